"""Every path under a state directory, named once: the run log, the transfer state, run folders, what phases
publish, caches.

A plan's `state_dir` (`.ferry` beside the plan by default) and `ferry sync --state-dir` name the same level: the
root below. Nothing else in ferry joins a name onto a state directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from ferry import lock, runlog

log = structlog.get_logger("ferry.layout")
# What a state folder holds: the transfer state's folder (connectors/transfer/state.py), the run log, the lock.
_STATE_FOLDER = ("transfers", runlog.FILE, lock.LOCK_FILE)


@dataclass(frozen=True)
class StateLayout:
    """The paths under one state directory."""

    root: Path

    @classmethod
    def for_sync(cls, root: Path) -> StateLayout:
        """The layout `ferry sync --state-dir root` uses. A root that is itself a state folder (`--state-dir` named
        that level before: it holds `transfers/`, a run log or a run lock, and no `state/`) is used as that folder,
        with a notice, so that its transfers resume and its lock keeps runs apart."""
        if any((root / name).exists() for name in _STATE_FOLDER) and not (root / "state").exists():
            log.warning(
                "state directory in the older layout: using it as it is",
                state_dir=str(root),
                next_time=f"--state-dir {root.parent} (the level a plan's state_dir names)",
            )
            return _Flat(root)
        return cls(root)

    @property
    def state(self) -> Path:
        """The run log, the run lock and the transfer state (`transfers/`, one file per shard)."""
        return self.root / "state"

    @property
    def sync_reports(self) -> Path:
        """Where `ferry sync` writes its JSON report when not told where."""
        return self.state / "reports"

    @property
    def runs(self) -> Path:
        """Where every run's audit folder is."""
        return self.root / "runs"

    def run(self, run_id: str) -> Path:
        """A run's audit folder (`runs/<run-id>/<phase>/`)."""
        return self.runs / run_id

    def bindings(self, plan: str) -> Path:
        """The RBAC bindings plan's iam phase publishes (the manifests phase applies them)."""
        return self.root / "iam" / plan / "rbac.yaml"

    def digest_map(self, plan: str) -> Path:
        """The digest map plan's images phase publishes (`ferry/digest_map.py`)."""
        return self.root / "images" / plan / "digests.json"

    def last_bundle(self) -> Path | None:
        """The bundle the newest run that rendered manifests wrote in its audit folder; None before any."""
        bundles = sorted((self.root / "runs").glob("*/manifests/bundle.yaml"), key=lambda p: p.stat().st_mtime)
        return bundles[-1] if bundles else None

    def estimate(self, plan: str) -> Path:
        """The last quote `ferry plan estimate` made of plan (`ferry plan show` prints it, with its age)."""
        return self.root / "estimates" / f"{plan}.json"

    @property
    def buildah(self) -> Path:
        """buildah's own storage (vfs), kept between runs as its layer cache."""
        return self.root / "images" / "buildah"

    @property
    def rendered(self) -> Path:
        """Where `ferry manifests render` writes, when not told where."""
        return self.root / "manifests" / "rendered"

    @property
    def discovery_cache(self) -> Path:
        """The target cluster's API discovery, cached between runs."""
        return self.root / "manifests" / "discovery-cache.json"

    def secret_snapshot(self, run_id: str) -> Path:
        """The Secrets a run's manifests replaced, owner-only, outside the audit folder (which is never secret)."""
        return self.root / "manifests" / "secret-snapshots" / f"{run_id}.json"

    def frozen(self, plan: str) -> Path:
        """The journal of the freeze steps plan's cut-over applied and undid (`ferry/cutover/freeze.py`): while a
        step in it is not undone, the source is frozen (`ferry status` says so)."""
        return self.root / "cutover" / plan / "freeze.jsonl"

    def cutover_durations(self, plan: str) -> Path:
        """What plan's last cut-over measured of its freeze steps, verification and switch phases: the next
        prediction's figures."""
        return self.root / "cutover" / plan / "durations.json"

    @property
    def synthetic_checkpoint(self) -> Path:
        """The go-live phase's synthetic checkpoint, kept between runs."""
        return self.root / "golive" / "synthetic"


class _Flat(StateLayout):
    """An older `ferry sync --state-dir` folder: the run log and the transfer state directly in root."""

    @property
    def state(self) -> Path:
        return self.root
