"""`make demo`: generate a sample dataset, sync it to an embedded S3 target through a profile alias,
verify it, sync again (nothing to copy), and show where the report is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3

from examples.gen_data import generate
from tests.servers import start_moto

WORK = Path(".ferry/demo")


def main() -> int:
    data = generate(WORK / "data")
    server = start_moto()
    try:
        env = {**os.environ, "FERRY_DEMO_KEY": "demo", "FERRY_DEMO_SECRET": "demo", "AWS_EC2_METADATA_DISABLED": "true"}
        boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            region_name="us-east-1",
            aws_access_key_id="demo",
            aws_secret_access_key="demo",
        ).create_bucket(Bucket="dest-store")
        profiles = WORK / "profiles.yaml"
        profiles.write_text(
            "# meta:// is an S3-compatible store; credentials are named, never inline.\n"
            "profiles:\n"
            "  meta:\n"
            "    type: s3\n"
            f"    endpoint_url: {server.endpoint}\n"
            "    region: eu-frankfurt-1\n"
            "    credentials:\n"
            "      access_key_id_env: FERRY_DEMO_KEY\n"
            "      secret_access_key_env: FERRY_DEMO_SECRET\n",
            encoding="utf-8",
        )
        state = WORK / f"state-{server.port}"
        command = [
            sys.executable,
            "-m",
            "ferry.cli",
            "sync",
            str(data),
            "meta://dest-store/datasets",
            "--profiles",
            str(profiles),
            "--state-dir",
            str(state),
            "--report",
            str(WORK / "report.json"),
        ]
        print(f"$ ferry sync {data} meta://dest-store/datasets --profiles {profiles}", flush=True)
        first = subprocess.run(command, env=env, check=False)
        if first.returncode != 0:
            return first.returncode
        print("\n$ ferry sync (again: everything is already there)", flush=True)
        second = subprocess.run(command, env=env, check=False)
        print(f"\nreport: {WORK / 'report.json'}; ledger: {state / 'ledger.sqlite'}")
        return second.returncode
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
