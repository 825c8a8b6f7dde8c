"""What a start of `ferry` imports: only the module of the command it runs, and the whole app for help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

UNUSED_BY_SYNC = ("ferry.phases", "ferry.quote", "ferry.images", "ferry.iam", "ferry.manifests", "ferry.golive",
                  "ferry.cutover", "flows", "prefect")  # fmt: skip


def _imported_by(args: list[str], record: Path) -> set[str]:
    """The modules a `ferry ARGS` process had imported when it exited (its output is dropped)."""
    script = (
        "import atexit, pathlib, sys\n"
        f"atexit.register(lambda: pathlib.Path({str(record)!r}).write_text('\\n'.join(sys.modules)))\n"
        f"sys.argv = ['ferry', *{args!r}]\n"
        "from ferry.cli import run\n"
        "run()\n"
    )
    subprocess.run([sys.executable, "-c", script], capture_output=True, check=False)
    return set(record.read_text().split("\n"))


def test_ferry_sync_starts_without_the_phases_the_quote_or_prefect(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    args = ["sync", str(tmp_path / "src"), str(tmp_path / "dst"), "--state-dir", str(tmp_path / "s")]
    modules = _imported_by(args, tmp_path / "modules")
    assert "ferry.cli.sync" in modules and "connectors.transfer.engine" in modules
    loaded = sorted(m for m in modules if m.startswith(UNUSED_BY_SYNC))
    assert loaded == [], "a sync imports what it does not run"


@pytest.mark.parametrize("args", [["--help"], ["version"]])
def test_help_and_other_commands_still_see_the_whole_app(args) -> None:
    done = subprocess.run([sys.executable, "-m", "ferry.cli", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    if args == ["--help"]:
        from ferry.cli import _COMMANDS, _GROUPS

        missing = [name for name, _, _ in (*_COMMANDS, *_GROUPS) if f" {name} " not in done.stdout]
        assert missing == []


def test_a_sync_into_s3_without_profiles_imports_neither_boto3_nor_yaml(tmp_path, moto_env) -> None:
    """botocore's session, not boto3's; pydantic models and YAML only where a profiles file is read; awscrt's
    CRC32C, not the crc32c package's (whose import reads every installed package's metadata)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a").write_bytes(b"a")
    moto_env.client("s3").create_bucket(Bucket="startup")
    args = ["sync", str(tmp_path / "src"), "s3://startup/p", "--state-dir", str(tmp_path / "s"), "--no-progress"]
    modules = _imported_by(args, tmp_path / "modules")
    assert "connectors.s3" in modules and "botocore.session" in modules, "the S3 connector ran"
    heavy = ("boto3", "s3transfer", "yaml", "ferry.profiles", "ferry.config", "crc32c")
    assert sorted(m for m in modules if m.split(".")[0] in heavy or m in heavy) == []
    assert moto_env.client("s3").list_objects_v2(Bucket="startup")["KeyCount"] == 1, "and it copied"
