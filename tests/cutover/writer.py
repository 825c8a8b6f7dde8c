"""A writer that keeps the source live: adds, changes and deletes objects in a bucket until SIGTERM, then removes
its pid file (the freeze step in the tests waits for that) and exits. Run as its own process:
`python writer.py ENDPOINT BUCKET PIDFILE`, with moto's credentials in the environment."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import boto3


def main(endpoint: str, bucket: str, pidfile: str) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    rng = random.Random(7)
    Path(pidfile).write_text(str(os.getpid()))
    n = 0
    while not stop:
        n += 1
        kind = rng.choice(("add", "change", "delete"))
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="live/").get("Contents", [])]
        try:
            if kind == "add" or not keys:
                s3.put_object(Bucket=bucket, Key=f"live/new-{n:05d}", Body=os.urandom(rng.randint(1, 4096)))
            elif kind == "change":
                s3.put_object(Bucket=bucket, Key=rng.choice(keys), Body=os.urandom(rng.randint(1, 4096)))
            else:
                s3.delete_object(Bucket=bucket, Key=rng.choice(keys))
        except s3.exceptions.ClientError:
            pass  # refused (a frozen bucket): the writer keeps trying until it is stopped
        time.sleep(0.02)
    Path(pidfile).unlink()


if __name__ == "__main__":
    main(*sys.argv[1:4])
