"""The raw ceiling: the least a client can do to put a directory into S3 with N threads.

    python -m bench.ceiling DIR s3://bucket/prefix --threads N

No listing of the target, no checksums, no verification: small files with put_object, files above 16 MiB
with create/upload_part (8 MiB parts)/complete, every part of every file in one thread pool. The endpoint and
credentials come from the environment (AWS_ENDPOINT_URL_S3 ...). Also used, untimed, to preload buckets.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
from botocore.config import Config

PART = 8 << 20
THRESHOLD = 16 << 20


def read(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", help="s3://bucket/prefix")
    parser.add_argument("--threads", type=int, default=128)
    args = parser.parse_args()
    bucket, _, prefix = args.target.removeprefix("s3://").partition("/")
    config = Config(
        max_pool_connections=args.threads,
        retries={"max_attempts": 5, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    s3 = boto3.client("s3", config=config)

    files = sorted(p for p in args.source.rglob("*") if p.is_file())
    key_of = {p: "/".join(filter(None, [prefix.strip("/"), p.relative_to(args.source).as_posix()])) for p in files}

    def put(path: Path) -> None:
        s3.put_object(Bucket=bucket, Key=key_of[path], Body=read(path, 0, os.path.getsize(path)))

    def put_part(path: Path, upload_id: str, number: int) -> dict:
        body = read(path, (number - 1) * PART, PART)
        response = s3.upload_part(Bucket=bucket, Key=key_of[path], UploadId=upload_id, PartNumber=number, Body=body)
        return {"PartNumber": number, "ETag": response["ETag"]}

    def complete(path: Path, upload_id: str, parts: list[dict]) -> None:
        s3.complete_multipart_upload(
            Bucket=bucket, Key=key_of[path], UploadId=upload_id, MultipartUpload={"Parts": parts}
        )

    with ThreadPoolExecutor(args.threads) as pool:
        large = [p for p in files if p.stat().st_size > THRESHOLD]
        uploads = {p: s3.create_multipart_upload(Bucket=bucket, Key=key_of[p])["UploadId"] for p in large}
        part_futures = {
            p: [pool.submit(put_part, p, uploads[p], n + 1) for n in range(-(-p.stat().st_size // PART))]
            for p in large
        }
        small_futures = [pool.submit(put, p) for p in files if p not in uploads]
        completes = [pool.submit(complete, p, uploads[p], [f.result() for f in fs]) for p, fs in part_futures.items()]
        for future in small_futures + completes:
            future.result()
    print(f"put {len(files)} files")


if __name__ == "__main__":
    main()
