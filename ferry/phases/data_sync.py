"""The data_sync phase: one step per shard (a key prefix); the transfer engine runs its own pool inside.

Each shard journals the keys it created in the target, so rolling the phase back deletes exactly
those (objects it overwrote cannot be restored without versioning, and the rollback report says
so). The gate compares target against source for every shard after all of them are done.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import importlib.util
import ipaddress
import json
import os
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import structlog
from pydantic import Field, field_validator, model_validator

from checks.data import check_data
from checks.preflight import check_storage_access
from connectors.base import redact_url
from connectors.registry import connector_class, connector_kind, open_connector, parse_location
from connectors.transfer import COPY, PROOFS, Action, Stats, TransferSettings, TransferState, bounds
from connectors.transfer.checkpoint import StateStore
from connectors.transfer.ranges import boundaries_path, key_ranges, split_outgrown
from connectors.transfer.state import FOLDER as TRANSFERS
from connectors.transfer.state import state_name
from ferry.audit import AuditFolder
from ferry.config import Settings
from ferry.cutover.history import churn
from ferry.cutover.inventory import Inventory, load_inventory
from ferry.errors import FerryError, PermanentError, TransientError, UsageError
from ferry.files import Journal
from ferry.interrupts import one_by_one
from ferry.phases.base import Changes, Phase, Placement, Progress, Reporter, StepResult, StepSpec, Undo
from ferry.plan import LoadedPlan, Plan, Size
from ferry.profiles import Profile
from ferry.quote.cost import SIDES, ends, in_words, priced
from ferry.quote.estimate import DataEstimate, cached, duration_words, gate_pages, plus
from ferry.quote.pricing import PriceTable, price_table
from ferry.quote.probe import Probe, ProbePlan, durations, plan_probe
from ferry.results import CheckResult, Status
from ferry.sync import delete_created, run_sync

log = structlog.get_logger("ferry.phases.data_sync")


def _knob(name: str, hashed: Literal["always", "unless default", "never"] = "always") -> Any:
    """A field for the engine's knob `name`, its default and bounds taken from TransferSettings. `hashed` says when
    it enters the input hash: always; unless at its default (a knob added since the hashes pinned at commit 4138b9e:
    a plan that leaves it there keeps the hash it had); never (how hard a transfer tries, not what it produces)."""
    default, limits = getattr(TransferSettings, name), bounds(name)
    return Field(
        default=default,
        ge=limits.least,
        le=limits.most,
        exclude=hashed == "never",
        exclude_if=(lambda value: value == default) if hashed == "unless default" else None,
    )


class DaskCluster(Settings):
    """A Dask cluster for the shards: an existing scheduler, or a local cluster of worker processes."""

    # tls://host:8786 (an open scheduler runs any code it is sent: tcp:// only on this machine). Its workers need
    # ferry (the same version), the connectors' credentials in their own environment, and PREFECT_API_URL.
    address: str | None = None
    # A local cluster of this many worker processes (one shard at a time each).
    workers: int | None = Field(default=None, ge=1, le=512)

    @model_validator(mode="after")
    def _one_cluster(self) -> DaskCluster:
        if (self.address is None) == (self.workers is None):
            raise ValueError("name one of address (an existing scheduler) or workers (a local cluster)")
        if importlib.util.find_spec("prefect_dask") is None or importlib.util.find_spec("distributed") is None:
            raise ValueError("a Dask runner needs prefect-dask and distributed: pip install 'ferry[dask]'")
        if self.address is not None:
            parts = urlsplit(self.address)
            if parts.scheme not in ("tls", "tcp") or not parts.hostname or parts.port is None:
                raise ValueError(f"address {self.address!r}: give tls://host:port")
            if parts.scheme == "tcp" and not _loopback(parts.hostname):
                raise ValueError(
                    f"address {self.address!r}: an open Dask scheduler runs any code it is sent: reach one on "
                    "another machine over tls:// (tcp:// only on this one)"
                )
        return self


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class Runner(Settings):
    """Where the shards run besides this process's threads."""

    dask: DaskCluster


class DataSyncSettings(Settings):
    """Settings of the data_sync phase (the same knobs as `ferry sync`, with the engine's defaults and bounds)."""

    threads: int = _knob("threads")
    part_size: Size = _knob("part_size")
    multipart_threshold: Size = _knob("multipart_threshold")
    copy_threshold: Size = _knob("copy_threshold", "unless default")
    memory_budget: Size = _knob("memory_budget")
    bwlimit: Size | None = _knob("bwlimit")
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    delete: bool = _knob("delete")
    checksum: bool = _knob("checksum")
    # How long each request keeps retrying a transient error (throttling, 5xx, resets, timeouts) before its object
    # fails, and at most how many attempts (none: the budget decides).
    retry_budget_s: float = _knob("retry_budget_s", "never")
    retries: int | None = _knob("retries", "never")
    # Key prefixes, each synced as its own shard (one Prefect task); none means one shard; "auto": key ranges probed
    # from the source (S3; connectors/transfer/ranges.py), each listed and diffed on its own. Never implied by the
    # runner: another runner must not mean another transfer state (and its unfinished uploads abandoned).
    shards: list[str] | Literal["auto"] = Field(default_factory=list)
    # How many key ranges "auto" makes the first time (kept for every later run): 3 per worker of a local cluster,
    # else 16. Where the work is split, not what it produces: out of the input hash.
    ranges: int | None = Field(default=None, ge=2, le=10_000, exclude=True)
    # A key range whose transfer state records more objects than this is split in two at its median key before the
    # next run's shards start (its halves take over its state). Out of the input hash, as `ranges`.
    range_max_objects: int = Field(default=1_000_000, ge=2, exclude=True)
    # Where the shards run: "threads" of this process, or a Dask cluster ({dask: {workers: 4}} or {dask: {address:
    # tls://scheduler:8786}}). Where the work runs, not what it produces: out of the input hash.
    runner: Literal["threads"] | Runner = Field(default="threads", exclude=True)
    # Where each shard's transfer state and journals are kept for workers on other machines: an object-store prefix
    # (or a shared path) outside the synced prefixes; copied there every checkpoint_every_s seconds and when a shard
    # ends, restored by whichever worker runs it next (connectors/transfer/checkpoint.py). Where the work keeps its
    # state, not what it produces: out of the input hash.
    state_url: str | None = Field(default=None, exclude=True)
    checkpoint_every_s: float = Field(default=60.0, gt=0, le=3600, exclude=True)

    @field_validator("runner", mode="before")
    @classmethod
    def _runner(cls, runner: Any) -> Any:
        # One of two shapes: say which, not why the value is neither (pydantic's words for each member of a union).
        if runner == "threads" or isinstance(runner, Runner):
            return runner
        if not isinstance(runner, dict):
            raise ValueError("give threads, {dask: {workers: N}} or {dask: {address: tls://host:port}}")
        return Runner.model_validate(runner)

    @field_validator("shards", mode="before")
    @classmethod
    def _shape(cls, shards: Any) -> Any:
        # One of two shapes: say which, not why the value is neither (pydantic's words for each member of a union).
        if shards == "auto" or isinstance(shards, list):
            return shards
        raise ValueError("give a list of key prefixes ([train/, val/]) or auto (key ranges probed from the source)")

    @field_validator("shards")
    @classmethod
    def _disjoint(cls, shards: list[str] | str) -> list[str] | str:
        if shards == "auto":
            return shards
        for a in shards:
            for b in shards:
                if a != b and b.startswith(a):
                    raise ValueError(f"shard {b!r} overlaps shard {a!r}")
        if len(set(shards)) != len(shards):
            raise ValueError("shards repeat")
        return shards


class DataGate(Settings):
    # Re-read every target object and compare checksums (slow, thorough).
    deep_verify: bool = False
    # Objects in the target that the source lacks: tolerated unless the phase deletes them.
    allow_extra: bool = True


def label(shard: str) -> str:
    """A shard's name in file names and artifact keys."""
    return shard.rstrip("/").replace("/", "_") or "all"


def _journal_name(shard: str) -> str:
    """The file, in the run's audit folder, of the keys a shard created."""
    return f"created-{label(shard)}.jsonl"


def _target_file(journal: Path) -> Path:
    """Beside a shard's journal: the target it synced into (redacted), for its rollback to check."""
    return journal.with_name("target-" + journal.stem.removeprefix("created-") + ".json")


class _Follow:
    """Feeds the engine's byte counters to a progress gauge every two seconds while a shard runs."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stats: Stats) -> None:
        # In a copy of this context: an orchestrator's run context (the API it reports to) reaches the gauge.
        self._thread = threading.Thread(target=contextvars.copy_context().run, args=(self._poll, stats), daemon=True)
        self._thread.start()

    def _poll(self, stats: Stats) -> None:
        while not self._stop.wait(2.0):
            done = 100.0 * stats.bytes_moved / stats.bytes_to_copy if stats.bytes_to_copy else 0.0
            self.progress.update(min(done, 100.0))

    def stop(self, finished: bool) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if finished:
            self.progress.update(100.0)


@dataclasses.dataclass(frozen=True)
class ShardSpec(StepSpec):
    """One shard as it travels to its worker: both ends' URLs and profiles (credentials as references, resolved
    on the worker), the engine's settings and where the transfer state lives (the plan's state directory, or
    state_url); never the plan's path."""

    source: str = dataclasses.field(kw_only=True)
    target: str = dataclasses.field(kw_only=True)
    profiles: Mapping[str, Profile] = dataclasses.field(kw_only=True)
    settings: TransferSettings = dataclasses.field(kw_only=True)
    state_dir: str = dataclasses.field(kw_only=True)
    # Where the state lives between workers (phases.data_sync.state_url), and how often it is copied there.
    state_url: str | None = dataclasses.field(default=None, kw_only=True)
    checkpoint_s: float = dataclasses.field(default=60.0, kw_only=True)

    def divided(self, peers: int, *, in_process: bool) -> ShardSpec:
        """The run's memory budget and bandwidth limit shared by `peers` shards at once (and the engine's threads,
        where they run in one process)."""
        settings = self.settings
        shares: dict[str, Any] = {"memory_budget": max(1, settings.memory_budget // peers)}
        if settings.bwlimit:
            shares["bwlimit"] = max(1, settings.bwlimit // peers)
        if in_process:
            shares["threads"] = max(1, settings.threads // peers)
        return dataclasses.replace(self, settings=dataclasses.replace(settings, **shares))

    @property
    def needs_audit_folder(self) -> bool:
        """Whether the worker must see the run's audit folder: not when the shard's state and journals are
        checkpointed to state_url, from where the driver fetches them."""
        return self.state_url is None

    def run(self, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Copy the shard, journalling the keys it created; raises if any object failed."""
        if self.state_url is None:
            return self._sync(audit, reporter, Path(self.state_dir))
        # The state on this worker's disk only while the shard runs; state_url holds it between workers.
        with tempfile.TemporaryDirectory(prefix="ferry-shard-") as scratch, _Checkpoints(self, audit, Path(scratch)):
            return self._sync(audit, reporter, Path(scratch))

    def state_name(self) -> str:
        """The shard's transfer state file under a state directory (named by the connectors' URLs)."""
        with (
            contextlib.closing(open_connector(self.source, self.profiles)) as source,
            contextlib.closing(open_connector(self.target, self.profiles)) as target,
        ):
            return state_name(source.url, target.url, self.settings.prefix, self.settings.key_range)

    def audit_files(self, audit: AuditFolder) -> dict[str, Path]:
        """The shard's files in the run's audit folder: its journal, its target and its report, by kind."""
        journal = audit.path(self.phase, _journal_name(self.step))
        return {
            "journal": journal,
            "target": _target_file(journal),
            "report": audit.path(self.phase, f"sync-{label(self.step)}.json"),
        }

    def _sync(self, audit: AuditFolder, reporter: Reporter, state_dir: Path) -> StepResult:
        step = self.step
        files = self.audit_files(audit)
        # The keys are relative to the target: a rollback must undo them there, wherever the plan points later.
        audit.write_json(self.phase, files["target"].name, {"target": redact_url(self.target)})
        created = Journal(files["journal"])
        follow = _Follow(
            reporter.progress(
                f"data-sync-{label(step).lower().replace('_', '-')}", f"data_sync progress, shard {step or '(all)'}"
            )
        )
        result = None

        def on_action(action: Action) -> None:
            # Only keys the target did not hold: deleting them is a faithful undo.
            if action.kind == COPY and action.dst is None:
                add_created(action.key)

        try:
            with created.appending() as add_created:
                result = run_sync(
                    self.source,
                    self.target,
                    self.settings,
                    profiles=self.profiles,
                    state_dir=state_dir,
                    verify=False,  # the gate verifies, after every shard is done
                    report_path=files["report"],
                    on_action=on_action,
                    on_start=follow.start,
                    stop=reporter.stopping,
                )
        finally:
            follow.stop(finished=result is not None)
        summary = result.stats.summary()
        objects = summary["objects"]
        if objects["copied"] == objects["deleted"] == objects["failed"] == 0:
            log.info("0 to copy: the target already holds the shard", shard=step or "(all)", equal=objects["skipped"])
        else:
            log.info("shard synced", shard=step or "(all)", **{k: objects[k] for k in ("copied", "skipped", "deleted")})
        if result.stats.failed:
            first = summary["failures"][0] if summary["failures"] else "see the report"
            error = PermanentError if result.stats.rejected else TransientError
            raise error(f"shard {step or '(all)'}: {result.stats.failed} object(s) failed; first: {first}")
        # Where the shard ran: this process, or a worker of a Dask cluster.
        summary["ran_on"] = f"{socket.gethostname()}:{os.getpid()}"
        return StepResult(changed=bool(objects["copied"] or objects["deleted"]), details=summary)


class _Checkpoints:
    """A shard's transfer state and audit files restored from state_url when it starts (the worker that ran it
    before may be gone), and copied there every checkpoint_s seconds and when it ends."""

    def __init__(self, spec: ShardSpec, audit: AuditFolder, state_dir: Path):
        assert spec.state_url is not None
        self.spec = spec
        self.name = spec.state_name()
        self.state = state_dir / self.name
        self.files = spec.audit_files(audit)
        self.prefix = _audit_prefix(audit, spec.phase)
        self.store = StateStore(open_connector(spec.state_url, spec.profiles))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.shard = spec.step or "(all)"
        self._thread = threading.Thread(target=self._every, daemon=True, name=f"checkpoint {self.shard}")

    def __enter__(self) -> _Checkpoints:
        try:
            restored = self.store.restore(self.name, self.state)
            # The keys earlier attempts created (on this worker's disk or another's), kept in this one's journal.
            journal = self.files["journal"]
            self.store.merge_lines(journal, self.prefix + journal.name)
            # A first copy before anything is copied: a store this worker cannot write fails the shard now.
            self.save()
        except _CHECKPOINT_ERRORS as exc:
            self.store.close()
            raise TransientError(f"shard {self.shard}: state_url {self.store.connector.url}: {exc}") from exc
        except BaseException:
            self.store.close()
            raise
        log.info("shard state", shard=self.shard, restored=restored, state_url=self.store.connector.url)
        self._thread.start()
        return self

    def _every(self) -> None:
        while not self._stop.wait(self.spec.checkpoint_s):
            try:
                self.save()
            except _CHECKPOINT_ERRORS as exc:
                log.warning("checkpoint failed: the next one tries again", shard=self.shard, error=str(exc))

    def save(self, *, final: bool = False) -> None:
        """The state first, then the journal: a key the state records is in the copy's journal too."""
        with self._lock:
            if self.state.exists():
                self.store.save_state(self.state, self.name)
            self.store.merge_lines(self.files["journal"], self.prefix + self.files["journal"].name)
            for kind in ("target", "report") if final else ("target",):
                self.store.save_file(self.files[kind], self.prefix + self.files[kind].name)

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        try:
            self.save(final=True)
        except _CHECKPOINT_ERRORS as error:
            if kind is None:  # the shard's own error is the one to tell when it has one
                raise TransientError(f"shard {self.shard}: its state was not checkpointed: {error}") from error
            log.warning("last checkpoint failed", shard=self.shard, error=str(error))
        finally:
            self.store.close()


def _name_in(state_dir: Path, path: Path) -> str:
    """A file of the state directory's name in state_url (the same relative path)."""
    return path.relative_to(state_dir).as_posix()


# What a copy to state_url may meet: the store's errors (after its retries), the snapshot's, the scratch disk's.
_CHECKPOINT_ERRORS = (FerryError, sqlite3.Error, OSError)


def _audit_prefix(audit: AuditFolder, phase: str) -> str:
    """Where a run's audit files of the phase are kept under state_url."""
    return f"runs/{audit.root.name}/{phase}/"


def _check_state_url(plan: Plan) -> None:
    """state_url names a store ferry opens and lies outside what is synced: inside the target's prefix the gate would
    count its files as extra objects (and a delete remove them), inside the source's they would be copied as data.
    (A password in it is refused by the plan's own check, as in every field.)"""
    url = plan.phases.data_sync.state_url
    assert url is not None
    try:
        connector_class(url, plan.profiles)
    except UsageError as exc:
        raise ValueError(f"phases.data_sync.state_url: {exc}") from None
    for role in ("source", "target"):
        storage = getattr(plan, role).storage
        if _within(url, storage, plan.profiles):
            raise ValueError(
                f"phases.data_sync.state_url {url!r} lies inside {role}.storage {storage!r}: give a prefix outside "
                "what is synced (another bucket, or a sibling prefix)"
            )
    if _within(url, plan.state_dir, plan.profiles) or _within(plan.state_dir, url, plan.profiles):
        raise ValueError(
            f"phases.data_sync.state_url {url!r} and state_dir {plan.state_dir!r} overlap: the copies would replace "
            "the files ferry writes there: give another folder or a bucket prefix"
        )


def _within(url: str, root: str, profiles: Mapping[str, Profile]) -> bool:
    """Whether url names root or a place under it: one store (the kind, and the endpoint a profile alias names) and
    the key path below. Local paths as the plan gives them (both relative to its file, or both absolute; preflight
    compares them resolved)."""

    def place(u: str) -> tuple[str, str, str]:
        location = parse_location(u)
        kind = connector_kind(u, profiles)
        if kind == "local":
            return kind, "", os.path.normpath(location.prefix)
        profile = profiles.get(location.scheme)
        endpoint = profile.endpoint_url if profile is not None and profile.endpoint_url else ""
        return kind, endpoint, f"{location.bucket}/{location.prefix}".strip("/")

    try:
        (kind, endpoint, path), (root_kind, root_endpoint, root_path) = place(url), place(root)
    except UsageError:  # a scheme no connector takes: the field's own check says so
        return False
    if (kind, endpoint) != (root_kind, root_endpoint):
        return False
    return root_path in ("", ".") or path == root_path or path.startswith(root_path.rstrip("/") + "/")


def _seeks(plan: Plan) -> bool:
    """Whether the plan's source lists from a key (an unknown scheme is said by the plan's own check, with its line)."""
    try:
        return connector_class(plan.source.storage, plan.profiles).capabilities.listing_seeks
    except UsageError:
        return True


class DataSyncPhase(Phase):
    """Objects copied from the source storage to the target's, shard by shard, then verified."""

    name = "data_sync"
    settings_model = DataSyncSettings
    gate_model = DataGate

    def __init__(self, loaded: LoadedPlan):
        super().__init__(loaded)
        self._ranges: dict[str, tuple[str, str]] | None = None

    @classmethod
    def check_plan(cls, plan: Plan) -> None:
        sync = plan.phases.data_sync
        if sync.shards == "auto" and not _seeks(plan):
            raise ValueError(
                "phases.data_sync.shards: auto splits a source whose listing starts at a key (S3) into key ranges; "
                "this source lists from the start every time: give its shards as prefixes ([a/, b/])"
            )
        if sync.state_url is not None:
            _check_state_url(plan)
        if sync.runner == "threads":
            return
        for role in ("source", "target"):
            url = getattr(plan, role).storage
            if redact_url(url) != url:
                raise ValueError(
                    f"{role}.storage: a Dask runner sends the shard's URLs to its workers: move the password into a "
                    "profile's credentials (an environment variable or a Prefect Secret block)"
                )

    @property
    def live_inputs(self) -> bool:
        """The objects live in storage, not in the plan: every run diffs them."""
        return True

    def steps(self) -> list[str]:
        """The shards: the plan's prefixes, key ranges (`range-01`...: `shard_ranges`), or one for everything."""
        if self.settings.shards == "auto":
            return list(self.shard_ranges())  # one at least: a source of one key (or none) is one range
        return list(self.settings.shards) or [""]

    def shard_ranges(self) -> dict[str, tuple[str, str]]:
        """The key ranges the shards are (by shard name), where the plan says `shards: auto`; made once per source
        and target, kept beside the transfer state, and read from there after."""
        sync = self.settings
        if sync.shards != "auto":
            return {}
        if self._ranges is None:
            source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
            target = open_connector(self.loaded.storage("target"), self.loaded.plan.profiles)
            try:
                count = sync.ranges or (3 * sync.runner.dask.workers if self._local_cluster() else 16)
                # Kept in state_url too, where the plan names one: the next run may start on another machine.
                kept = boundaries_path(self.loaded.layout.state, source.url, target.url, "")
                with self._state_store() as store:
                    if store is not None:
                        store.restore(_name_in(self.loaded.layout.state, kept), kept)
                    found = key_ranges(source, target.url, "", count, self.loaded.layout.state)
                    if store is not None:
                        store.save_file(kept, _name_in(self.loaded.layout.state, kept))
            finally:
                source.close()
                target.close()
            width = len(str(len(found)))
            self._ranges = {f"range-{i:0{width}d}": r for i, r in enumerate(found, start=1)}
        return self._ranges

    @contextlib.contextmanager
    def _state_store(self) -> Iterator[StateStore | None]:
        """The plan's state_url opened (None where it names none)."""
        url = self._state_url()
        if url is None:
            yield None
            return
        with contextlib.closing(StateStore(open_connector(url, self.loaded.plan.profiles))) as store:
            yield store

    def prepare(self) -> None:
        """Split the key ranges (shards: auto) whose transfer state outgrew range_max_objects, each at its median key,
        its halves taking over its rows; with a state_url, the states fetched from there first, then the halves'
        copied there, then the new ranges, then the split ranges' states removed (a crash in between leaves whole
        states behind the ranges the store names)."""
        if self.settings.shards != "auto":
            return
        old = self.shard_ranges()
        self.fetch_checkpoints(None)
        state = self.loaded.layout.state
        with (
            contextlib.closing(open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)) as source,
            contextlib.closing(open_connector(self.loaded.storage("target"), self.loaded.plan.profiles)) as target,
        ):
            split = split_outgrown(state, source.url, target.url, "", self.settings.range_max_objects)
            if not split:
                return
            new = key_ranges(source, target.url, "", len(old), state)  # the ranges just kept: no probe
            names = {r: state_name(source.url, target.url, "", r) for r in [*old.values(), *new]}
            kept = boundaries_path(state, source.url, target.url, "")
        self._ranges = None
        log.info("key ranges split", split=len(split), ranges=len(new), most=self.settings.range_max_objects)
        with self._state_store() as store:
            if store is None:
                return
            for key_range in set(new) - set(old.values()):
                store.save_state(state / names[key_range], names[key_range])
            store.save_file(kept, _name_in(state, kept))
            for key_range in split:
                store.connector.delete(names[key_range])

    def _local_cluster(self) -> bool:
        runner = self.settings.runner
        return runner != "threads" and runner.dask.workers is not None

    def transfer_settings(self, shard: str, *, dry_run: bool = False) -> TransferSettings:
        """The engine's settings for one shard."""
        sync = self.settings
        ranges = self.shard_ranges()
        start_after, end_at = ranges.get(shard, ("", ""))
        return TransferSettings(
            threads=sync.threads,
            part_size=sync.part_size,
            multipart_threshold=sync.multipart_threshold,
            copy_threshold=sync.copy_threshold,
            memory_budget=sync.memory_budget,
            bwlimit=sync.bwlimit,
            include=tuple(sync.include),
            exclude=tuple(sync.exclude),
            delete=sync.delete,
            checksum=sync.checksum,
            retry_budget_s=sync.retry_budget_s,
            retries=sync.retries,
            prefix="" if shard in ranges else shard,
            start_after=start_after,
            end_at=end_at,
            dry_run=dry_run,
        )

    def inputs(self) -> dict[str, Any]:
        return {
            "source": self.loaded.storage("source"),
            "target": self.loaded.storage("target"),
            "profiles": {k: v.model_dump(mode="json") for k, v in self.loaded.plan.profiles.items()},
        }

    def summary(self) -> str:
        sync, gate = self.settings, self.gate_settings
        if sync.shards == "auto":
            shards = "key ranges probed from the source the first time, kept for later runs"
        else:
            shards = ", ".join(sync.shards) if sync.shards else "one shard (the whole prefix)"
        where = f"{sync.threads} threads"
        if sync.runner != "threads":
            dask = sync.runner.dask
            cluster = f"the Dask scheduler {dask.address}" if dask.address else f"{dask.workers} local Dask workers"
            where = f"shards on {cluster}, {where} each"
        if sync.state_url is not None:
            where += f"; each shard's state copied to {sync.state_url} every {sync.checkpoint_every_s:g} s"
        return (
            f"copy what is missing or different from {self.loaded.storage('source')} to "
            f"{self.loaded.storage('target')} ({where}; shards: {shards}; delete extraneous: "
            f"{'yes' if sync.delete else 'no'}), then the data gate "
            f"({'re-reading every object' if gate.deep_verify else 'sizes, checksums, transfer state'})"
        )

    def estimate(self, sample: int | None = None) -> tuple[DataEstimate, dict[str, int]]:
        """A dry run of every shard (the run's own listing, diff and route decisions): what a run would copy, copy
        again and delete, the requests it would send, and those of the data gate's listings after it; with the
        objects it would adopt, by proof. sample: only the first this many keys of each shard, in key order (a
        bounded estimate, its figures not scaled). A cut-over plan with an inventory report takes the source's
        listing from it, as its first delta does."""
        estimate = DataEstimate(sample=sample)
        # Adopting changes nothing on the target (it records what is there): said, not a total to approve.
        proofs = dict.fromkeys(PROOFS, 0)
        self.fetch_checkpoints(None)
        profiles = self.loaded.plan.profiles
        # Opened to be asked what a listing of theirs sends (no request), and who pays for reading the source.
        ends = {side: open_connector(self.loaded.storage(side), profiles) for side in SIDES}
        try:
            bucket, profile = ends["source"].request_payment()
            estimate.own_requests["source"] = ends["source"].requests_sent()
        finally:
            for end in ends.values():
                end.close()
        if bucket and not profile:
            said = "a Requester Pays bucket: its profile needs requester_pays: true (S3 refuses its reads otherwise)"
            raise UsageError(self.loaded.problem(("source", "storage"), said))
        estimate.requester_pays = {"bucket": bucket, "profile": profile}
        if self.gate_settings.deep_verify:
            estimate.gate_note = "not counted: the deep gate re-reads every object of the target besides listing it"
        with tempfile.TemporaryDirectory(prefix="ferry-estimate-") as scratch:
            inventory = self._inventory(estimate, Path(scratch))
            for shard in self.steps():
                in_target = [0]

                def seen(action: Action, in_target: list[int] = in_target) -> None:
                    in_target[0] += action.dst is not None

                result = run_sync(
                    self.loaded.storage("source"),
                    self.loaded.storage("target"),
                    dataclasses.replace(self.transfer_settings(shard, dry_run=True), sample=sample),
                    profiles=profiles,
                    state_dir=self.loaded.layout.state,
                    on_action=seen,
                    source_listing=None if inventory is None else inventory.objects(),
                )
                stats, forecast = result.stats, result.forecast
                own = {side: stats.requests.get(side) for side in SIDES}
                listed = {side: None if own[side] is None else own[side].get("LIST", 0) for side in SIDES}
                after = in_target[0] + forecast.copies - forecast.recopies - forecast.deletes
                pages = {
                    # The gate lists the source itself where the run took its listing from a report.
                    "source": gate_pages(0, 0, stats.objects_listed, ends["source"].list_page)
                    if inventory
                    else listed["source"],
                    "target": None
                    if self.gate_settings.deep_verify
                    else gate_pages(listed["target"], in_target[0], after, ends["target"].list_page),
                }
                gate = {side: None if n is None else ends[side].listing_requests(n) for side, n in pages.items()}
                # The engine's own time, on the clock a run's report keeps (duration_s): listing and diff.
                seconds = stats.summary()["duration_s"]
                estimate.add(forecast, result.requests, own, stats.objects_listed, stats.bytes_listed, seconds, gate)
                for proof, n in stats.adopted_by.items():
                    proofs[proof] += n
        self._archive_tiers(estimate)
        return estimate, proofs

    def _archive_tiers(self, estimate: DataEstimate) -> None:
        """Ask the source where each Intelligent-Tiering copy the forecast kept sits (one HEAD each, at most
        TIERING_KEYS: the estimate's own requests): those in an archive tier need a restore first."""
        asked = estimate.forecast.tiering_keys
        if not asked:
            return
        source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
        try:
            for key, size in asked:
                status = source.archive_status(key)
                if status is not None:
                    held = estimate.archive_tiers.setdefault(f"INTELLIGENT_TIERING/{status}", [0, 0])
                    held[0], held[1] = held[0] + 1, held[1] + size
            estimate.own_requests["source"] = plus(estimate.own_requests["source"], source.requests_sent())
        finally:
            source.close()
        estimate.tiering_asked = len(asked)

    def _inventory(self, estimate: DataEstimate, scratch: Path) -> Inventory | None:
        """The plan's inventory report of the source (a cut-over's `inventory`) sorted into scratch, said in the
        estimate with its age; None where the plan names none."""
        cutover = self.loaded.plan.cutover
        if cutover is None or cutover.inventory is None:
            return None
        inventory = load_inventory(self.loaded, scratch, cutover.inventory.manifest)
        estimate.listing = {
            "source": "inventory report",
            "inventory": cutover.inventory.manifest,
            "age_s": round(max(0.0, time.time() - inventory.created / 1000), 1) if inventory.created else None,
        }
        return inventory

    def endpoints(self) -> dict[str, tuple[str | None, str | None]]:
        """Each end's host and region as its connector knows them, sending no request (what a quote is priced by)."""
        ends = {}
        for role in ("source", "target"):
            connector = open_connector(self.loaded.storage(role), self.loaded.plan.profiles)
            try:
                ends[role] = (connector.network_host(), connector.region())
            finally:
                connector.close()
        return ends

    def store_settings(self) -> dict[str, Any]:
        """What the stores say that prices depend on: the source's default encryption, where its connector can tell
        (one request), and the encryption the target's writes ask for (none)."""
        source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
        target = open_connector(self.loaded.storage("target"), self.loaded.plan.profiles)
        try:
            return {
                "source_default_encryption": source.default_encryption(),
                "target_write_encryption": target.write_encryption(),
            }
        finally:
            source.close()
            target.close()

    def price_table(self, prices: Path | None = None) -> PriceTable:
        """The list prices with the plan's negotiated file over them, and prices (a file) over both."""
        named = self.loaded.plan.pricing.prices
        return price_table(*([self.loaded.resolve(named)] if named else []), *([prices] if prices else []))

    def quote(self, estimate: DataEstimate, probe: Probe | None, table: PriceTable) -> dict[str, Any]:
        """The estimate's figures, the probe's and the duration from them, priced by table: `plan estimate`'s
        figures (JSON values)."""
        pricing = self.loaded.plan.pricing
        named = {side: (getattr(pricing, side).provider, getattr(pricing, side).region, getattr(pricing, side).tier)
                 for side in SIDES}  # fmt: skip
        source, target = ends(table, self.endpoints(), named).values()
        forecast = estimate.forecast
        whole = forecast.copies - forecast.multipart_objects
        data = {
            **estimate.figures(),
            **self.store_settings(),
            "probe": None if probe is None else probe.to_dict(),
            **durations(probe, whole, forecast.multipart_bytes, estimate.listing_s, self.transfer_settings("")),
            # A cut-over plan's deltas: predicted from its last cut-over's, else from the change log's event rate.
            "churn": churn(self.loaded, probe.objects_per_s.p50 if probe else None, estimate.listing_s),
        }
        return {"plan": self.loaded.plan.name, **data, **priced(data, source, target)}

    def probe_plan(self, seconds: float, max_bytes: int) -> ProbePlan:
        """What the throughput probe would copy, at the plan's settings, into a scratch prefix of the target."""
        return plan_probe(
            self.loaded.storage("source"),
            self.loaded.storage("target"),
            self.loaded.plan.profiles,
            self.transfer_settings(""),
            seconds=seconds,
            max_bytes=max_bytes,
        )

    def files(self) -> dict[tuple, Path]:
        prices = self.loaded.plan.pricing.prices
        return {("pricing", "prices"): self.loaded.resolve(prices)} if prices else {}

    def changes(self) -> Changes:
        """A dry run of every shard: what would be copied and deleted, priced by the plan's price table, and how
        long it would take as the last kept estimate measured it (no probe here: an approval sends none)."""
        estimate, proofs = self.estimate()
        figures = self.quote(estimate, None, self.price_table())
        forecast = estimate.forecast
        totals = {
            "objects_to_copy": forecast.copies,
            "bytes_to_copy": forecast.bytes,
            "objects_to_delete": forecast.deletes,
        }
        adopted = ""
        if any(proofs.values()):
            by = ", ".join(f"{proof} {n}" for proof, n in proofs.items() if n)
            adopted = f" It adopts {sum(proofs.values())} object(s) another tool wrote there (by proof: {by})."
        text = (
            f"data_sync will copy {totals['objects_to_copy']} object(s), {totals['bytes_to_copy']:,} bytes, "
            f"from {self.loaded.storage('source')} to {self.loaded.storage('target')}"
            f" and delete {totals['objects_to_delete']} object(s) there; {in_words(figures)}; "
            f"{duration_words(cached(self.loaded.layout.estimate(self.loaded.plan.name)))}.{adopted}"
        )
        return Changes(text, totals)

    def run(self, step: str, audit: AuditFolder, reporter: Reporter) -> StepResult:
        """Copy one shard, journalling the keys it created; raises if any object failed."""
        return self.step_spec(step).run(audit, reporter)

    def placement(self) -> Placement:
        runner = self.settings.runner
        if runner == "threads":
            return Placement()
        return Placement(dask_address=runner.dask.address, dask_workers=runner.dask.workers)

    def step_spec(self, step: str) -> ShardSpec:
        return ShardSpec(
            self.name,
            step,
            source=self.loaded.storage("source"),
            target=self.loaded.storage("target"),
            profiles=self.loaded.plan.profiles,
            settings=self.transfer_settings(step),
            state_dir=str(self.loaded.layout.state),
            state_url=self._state_url(),
            checkpoint_s=self.settings.checkpoint_every_s,
        )

    def _state_url(self) -> str | None:
        url = self.settings.state_url
        return url if url is None or "://" in url else str(self.loaded.resolve(url))

    def preflight(self) -> list[CheckResult]:
        """The state_url answers with its credentials (a shard writes its first copy there as it starts, so a store
        it cannot write fails the shard before anything is copied) and is none of the places ferry writes otherwise
        (the source, the target, the plan's state directory), with local paths resolved."""
        url = self._state_url()
        if url is None:
            return []
        failed = functools.partial(CheckResult, "preflight.state_storage_access", Status.FAIL, {"url": url})
        if "://" not in url:
            mine = Path(url).resolve()
            places = {"source.storage": self.loaded.storage("source"), "target.storage": self.loaded.storage("target")}
            for field, place in places.items():
                if "://" not in place and mine.is_relative_to(Path(place).resolve()):
                    return [failed(evidence=[f"phases.data_sync.state_url lies inside {field} ({place})"])]
            state = self.loaded.layout.root.resolve()
            if mine.is_relative_to(state) or state.is_relative_to(mine):
                said = f"phases.data_sync.state_url and the plan's state directory ({state}) overlap"
                return [failed(evidence=[f"{said}: the copies would replace the files ferry writes there"])]
        try:
            store = open_connector(url, self.loaded.plan.profiles)
        except FerryError as exc:
            return [failed(evidence=[str(exc)])]
        try:
            return [check_storage_access("state", store)]
        finally:
            store.close()

    def fetch_checkpoints(self, audit: AuditFolder | None) -> None:
        """With a state_url: every shard's transfer state fetched from there into the plan's state directory (the
        copy there is the newest: no worker writes this one), and the run's audit files this folder lacks (the
        journals a rollback reads, written on other machines)."""
        url = self._state_url()
        if url is None:
            return
        with self._state_store() as store:
            assert store is not None
            # Every shard's, this plan's shards now or not: a rollback of an older run reads them too.
            for name in store.names(f"{TRANSFERS}/"):
                if name.endswith(".sqlite"):
                    store.restore(name, self.loaded.layout.state / name)
            if audit is not None:
                prefix = _audit_prefix(audit, self.name)
                for name in store.names(prefix):
                    local = audit.root / self.name / name.removeprefix(prefix)
                    if local.suffix == ".jsonl":
                        store.merge_lines(local, name)  # every worker's lines, and any this folder holds
                    elif not local.exists():
                        store.restore(name, local)

    def gate(self, audit: AuditFolder) -> list[CheckResult]:
        """Target against source for every shard: objects, bytes, size and checksum."""
        gate = self.gate_settings
        self.fetch_checkpoints(audit)
        results = []
        for shard in self.steps():
            settings = self.transfer_settings(shard)
            if not gate.allow_extra:
                settings = dataclasses.replace(settings, delete=True)
            source = open_connector(self.loaded.storage("source"), self.loaded.plan.profiles)
            target = open_connector(self.loaded.storage("target"), self.loaded.plan.profiles)
            state = TransferState(self.loaded.layout.state, source.url, target.url, settings.prefix, settings.key_range)
            try:
                result = check_data(source, target, state, settings, deep=gate.deep_verify)
            finally:
                state.close()
                source.close()
                target.close()
            name = f"{result.name}[{shard}]" if shard else result.name
            results.append(CheckResult(name, result.status, result.measured, result.threshold, result.evidence))
        return results

    def undo(self, audit: AuditFolder, *, dry_run: bool, force: bool, stopping: threading.Event | None) -> Undo:
        """Delete every object the run's shards created and that is still what ferry wrote (each journal once)."""
        self.fetch_checkpoints(audit)
        folder = audit.root / self.name
        # Every shard the run journalled, whatever the plan's shards are now.
        journals = sorted(j for j in folder.glob("created-*.jsonl") if not j.name.endswith(".undone.jsonl"))
        pending = [j for j in journals if j.exists() and not j.with_name(j.stem + ".rollback.json").exists()]
        target, state = self.loaded.storage("target"), self.loaded.layout.state
        for journal in pending:
            synced = _target_file(journal)
            then = json.loads(synced.read_text(encoding="utf-8"))["target"] if synced.exists() else None
            if then is not None and then != redact_url(target):
                # Its keys under the plan's new target would be someone else's objects (another plan's, even
                # recorded as ferry's in a transfer state this state directory shares).
                raise UsageError(
                    f"run {audit.root.name} synced into {then}, not into {redact_url(target)} (the plan's target "
                    "now): point target.storage back there to roll that run back"
                )
        kept = "objects it overwrote cannot be restored without bucket versioning"
        if dry_run:
            to_delete, items = 0, []
            for journal in pending:
                preview = delete_created(target, self.loaded.plan.profiles, journal, state, dry_run=True)
                to_delete += preview["to_delete"]
                items += preview["items"]
            return Undo(
                f"delete {to_delete} object(s) it created in {target} that are still what ferry wrote ({kept})", items
            )
        deleted, left, errors, items = 0, 0, 0, []
        for journal in one_by_one(pending, stopping):
            report = delete_created(target, self.loaded.plan.profiles, journal, state, stopping=stopping)
            items += report.pop("items")
            log.warning("rolled back a data_sync shard", journal=str(journal), **report)
            deleted += report["deleted_created_objects"]
            left += report["kept"]
            errors += report["errors"]
        kept_words = f"; kept {left} that someone else changed or ferry never verified" if left else ""
        failed = f"; {errors} deletion(s) failed: the next rollback tries them again" if errors else ""
        return Undo(f"deleted {deleted} object(s) it had created{kept_words}{failed} ({kept})", items, errors)
