"""kill -9 at a random point of a 1 GiB multipart upload, then rerun: it must complete, verify, and
re-send at most the parts that were in flight when it died.

    python -m bench.resume [--threads 128] [--seed N] [--quick]

The first run is killed once the transfer state has recorded a random share (10-90%) of the parts. Then:
parts the server holds but the state never recorded were in flight (their answers never came back);
the rerun resumes the same upload, and its report says how many parts it took from the state.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.datasets import ensure
from tests.support import start_moto

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).with_name("ferry"))
PART = 8 << 20


def _recorded(state: Path) -> int:
    """Parts recorded in the transfer state of the run's one shard (0 until the run has created it)."""
    try:
        (path,) = state.glob("transfers/*.sqlite")
        with sqlite3.connect(path, timeout=1) as conn:
            return conn.execute("SELECT count(*) FROM parts").fetchone()[0]
    except (ValueError, sqlite3.Error):
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=128)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    data = ensure("one-gib", args.out / "data", args.quick)
    total = -(-data.bytes // PART)
    server = start_moto()
    try:
        env = {**server.env, "PATH": "/usr/bin:/bin", "AWS_EC2_METADATA_DISABLED": "true"}
        client = server.client("s3")
        client.create_bucket(Bucket="resume")
        work = Path(tempfile.mkdtemp(prefix="ferry-resume-", dir=args.out))
        command = [
            FERRY,
            "sync",
            str(data.path),
            "s3://resume/p",
            "--threads",
            str(args.threads),
            "--part-size",
            str(PART),
            "--state-dir",
            str(work / "state"),
            "--no-progress",
            "--report",
            str(work / "report.json"),
        ]
        kill_at = max(1, int(total * rng.uniform(0.1, 0.9)))
        first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = work / "state"
        while _recorded(state) < kill_at and first.poll() is None:
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait()
        recorded = _recorded(state)
        (state_file,) = state.glob("transfers/*.sqlite")
        with sqlite3.connect(state_file) as conn:
            (upload_id,) = conn.execute("SELECT upload_id FROM uploads").fetchone()
        pages = client.get_paginator("list_parts").paginate(
            Bucket="resume", Key=f"p/{data.path.name}", UploadId=upload_id
        )
        held = sum(len(page.get("Parts", [])) for page in pages)
        started = time.monotonic()
        second = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
        report = json.loads((work / "report.json").read_text())
    finally:
        server.stop()
    resumed = report["summary"]["multipart"]["parts_resumed"]
    resent = held - resumed  # parts the server already had that the rerun sent again
    ok = (
        second.returncode == 0 and report["gate"]["status"] == "PASS" and resumed == recorded and resent <= args.threads
    )
    print(f"resume after kill -9: {data.bytes >> 20} MiB, {total} parts of {PART >> 20} MiB, {args.threads} threads")
    print(f"  killed with {recorded} parts recorded in the transfer state, {held} held by the server")
    print(
        f"  rerun: rc {second.returncode}, {wall:.2f} s, took {resumed} parts from the transfer state, "
        f"re-sent {resent} part(s) that were in flight, gate {report['gate']['status']}"
    )
    print(
        f"  target: completes, verifies, re-sends at most the parts in flight (<= {args.threads}): "
        f"{'ok' if ok else 'MISSED'}"
    )
    if second.returncode != 0:
        print(second.stderr[-2000:])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
