"""S3 event notifications through SQS as the change log between live deltas (moto delivers them to its own SQS):
a delta asks both sides only for the keys the events named, the final delta lists everything."""

from __future__ import annotations

import hashlib
import json

from connectors.base import ObjectInfo
from connectors.registry import open_connector
from connectors.s3 import PROBE_KEY, Changes
from connectors.transfer import TransferSettings
from ferry.profiles import Profile
from ferry.sync import run_sync
from tests.cutover.test_cutover_cli import STOP_WRITER, contents, cutover_plan, cutover_with_writer, report


def notifying_queue(moto, bucket: str) -> str:
    sqs = moto.client("sqs")
    url = sqs.create_queue(QueueName=f"{bucket}-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    moto.client("s3").put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]
        },
    )
    return url


def test_changed_keys_reads_the_queue_leaving_out_what_is_not_this_sources(moto_env) -> None:
    s3, sqs = moto_env.client("s3"), moto_env.client("sqs")
    s3.create_bucket(Bucket="cl-keys")
    url = notifying_queue(moto_env, "cl-keys")
    s3.put_object(Bucket="cl-keys", Key="root/a b", Body=b"1")
    s3.put_object(Bucket="cl-keys", Key="root/a b", Body=b"2")  # named twice: one key
    s3.put_object(Bucket="cl-keys", Key="elsewhere/x", Body=b"3")  # outside the root
    s3.put_object(Bucket="cl-keys", Key=f"root/{PROBE_KEY}", Body=b"4")  # ferry's receipt probe, when it was a target
    s3.delete_object(Bucket="cl-keys", Key=f"root/{PROBE_KEY}")
    s3.delete_object(Bucket="cl-keys", Key="root/a b")
    foreign = {"Records": [{"s3": {"bucket": {"name": "other"}, "object": {"key": "root/y"}}}]}
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(foreign))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"Event": "s3:TestEvent", "Bucket": "cl-keys"}))
    sqs.send_message(QueueUrl=url, MessageBody="not json")
    source = open_connector("moto://cl-keys/root", {"moto": Profile(type="s3", endpoint_url=moto_env.endpoint)})
    try:
        changes = source.changed_keys(url)
        assert changes.keys == {"a b"}
        assert changes.latest == {}  # moto's records carry no sequencer: the key's state is asked of the store
        source.forget_events(url, changes.handles)
        assert source.changed_keys(url) == Changes(set(), {}, [])
    finally:
        source.close()


def event(bucket: str, key: str, name: str, sequencer: str | None, body: bytes = b"") -> str:
    """An S3 event notification as S3 sends it: one record, with a sequencer where given."""
    found = {"key": key.replace(" ", "+"), "size": len(body), "eTag": hashlib.md5(body).hexdigest()}  # noqa: S324
    if name.startswith("ObjectRemoved"):
        found = {"key": key.replace(" ", "+")}
    if sequencer is not None:
        found["sequencer"] = sequencer
    return json.dumps({"Records": [{"eventName": name, "s3": {"bucket": {"name": bucket}, "object": found}}]})


def test_a_keys_latest_event_by_sequencer_decides_its_state_without_asking_the_store(moto_env, tmp_path) -> None:
    s3, sqs = moto_env.client("s3"), moto_env.client("sqs")
    for bucket in ("cl-seq", "cl-seq-dst"):
        s3.create_bucket(Bucket=bucket)
    url = sqs.create_queue(QueueName="cl-seq-events")["QueueUrl"]
    s3.put_object(Bucket="cl-seq", Key="r/x", Body=b"second")
    s3.put_object(Bucket="cl-seq", Key="r/z", Body=b"asked")
    s3.put_object(Bucket="cl-seq-dst", Key="r/y", Body=b"copied before")
    # Delivered out of order: x's later write (sequencer 0100 > FF, though shorter strings sort first) before its
    # earlier one; y written, then deleted; z's records carry no sequencer.
    for body in (
        event("cl-seq", "r/x", "ObjectCreated:Put", "0100", b"second"),
        event("cl-seq", "r/y", "ObjectRemoved:Delete", "0A2"),
        event("cl-seq", "r/x", "ObjectCreated:Put", "FF", b"first!"),
        event("cl-seq", "r/y", "ObjectCreated:Put", "0A1", b"gone"),
        event("cl-seq", "r/z", "ObjectCreated:Put", None, b"asked"),
    ):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    profiles = {"moto": Profile(type="s3", endpoint_url=moto_env.endpoint)}
    source = open_connector("moto://cl-seq/r", profiles)
    try:
        changes = source.changed_keys(url)
    finally:
        source.close()
    assert changes.keys == {"x", "y", "z"}
    assert changes.latest == {"x": ObjectInfo(key="x", size=6, signature=hashlib.md5(b"second").hexdigest()), "y": None}  # noqa: S324
    gone: list[str] = []
    result = run_sync(
        "moto://cl-seq/r",
        "moto://cl-seq-dst/r",
        TransferSettings(threads=2, live=True),
        profiles=profiles,
        state_dir=tmp_path / "state",
        verify=False,
        on_action=lambda a: gone.append(a.key) if a.src is None and a.dst is not None else None,
        keys=changes.keys,
        source_known=changes.latest,
    )
    # x copied as its latest event wrote it (a copy of another version would be refused: changed_during_copy),
    # y gone from the source without a HEAD; of the source's keys only z, without a sequencer, was asked (the other
    # HEAD is the bucket's check, HeadBucket).
    assert (result.stats.copied, result.stats.changed_during_copy, result.stats.failed) == (2, 0, 0)
    assert gone == ["y"]
    assert result.stats.requests["source"]["HEAD"] == 2
    assert s3.get_object(Bucket="cl-seq-dst", Key="r/x")["Body"].read() == b"second"


def test_live_deltas_by_the_change_log_end_with_the_target_equal_to_the_source(prefect_api, moto_env, tmp_path) -> None:
    plan = cutover_plan(
        tmp_path,
        moto_env,
        "co-events",
        "  freeze_budget: 10m\n  delta_interval: 0.3s\n  max_deltas: 6\n  max_delete: {percent: 100}\n"
        "  freeze:\n    " + STOP_WRITER,
    )
    url = notifying_queue(moto_env, "co-events-src")
    with plan.open("a") as file:
        file.write(f"  change_log: {{sqs_queue_url: '{url}'}}\n")
    code, _, err = cutover_with_writer(plan, moto_env, "co-events-src", prefect_api)
    assert code == 0, err
    s3 = moto_env.client("s3")
    assert contents(s3, "co-events-src") == contents(s3, "co-events-dst")
    deltas = report(plan)["deltas"]
    assert not deltas[0]["by_change_log"] and all(d["by_change_log"] for d in deltas[1:])
    # A delta by the change log asked only for the keys the events named, not for every object.
    assert all(d["listed"] < deltas[0]["listed"] for d in deltas[1:])
    assert report(plan)["final_delta"]["by_change_log"] is False  # the final delta lists everything
