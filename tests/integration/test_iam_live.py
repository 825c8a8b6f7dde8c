"""The iam phase's live AWS source against moto's real IAM API over HTTP."""

from __future__ import annotations

import json
import secrets

from ferry.iam.model import Level
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from ferry.results import Status
from tests.support import free_port, run_cli

PLAN = """\
name: live-iam
source:
  storage: ./src
  iam:
    aws:
      endpoint_url: {endpoint}
      credentials: {{access_key_id_env: LIVE_IAM_KEY, secret_access_key_env: LIVE_IAM_SECRET}}
target:
  profile: generic-k8s
  storage: ./dst
phases:
  iam: {{namespace: research}}
"""


def policy(*statements: dict) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def test_live_account_is_read_through_the_iam_api(moto_server, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LIVE_IAM_KEY", moto_server.env["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("LIVE_IAM_SECRET", moto_server.env["AWS_SECRET_ACCESS_KEY"])
    iam = moto_server.client("iam")
    tag = secrets.token_hex(3)
    user, group, role = f"ana-{tag}", f"trainers-{tag}", f"Batch-Job-{tag}"
    iam.create_user(UserName=user)
    iam.put_user_policy(
        UserName=user,
        PolicyName="read-one-bucket",
        PolicyDocument=policy({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ds/*"}),
    )
    iam.create_group(GroupName=group)
    iam.add_user_to_group(GroupName=group, UserName=user)
    managed = iam.create_policy(
        PolicyName=f"train-{tag}",
        PolicyDocument=policy({"Effect": "Allow", "Action": ["s3:*", "ecr:PutImage"], "Resource": "*"}),
    )["Policy"]["Arn"]
    iam.attach_group_policy(GroupName=group, PolicyArn=managed)
    trust = policy({"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"}, "Action": "sts:AssumeRole"})
    iam.create_role(RoleName=role, AssumeRolePolicyDocument=trust)
    iam.put_role_policy(
        RoleName=role,
        PolicyName="admin-ish",
        PolicyDocument=policy({"Effect": "Allow", "Action": "*", "Resource": "*"}),
    )

    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(endpoint=moto_server.endpoint))
    phase = open_phase(load_plan(plan), "iam")
    assert phase.live_inputs, "a live account is read on every run, never skipped on the plan's hash"
    assert [r.status for r in phase.preflight()] == [Status.PASS]
    mapping = phase.mapping()
    by_id = {p.id: p for p in mapping.principals}
    # Its own read plus its group's s3:* : write, from the two policies combined.
    assert by_id[f"aws:user/{user}"].level == Level.WRITE
    assert any("scoped to arn:aws:s3:::ds/*" in w for w in by_id[f"aws:user/{user}"].widened)
    assert f"aws:group/{group}" not in by_id
    assert any(s.startswith(f"aws:group/{group}: IAM groups are not bound") for s in mapping.skipped)
    assert by_id[f"aws:role/{role}"].level == Level.ADMIN
    assert by_id[f"aws:role/{role}"].escalations  # `*` holds every escalation method
    assert mapping.subject(by_id[f"aws:role/{role}"]) == ("ServiceAccount", f"batch-job-{tag}")
    assert mapping.roles == {1: "view", 2: "edit", 3: "admin"}


def test_plan_show_names_the_iam_credentials_and_never_their_values(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LIVE_IAM_KEY", "AKIDSHOWKEY")
    monkeypatch.delenv("LIVE_IAM_SECRET", raising=False)
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(endpoint="http://127.0.0.1:9"))
    code, out, _ = run_cli("plan", "show", str(plan), "--no-preflight")
    assert code == 0
    assert "LIVE_IAM_KEY: set" in out and "LIVE_IAM_SECRET: NOT SET" in out and "AKIDSHOWKEY" not in out


def test_unreachable_iam_api_fails_preflight_with_one_line(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("LIVE_IAM_KEY", "AKIDLIVEKEY")
    monkeypatch.setenv("LIVE_IAM_SECRET", "hunter2-not-for-logs")
    plan = tmp_path / "migration.yaml"
    plan.write_text(PLAN.format(endpoint=f"http://127.0.0.1:{free_port()}"))
    (result,) = open_phase(load_plan(plan), "iam").preflight()
    assert result.status == Status.FAIL
    assert result.evidence[0].startswith("IAM API at http://127.0.0.1:")
    assert "nothing accepts connections at http://127.0.0.1:" in result.evidence[0], "the cause, in words"
    assert "\n" not in result.evidence[0] and "hunter2" not in json.dumps(result.to_dict())
