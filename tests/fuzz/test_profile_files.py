"""Profiles files, mutated: `ferry sync SRC DST --dry-run --profiles FILE` between two local folders either runs
its dry run (exit 0) or says in one line what is wrong with the file (exit 2); neither folder ever changes.

A second test points the target at a profile of its own (fsspec's in-memory filesystem), so that the profile's
protocol and options reach the connector.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from tests.fuzz.common import ODD_VALUES, TRIED, check_cli, fuzz_settings, mutated, text_of, write_bytes

PROFILES = """\
profiles:
  meta:
    type: s3
    endpoint_url: https://objectstore.example.internal
    region: eu-frankfurt-1
    credentials: {access_key_id_env: META_KEY_ID, secret_access_key_env: META_SECRET}
  minio:
    type: s3
    endpoint_url: http://127.0.0.1:9
    addressing_style: virtual
    min_part_size: 5242880
    credentials: {aws_profile: minio, session_token_secret: minio-token}
  blob:
    type: azure
    endpoint_url: https://account.blob.core.windows.net
    credentials: {account_name: account, account_key_env: AZ_KEY, sas_token_secret: az-sas}
  conn:
    type: azure
    credentials: {connection_string_env: AZURE_STORAGE_CONNECTION_STRING}
  mem:
    type: fsspec
    protocol: memory
    options: {skip_instance_cache: false, auto_mkdir: true, depth: 2, ratio: 0.5, name: x}
  disk:
    type: local
"""
BASE: Any = yaml.safe_load(PROFILES)
# Top-level additions and structures no profiles file holds (see test_plan_files.INVALID_TEXT).
INVALID_TEXT = (
    "two documents",
    "non-mapping top level",
    "utf-16",
    "recursive alias",
    "alias bomb",
    "merge key",
    "bad merge",
    "anchor and alias",
    "deep flow nesting",
    "deep block nesting",
    "huge scalar",
    "duplicate top-level key",
    "bad timestamp",
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-profiles")
    for key, data in {"src/a/one.bin": b"1" * 100, "src/b/two.bin": b"22", "dst/old.bin": b"old"}.items():
        write_bytes(root / key, data)
    return root


def _sync(root: Path, data: bytes, what: str, must_fail: bool, target: str | None = None) -> int:
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        profiles = write_bytes(work / "profiles.yaml", data)
        args = (
            "sync",
            str(root / "src"),
            target or str(root / "dst"),
            "--dry-run",
            "--profiles",
            str(profiles),
            "--state-dir",
            str(work / "state"),
            "--no-progress",
        )
        code, _, _ = check_cli(
            "profiles", args, unchanged=(root / "src", root / "dst"), must_fail=must_fail, read_only=True, what=what
        )
        return code
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_base_profiles_are_valid(folders: Path) -> None:
    assert _sync(folders, PROFILES.encode(), "the base", False) == 0
    assert _sync(folders, PROFILES.encode(), "the base, to memory", False, target="mem://bucket/x") == 0


@st.composite
def profile_texts(draw: st.DrawFn) -> tuple[bytes, str, bool]:
    data, how = draw(text_of(draw(mutated(BASE))))
    return data, how, how.endswith(INVALID_TEXT)


@example(case=(b"profiles:\n  m: &m {type: s3, options: {self: *m}}\n", "recursive", True))
@example(case=(b"profiles:\n  m: {type: s3}\n  m: {type: azure}\n", "a profile twice", True))
@example(case=(b"profiles:\n  m: {type: s3, min_part_size: " + b"9" * 5000 + b"}\n", "5000 digits", True))
@given(case=profile_texts())
@fuzz_settings(120)
def test_mutated_profiles_are_one_line(folders: Path, case: tuple[bytes, str, bool]) -> None:
    data, how, must_fail = case
    _sync(folders, data, f"{how}:\n{data[:3000]!r}", must_fail)


@st.composite
def memory_profiles(draw: st.DrawFn) -> bytes:
    """The `mem` profile alone, its protocol and options changed (protocols that stay in this process only)."""
    profile: dict[str, Any] = {"type": "fsspec", "protocol": draw(st.sampled_from(["memory", "MEMORY", "", "nosuch"]))}
    options = draw(
        st.dictionaries(
            st.sampled_from(["skip_instance_cache", "auto_mkdir", "root_marker", "x", "", "ünï", "use_listings_cache"]),
            st.sampled_from([v for v in ODD_VALUES if not isinstance(v, (list, dict))]),
            max_size=3,
        )
    )
    if options or draw(st.booleans()):
        profile["options"] = options
    return yaml.safe_dump({"profiles": {"mem": profile}}, allow_unicode=True).encode()


@example(data=b"profiles:\n  mem: {type: fsspec, protocol: memory, options: {x: .nan}}\n")
@given(data=memory_profiles())
@fuzz_settings(40)
def test_a_profile_the_target_uses_is_one_line(folders: Path, data: bytes) -> None:
    _sync(folders, data, f"{data!r}", False, target="mem://bucket/x")


def test_inputs_were_counted() -> None:
    assert TRIED["profiles"] > 0
