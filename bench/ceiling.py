"""The ceiling: a bare loop that puts a directory into S3 the way a careful person would, with N threads.

    python -m bench.ceiling DIR s3://bucket/prefix [--threads N] [--client boto3|crt] [--part-size 8M]
                            [--checksums default|off]

No listing of the target and no verification beyond what the SDK does by default. Two clients:

- `boto3` (the `ceiling` row): one boto3 client with its defaults, so every PUT and UploadPart carries the
  CRC32 boto3 computes itself (request_checksum_calculation=when_supported, as boto3 >= 1.36 ships); multipart
  uploads declare CRC32 and complete with each part's checksum, as s3transfer does. The settings a person picks:
  a connection pool the size of the thread pool, standard retries, files above 16 MiB as 8 MiB parts (S3's and
  s3transfer's usual part size; the same threshold and part size as ferry's defaults, so both send the same
  requests), every part of every file in one thread pool. 16, 32 and 64 MiB parts (`--part-size`) were tried
  against moto on 4 x 256 MiB with both clients: no size was faster or cheaper for the server beyond run-to-run
  noise (8.8-14 s wall, 9-13 s server CPU at load 3-6), so the usual 8 MiB stays.
- `crt` (the `ceiling-crt` row): s3transfer's CRT transfer manager as AWS CLI v2's `crt` transfer client builds
  it (create_s3_crt_client with the session's region and credentials, BotocoreCRTRequestSerializer with the
  endpoint, files handed over by path): the CRT's own thread pool, connection count and throughput target, its
  default CRC32 as a trailer, 8 MiB parts and its default threshold (the part size).

The endpoint and credentials come from the environment (AWS_ENDPOINT_URL_S3 ...). With `--checksums off` (the
untimed preload of a source bucket, kept as it was) the boto3 loop sends no checksums.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
from botocore.config import Config

from ferry.units import parse_size

PART = 8 << 20
THRESHOLD = 16 << 20


def read(path: Path, offset: int, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(size)


def boto3_loop(files: list[Path], bucket: str, key_of: dict[Path, str], threads: int, checksums: bool,
               part: int = PART) -> None:
    """Every file with one boto3 client in one pool of threads: whole up to THRESHOLD (or part), else in parts."""
    threshold = max(THRESHOLD, part)
    settings: dict = {"max_pool_connections": threads, "retries": {"max_attempts": 5, "mode": "standard"}}
    if not checksums:
        settings |= {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
    s3 = boto3.client("s3", config=Config(**settings))
    algorithm = {"ChecksumAlgorithm": "CRC32"} if checksums else {}

    def put(path: Path) -> None:
        s3.put_object(Bucket=bucket, Key=key_of[path], Body=read(path, 0, os.path.getsize(path)))

    def put_part(path: Path, upload_id: str, number: int) -> dict:
        body = read(path, (number - 1) * part, part)
        response = s3.upload_part(Bucket=bucket, Key=key_of[path], UploadId=upload_id, PartNumber=number, Body=body,
                                  **algorithm)
        done = {"PartNumber": number, "ETag": response["ETag"]}
        if checksums and "ChecksumCRC32" in response:
            done["ChecksumCRC32"] = response["ChecksumCRC32"]
        return done

    def complete(path: Path, upload_id: str, parts: list[dict]) -> None:
        s3.complete_multipart_upload(
            Bucket=bucket, Key=key_of[path], UploadId=upload_id, MultipartUpload={"Parts": parts}
        )

    with ThreadPoolExecutor(threads) as pool:
        large = [p for p in files if p.stat().st_size > threshold]
        uploads = {p: s3.create_multipart_upload(Bucket=bucket, Key=key_of[p], **algorithm)["UploadId"] for p in large}
        part_futures = {
            p: [pool.submit(put_part, p, uploads[p], n + 1) for n in range(-(-p.stat().st_size // part))]
            for p in large
        }
        small_futures = [pool.submit(put, p) for p in files if p not in uploads]
        completes = [pool.submit(complete, p, uploads[p], [f.result() for f in fs]) for p, fs in part_futures.items()]
        for future in small_futures + completes:
            future.result()


def crt_manager(files: list[Path], bucket: str, key_of: dict[Path, str], part: int = PART) -> None:
    """Every file through s3transfer's CRT transfer manager, built as AWS CLI v2 builds its `crt` client."""
    import botocore.session
    from s3transfer.crt import (
        BotocoreCRTCredentialsWrapper,
        BotocoreCRTRequestSerializer,
        CRTTransferManager,
        create_s3_crt_client,
    )

    session = botocore.session.get_session()
    region = session.get_config_variable("region") or "us-east-1"
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    credentials = BotocoreCRTCredentialsWrapper(session.get_credentials()).to_crt_credentials_provider()
    use_ssl = endpoint is None or endpoint.startswith("https://")
    client = create_s3_crt_client(region, crt_credentials_provider=credentials, part_size=part, use_ssl=use_ssl)
    serializer = BotocoreCRTRequestSerializer(session, {"region_name": region, "endpoint_url": endpoint})
    with CRTTransferManager(client, serializer) as manager:
        futures = [manager.upload(str(p), bucket, key_of[p]) for p in files]
        for future in futures:
            future.result()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", help="s3://bucket/prefix")
    parser.add_argument("--threads", type=int, default=128, help="the boto3 loop's pool (the CRT sizes its own)")
    parser.add_argument("--client", choices=("boto3", "crt"), default="boto3")
    parser.add_argument("--part-size", type=parse_size, default=PART, help="8M unless given (for trying others)")
    parser.add_argument("--checksums", choices=("default", "off"), default="default",
                        help="off: the boto3 loop sends no checksums (for untimed preloads)")
    args = parser.parse_args()
    bucket, _, prefix = args.target.removeprefix("s3://").partition("/")
    files = sorted(p for p in args.source.rglob("*") if p.is_file())
    key_of = {p: "/".join(filter(None, [prefix.strip("/"), p.relative_to(args.source).as_posix()])) for p in files}
    if args.client == "crt":
        crt_manager(files, bucket, key_of, args.part_size)
    else:
        boto3_loop(files, bucket, key_of, args.threads, checksums=args.checksums == "default", part=args.part_size)
    print(f"put {len(files)} files")


if __name__ == "__main__":
    main()
