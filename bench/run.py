"""ferry's sync benchmark against its peers (rclone, AWS CLI, cp), two bare-loop ceilings, and ferry's engine alone.

    python -m bench.run [--runs 5] [--scenarios a,b] [--threads 128] [--out bench/out] [--quick]

Every timed run gets a fresh server (moto does not give memory back) and a fresh target; tools alternate
within each repetition; the table shows medians, with client and server CPU per object and per GiB.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from azure.storage.blob import AccountSasPermissions, BlobServiceClient, ResourceTypes, generate_account_sas

from bench.datasets import Dataset, ensure
from tests.support import AZURITE_ACCOUNT, AZURITE_KEY, Server, start_azurite, start_moto

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
FERRY = str(Path(sys.executable).with_name("ferry"))
RCLONE = shutil.which("rclone") or "rclone"
SPAWN = ROOT / "bench" / "spawn.py"
AWS = "/usr/bin/aws"  # the first `aws` on PATH may be a v1 shim
RUN_LIMIT_S = 1800  # a run still going after this is killed (its whole session) and counted as failed


# -- scenarios -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One end of a transfer: `url` for ferry, AWS CLI, cp and the helpers; `rclone` for rclone."""

    url: str
    rclone: str


@dataclass
class Ends:
    """A fresh source and target for one run (or, with Scenario.shared, one repetition)."""

    src: Side
    dst: Side
    env: dict[str, str]  # the server's client environment (credentials, endpoint)
    endpoint: str | None  # the S3 endpoint, for the AWS CLI
    rclone_flags: list[str]
    inventory: Callable[[], tuple[int, int]] | None  # (objects, bytes) at the target now; None: ferry's report says
    work: Path
    server_pid: int | None = None  # the storage server's process, whose CPU time each run reports


CEILINGS = ("ceiling", "ceiling-crt")


@dataclass(frozen=True)
class Summary:
    """Medians of one scenario's successful rows, for its goals."""

    walls: dict[str, float]
    rss: dict[str, float]
    ferry_bytes: list[dict]
    cpu: dict[str, float] = field(default_factory=dict)  # the tool's own CPU seconds
    server_cpu: dict[str, float] = field(default_factory=dict)  # the storage server's CPU seconds

    @property
    def ceiling(self) -> str:
        """The faster (median wall) of the two bare loops: every ceiling ratio and target uses it."""
        timed = [name for name in CEILINGS if name in self.walls]
        if not timed:
            raise KeyError("ceiling")
        return min(timed, key=lambda name: self.walls[name])


@dataclass(frozen=True)
class Goal:
    text: str  # "{ceiling}" in it names the ceiling the value was measured against
    value: Callable[[Summary], float]
    op: str  # ">=" or "<="
    limit: float


@dataclass(frozen=True)
class Scenario:
    name: str
    route: str  # local-s3, s3-s3, local-azurite, local-local: see ROUTES
    datasets: tuple[str, ...]
    tools: tuple[str, ...]
    goals: tuple[Goal, ...]
    dry_run: bool = False  # ferry only looks: the target must stay empty
    preload_target: bool = False  # one untimed ferry sync first (for re-sync timings)
    shared: bool = False  # one setup per repetition for all tools (their runs must not change the target)


def vs(tool: str) -> Callable[[Summary], float]:
    """peer wall / ferry wall: > 1 means ferry is faster."""
    return lambda s: s.walls[tool] / s.walls["ferry"]


def vs_best_peer(s: Summary) -> float:
    return min(s.walls["rclone"], s.walls["aws"]) / s.walls["ferry"]


def vs_ceiling(s: Summary) -> float:
    """ceiling wall / ferry wall, against the faster ceiling: the fraction of its throughput ferry reached."""
    return s.walls[s.ceiling] / s.walls["ferry"]


def cpu_vs_ceiling(s: Summary) -> float:
    """ferry's client CPU / the faster ceiling's (the same dataset, so per object and per GiB alike)."""
    return s.cpu["ferry"] / s.cpu[s.ceiling]


def server_cpu_vs_ceiling(s: Summary) -> float:
    """The server CPU ferry's run cost / what the faster ceiling's run cost it."""
    return s.server_cpu["ferry"] / s.server_cpu[s.ceiling]


def bytes_through_ferry(s: Summary) -> float:
    return max(b["read_through_ferry"] + b["written_through_ferry"] for b in s.ferry_bytes)


S3_PEERS = ("ferry", "rclone", "aws")
SCENARIOS = [
    Scenario("local-s3-large", "local-s3", ("large",), (*S3_PEERS, "ferry-md5", *CEILINGS), (
        Goal("(primary) ferry server CPU per GiB <= 1.05x the bare loop's ({ceiling}, ferry/{ceiling})",
             server_cpu_vs_ceiling, "<=", 1.05),
        Goal("ferry wall throughput >= 0.9x the bare loop's ({ceiling}, {ceiling}/ferry wall)", vs_ceiling, ">=", 0.9),
        Goal("ferry >= 1.2x the better peer", vs_best_peer, ">=", 1.2),
    )),
    Scenario("local-s3-mixed", "local-s3", ("mixed",), (*S3_PEERS, *CEILINGS), (
        Goal("ferry >= 1.1x the better of rclone and the AWS CLI", vs_best_peer, ">=", 1.1),
        Goal("ferry peak RSS <= 200 MB", lambda s: s.rss["ferry"], "<=", 200),
    )),
    Scenario("local-s3-small", "local-s3", ("small",), (*S3_PEERS, "ferry-md5", *CEILINGS), (
        Goal("(primary) ferry client CPU per object <= 1.0x the bare loop's ({ceiling}, ferry/{ceiling})",
             cpu_vs_ceiling, "<=", 1.0),
        Goal("ferry wall throughput >= the better peer's", vs_best_peer, ">=", 1.0),
    )),
    Scenario("s3-s3-mixed", "s3-s3", ("mixed",), S3_PEERS, (
        Goal("ferry >= 1.5x rclone", vs("rclone"), ">=", 1.5),
        Goal("object bytes read+written through ferry == 0", bytes_through_ferry, "<=", 0),
    )),
    Scenario("local-azurite-mixed", "local-azurite", ("mixed",), ("ferry", "rclone"), (
        Goal("ferry >= 1.25x rclone", vs("rclone"), ">=", 1.25),
    )),
    Scenario("local-local-mixed", "local-local", ("mixed",), ("ferry", "rclone", "cp"), (
        Goal("ferry within 1.5x of cp -r (ferry/cp wall)", lambda s: s.walls["ferry"] / s.walls["cp"], "<=", 1.5),
        Goal("ferry >= 1.4x rclone", vs("rclone"), ">=", 1.4),
    )),
    Scenario("resync-20k", "local-s3", ("tiny-20k",), ("ferry", "listing"), (
        Goal("unchanged re-sync <= 1.5x a bare listing (ferry/listing wall)",
             lambda s: s.walls["ferry"] / s.walls["listing"], "<=", 1.5),
    ), preload_target=True, shared=True),
    Scenario("diff-rss", "local-local", ("files-20k", "files-200k"), ("ferry",), (
        Goal("dry-run peak RSS 200k files / 20k files <= 1.2",
             lambda s: s.rss["ferry files-200k"] / s.rss["ferry files-20k"], "<=", 1.2),
    ), dry_run=True),
    # The engine alone: one ferry process, verification on, from a synthetic source into a null target (no server,
    # no disk). No target: the lines under the table say what one process drives.
    Scenario("engine-small", "synthetic-null", ("synthetic-small",), ("ferry",), ()),
    Scenario("engine-large", "synthetic-null", ("synthetic-large",), ("ferry",), ()),
]
BY_NAME = {s.name: s for s in SCENARIOS}


# -- routes: fresh servers and targets --------------------------------------------------------------


def inventory(sizes: Iterable[int]) -> tuple[int, int]:
    objects = total = 0
    for size in sizes:
        objects, total = objects + 1, total + size
    return objects, total


def s3_inventory(s3, bucket: str, prefix: str) -> tuple[int, int]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return inventory(obj["Size"] for page in pages for obj in page.get("Contents", []))


def local_inventory(path: Path) -> tuple[int, int]:
    walk = os.walk(path)
    return inventory(os.path.getsize(os.path.join(folder, name)) for folder, _dirs, names in walk for name in names)


def rclone_s3_flags(server: Server) -> list[str]:
    return ["--s3-provider", "Other", "--s3-endpoint", server.endpoint, "--s3-access-key-id", "testing",
            "--s3-secret-access-key", "testing", "--s3-no-head"]


@contextmanager
def moto_route(data: Dataset, work: Path, from_s3: bool) -> Iterator[Ends]:
    server = start_moto(verifying=True)  # refuses a body that differs from its checksums, as S3 does
    try:
        s3 = server.client("s3")
        for bucket in ("src", "dst"):
            s3.create_bucket(Bucket=bucket)
        src = Side(str(data.path), str(data.path))
        if from_s3:  # untimed: load the dataset into the source bucket
            src = Side("s3://src/p", ":s3:src/p")
            load = [PYTHON, "-m", "bench.ceiling", str(data.path), src.url, "--threads", "64", "--checksums", "off"]
            done = subprocess.run(load, env={**os.environ, **server.env}, cwd=ROOT, capture_output=True, text=True)
            if done.returncode != 0 or s3_inventory(s3, "src", "p/") != (data.files, data.bytes):
                raise RuntimeError(f"preloading the source bucket failed: {done.stderr[-2000:]}")
        yield Ends(src, Side("s3://dst/p", ":s3:dst/p"), server.env, server.endpoint, rclone_s3_flags(server),
                   lambda: s3_inventory(s3, "dst", "p/"), work, server.proc.pid)
    finally:
        server.stop()


@contextmanager
def azurite_route(data: Dataset, work: Path) -> Iterator[Ends]:
    server = start_azurite()
    try:
        service = BlobServiceClient.from_connection_string(server.env["AZURE_STORAGE_CONNECTION_STRING"])
        container = service.create_container("bench")
        sas = generate_account_sas(
            AZURITE_ACCOUNT, AZURITE_KEY,
            resource_types=ResourceTypes(service=True, container=True, object=True),
            permission=AccountSasPermissions(read=True, write=True, delete=True, list=True, add=True, create=True),
            expiry=datetime.now(UTC) + timedelta(days=1),
        )
        sas_url = f"{server.endpoint}/{AZURITE_ACCOUNT}?{sas}"
        yield Ends(Side(str(data.path), str(data.path)), Side("az://bench/p", ":azureblob:bench/p"), server.env,
                   None, ["--azureblob-sas-url", sas_url],
                   lambda: inventory(blob.size for blob in container.list_blobs(name_starts_with="p/")), work,
                   server.proc.pid)
    finally:
        server.stop()


@contextmanager
def local_route(data: Dataset, work: Path) -> Iterator[Ends]:
    target = work / "target"
    target.mkdir()
    yield Ends(Side(str(data.path), str(data.path)), Side(str(target), str(target)), {}, None, [],
               lambda: local_inventory(target), work)


@contextmanager
def synthetic_route(data: Dataset, work: Path) -> Iterator[Ends]:
    """ferry's synthetic source into its null target: nothing outside the ferry process; its report counts."""
    yield Ends(Side(str(data.url), ""), Side("null://sink", ""), {}, None, [], None, work)


ROUTES: dict[str, Callable[[Dataset, Path], AbstractContextManager[Ends]]] = {
    "local-s3": lambda data, work: moto_route(data, work, from_s3=False),
    "s3-s3": lambda data, work: moto_route(data, work, from_s3=True),
    "local-azurite": azurite_route,
    "local-local": local_route,
    "synthetic-null": synthetic_route,
}


# -- commands and measurement -----------------------------------------------------------------------


def command(tool: str, ends: Ends, threads: int, scenario: Scenario, report: Path) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one tool copying ends.src to ends.dst."""
    env = {**os.environ, **ends.env}
    src, dst, n = ends.src, ends.dst, str(threads)
    if tool in ("ferry", "ferry-md5"):
        env["PYTHONPATH"] = str(ROOT)  # this tree's ferry, also where the installed one is another checkout's
        target, more = dst.url, []
        if tool == "ferry-md5":  # receipt md5: what ferry does where the store does not verify the CRC32C it is sent
            profiles = ends.work / "md5-profiles.yaml"
            profiles.write_text(f"profiles:\n  md5:\n    type: s3\n    endpoint_url: {ends.endpoint}\n"
                                "    receipt: md5\n")  # fmt: skip
            target, more = dst.url.replace("s3://", "md5://", 1), ["--profiles", str(profiles)]
        argv = [FERRY, "sync", src.url, target, "--threads", n, "--no-progress",
                "--state-dir", str(ends.work / f"{tool}-state"), "--report", str(report), *more]
        argv += ["--dry-run"] if scenario.dry_run else []
    elif tool == "rclone":
        env.pop("AWS_CA_BUNDLE", None)  # breaks rclone's S3 backend
        env["RCLONE_CONFIG"] = str(ends.work / "rclone.conf")  # empty: on-the-fly remotes only
        Path(env["RCLONE_CONFIG"]).touch()
        argv = [RCLONE, "copy", src.rclone, dst.rclone, "--transfers", n, "--checkers", n, *ends.rclone_flags]
    elif tool == "aws":
        config = ends.work / "aws-config"
        config.write_text(f"[default]\ns3 =\n  max_concurrent_requests = {threads}\n")
        env["AWS_CONFIG_FILE"] = str(config)
        argv = [AWS, "s3", "sync", src.url, dst.url, "--endpoint-url", str(ends.endpoint), "--only-show-errors"]
    elif tool == "ceiling":
        argv = [PYTHON, "-m", "bench.ceiling", src.url, dst.url, "--threads", n]
    elif tool == "ceiling-crt":
        argv = [PYTHON, "-m", "bench.ceiling", src.url, dst.url, "--client", "crt"]
    elif tool == "listing":
        argv = [PYTHON, "-m", "bench.listing", src.url, dst.url]
    elif tool == "cp":
        argv = ["cp", "-r", src.url + "/.", dst.url]
    else:
        raise ValueError(f"unknown tool {tool!r}")
    return argv, env


@dataclass
class Measurement:
    wall_s: float
    rss_mb: float  # peak RSS of the process tree (the largest process), 10^6 bytes
    cpu_s: float  # user + system CPU seconds of the whole process tree
    rc: int
    tail: str


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a live process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(argv: list[str], env: dict[str, str], log: Path) -> Measurement:
    """Run argv to the end through bench/spawn.py (wall seconds, wait4's peak RSS, exit code); output into log.*"""
    out, err, result = log.with_suffix(".out"), log.with_suffix(".err"), log.with_suffix(".rusage.json")
    result.unlink(missing_ok=True)
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        proc = subprocess.Popen([PYTHON, "-I", "-S", str(SPAWN), str(result), *argv], env=env, cwd=ROOT,
                                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            proc.wait(timeout=RUN_LIMIT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    tail = (err.read_text(errors="replace") or out.read_text(errors="replace"))[-2000:]
    if not result.exists():  # killed, or the command could not start
        return Measurement(RUN_LIMIT_S, 0.0, 0.0, proc.returncode or -1, tail)
    usage = json.loads(result.read_text())
    return Measurement(usage["wall_s"], usage["maxrss_kib"] * 1024 / 1e6, usage["cpu_s"], usage["rc"], tail)


@dataclass
class Record:
    scenario: str
    row: str
    rep: int
    command: list[str]
    wall_s: float | None = None
    rss_mb: float | None = None
    cpu_s: float | None = None  # the tool's own CPU seconds
    server_cpu_s: float | None = None  # CPU seconds the storage server spent during the run
    error: str | None = None
    load1: float | None = None  # the 1-minute load average as the run started (others' work skews timings)
    ferry_summary: dict | None = None


def run_tool(tool: str, row: str, rep: int, scenario: Scenario, ends: Ends, data: Dataset, threads: int,
             logs: Path) -> Record:
    log = logs / f"{rep}-{row.replace(' ', '-')}.log"
    report = log.with_suffix(".report.json")
    argv, env = command(tool, ends, threads, scenario, report)
    record = Record(scenario.name, row, rep, argv, load1=os.getloadavg()[0])
    server_before = process_cpu_s(ends.server_pid) if ends.server_pid else None
    m = measure(argv, env, log)
    record.wall_s, record.rss_mb, record.cpu_s = round(m.wall_s, 3), round(m.rss_mb, 1), round(m.cpu_s, 2)
    if server_before is not None:
        record.server_cpu_s = round(process_cpu_s(ends.server_pid) - server_before, 2)
    if tool == "ferry" and report.exists():
        record.ferry_summary = json.loads(report.read_text())["summary"]
    expected = (0, 0) if scenario.dry_run else (data.files, data.bytes)
    if m.rc != 0:
        record.error = f"exit {m.rc}"
    elif (found := reported(record) if ends.inventory is None else ends.inventory()) != expected:
        record.error = "target holds {:,} objects of {:,} bytes, expected {:,} of {:,}".format(*found, *expected)
    status = f"FAILED ({record.error})" if record.error else "ok"
    server = f", server {record.server_cpu_s:.1f} s CPU" if record.server_cpu_s is not None else ""
    print(f"[{scenario.name} run {rep + 1}] {row}: {m.wall_s:.2f} s, {m.rss_mb:.0f} MB RSS, {m.cpu_s:.1f} s CPU"
          f"{server}, {status} (load average {record.load1:.1f} at start)", file=sys.stderr)
    if record.error:
        print(f"  command: {' '.join(argv)}\n  output tail:\n{indent(m.tail)}", file=sys.stderr)
    return record


def reported(record: Record) -> tuple[int, int]:
    """(objects, bytes) ferry's report says it copied and verified: a null target keeps nothing to list afterwards."""
    summary = record.ferry_summary or {"objects": {"copied": 0}, "bytes": {"copied": 0}}
    return summary["objects"]["copied"], summary["bytes"]["copied"]


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())


def run_scenario(scenario: Scenario, runs: int, threads: int, out: Path, quick: bool) -> list[Record]:
    datasets = {name: ensure(name, out / "data", quick) for name in scenario.datasets}
    logs = out / "logs" / scenario.name
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    records = []
    for rep in range(runs):
        for data in datasets.values():
            rows = [(tool, tool if len(datasets) == 1 else f"{tool} {data.name}") for tool in scenario.tools]
            groups = [rows] if scenario.shared else [[row] for row in rows]
            for group in groups:
                work = out / "work" / scenario.name
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
                try:
                    with ROUTES[scenario.route](data, work) as ends:
                        if scenario.preload_target:
                            preload(scenario, ends, data, threads, logs / f"{rep}-preload.log")
                        for tool, row in group:
                            records.append(run_tool(tool, row, rep, scenario, ends, data, threads, logs))
                except Exception as exc:  # noqa: BLE001 - a broken setup fails this group's cells, not the bench
                    print(f"[{scenario.name} run {rep + 1}] setup failed: {exc}", file=sys.stderr)
                    done = {(r.row, r.rep) for r in records}
                    records += [Record(scenario.name, row, rep, [], error=f"setup: {exc}")
                                for _tool, row in group if (row, rep) not in done]
                finally:
                    shutil.rmtree(work, ignore_errors=True)
    return records


def preload(scenario: Scenario, ends: Ends, data: Dataset, threads: int, log: Path) -> None:
    """An untimed first ferry sync into the target, leaving ferry's state in place for the timed re-sync."""
    argv, env = command("ferry", ends, threads, scenario, log.with_suffix(".report.json"))
    m = measure(argv, env, log)
    if m.rc != 0 or ends.inventory() != (data.files, data.bytes):
        raise RuntimeError(f"first sync failed (exit {m.rc}): {' '.join(argv)}\n{indent(m.tail)}")


# -- the table ---------------------------------------------------------------------------------------


def summarize(scenario: Scenario, records: list[Record], out: Path, quick: bool) -> tuple[list[dict], list[str]]:
    """Table rows (medians) and the goal lines for one scenario."""
    datasets = {name: ensure(name, out / "data", quick) for name in scenario.datasets}
    by_label: dict[str, list[Record]] = {}
    for r in records:
        by_label.setdefault(r.row, []).append(r)
    walls, rss, cpu, server_cpu, rows = {}, {}, {}, {}, []
    for label, mine in by_label.items():
        if not any(r.error for r in mine):
            walls[label] = statistics.median(r.wall_s for r in mine)
            rss[label] = statistics.median(r.rss_mb for r in mine)
            cpu[label] = statistics.median(r.cpu_s for r in mine)
            if all(r.server_cpu_s is not None for r in mine):
                server_cpu[label] = statistics.median(r.server_cpu_s for r in mine)
    for label, mine in by_label.items():
        data = datasets[label.split(" ", 1)[1]] if len(datasets) > 1 else next(iter(datasets.values()))
        failed = [r for r in mine if r.error]
        row = {"scenario": scenario.name, "tool": label, "runs": len(mine)}
        if failed:
            row["failed"] = f"FAILED ({len(failed)}/{row['runs']}: {failed[0].error})"
        else:
            wall = walls[label]
            row |= {"wall_s": round(wall, 2), "mb_s": round(data.bytes / 1e6 / wall, 1),
                    "objects_s": round(data.files / wall, 1), "rss_mb": round(rss[label], 1)}
            row |= per_unit("cpu", cpu[label], data)
            if label in server_cpu:
                row |= per_unit("server_cpu", server_cpu[label], data)
            if label != "ferry" and "ferry" in walls:
                row["ratio"] = round(wall / walls["ferry"], 2)
        rows.append(row)
    ferry_bytes = [r.ferry_summary["bytes"] for r in records if r.row == "ferry" and r.ferry_summary]
    summary = Summary(walls, rss, ferry_bytes, cpu, server_cpu)
    lines = []
    for goal in scenario.goals:
        text = goal_text(goal, summary)
        try:
            value = goal.value(summary)
        except (KeyError, ValueError, ZeroDivisionError):
            lines.append(f"{scenario.name}: target {text}: n/a (a run failed)")
            continue
        ok = value >= goal.limit if goal.op == ">=" else value <= goal.limit
        lines.append(f"{scenario.name}: target {text}: got {value:,.2f} -> {'ok' if ok else 'MISSED'}")
    reports = [r.ferry_summary for r in records if r.ferry_summary]
    if scenario.route == "synthetic-null" and "ferry" in walls and reports:
        (data,) = datasets.values()
        row = next(r for r in rows if r["tool"] == "ferry")
        inside = statistics.median(report["duration_s"] for report in reports)
        lines.append(f"{scenario.name}: one ferry process, verification on, {data.url} -> null://: "
                     f"{row['objects_s']:,.0f} objects/s, {row['mb_s'] / 1000:.2f} GB/s, client CPU "
                     f"{row['cpu_ms_obj']:.3f} ms/object, {row['cpu_s_gib']:.2f} s/GiB (the process, start-up "
                     f"included); the engine's own {inside:.2f} s: {data.files / inside:,.0f} objects/s, "
                     f"{data.bytes / inside / 1e9:.2f} GB/s")
    if scenario.name == "s3-s3-mixed":
        for i, b in enumerate(ferry_bytes):
            lines.append(f"{scenario.name}: ferry run {i + 1} bytes: read_through_ferry={b['read_through_ferry']:,} "
                         f"written_through_ferry={b['written_through_ferry']:,} server_side={b['server_side']:,}")
    copied = [r.ferry_summary["objects"]["copied"] for r in records if r.ferry_summary and scenario.preload_target]
    if any(copied):
        lines.append(f"{scenario.name}: NOTE ferry copied objects on an unchanged re-sync: {copied}")
    return rows, lines


def goal_text(goal: Goal, summary: Summary) -> str:
    """The goal's words, naming the ceiling it was measured against where it names one."""
    if "{ceiling}" not in goal.text:
        return goal.text
    try:
        return goal.text.format(ceiling=summary.ceiling)
    except KeyError:  # neither ceiling finished
        return goal.text.format(ceiling="the faster ceiling")


def per_unit(name: str, seconds: float, data: Dataset) -> dict[str, float]:
    """CPU seconds as they are, per object (ms) and per GiB (s) of the dataset."""
    return {f"{name}_s": round(seconds, 2), f"{name}_ms_obj": round(seconds * 1000 / data.files, 3),
            f"{name}_s_gib": round(seconds / (data.bytes / 2**30), 3)}


COLUMNS = [("scenario", "scenario", ""), ("tool", "tool", ""), ("wall_s", "wall s (median)", ".2f"),
           ("mb_s", "MB/s", ".1f"), ("objects_s", "objects/s", ".1f"), ("rss_mb", "peak RSS MB", ".0f"),
           ("cpu_s", "CPU s", ".1f"), ("cpu_ms_obj", "CPU ms/obj", ".3f"), ("cpu_s_gib", "CPU s/GiB", ".2f"),
           ("server_cpu_s", "server CPU s", ".1f"), ("server_cpu_ms_obj", "server ms/obj", ".3f"),
           ("server_cpu_s_gib", "server s/GiB", ".2f"), ("ratio", "ferry/peer ratio", ".2f")]


def render(rows: list[dict], lines: list[str], header: str) -> str:
    """A pipe table (plain text that is also markdown), then the goal lines."""
    cells = [[title for _key, title, _fmt in COLUMNS]]
    for row in rows:
        if "failed" in row:
            cells.append([row["scenario"], row["tool"], row["failed"], *[""] * (len(COLUMNS) - 3)])
        else:
            cells.append([format(row[key], fmt) if key in row else "-" for key, _title, fmt in COLUMNS])
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    fmt = [f"| {' | '.join(c.ljust(w) for c, w in zip(line, widths, strict=True))} |" for line in cells]
    fmt.insert(1, f"|{'|'.join('-' * (w + 2) for w in widths)}|")
    return "\n".join([header, "", *fmt, "", *[f"- {line}" for line in lines]]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="repetitions per scenario; medians are reported")
    parser.add_argument("--scenarios", default=",".join(BY_NAME), help="comma-separated, of: " + ", ".join(BY_NAME))
    parser.add_argument("--threads", type=int, default=128, help="concurrency given to every tool")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="results, logs, cached datasets")
    parser.add_argument("--quick", action="store_true", help="small datasets, for a smoke run")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        parser.error(f"unknown scenario(s) {unknown}; known: {', '.join(BY_NAME)}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (f"ferry sync benchmark, {started}: runs={args.runs} threads={args.threads}"
              f"{' QUICK datasets' if args.quick else ''}; ratio = peer wall / ferry wall (>1: ferry is faster)")
    all_rows, all_lines, all_records = [], [], []
    for name in names:
        records = run_scenario(BY_NAME[name], args.runs, args.threads, out, args.quick)
        rows, lines = summarize(BY_NAME[name], records, out, args.quick)
        all_rows += rows
        all_lines += lines
        all_records += records
        text = render(all_rows, all_lines, header)
        (out / "results.md").write_text(text)
        (out / "results.json").write_text(json.dumps(
            {"header": header, "args": {k: str(v) for k, v in vars(args).items()}, "rows": all_rows,
             "targets": all_lines, "runs": [asdict(r) for r in all_records]}, indent=1))
    print(text)
    return 1 if any("failed" in row for row in all_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
