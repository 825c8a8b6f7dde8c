"""The data gate names the keys behind its counts: the first 20 of each kind, and how many more there are."""

from __future__ import annotations

from pathlib import Path

from checks.data import check_data
from connectors.registry import open_connector
from connectors.transfer import TransferSettings, TransferState
from ferry.results import Status


def tree(root: Path, files: dict[str, bytes]) -> str:
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return str(root)


def test_gate_evidence_names_the_first_20_keys_of_each_kind(tmp_path) -> None:
    source = tree(tmp_path / "src", {"same.bin": b"1", "short.bin": b"22", "gone.bin": b"3"})
    extra = {f"extra/{n:02d}.bin": b"x" for n in range(25)}
    target = tree(tmp_path / "dst", {"same.bin": b"1", "short.bin": b"2", **extra})
    src, dst = open_connector(source, {}), open_connector(target, {})
    state = TransferState(tmp_path / "state", src.url, dst.url, "")
    try:
        tolerated = check_data(src, dst, state, TransferSettings())
        strict = check_data(src, dst, state, TransferSettings(delete=True))
    finally:
        state.close()
    assert tolerated.status == strict.status == Status.FAIL  # a missing object fails either way
    assert "missing: gone.bin" in strict.evidence
    assert "size_mismatch: short.bin (source 2, target 1 bytes)" in strict.evidence
    listed = [line for line in strict.evidence if line.startswith("extra_in_target: extra/")]
    assert listed == [f"extra_in_target: extra/{n:02d}.bin" for n in range(20)]
    assert "extra_in_target: 5 more not listed" in strict.evidence
    assert strict.measured["extra_in_target"] == 25 and strict.threshold["extra_in_target"] == 0
    # Tolerated extras are still named (they are not a failure there).
    assert "extra_in_target" not in tolerated.threshold and "extra_in_target: extra/00.bin" in tolerated.evidence
