"""bench/scale.py at small sizes: each part measures what it says (every key found, every object copied)."""

from __future__ import annotations

from bench.scale import engine, list_latency_bound, list_ranges, plan_and_diff, render


def test_planning_and_diffing_keys_in_ranges_finds_every_key_once() -> None:
    row = plan_and_diff(20_000)
    assert row["keys"] == 20_000 and row["ranges"] == 32 and row["keys_per_s"] > 0 and row["peak_rss_mb"] > 0


def test_the_engine_and_the_listing_on_ranges_measure_every_object_and_request(tmp_path) -> None:
    rows = engine("300x64K+2x8M", 8, tmp_path)
    assert [r.get("workers") for r in rows] == [None, 1, 2]
    assert {r["objects"] for r in rows} == {302} and all(r["objects_per_s"] > 0 and r["cpu_s"] > 0 for r in rows)
    listed = list_ranges(3_000)
    assert [r["asked"] for r in listed] == [1, 8]
    one, eight = listed
    assert one["requests"] == 3 and one["probe_requests"] == 0  # 1,000 keys a page
    assert eight["ranges"] >= 8 and eight["probe_requests"] > 0 and eight["requests"] > eight["probe_requests"]
    bound = list_latency_bound(5_000)
    assert [r["asked"] for r in bound] == [1, 8] and bound[1]["ranges"] >= 8
    text = render(rows, [], listed + bound)
    assert "Scaling, 2 Dask workers against 1: " in text and f"| moto | {eight['ranges']} |" in text
    assert "8 ranges against 1 on synthetic: " in text
