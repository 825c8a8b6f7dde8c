"""What the tests share: real local servers (moto S3, Azurite, a registry) on free loopback ports, stopped by
PID, and the two ways to run `ferry`: in this process (run_cli) and as its own process, as a shell does
(run_ferry). The benchmark and the demo start their servers from here too.

run_cli captures by redirecting sys.stdout and sys.stderr for the call alone, not with pytest's capsys:
Prefect's console handler keeps the stream it first sees, and capsys's is closed after its test.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FERRY = str(Path(sys.executable).with_name("ferry"))
# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


@dataclass
class Server:
    """A server process we started; stopped by PID."""

    proc: subprocess.Popen
    port: int
    env: dict[str, str] = field(default_factory=dict)
    workdir: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str):
        """A boto3 client of service (s3, iam) on this (moto) server, with its credentials, whatever the
        environment holds."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.env["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def start_moto(min_part_size: int | None = None, verifying: bool = False) -> Server:
    """moto's S3/IAM server on a free port. Credentials are moto's fakes, passed by environment. verifying: one
    that refuses a body whose Content-MD5 or x-amz-checksum-* differs, as S3 does (tests/moto_s3.py)."""
    port = free_port()
    env = dict(os.environ)
    if min_part_size is not None:
        env["S3_UPLOAD_PART_MIN_SIZE"] = str(min_part_size)
    server = [sys.executable, str(Path(__file__).with_name("moto_s3.py"))] if verifying else [
        str(Path(sys.executable).with_name("moto_server"))
    ]
    proc = subprocess.Popen(
        [*server, "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc, "moto_server")
    client_env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
    }
    return Server(proc=proc, port=port, env=client_env)


def azurite_binary() -> Path:
    path = ROOT / "node_modules" / ".bin" / "azurite-blob"
    if not path.exists():
        raise RuntimeError("Azurite is not installed: run `npm install` in the repository root")
    return path


def start_azurite() -> Server:
    """Azurite's blob service on a free port, on disk in a temp dir."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ferry-azurite-"))
    proc = subprocess.Popen(
        [
            str(azurite_binary()),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--location",
            str(workdir),
            "--skipApiVersionCheck",
            "--loose",
            "--disableProductStyleUrl",
            "--silent",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc, "azurite")
    conn = (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )
    return Server(proc=proc, port=port, env={"AZURE_STORAGE_CONNECTION_STRING": conn}, workdir=workdir)


def start_registry(deletes: bool = True) -> Server:
    """Debian's docker-registry (distribution 2.8) on a free port, storing in a temp dir, deletes enabled or not."""
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="ferry-registry-"))
    config = workdir / "config.yml"
    config.write_text(
        "version: 0.1\n"
        f"storage:\n  filesystem:\n    rootdirectory: {workdir / 'data'}\n"
        # Deletes by digest, as the images phase's rollback needs (the registry refuses them by default).
        f"  delete:\n    enabled: {str(deletes).lower()}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        "log:\n  level: error\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc, "docker-registry")
    return Server(proc=proc, port=port, workdir=workdir)


def buildah(work: Path, *args: str) -> str:
    """Run buildah with its storage under work (vfs, as the images phase does); its stdout. A failure raises with
    the end of buildah's own output (a build's last step says what went wrong)."""
    root = ["--root", str(work / "root"), "--runroot", str(work / "run"), "--storage-driver", "vfs"]
    done = subprocess.run(["buildah", *root, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"buildah {args[0]} exited {done.returncode}: {(done.stdout + done.stderr)[-4000:]}")
    return done.stdout.strip()


def busybox_image(work: Path, name: str, arch: str, env: list[str]) -> None:
    """A local image `name` of Debian's busybox-static (.ci/run installs it), its architecture declared as arch.

    Only amd64 ones ever run here: the others are for multi-platform indexes, assembled without emulation.
    """
    rootfs = work / f"rootfs-{arch}"
    if not rootfs.exists():
        (rootfs / "bin").mkdir(parents=True)
        shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
        for tool in ("sh", "echo", "cat", "false"):
            (rootfs / "bin" / tool).symlink_to("busybox")
        (rootfs / "arch").write_text(arch)
    container = buildah(work, "from", "scratch")
    buildah(work, "copy", container, str(rootfs), "/")
    buildah(work, "config", "--arch", arch, "--env", "PATH=/bin", *(x for e in env for x in ("--env", e)), container)
    buildah(work, "commit", "--format", "oci", "--rm", container, name)


@dataclass
class Registries:
    """Two registries, the source seeded by start_registry_pair, and buildah's storage that seeded it."""

    source: Server
    target: Server
    work: Path

    @property
    def src(self) -> str:
        return f"127.0.0.1:{self.source.port}"

    @property
    def tgt(self) -> str:
        return f"127.0.0.1:{self.target.port}"

    def client(self, host: str):
        from ferry.images.oci import Registry

        return Registry(host, insecure=True)

    def digest(self, reference: str) -> str | None:
        from ferry.images.reference import Reference

        ref = Reference.parse(reference)
        return self.client(ref.host).digest(ref.repository, ref.ref)

    def stop(self) -> None:
        self.source.stop()
        self.target.stop()


def start_registry_pair(work: Path) -> Registries:
    """A source and a target registry, the source holding what the images tests copy and rebase onto.

    The bases are made here: a busybox-static root filesystem committed with buildah and pushed to the source
    (`base/busy-meta:1`, with CUDA_VERSION in its config, as NGC's images carry it); `ml/tokenizer:1.0`, a
    two-platform index assembled with `buildah manifest` from two images whose architecture is only declared, so
    no foreign binary runs; and `ml/eval:1` and `ml/eval:2`, one image under two tags.
    """
    regs = Registries(start_registry(), start_registry(), work)
    try:
        src = regs.src
        push = ("push", "--tls-verify=false")
        busybox_image(work, "busy-meta", "amd64", ["CUDA_VERSION=12.4.1"])
        buildah(work, *push, "busy-meta", f"docker://{src}/base/busy-meta:1")
        busybox_image(work, "tok-amd64", "amd64", [])
        busybox_image(work, "tok-arm64", "arm64", [])
        buildah(work, "manifest", "create", "tok")
        buildah(work, "manifest", "add", "--arch", "amd64", "tok", "containers-storage:localhost/tok-amd64")
        buildah(work, "manifest", "add", "--arch", "arm64", "tok", "containers-storage:localhost/tok-arm64")
        buildah(work, "manifest", "push", "--all", "--tls-verify=false", "tok", f"docker://{src}/ml/tokenizer:1.0")
        for tag in ("1", "2"):
            buildah(work, *push, "tok-amd64", f"docker://{src}/ml/eval:{tag}")
    except BaseException:
        regs.stop()
        raise
    return regs


def run_cli(*args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `ferry ARGS...` run in this process (it sees phases registered here)."""
    import pytest

    from ferry import cli

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["ferry", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
            cli.run()
    finally:
        sys.argv = old
    return exited.value.code, out.getvalue(), err.getvalue()


def run_ferry(
    *args: str, api: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the installed `ferry ARGS...` as its own process, as a shell runs it.

    api: the Prefect server it reports to (else none: commands that need one say so). A wide terminal,
    so that tables are not cut.
    """
    environ = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FERRY_DEBUG")}
    environ.update({"COLUMNS": "200", **(env or {})})
    if api:
        environ["PREFECT_API_URL"] = api
    done = subprocess.run(
        [FERRY, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300, check=False
    )
    return done.returncode, done.stdout, done.stderr


# A small migration of a local tree in two shards, for the pipeline and CLI tests.
PIPELINE_PLAN = """\
name: {name}
source:
  storage: ./src
target:
  profile: meta-compute
  storage: ./dst
phases:
  data_sync:
    threads: 8
    shards: [a/, b/]
gates:
  data_sync: {{allow_extra: {allow_extra}}}
retries: {{attempts: 1, delay_s: 0}}
{extra}
"""


def write_plan(root: Path, name: str, allow_extra: bool = True, extra: str = "") -> Path:
    for key, data in {"a/one.bin": b"1" * 1000, "a/two.bin": b"22", "b/three.bin": b"333" * 100}.items():
        path = root / "src" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    plan = root / "migration.yaml"
    plan.write_text(PIPELINE_PLAN.format(name=name, allow_extra=str(allow_extra).lower(), extra=extra))
    return plan


def parts_recorded(state_dir: Path) -> int:
    """Multipart parts the transfer state of the one shard under state_dir has recorded (0 before it exists)."""
    import sqlite3

    try:
        (path,) = state_dir.glob("transfers/*.sqlite")
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM parts").fetchone()[0]
    except (ValueError, sqlite3.Error):
        return 0


def signal_mid_copy(proc: subprocess.Popen, state_dir: Path, parts: int, sig: int) -> str:
    """Send sig to proc once its transfer state has recorded parts parts; its stderr once it has stopped."""
    deadline = time.monotonic() + 120
    while parts_recorded(state_dir) < parts and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return err or ""


class Watched:
    """`ferry ARGS...` as its own process, its stderr read line by line as it comes, so that a test acts on
    the process's own events (a log line, a failpoint: FERRY_FAILPOINTS) rather than on time."""

    def __init__(self, *args: str, api: str | None = None, env: dict[str, str] | None = None):
        import threading

        environ = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "FERRY_DEBUG")}
        environ.update({"COLUMNS": "200", **(env or {})})
        if api:
            environ["PREFECT_API_URL"] = api
        self.proc = subprocess.Popen(
            [FERRY, *args], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 180) -> bool:
        """True once a line of stderr holds text; False if the process ended (or timeout passed) first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    def finish(self, sig: int | None = None, timeout: float = 180) -> tuple[int, str, str]:
        """Send sig (if any), then (exit code, stdout, stderr) once the process has ended."""
        if sig is not None:
            self.proc.send_signal(sig)
        try:
            out = self.proc.stdout.read()
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=10)
        return self.proc.returncode, out, "".join(self.lines)
