"""`make demo`: run examples/demo/migration.yaml on embedded defaults.

Generates a sample dataset, starts an embedded S3 server (moto) for the `meta://` target,
runs `ferry run` (Prefect's ephemeral API unless PREFECT_API_URL is set), then runs it again to
show the resume: iam, committed with unchanged exports, is skipped; data_sync diffs the storage
again and copies nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from examples.gen_data import generate
from tests.support import start_moto

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "examples" / "demo" / "migration.yaml"
WORK = ROOT / ".ferry" / "demo"


def main() -> int:
    generate(WORK / "data")
    server = start_moto()
    try:
        env = {
            **os.environ,
            "FERRY_DEMO_S3_ENDPOINT": server.endpoint,
            "FERRY_DEMO_KEY": "demo",
            "FERRY_DEMO_SECRET": "demo",
            "AWS_EC2_METADATA_DISABLED": "true",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        server.client("s3").create_bucket(Bucket="dest-store")
        ferry = [sys.executable, "-m", "ferry.cli"]
        # A fresh embedded S3 server holds nothing: start the plan's record afresh too.
        for stale in ("state", "runs"):
            shutil.rmtree(WORK / stale, ignore_errors=True)
        print(f"$ ferry run {PLAN.relative_to(ROOT)}", flush=True)
        first = subprocess.run([*ferry, "run", str(PLAN)], env=env, check=False)
        if first.returncode != 0:
            return first.returncode
        print(
            f"\n$ ferry run {PLAN.relative_to(ROOT)}   # again: iam is skipped, data_sync copies nothing new",
            flush=True,
        )
        second = subprocess.run([*ferry, "run", str(PLAN)], env=env, check=False)
        if not os.environ.get("PREFECT_API_URL"):
            print(
                "\nThe runs used Prefect's ephemeral API. To watch them in the UI: `ferry ui`, then export the "
                "PREFECT_API_URL it prints and run `make demo` again."
            )
        return second.returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
