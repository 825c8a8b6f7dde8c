"""bench.quote's run: an estimate, then the copy it predicts, on a fresh moto (the figures' values are the bench's,
not asserted here)."""

from __future__ import annotations

import os

from bench.quote import one_run


def test_one_run_holds_the_copy_to_the_estimate_and_gives_both_times(tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for n in range(20):
        (data / f"f{n:02d}").write_bytes(os.urandom(10_000))
    (data / "large").write_bytes(os.urandom(20 << 20))  # in parts (over 16M): the probe times both kinds
    work = tmp_path / "work"
    work.mkdir()
    run = one_run(data, 8, 5, work)
    assert run["p50_s"] is not None and run["p90_s"] >= run["p50_s"] and run["measured_s"] > 0
    assert run["bound"]
