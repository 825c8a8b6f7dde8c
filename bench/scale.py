"""Beyond one process (issue 22): what sharding the key space buys on this machine.

    python -m bench.scale [--quick] [--parts engine,plan,listing]

- engine: ferry's engine alone (the synthetic source into the null target, verification on) as one `ferry sync`
  process, then the same objects as key ranges (probed as data_sync's `shards: auto` probes them) on a local Dask
  cluster of 1 and of 2 worker processes, each range one `run_sync` on a worker, 3 ranges per worker: objects/s,
  GB/s, the CPU the workers spent, and the scaling ratio (2 workers against 1).
- plan: 10 million synthetic keys (1 million with --quick) probed into 32 key ranges and diffed range by range
  against an empty target (a dry run: what the engine would copy), in a process of its own: the planning time,
  the diff's keys/s and its peak RSS, beside the same for a tenth of the keys, which must be about the same.
- listing: 200,000 keys (20,000 with --quick) in a moto bucket behind a proxy that holds every request 30 ms, as a
  distant endpoint does, listed as 1 range and as 8 ranges listed at once: wall seconds, LIST requests, the
  probing's own requests, and what moto spent (moto's CPU per page bounds it on this machine); then 1,000,000 keys
  (100,000) of the synthetic source whose pages wait 30 ms each and cost no server CPU, as a listing bounded by
  latency alone is.

Results go to bench/out/scale.md (and scale.json); `make bench` runs it after bench.run and bench.resume.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.run import PYTHON, ROOT, measure, process_cpu_s
from connectors.registry import open_connector
from connectors.transfer import TransferSettings, listing
from connectors.transfer.ranges import key_ranges
from ferry.profiles import Profile
from ferry.sync import run_sync

FERRY = str(Path(sys.executable).with_name("ferry"))
LATENCY_S = 0.030


def _shard(source: str, key_range: tuple[str, str], threads: int, state: str) -> dict[str, Any]:
    """One key range synced into a null target on the worker that runs it (the null target lives in its process,
    so the range's gate runs there too)."""
    settings = TransferSettings(threads=threads, start_after=key_range[0], end_at=key_range[1])
    started = time.monotonic()
    result = run_sync(source, "null://sink", settings, profiles={}, state_dir=Path(state), report_path=Path(os.devnull))
    stats = result.stats
    return {"ok": result.ok, "copied": stats.copied, "bytes": stats.bytes_copied, "seconds": time.monotonic() - started}


def engine(shape: str, threads: int, out: Path) -> list[dict[str, Any]]:
    """One `ferry sync` process, then key ranges on 1 and 2 Dask worker processes."""
    import dask
    from distributed import Client, LocalCluster

    from flows.cluster import WORKER_CONFIG

    dask.config.set(WORKER_CONFIG)  # as ferry runs its workers (their profiler off: it deadlocks on 3.11)
    url = f"synthetic://{shape}"
    rows = []
    with tempfile.TemporaryDirectory(dir=out) as work:
        report = Path(work) / "report.json"
        argv = [FERRY, "sync", url, "null://sink", "--threads", str(threads), "--state-dir", work, "--no-progress",
                "--report", str(report)]  # fmt: skip
        run = measure(argv, {**os.environ, "PYTHONPATH": str(ROOT)}, Path(work) / "one-process")
        if run.rc != 0:
            raise SystemExit(f"ferry sync failed: {run.tail}")
        summary = json.loads(report.read_text())["summary"]
        # The engine's own duration, as the Dask rows time theirs (the process's start is not the sync's).
        rows.append({"how": f"1 ferry sync process ({run.wall_s:.2f} s with its start)", "cpu_s": run.cpu_s,
                     "objects": summary["objects"]["copied"], "wall_s": summary["duration_s"]})  # fmt: skip
    source = open_connector(url, {})
    total_bytes = source.total_bytes
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(dir=out) as state:
            ranges = key_ranges(source, "null://sink", "", 3 * workers, Path(state))
            cluster = LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None)
            client = Client(cluster)
            try:
                # Started and warm (ferry imported): the cluster's start is not the sync's.
                client.run(lambda: __import__("ferry.sync"))
                pids = list(client.run(os.getpid).values())
                cpu_before = sum(process_cpu_s(pid) for pid in pids)
                started = time.monotonic()
                futures = client.map(_shard, [url] * len(ranges), ranges, [threads] * len(ranges),
                                     [state] * len(ranges), pure=False)  # fmt: skip
                results = client.gather(futures)
                wall = time.monotonic() - started
                cpu = sum(process_cpu_s(pid) for pid in pids) - cpu_before
            finally:
                client.close()
                cluster.close()
        if not all(r["ok"] for r in results) or sum(r["copied"] for r in results) != source.objects:
            raise SystemExit(f"a range failed on {workers} worker(s): {results}")
        rows.append({"how": f"{len(ranges)} key ranges on {workers} Dask worker(s)", "objects": source.objects,
                     "wall_s": wall, "cpu_s": cpu, "workers": workers})  # fmt: skip
    for row in rows:
        row["objects_per_s"] = row["objects"] / row["wall_s"]
        row["gb_per_s"] = total_bytes / 1e9 / row["wall_s"]
    return rows


def plan_and_diff(count: int) -> dict[str, Any]:
    """In this process: count synthetic keys probed into 32 ranges, then each range diffed against an empty null
    target (a dry run); its timings and this process's peak RSS."""
    url = f"synthetic://{count}x1K"
    with tempfile.TemporaryDirectory() as state:
        started = time.monotonic()
        ranges = key_ranges(open_connector(url, {}), "null://sink", "", 32, Path(state))
        planned = time.monotonic() - started
        to_copy = 0
        for key_range in ranges:
            settings = TransferSettings(start_after=key_range[0], end_at=key_range[1], dry_run=True)
            result = run_sync(url, "null://sink", settings, profiles={}, state_dir=Path(state), verify=False,
                              report_path=Path(os.devnull))  # fmt: skip
            to_copy += result.stats.to_copy
        diffed = time.monotonic() - started - planned
    if to_copy != count:
        raise SystemExit(f"the ranges' dry runs found {to_copy} keys to copy, not {count}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    return {"keys": count, "ranges": len(ranges), "plan_s": planned, "diff_s": diffed,
            "keys_per_s": count / diffed, "peak_rss_mb": peak}  # fmt: skip


def plan(keys: int, out: Path) -> list[dict[str, Any]]:
    """plan_and_diff for a tenth of the keys and for all of them, each in a process of its own."""
    rows = []
    for count in (keys // 10, keys):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([PYTHON, "-m", "bench.scale", "--plan-and-diff", str(count)], cwd=ROOT, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"plan-and-diff of {count} keys failed: {done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    return rows


def serve_bucket(keys: int) -> None:
    """In this process: a moto server whose bucket `listing` holds keys objects (put straight into moto's backend:
    200,000 PUTs over HTTP would take most of an hour); prints its port and pid, serves until stdin closes."""
    import logging

    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    backend.create_bucket("listing", "us-east-1")
    for i in range(keys):
        backend.put_object("listing", f"data/{i:08d}.bin", b"x")
    print(json.dumps({"port": server.get_host_and_port()[1], "pid": os.getpid()}), flush=True)
    sys.stdin.read()
    server.stop()


def list_ranges(keys: int) -> list[dict[str, Any]]:
    """The bucket listed as 1 range, then as 8 ranges at once, through the latency proxy."""
    from tests.faults.proxy import FaultProxy

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([PYTHON, "-m", "bench.scale", "--serve-bucket", str(keys)], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    rows = []
    try:
        started = json.loads(server.stdout.readline())
        with FaultProxy(started["port"], latency_s=LATENCY_S) as proxy:
            profile = Profile(type="s3", endpoint_url=proxy.endpoint, transfer_client="botocore")
            os.environ.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
            source = open_connector("moto://listing", {"moto": profile})
            for count in (1, 8):
                before, cpu_before = proxy.requests, process_cpu_s(started["pid"])
                row = _listed_in_ranges(source, "data/", count, keys, lambda since=before: proxy.requests - since)
                rows.append({**row, "store": "moto", "requests": proxy.requests - before,
                             "server_cpu_s": process_cpu_s(started["pid"]) - cpu_before})  # fmt: skip
            source.close()
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    return rows


def list_latency_bound(keys: int) -> list[dict[str, Any]]:
    """The synthetic source whose every page of 1,000 keys waits LATENCY_S first (no server, no CPU behind it): what
    ranges listed at once make of a listing that latency alone bounds, as a real endpoint's is."""
    source = open_connector(f"synthetic://{keys}x1K?page_ms={LATENCY_S * 1000:.0f}", {})
    return [{**_listed_in_ranges(source, "", count, keys, lambda: 0), "store": "synthetic"} for count in (1, 8)]


def _listed_in_ranges(source: Any, prefix: str, count: int, keys: int, probes: Any) -> dict[str, Any]:
    """source's prefix probed into about count key ranges (1: the whole prefix, no probe), then each range listed in
    a thread of its own, all at once: wall and probing seconds, the ranges, the probing's requests (probes())."""
    with tempfile.TemporaryDirectory() as state:
        began = time.monotonic()
        ranges = key_ranges(source, "null://sink", prefix, count, Path(state)) if count > 1 else [("", "")]
        probed, probe_requests = time.monotonic() - began, probes()
        listed: list[int] = []

        def walk(key_range: tuple[str, str]) -> None:
            settings = TransferSettings(prefix=prefix, start_after=key_range[0], end_at=key_range[1])
            listed.append(sum(1 for _ in listing(source, settings)))

        threads = [threading.Thread(target=walk, args=(r,)) for r in ranges]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - began
    if sum(listed) != keys:
        raise SystemExit(f"{count} range(s) listed {sum(listed)} keys, not {keys}")
    return {"ranges": len(ranges), "asked": count, "wall_s": wall, "probe_s": probed, "probe_requests": probe_requests}


def render(engine_rows: list[dict], plan_rows: list[dict], list_rows: list[dict]) -> str:
    lines = []
    if engine_rows:
        lines += ["| engine: synthetic -> null | objects | wall s | objects/s | GB/s | CPU s |", "|---" * 6 + "|"]
        lines += [f"| {r['how']} | {r['objects']} | {r['wall_s']:.2f} | {r['objects_per_s']:.0f} | {r['gb_per_s']:.2f} "
                  f"| {r['cpu_s']:.1f} |" for r in engine_rows]  # fmt: skip
        one, two = (r for r in engine_rows if r.get("workers") == 1), (r for r in engine_rows if r.get("workers") == 2)
        ratio = next(two)["objects_per_s"] / next(one)["objects_per_s"]
        lines += ["", f"Scaling, 2 Dask workers against 1: {ratio:.2f}x on {os.cpu_count()} cores.", ""]
    if plan_rows:
        lines += ["| plan + diff | keys | ranges | planning s | diff s | keys/s | peak RSS MB |", "|---" * 7 + "|"]
        lines += [f"| synthetic, dry run | {r['keys']:,} | {r['ranges']} | {r['plan_s']:.2f} | {r['diff_s']:.1f} "
                  f"| {r['keys_per_s']:,.0f} | {r['peak_rss_mb']:.0f} |" for r in plan_rows]  # fmt: skip
        ratio = plan_rows[-1]["peak_rss_mb"] / plan_rows[0]["peak_rss_mb"]
        verdict = "ok" if ratio <= 1.2 else "MISSED"
        lines += ["", f"Flat memory: peak RSS at {plan_rows[-1]['keys']:,} keys is {ratio:.2f}x that at "
                  f"{plan_rows[0]['keys']:,} (target <= 1.2x): {verdict}", ""]  # fmt: skip
    if list_rows:
        lines += [f"| listing through {LATENCY_S * 1000:.0f} ms a request | ranges | wall s | of which probing s "
                  "| LIST requests | of which probes | moto CPU s |", "|---" * 7 + "|"]  # fmt: skip
        lines += [f"| moto | {r['ranges']} | {r['wall_s']:.2f} | {r['probe_s']:.2f} | {r['requests']} "
                  f"| {r['probe_requests']} | {r['server_cpu_s']:.1f} |" for r in list_rows
                  if r["store"] == "moto"]  # fmt: skip
        lines += [f"| synthetic, {LATENCY_S * 1000:.0f} ms a page of 1,000 keys, no server | {r['ranges']} "
                  f"| {r['wall_s']:.2f} | {r['probe_s']:.2f} | - | - | - |" for r in list_rows
                  if r["store"] == "synthetic"]  # fmt: skip
        by = {(r["store"], r["asked"]): r["wall_s"] for r in list_rows}
        lines += [""] + [f"8 ranges against 1 on {store}: {by[(store, 1)] / by[(store, 8)]:.2f}x faster"
                         for store in ("moto", "synthetic") if (store, 8) in by]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parts", default="engine,plan,listing")
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--plan-and-diff", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--serve-bucket", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plan_and_diff:
        print(json.dumps(plan_and_diff(args.plan_and_diff)))
        return 0
    if args.serve_bucket:
        serve_bucket(args.serve_bucket)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    shape = "4000x64K+8x32M" if args.quick else "40000x64K+32x64M"
    engine_rows = engine(shape, args.threads, args.out) if "engine" in parts else []
    plan_rows = plan(1_000_000 if args.quick else 10_000_000, args.out) if "plan" in parts else []
    list_rows = []
    if "listing" in parts:
        list_rows = list_ranges(20_000 if args.quick else 200_000) + list_latency_bound(
            100_000 if args.quick else 1_000_000
        )
    text = render(engine_rows, plan_rows, list_rows)
    (args.out / "scale.md").write_text(text)
    (args.out / "scale.json").write_text(json.dumps({"engine": engine_rows, "plan": plan_rows, "listing": list_rows},
                                                    indent=2))  # fmt: skip
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
