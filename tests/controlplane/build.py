"""Build the test control plane's binaries from the Go module proxy, once per set of versions.

`python -m tests.controlplane.build` (make test runs it) builds etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kubectl and kwok at the versions pinned in sources.toml into a cache outside the checkout
(`$FERRY_CONTROLPLANE_CACHE`, else ~/.cache/ferry/controlplane), one folder per set of versions, and reuses it
after. It is test infrastructure: ferry itself has no Go in it.

k8s.io/kubernetes points its k8s.io/* staging modules at ./staging with replace directives, which a module that
depends on it ignores; so the binaries are built from a small wrapper module that requires k8s.io/kubernetes and
replaces each staging module with its published release, the list read from that release's own go.mod.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

SOURCES = Path(__file__).with_name("sources.toml")
KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
BINARIES = ("etcd", *KUBE_COMMANDS, "kwok")
# kwok's stages (what it does to a node or pod, and when), taken from its own release: nodes initialised and kept
# alive by heartbeats; pods Ready at once, a Job's pods Succeeded, deleted pods gone.
STAGES = "kwok-stages.yaml"
_KWOK_STAGES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)
_ETCD_MAIN = """\
// The etcd server, as the etcd repository's own main.go starts it.
package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


class BuildError(RuntimeError):
    """A binary could not be built: the one line says which and why."""


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str

    @classmethod
    def pinned(cls) -> Versions:
        table = tomllib.loads(SOURCES.read_text())
        return cls(**{name: table[name]["version"] for name in ("kubernetes", "etcd", "kwok")})

    @property
    def key(self) -> str:
        return f"k8s-{self.kubernetes}-etcd-{self.etcd}-kwok-{self.kwok}"


def cache_root() -> Path:
    configured = os.environ.get("FERRY_CONTROLPLANE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "ferry" / "controlplane"


def bin_dir(versions: Versions | None = None) -> Path:
    return cache_root() / (versions or Versions.pinned()).key / "bin"


def built(versions: Versions | None = None) -> bool:
    folder = bin_dir(versions)
    return all((folder / name).is_file() for name in (*BINARIES, STAGES))


def _say(message: str) -> None:
    print(f"control plane: {message}", flush=True)


def _go(args: list[str], cwd: Path, *, what: str) -> str:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    done = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        raise BuildError(f"{what}: go {args[0]} failed: {last[-1] if last else f'exit {done.returncode}'}")
    return done.stdout


def _module(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "go.mod").write_text(f"module {name}\n\ngo 1.26.0\n{body}")
    return folder


def _staging_replaces(kubernetes: str, cwd: Path) -> str:
    info = json.loads(
        _go(["mod", "download", "-json", f"k8s.io/kubernetes@v{kubernetes}"], cwd, what="k8s.io/kubernetes")
    )
    staging = _STAGING.findall(Path(info["GoMod"]).read_text())
    if not staging:
        raise BuildError(f"k8s.io/kubernetes v{kubernetes}: its go.mod names no staging modules")
    minor_patch = kubernetes.split(".", 1)[1]
    lines = "".join(f"\t{module} => {module} v0.{minor_patch}\n" for module in sorted(staging))
    return f"\nreplace (\n{lines})\n"


def _ldflags_kube(kubernetes: str) -> str:
    major, minor, _ = kubernetes.split(".")
    pkg = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion=v{kubernetes}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    )


def _build(work: Path, out: Path, packages: list[str], *, ldflags: str, what: str) -> None:
    jobs = str(os.cpu_count() or 2)
    _go(["build", "-p", jobs, "-trimpath", "-ldflags", ldflags, "-o", str(out) + "/", *packages], work, what=what)


def build(versions: Versions | None = None) -> Path:
    versions = versions or Versions.pinned()
    target = bin_dir(versions)
    if built(versions):
        _say(f"cached in {target.parent}")
        return target
    if shutil.which("go") is None:
        raise BuildError("Go is not installed: the test control plane builds from Go sources (the polyglot machine)")
    src = target.parent / "src"
    staging_bin = target.parent / "bin.partial"
    staging_bin.mkdir(parents=True, exist_ok=True)
    _say(f"building {versions.key} into {target.parent} (once per version; ~15 minutes on 2 cores)")

    started = time.monotonic()
    etcd = _module(src / "etcd", "ferry.test/etcd", f"\nrequire go.etcd.io/etcd/server/v3 v{versions.etcd}\n")
    (etcd / "main.go").write_text(_ETCD_MAIN)
    _go(["mod", "tidy"], etcd, what="etcd")
    _build(etcd, staging_bin, ["."], ldflags="-s -w", what="etcd")
    _say(f"etcd v{versions.etcd} built ({time.monotonic() - started:.0f} s)")

    kube = _module(
        src / "kubernetes",
        "ferry.test/kubernetes",
        f"\nrequire k8s.io/kubernetes v{versions.kubernetes}\n" + _staging_replaces(versions.kubernetes, src),
    )
    commands = [f"k8s.io/kubernetes/cmd/{name}" for name in KUBE_COMMANDS]
    for package in commands:
        _go(["get", "-tool", package], kube, what=package)
    _build(kube, staging_bin, commands, ldflags=_ldflags_kube(versions.kubernetes), what="k8s.io/kubernetes")
    _say(f"kubernetes v{versions.kubernetes} built ({time.monotonic() - started:.0f} s)")

    kwok = _module(src / "kwok", "ferry.test/kwok", f"\nrequire sigs.k8s.io/kwok v{versions.kwok}\n")
    _go(["get", "-tool", "sigs.k8s.io/kwok/cmd/kwok"], kwok, what="kwok")
    _build(kwok, staging_bin, ["sigs.k8s.io/kwok/cmd/kwok"], ldflags="-s -w", what="kwok")
    info = json.loads(_go(["mod", "download", "-json", f"sigs.k8s.io/kwok@v{versions.kwok}"], kwok, what="kwok"))
    stages = Path(info["Dir"]) / "kustomize" / "stage"
    (staging_bin / STAGES).write_text("---\n".join((stages / name).read_text() for name in _KWOK_STAGES))
    _say(f"kwok v{versions.kwok} built ({time.monotonic() - started:.0f} s)")

    missing = [name for name in (*BINARIES, STAGES) if not (staging_bin / name).is_file()]
    if missing:
        raise BuildError(f"the build left out {', '.join(missing)}")
    if target.exists():
        shutil.rmtree(target)
    staging_bin.rename(target)
    _say(f"built in {time.monotonic() - started:.0f} s")
    return target


def main() -> int:
    try:
        build()
    except BuildError as error:
        print(f"control plane: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
