"""The freeze steps against moto: bucket_policy's Deny (writers refused, ferry's identity exempt in the document,
the prior policy kept and put back exactly), run steps and their undos in reverse order, the journal."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.exceptions
import pytest

from ferry.cutover import policy
from ferry.cutover.freeze import Freeze
from ferry.plan import load_plan

PRIOR = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "Reads",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": "arn:aws:s3:::fz-prior/*",
        }
    ],
}


def frozen_plan(root: Path, moto, bucket: str) -> Path:
    plan = root / "migration.yaml"
    plan.write_text(
        f"name: fz\nsource: {{storage: 'moto://{bucket}'}}\ntarget: {{storage: ./dst}}\n"
        f"profiles: {{moto: {{type: s3, endpoint_url: '{moto.endpoint}'}}}}\nphases: {{data_sync: {{}}}}\n"
        "cutover:\n  freeze_budget: 5m\n  max_freeze: 1h\n  freeze:\n"
        "    - {run: 'echo 1 >> steps', undo: 'echo undo-1 >> steps'}\n"
        "    - bucket_policy: deny_writes\n"
        "    - {run: 'echo 2 >> steps', undo: 'echo undo-2 >> steps'}\n"
    )
    return plan


@pytest.mark.parametrize("prior", [PRIOR, None], ids=["with-a-policy", "without"])
def test_deny_writes_refuses_writers_and_undo_restores_the_exact_policy(moto_env, tmp_path, prior) -> None:
    s3 = moto_env.client("s3")
    bucket = "fz-prior" if prior else "fz-none"
    s3.create_bucket(Bucket=bucket)
    before = json.dumps(prior) if prior else None
    if before:
        s3.put_bucket_policy(Bucket=bucket, Policy=before)
    freeze = Freeze(load_plan(frozen_plan(tmp_path, moto_env, bucket)))
    said: list[str] = []
    freeze.apply("run-1", said.append)

    document = json.loads(s3.get_bucket_policy(Bucket=bucket)["Policy"])
    (ours,) = [s for s in document["Statement"] if s.get("Sid") == policy.SID]
    assert [s for s in document["Statement"] if s.get("Sid") != policy.SID] == (prior or {}).get("Statement", [])
    assert ours["Effect"] == "Deny" and "s3:PutBucketPolicy" not in ours["Action"]
    assert set(ours["Action"]) >= {"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:RestoreObject"}
    caller = moto_env.client("sts").get_caller_identity()["Arn"]
    assert ours["Condition"]["ArnNotEquals"] == {"aws:PrincipalArn": caller}
    assert "aws:CurrentTime" in ours["Condition"]["DateLessThan"]
    with pytest.raises(botocore.exceptions.ClientError, match="Forbidden|AccessDenied"):
        s3.put_object(Bucket=bucket, Key="during-freeze", Body=b"x")
    assert freeze.frozen() is not None and freeze.frozen().run_id == "run-1"

    assert freeze.undo(said.append) == 0
    assert (tmp_path / "steps").read_text().split() == ["1", "2", "undo-2", "undo-1"]
    if before:
        assert s3.get_bucket_policy(Bucket=bucket)["Policy"] == before
    else:
        with pytest.raises(botocore.exceptions.ClientError, match="NoSuchBucketPolicy"):
            s3.get_bucket_policy(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="after-freeze", Body=b"x")
    assert freeze.frozen() is None
    assert freeze.undo(said.append) == 0  # a second undo has nothing to do


def test_a_failed_step_leaves_the_steps_before_it_journalled_for_undo(moto_env, tmp_path) -> None:
    plan = tmp_path / "migration.yaml"
    plan.write_text(
        "name: fz\nsource: {storage: ./src}\ntarget: {storage: ./dst}\nphases: {data_sync: {}}\n"
        "cutover:\n  freeze_budget: 5m\n  freeze:\n    - {run: 'echo 1 >> steps', undo: 'echo undo-1 >> steps'}\n"
        "    - {run: 'exit 3', undo: 'echo undo-2 >> steps'}\n    - {run: 'echo 3 >> steps'}\n"
    )
    freeze = Freeze(load_plan(plan))
    with pytest.raises(Exception, match="freeze step 2 .* exited 3"):
        freeze.apply("run-2", print)
    assert [s["what"] for s in freeze.frozen().steps] == ["run 'echo 1 >> steps'", "run 'exit 3'"]
    assert freeze.undo(print) == 0
    assert (tmp_path / "steps").read_text().split() == ["1", "undo-2", "undo-1"]


@pytest.mark.parametrize(
    ("caller", "principal"),
    [
        (
            "arn:aws:sts::123456789012:assumed-role/ferry-migrator/session-1",
            "arn:aws:iam::123456789012:role/ferry-migrator",
        ),
        ("arn:aws:iam::123456789012:user/ferry", "arn:aws:iam::123456789012:user/ferry"),
    ],
)
def test_principal_arn_is_the_role_behind_a_session(caller: str, principal: str) -> None:
    assert policy.principal_arn(caller) == principal
