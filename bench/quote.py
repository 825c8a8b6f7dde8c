"""The quote's duration against the copy it predicts: for each dataset, a fresh moto server, `ferry plan estimate`
(its throughput probe) predicts the data phase's P50 and P90, then `ferry sync` with the plan's settings copies the
dataset; the engine's own time (its report's `duration_s`: listing, diff and copy, without the process start or the
data gate) is held to the P50.

    python -m bench.quote [--runs 3] [--datasets mixed,small,large] [--threads 128] [--probe-seconds 60] [--quick]

Each run is a fresh server and target. The table shows, per dataset, the medians over the runs, the spread of the
measured times (min-max) and measured / predicted P50 (the target: within 25%).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.datasets import ensure
from tests.support import start_moto

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).with_name("ferry"))


def one_run(data_path: Path, threads: int, probe_seconds: int, work: Path) -> dict:
    """One estimate and the copy after it, on a fresh moto server: their figures."""
    server = start_moto()
    try:
        server.client("s3").create_bucket(Bucket="dst")
        env = {**server.env, "PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": str(ROOT)}
        plan = work / "migration.yaml"
        plan.write_text(
            f"name: bench-quote\nsource: {{storage: '{data_path}'}}\ntarget: {{storage: 's3://dst/p'}}\n"
            f"phases:\n  data_sync: {{threads: {threads}}}\nstate_dir: '{work / 'state'}'\n"
        )
        estimate = subprocess.run(
            [FERRY, "plan", "estimate", str(plan), "--format", "json", "--probe-seconds", str(probe_seconds)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if estimate.returncode != 0:
            raise RuntimeError(f"ferry plan estimate failed: {estimate.stderr[-2000:]}")
        quote = json.loads(estimate.stdout)
        report = work / "report.json"
        sync = subprocess.run(
            [FERRY, "sync", str(data_path), "s3://dst/p", "--threads", str(threads), "--no-progress", "--no-verify",
             "--state-dir", str(work / "sync-state"), "--report", str(report)],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if sync.returncode != 0:
            raise RuntimeError(f"ferry sync failed: {sync.stderr[-2000:]}")
        summary = json.loads(report.read_text())["summary"]
    finally:
        server.stop()
    if (summary["objects"]["copied"], summary["bytes"]["copied"]) != (quote["objects_to_copy"], quote["bytes_to_copy"]):
        raise RuntimeError("the copy moved other objects or bytes than the estimate said")
    return {
        "p50_s": quote["duration_p50_s"],
        "p90_s": quote["duration_p90_s"],
        "bound": quote["duration_bound"],
        "measured_s": summary["duration_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--datasets", default="mixed,small,large")
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--probe-seconds", type=int, default=60)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"quote accuracy (P50, P90: predicted): {args.runs} run(s) per dataset, {args.threads} threads, probe "
        f"{args.probe_seconds} s{', QUICK datasets' if args.quick else ''}; measured: the engine's duration_s of "
        "`ferry sync`",
        "",
        "| dataset | runs | P50 s | P90 s | measured s (median) | spread s | measured / P50 | bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    missed = False
    for name in [n.strip() for n in args.datasets.split(",") if n.strip()]:
        data = ensure(name, args.out / "data", args.quick)
        runs = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="ferry-quote-", dir=args.out) as work:
                runs.append(one_run(data.path, args.threads, args.probe_seconds, Path(work)))
            print(f"[{name}] {runs[-1]}", file=sys.stderr)
        measured = [r["measured_s"] for r in runs]
        predicted = [r["p50_s"] for r in runs if r["p50_s"] is not None]
        if len(predicted) < len(runs):
            lines.append(f"| {name} | {len(runs)} | not measured | | {statistics.median(measured):.2f} | | | |")
            missed = True
            continue
        p50, p90, real = (
            statistics.median(predicted),
            statistics.median(r["p90_s"] for r in runs),
            statistics.median(measured),
        )
        ratio = real / p50 if p50 else float("inf")
        missed |= not 0.75 <= ratio <= 1.25
        lines.append(
            f"| {name} | {len(runs)} | {p50:.2f} | {p90:.2f} | {real:.2f} | {min(measured):.2f}-{max(measured):.2f} "
            f"| {ratio:.2f} | {runs[0]['bound']} |"
        )
    lines += ["", f"- target: measured within 25% of the predicted P50: {'MISSED' if missed else 'met'}"]
    text = "\n".join(lines) + "\n"
    (args.out / "quote.md").write_text(text)
    print(text)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
