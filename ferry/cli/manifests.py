"""`ferry manifests render`: a plan's manifests rendered and validated without a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.console import out
from ferry.errors import UsageError
from ferry.phases.base import open_phase
from ferry.plan import load_plan
from ferry.results import Status

app = typer.Typer(no_args_is_help=True, help="Kubernetes manifests rewritten for the target.")


@app.command("render")
def manifests_render(
    plan: Annotated[Path, typer.Argument(help="The plan file")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="Where rendered files go (default: <state>/manifests/rendered)")
    ] = None,
) -> None:
    """Render and validate the plan's manifests without a cluster; print what could not be carried over."""
    import datetime

    from ferry.audit import AuditFolder

    loaded = load_plan(plan)
    if "manifests" not in loaded.plan.enabled_phases():
        raise UsageError(f"{plan}: phases.manifests: the plan has no manifests phase to render")
    phase = open_phase(loaded, "manifests")
    rendering = phase.render()
    target = out_dir or loaded.layout.rendered
    written = rendering.write(target)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    audit = AuditFolder(loaded.layout.run(f"render-{stamp}"))
    phase.write_render(rendering, audit)
    results = phase.validate(rendering)
    audit.write_gate(phase.name, results)
    for finding in rendering.findings:
        out.print(f"WARN {finding}", markup=False, highlight=False)
    for result in results:
        out.print(f"{result.name}: {result.status.value}", markup=False, highlight=False)
        if result.name != "manifests.warnings":
            for line in result.evidence:
                out.print(f"  {line}", markup=False, highlight=False)
    out.print(
        f"rendered {len(rendering.documents)} object(s) into {len(written)} file(s) under {target}; "
        f"bundle and diff in {audit.root / phase.name}",
        markup=False,
        highlight=False,
    )
    if any(result.status == Status.FAIL for result in results):
        raise typer.Exit(1)
