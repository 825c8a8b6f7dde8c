"""S3 event notifications through SQS as the change log between live deltas (moto delivers them to its own SQS):
a delta asks both sides only for the keys the events named, the final delta lists everything."""

from __future__ import annotations

import json

from connectors.registry import open_connector
from ferry.profiles import Profile
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
    s3.delete_object(Bucket="cl-keys", Key="root/a b")
    foreign = {"Records": [{"s3": {"bucket": {"name": "other"}, "object": {"key": "root/y"}}}]}
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(foreign))
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps({"Event": "s3:TestEvent", "Bucket": "cl-keys"}))
    sqs.send_message(QueueUrl=url, MessageBody="not json")
    source = open_connector("moto://cl-keys/root", {"moto": Profile(type="s3", endpoint_url=moto_env.endpoint)})
    try:
        keys, handles = source.changed_keys(url)
        assert keys == {"a b"}
        source.forget_events(url, handles)
        assert source.changed_keys(url) == (set(), [])
    finally:
        source.close()


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
