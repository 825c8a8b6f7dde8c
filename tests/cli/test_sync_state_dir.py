"""`ferry sync --state-dir DIR` names the level a plan's state_dir names; an older state folder keeps working."""

from __future__ import annotations

from tests.support import run_ferry


def _tree(root, n: int) -> None:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"{i}.bin").write_bytes(b"x" * (i + 1))


def test_the_transfer_state_is_under_state_like_a_plans(tmp_path) -> None:
    _tree(tmp_path / "src", 3)
    code, _, err = run_ferry("sync", str(tmp_path / "src"), str(tmp_path / "dst"), "--state-dir", str(tmp_path / "d"))
    assert code == 0, err
    assert len(list((tmp_path / "d" / "state" / "transfers").glob("*.sqlite"))) == 1
    assert "older layout" not in err


def test_an_older_state_folder_resumes_where_it_is_with_a_notice(tmp_path) -> None:
    _tree(tmp_path / "src", 3)
    old = tmp_path / "d" / "state"
    args = ("sync", str(tmp_path / "src"), str(tmp_path / "dst"), "--state-dir")
    code, _, err = run_ferry(*args, str(tmp_path / "d"))
    assert code == 0, err
    # The same folder named one level down, as --state-dir named it before: used as it is, not nested again.
    code, out, err = run_ferry(*args, str(old), "--log-format", "json")
    assert code == 0, err
    assert not (old / "state").exists() and len(list((old / "transfers").glob("*.sqlite"))) == 1
    notices = [line for line in err.splitlines() if "older layout" in line]
    assert len(notices) == 1 and f"--state-dir {tmp_path / 'd'}" in notices[0], err
