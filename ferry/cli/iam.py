"""`ferry iam explain`: one principal's outcome in the iam phase's mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.console import out
from ferry.phases.base import open_phase
from ferry.plan import load_plan

app = typer.Typer(no_args_is_help=True, help="Explain the iam phase's mapping.")


@app.command("explain")
def iam_explain(
    path: Annotated[Path, typer.Argument(help="The plan file")],
    principal: Annotated[str, typer.Argument(help="A principal id, e.g. aws:user/alice or ldap:group/ml-admins")],
) -> None:
    """One principal's outcome: its level and the grants behind it, or why it has none, and every category."""
    loaded = load_plan(path)
    loaded.plan.require_phases("explain", ["iam"])
    out.print(open_phase(loaded, "iam").mapping().explain(principal).rstrip(), markup=False, highlight=False)
