"""`ferry rollback` without --yes on a terminal (a pty, as a shell gives it): it lists the first 20 items and where
the full list is, asks, and "n" changes nothing while "y" rolls back. (Ctrl-C at the same prompt: see
tests/cli/test_interrupts.py.)"""

from __future__ import annotations

import os
import pty
import re
import select
import time
from pathlib import Path

from ferry.runlog import RunLog
from tests.support import FERRY, write_plan

EXTRA = 22  # files added to shard a/: 25 objects in all, 5 more than the terminal shows


def _committed_plan(root: Path, name: str) -> Path:
    from flows.pipeline import migrate

    plan = write_plan(root, name)
    for i in range(EXTRA):
        (root / "src" / "a" / f"extra-{i:02d}.bin").write_bytes(b"x" * i)
    assert migrate(plan_path=str(plan))["phases"]["data_sync"] == "PASS"
    return plan


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _status(root: Path, plan: str) -> str:
    runlog = RunLog(root / ".ferry" / "state")
    try:
        return runlog.phase(plan, "data_sync").status
    finally:
        runlog.close()


def _read_until(fd: int, screen: bytearray, text: bytes | None, timeout: float = 120) -> None:
    """Read the terminal into screen until it shows text (None: until the child closes it)."""
    deadline = time.monotonic() + timeout
    while text is None or text not in screen:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"the terminal showed nothing more within {timeout} s: {screen.decode(errors='replace')}"
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO once the child has closed the terminal
            chunk = b""
        if not chunk:
            assert text is None, screen.decode(errors="replace")
            return
        screen += chunk


def rollback_on_a_terminal(plan: Path, answer: bytes) -> tuple[int, str]:
    """`ferry rollback PLAN --phase data_sync` on a pty, answering its question; (exit code, what the screen showed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FERRY_DEBUG")}
    pid, fd = pty.fork()
    if pid == 0:  # the child: ferry with the pty as its controlling terminal
        os.execve(FERRY, [FERRY, "rollback", str(plan), "--phase", "data_sync"], {**env, "COLUMNS": "200"})
    screen = bytearray()
    try:
        _read_until(fd, screen, b"roll back data_sync of run ")
        _read_until(fd, screen, b"]: ")  # the end of the question: typer's "[y/N]: "
        os.write(fd, answer)
        _read_until(fd, screen, None)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    return os.waitstatus_to_exitcode(status), screen.decode(errors="replace").replace("\r\n", "\n")


def _listing(text: str, total: int) -> None:
    """The announcement: the first 20 items on the terminal, the rest counted, all of them in the file it names."""
    shown = [line for line in text.splitlines() if line.startswith("  delete ")]
    assert len(shown) == 20, text
    more = re.search(rf"^  \.\.\. and {total - 20} more \({total} in all: (\S+)\)$", text, re.MULTILINE)
    assert more and more.group(1).endswith("/data_sync/rollback-items.txt"), text
    items = Path(more.group(1)).read_text().splitlines()
    assert len(items) == total and [f"  {item}" for item in items[:20]] == shown


def test_the_prompt_lists_20_items_and_n_changes_nothing_then_y_rolls_back(prefect_api, tmp_path) -> None:
    plan = _committed_plan(tmp_path, "prompt-answers")
    dst = tmp_path / "dst"
    synced = _files(dst)
    assert len(synced) == 3 + EXTRA

    code, text = rollback_on_a_terminal(plan, b"n\n")
    assert code == 1 and "Traceback" not in text, text
    _listing(text, 3 + EXTRA)
    assert "nothing was changed" in text.splitlines()[-1], text
    assert _files(dst) == synced and _status(tmp_path, "prompt-answers") == "committed"

    code, text = rollback_on_a_terminal(plan, b"y\n")
    assert code == 0 and "Traceback" not in text, text
    _listing(text, 3 + EXTRA)
    assert re.search(rf"^rolled back data_sync of run \S+: deleted {3 + EXTRA} object\(s\)", text, re.MULTILINE), text
    assert _files(dst) == [] and _status(tmp_path, "prompt-answers") == "rolled_back"
