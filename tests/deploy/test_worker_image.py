"""deploy/worker.Dockerfile built for real with buildah, and the image it makes run: ferry, Prefect's Dask and
Kubernetes integrations and the dask command work in it, as a user that is not root, and prefect-kubernetes in it
takes the work pool's Job template (deploy/work-pool.json).

Nothing can be pulled here, so the base is made from this machine: the Python the tests run on (its executable,
libpython and standard library, under /usr/local as the official python images have them), the shared libraries
those and manylinux wheels link, a shell, a few coreutils and useradd, committed with buildah as a local image and
given as BASE. ferry's dependencies come from a wheelhouse downloaded once from PyPI at the lock's versions and kept
outside the checkout; the build reads it through a pip configuration file mounted for the build alone
(PIP_CONFIG_FILE), so pip reaches no index. buildah's storage lives in a temporary folder removed after the test,
whatever happens: about 2 GB at its peak.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest

import ferry
from tests.support import ROOT, buildah

DOCKERFILE = ROOT / "deploy" / "worker.Dockerfile"
BASE = "localhost/ferry-test-python:3.11"
IMAGE = "localhost/ferry-worker:test"
# The packages ferry's wheel is built from: every file in them that is not Python is data the code reads.
PACKAGES = ("ferry", "connectors", "checks", "flows")
# What a manylinux wheel may link from the system (PEP 600's list, those this machine's glibc and GCC give).
MANYLINUX_LIBS = ("libc.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libpthread.so.0", "libutil.so.1",
                  "libresolv.so.2", "libgcc_s.so.1", "libstdc++.so.6")  # fmt: skip
# A Debian base's tools that the Dockerfile's RUN steps (and a person debugging the image) use.
TOOLS = ("/usr/bin/dash", "/usr/bin/rm", "/usr/bin/mkdir", "/usr/bin/ls", "/usr/bin/cat", "/usr/bin/id",
         "/usr/bin/env", "/usr/sbin/useradd", "/usr/sbin/nologin")  # fmt: skip


def wheelhouse_root() -> Path:
    configured = os.environ.get("FERRY_WHEELHOUSE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "ferry" / "wheelhouse"


def wheelhouse() -> Path:
    """The wheels the Dockerfile installs (its extras, at the lock's versions, for this Python), with a pip.conf that
    points pip at them alone when mounted at /mnt; downloaded once per lock, pyproject and Python."""
    extras = re.search(r"/tmp/ferry\[([\w,-]+)\]", DOCKERFILE.read_text()).group(1)
    build_requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    inputs = [(ROOT / "constraints.txt").read_bytes(), (ROOT / "pyproject.toml").read_bytes(), extras.encode()]
    key = hashlib.sha256(b"\0".join([*inputs, sys.version.encode()])).hexdigest()[:16]
    root = wheelhouse_root()
    folder = root / key
    if (folder / "pip.conf").exists():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
    try:
        # The build's setuptools too: the wheel of ferry is built in the image, offline.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(partial), "-c",
             str(ROOT / "constraints.txt"), f"{ROOT}[{extras}]", *build_requires],
            check=True, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        (partial / "pip.conf").write_text("[global]\nno-index = true\nfind-links = /mnt\n")
        partial.rename(folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    for old in root.iterdir():  # one wheelhouse is enough: an older lock's goes
        if old != folder:
            shutil.rmtree(old, ignore_errors=True)
    return folder


def _place(rootfs: Path, src: Path) -> None:
    """Copy src into rootfs where it resolves (the base's /lib is usr/lib, as on Debian 12), keeping symlinks."""
    parent = Path(os.path.realpath(src.parent))
    dest = rootfs / parent.relative_to("/") / src.name
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        target = os.readlink(src)
        dest.symlink_to(target)
        _place(rootfs, parent / target)
    else:
        shutil.copy2(src, dest)


def _linked(binaries: list[Path]) -> set[Path]:
    libraries: set[Path] = set()
    for binary in binaries:
        listed = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True).stdout
        libraries.update(Path(word) for line in listed.splitlines() for word in line.split() if word.startswith("/"))
    return libraries


def python_rootfs(rootfs: Path) -> None:
    """A python:3.11-slim-like root filesystem from this machine's own files."""
    for folder in ("bin", "lib", "lib64", "sbin"):  # merged /usr, as Debian 12
        (rootfs / "usr" / folder).mkdir(parents=True)
        (rootfs / folder).symlink_to(f"usr/{folder}")
    for folder in ("etc/skel", "etc/default", "etc/ld.so.conf.d", "home", "root", "mnt", "opt", "srv", "var/log",
                   "tmp", "usr/local/bin", "usr/local/lib"):  # fmt: skip
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    prefix = Path(sys.base_prefix)
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    executable = prefix / "bin" / name
    shutil.copy2(executable, rootfs / "usr/local/bin" / name)
    (rootfs / "usr/local/bin/python3").symlink_to(name)
    (rootfs / "usr/local/bin/python").symlink_to("python3")
    stdlib = prefix / "lib" / name
    left_out = {"test", "idlelib", "tkinter", "turtledemo", "site-packages"}
    shutil.copytree(stdlib, rootfs / "usr/local/lib" / name, symlinks=True,
                    ignore=lambda _, names: [n for n in names if n in left_out or n.startswith("config-")])  # fmt: skip
    (rootfs / "usr/local/lib" / name / "site-packages").mkdir()
    tools = [Path(tool) for tool in TOOLS]
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
    system = {Path(line.split(" => ")[1]) for line in cache.splitlines()
              if " => " in line and "x86-64" in line and line.split()[0] in MANYLINUX_LIBS}  # fmt: skip
    for library in sorted(_linked([executable, *tools, *stdlib.glob("lib-dynload/*.so")]) | system):
        if prefix in library.parents:  # libpython, beside the interpreter as in the official images
            shutil.copy2(library, rootfs / "usr/local/lib" / library.name)
        else:
            _place(rootfs, library)
    for tool in tools:
        _place(rootfs, tool)
    (rootfs / "usr/bin/sh").symlink_to("dash")
    for config in ("login.defs", "default/useradd"):
        shutil.copy2(Path("/etc") / config, rootfs / "etc" / config)
    (rootfs / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (rootfs / "etc/group").write_text("root:x:0:\n")
    (rootfs / "etc/shadow").write_text("root:*:19000:0:99999:7:::\n")
    (rootfs / "etc/gshadow").write_text("root:*::\n")
    # The interpreter's RUNPATH names this machine's prefix: the loader finds libpython in /usr/local/lib by the
    # cache, as the official images' `ldconfig` step makes it.
    (rootfs / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (rootfs / "etc/ld.so.conf.d/libc.conf").write_text("/usr/local/lib\n")
    subprocess.run(["ldconfig", "-r", str(rootfs)], check=True)


def _say(what: str, started: float) -> float:
    now = time.monotonic()
    print(f"worker image: {what} in {now - started:.1f} s", file=sys.stderr)
    return now


def _disk(folder: Path) -> str:
    return subprocess.run(["du", "-sh", str(folder)], capture_output=True, text=True).stdout.split()[0]


@pytest.mark.timeout(900)
def test_the_worker_image_builds_from_a_local_base_and_runs_ferry_prefect_and_dask() -> None:
    started = time.monotonic()
    wheels = wheelhouse()
    started = _say(f"wheelhouse {wheels.name} ({_disk(wheels)})", started)
    work = Path(tempfile.mkdtemp(prefix="ferry-worker-image-"))
    try:
        python_rootfs(work / "rootfs")
        base = buildah(work, "from", "scratch")
        buildah(work, "copy", base, str(work / "rootfs"), "/")
        buildah(work, "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "--env", "LANG=C.UTF-8", "--cmd", "python3", base)  # fmt: skip
        buildah(work, "commit", "--quiet", "--rm", base, BASE)
        shutil.rmtree(work / "rootfs")
        started = _say("base image", started)

        buildah(work, "bud", "--isolation", "chroot", "--pull=never", "--file", str(DOCKERFILE),
                "--build-arg", f"BASE={BASE}", "--build-arg", "PIP_CONFIG_FILE=/mnt/pip.conf",
                "--volume", f"{wheels}:/mnt:ro", "--tag", IMAGE, str(ROOT))  # fmt: skip
        started = _say(f"build (storage {_disk(work)})", started)
        config = buildah(work, "inspect", "--format", "{{.OCIv1.Config.User}} {{.OCIv1.Config.Env}}", IMAGE)
        assert config.startswith("10001:10001 ") and "PATH=/opt/ferry/bin:" in config, config

        container = buildah(work, "from", "--pull=never", IMAGE)
        started = _say(f"container (storage {_disk(work)})", started)
        data = sorted(
            str(path.relative_to(ROOT))
            for package in PACKAGES
            for path in (ROOT / package).rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts
        )
        assert data, "the packages hold data files (target profiles, the CUDA table)"
        script = "; ".join(
            [
                "set -e",
                "id -u",
                "ferry --version",
                "prefect --version",
                "dask --version",
                "python -c \"import flows.pipeline, prefect_dask, prefect_kubernetes; print('imported')\"",
                # The wheel carries the package's data: the files the code reads beside its modules.
                'python -c "import ferry, pathlib, sys; site = pathlib.Path(ferry.__file__).parent.parent; '
                "print('missing:', [p for p in sys.argv[1:] if not (site / p).is_file()])\" " + " ".join(data),
                # prefect-kubernetes, as the pool's worker will, takes the pool's Job template (deploy/work-pool.json).
                'python -c "import json; from prefect.utilities.templating import apply_values; '
                "from prefect_kubernetes.worker import KubernetesWorkerJobConfiguration as Job; "
                "template = json.load(open('/deploy/work-pool.json')); "
                "values = Job._get_base_config_defaults(template['variables']['properties']); "
                "Job(**apply_values(template['job_configuration'], values)); print('template accepted')\"",
                # The wheelhouse was the build's alone: nothing of it stays in the image.
                "test -z \"$(ls -A /mnt)\" && test ! -e /etc/pip.conf && echo 'no wheelhouse left'",
            ]
        )
        deploy = f"{ROOT / 'deploy'}:/deploy:ro"
        out = buildah(work, "run", "--isolation", "chroot", "--volume", deploy, container, "--", "sh", "-c", script)
        _say("checks run in the image", started)
    finally:
        subprocess.run(["buildah", "--root", str(work / "root"), "--runroot", str(work / "run"), "--storage-driver",
                        "vfs", "rm", "--all"], capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    lines = out.splitlines()
    assert lines[0] == "10001", out  # not root
    assert lines[1] == ferry.__version__, out
    assert lines[2] == importlib.metadata.version("prefect"), out
    assert lines[3] == f"dask, version {importlib.metadata.version('dask')}", out
    assert lines[4] == "imported", out
    assert lines[5] == "missing: []", out
    assert lines[6:] == ["template accepted", "no wheelhouse left"], out
