"""Bad input: one clear line on stderr, exit code 2, never a traceback; nothing written."""

from __future__ import annotations

import uuid

import boto3
import pytest

from tests.support import run_ferry


def assert_one_line_usage_error(done: tuple[int, str, str], *needles: str) -> None:
    code, out, err = done
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0]


def test_unknown_scheme(tmp_path) -> None:
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path), "nosuch://bucket/x"), "unknown scheme 'nosuch'")


def test_missing_source_directory(tmp_path) -> None:
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path / "absent"), str(tmp_path / "out")), "no such directory")


def test_missing_bucket(moto_env, tmp_path) -> None:
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path), "s3://no-such-bucket/x"), "does not exist")


def test_missing_credentials(moto_env, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path), "s3://bucket/x"), "no AWS credentials")


def test_missing_container(azurite_env, tmp_path) -> None:
    assert_one_line_usage_error(run_ferry("sync", str(tmp_path), "az://no-such-container/x"), "no-such-container")


def test_unreadable_profiles_file(tmp_path) -> None:
    assert_one_line_usage_error(
        run_ferry("sync", str(tmp_path), "meta://b/x", "--profiles", str(tmp_path / "none.yaml")),
        "none.yaml",
        "cannot read",
    )


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        (
            "profiles:\n  meta:\n    type: s3\n    secret_access_key: hunter2\n",
            (":4:", "secret_access_key", "unknown field"),
        ),
        ("profiles:\n  meta:\n    type: ftp\n", (":3:", "profiles.meta.type")),
        ("profiles: [1, 2\n", ("not valid YAML",)),
        ("profiles:\n  Meta:\n    type: s3\n", ("lowercase scheme",)),
    ],
)
def test_bad_profiles_file(tmp_path, text, needles) -> None:
    path = tmp_path / "profiles.yaml"
    path.write_text(text)
    done = run_ferry("sync", str(tmp_path), "meta://b/x", "--profiles", str(path))
    assert_one_line_usage_error(done, "profiles.yaml", *needles)
    assert "hunter2" not in done[2]


def test_bad_size_option(tmp_path) -> None:
    done = run_ferry("sync", str(tmp_path), str(tmp_path / "o"), "--part-size", "lots")
    assert_one_line_usage_error(done, "--part-size")


def test_source_key_escaping_a_local_target_is_rejected(moto_env, tmp_path) -> None:
    bucket = f"t-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=moto_env.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    for key in ("p/../escape.txt", "p//etc/passwd-copy", "p/fine.txt"):
        client.put_object(Bucket=bucket, Key=key, Body=b"payload")
    target = tmp_path / "jail" / "inside"
    code, _, err = run_ferry("sync", f"s3://{bucket}/p", str(target), "--state-dir", str(tmp_path / "state"))
    assert code == 2, err
    assert "escape.txt" in err and "/etc/passwd-copy" in err
    assert "Traceback" not in err
    written = sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file() and "state" not in p.parts
    )
    assert written == ["jail/inside/fine.txt"]
