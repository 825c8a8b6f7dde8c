"""Whether a plan can run here: what `ferry plan validate` checks beyond the plan's own structure.

The structure (fields, types, cross-field rules) is checked when the plan loads. This checks what a
structurally valid plan still needs: storage URLs whose scheme ferry can open, and, unless offline
(for plans deployed to workers whose environment holds the secrets), the files it reads and the
environment variables it takes credentials from.
"""

from __future__ import annotations

import os
from pathlib import Path

from connectors.registry import connector_kind
from ferry.errors import UsageError
from ferry.plan import LoadedPlan


def plan_problems(
    loaded: LoadedPlan, files: dict[tuple, Path], variables: dict[tuple, str], offline: bool
) -> list[str]:
    """Each reason the plan cannot run here, as one `file:line: field: problem` line (none: it can): files are the
    files it reads and variables the environment variables its credentials name, by the field naming each."""
    problems = []
    for role in ("source", "target"):
        try:
            connector_kind(getattr(loaded.plan, role).storage, loaded.plan.profiles)
        except UsageError as exc:
            problems.append(loaded.problem((role, "storage"), str(exc)))
    if offline:
        return problems
    for loc, path in files.items():
        # A folder is an input too (the manifests phase reads every YAML file in one).
        readable = path.is_file() or path.is_dir()
        if not (readable and os.access(path, os.R_OK)):
            problems.append(loaded.problem(loc, f"{path}: no such readable file or folder"))
    for loc, name in variables.items():
        if name not in os.environ:
            problems.append(loaded.problem(loc, f"{name} is not set in this environment (--offline skips this)"))
    return problems
