"""Phases by name, as import strings loaded on first use; the pipeline runs them in the registry's order.

The base layer knows phases only through this table, as `connectors/registry.py` knows connectors:
the plan validates each `phases.<name>` and `gates.<name>` section with the models of the class
registered under that name. Third parties add phases through the "ferry.phases" entry point group
(run after the built-in ones); `register()` adds one in-process, at a chosen place in the order.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from ferry.errors import UsageError

GROUP = "ferry.phases"
# The pipeline's phases in order; a new phase is one line here and one module under ferry/phases/.
_BUILTIN = (
    ("iam", "ferry.phases.iam:IamPhase"),
    ("data_sync", "ferry.phases.data_sync:DataSyncPhase"),
    ("images", "ferry.phases.images:ImagesPhase"),
    ("manifests", "ferry.phases.manifests:ManifestsPhase"),
    ("golive", "ferry.phases.golive:GolivePhase"),
)

# Phases added in-process by register(): (name, "module:Class", the phase it follows or None).
_registered: list[tuple[str, str, str | None]] = []


def register(name: str, target: str, after: str | None = None) -> None:
    """Add the phase class at target ("module:Class") under name, after the phase named `after` (else last)."""
    unregister(name)
    _registered.append((name, target, after))


def unregister(name: str) -> None:
    """Remove a phase added by register() (tests clean up with it); built-in phases stay."""
    _registered[:] = [entry for entry in _registered if entry[0] != name]


def phase_table() -> list[tuple[str, str]]:
    """(name, "module:Class") of every known phase, in pipeline order."""
    builtin = dict(_BUILTIN)
    plugins = sorted((ep.name, ep.value) for ep in entry_points(group=GROUP) if ep.name not in builtin)
    table = [*_BUILTIN, *plugins]
    for name, target, after in _registered:
        table = [entry for entry in table if entry[0] != name]
        names = [entry[0] for entry in table]
        table.insert(names.index(after) + 1 if after in names else len(table), (name, target))
    return table


def phase_names() -> list[str]:
    """The names of every known phase, in pipeline order."""
    return [name for name, _ in phase_table()]


def load_phase(name: str) -> Any:
    """The phase class registered under name (a subclass of ferry.phases.base.Phase)."""
    target = dict(phase_table()).get(name)
    if target is None:
        raise UsageError(f"unknown phase {name!r} (known: {', '.join(phase_names())})")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"phase {name!r} needs a missing package ({exc.name}): install what provides it") from None
    return getattr(module, class_name)
