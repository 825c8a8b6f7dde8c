"""A bare listing of both sides, the floor for an unchanged re-sync.

    python -m bench.listing DIR s3://bucket/prefix

Walks DIR (os.walk + stat) and lists the bucket prefix (list_objects_v2, paginated); endpoint and credentials
from the environment.
"""

from __future__ import annotations

import os
import sys

import boto3
from botocore.config import Config


def main() -> None:
    source, target = sys.argv[1], sys.argv[2]
    local = 0
    for folder, _dirs, names in os.walk(source):
        for name in names:
            os.stat(os.path.join(folder, name))
            local += 1
    bucket, _, prefix = target.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", config=Config(response_checksum_validation="when_required"))
    remote = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.strip("/") + "/"):
        remote += len(page.get("Contents", []))
    print(f"local {local} files, remote {remote} objects")


if __name__ == "__main__":
    main()
