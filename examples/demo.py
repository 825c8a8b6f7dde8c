"""`make demo`: run examples/demo/migration.yaml on embedded defaults, then examples/demo/images.yaml.

Generates a sample dataset, starts an embedded S3 server (moto) for the `meta://` target, runs `ferry run` (Prefect's
ephemeral API unless PREFECT_API_URL is set), then runs it again to show the resume: iam, committed with unchanged
exports, is skipped; data_sync diffs the storage again and copies nothing. Then the images phase: where buildah,
skopeo and docker-registry are installed, between a local registry pair started on free ports (the tests' own
launcher) and seeded with images buildah builds from scratch; where they are not, one line says which are missing,
how to install them, and that the images phase was skipped. Every server started is stopped by PID at the end,
after an error or Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from examples.gen_data import generate
from tests.support import buildah, start_moto, start_registry

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "examples" / "demo" / "migration.yaml"
IMAGES = ROOT / "examples" / "demo" / "images.yaml"
WORK = ROOT / ".ferry" / "demo"
TOOLS = ("buildah", "skopeo", "docker-registry")
INSTALL = "apt-get install buildah skopeo docker-registry"
# What images.yaml finds on the source registry: two to copy (eval:* matches both evals) and the platform's base
# its Dockerfile is rebased onto, with the CUDA toolkit each declares (the go-live check reads it from the digest map).
SOURCE_IMAGES = {
    "ml/tokenizer:1.0": [],
    "ml/eval:1": ["CUDA_VERSION=12.2.2"],
    "ml/eval:2": ["CUDA_VERSION=12.4.1"],
    "base/cuda-runtime:12.4.1": ["CUDA_VERSION=12.4.1"],
}


def missing_tools() -> list[str]:
    """The tools the images phase needs that are not on PATH."""
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def _terminated(signum: int, frame: object) -> None:
    # A SIGTERM ends the demo as Ctrl-C does: through the `finally` blocks that stop its servers.
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminated)
    generate(WORK / "data")
    # Fresh embedded servers hold nothing: start the plans' record (and the images' build storage) afresh too.
    for stale in ("state", "runs", "buildah"):
        shutil.rmtree(WORK / stale, ignore_errors=True)
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
        print(f"$ ferry run {PLAN.relative_to(ROOT)}", flush=True)
        first = subprocess.run([*ferry, "run", str(PLAN)], env=env, check=False)
        if first.returncode != 0:
            return first.returncode
        print(
            f"\n$ ferry run {PLAN.relative_to(ROOT)}   # again: iam is skipped, data_sync copies nothing new",
            flush=True,
        )
        second = subprocess.run([*ferry, "run", str(PLAN)], env=env, check=False)
        images = run_images(ferry, env)
        if not os.environ.get("PREFECT_API_URL"):
            print(
                "\nThe runs used Prefect's ephemeral API. To watch them in the UI: `ferry ui`, then export the "
                "PREFECT_API_URL it prints and run `make demo` again."
            )
        return second.returncode or images
    finally:
        server.stop()


def run_images(ferry: list[str], env: dict[str, str]) -> int:
    """`ferry run examples/demo/images.yaml` between a fresh local registry pair, or one line saying why it is
    skipped (a SKIP, exit code 0: the rest of the demo ran) where a tool is missing."""
    missing = missing_tools()
    if missing:
        print(f"\nimages: SKIP (not run): {', '.join(missing)} not on PATH; install with: {INSTALL}", flush=True)
        return 0
    with contextlib.ExitStack() as servers:
        source = start_registry()
        servers.callback(source.stop)
        target = start_registry()
        servers.callback(target.stop)
        print("\n(pushing the source images, built from scratch by buildah)", flush=True)
        seed(WORK / "buildah", f"127.0.0.1:{source.port}")
        registries = {
            "FERRY_DEMO_SOURCE_REGISTRY": f"127.0.0.1:{source.port}",
            "FERRY_DEMO_TARGET_REGISTRY": f"127.0.0.1:{target.port}",
        }
        print(
            f"$ ferry run {IMAGES.relative_to(ROOT)}   # copy two images with their digests, rebuild one on the "
            "platform's base",
            flush=True,
        )
        return subprocess.run([*ferry, "run", str(IMAGES)], env={**env, **registries}, check=False).returncode


def seed(work: Path, registry: str) -> None:
    """Push SOURCE_IMAGES to registry: each one file and its environment on linux/amd64 (nothing in them runs)."""
    for ref, variables in SOURCE_IMAGES.items():
        content = work / "content" / ref.replace("/", "_").replace(":", "_")
        content.mkdir(parents=True, exist_ok=True)
        (content / "IMAGE").write_text(f"{ref}: a demo image\n", encoding="utf-8")
        container = buildah(work, "from", "scratch")
        buildah(work, "copy", container, str(content), "/")
        environment = [x for v in variables for x in ("--env", v)]
        buildah(work, "config", "--os", "linux", "--arch", "amd64", *environment, container)
        buildah(work, "commit", "--format", "oci", "--rm", container, ref)
        buildah(work, "push", "--tls-verify=false", ref, f"docker://{registry}/{ref}")


if __name__ == "__main__":
    sys.exit(main())
