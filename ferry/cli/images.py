"""`ferry images rebase`: Dockerfiles rebased onto a target profile's base images, no plan needed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from ferry.cli.console import out
from ferry.errors import UsageError
from ferry.images.rebase import read_dockerfile, rebase
from ferry.plan import load_target_profile

app = typer.Typer(no_args_is_help=True, help="Container images: rebase Dockerfiles onto a target's bases.")


@app.command("rebase")
def images_rebase(
    files: Annotated[list[Path], typer.Argument(help="The Dockerfiles")],
    out_dir: Annotated[Path, typer.Option("--out", help="Where the rebased files and their diffs go")],
    profile: Annotated[
        str, typer.Option(help="A built-in target profile, or the path of a YAML profile")
    ] = "meta-compute",
    build_arg: Annotated[
        list[str] | None,
        typer.Option("--build-arg", help="NAME=VALUE, as the build will pass it (for an ARG without a default)"),
    ] = None,
    stage: Annotated[
        str | None, typer.Option("--target", help="The stage the build stops at: it gets the SDK steps")
    ] = None,
    platform: Annotated[
        str | None, typer.Option(help="The platform built for (linux/amd64): its TARGETARCH... in FROM lines")
    ] = None,
) -> None:
    """Rebase Dockerfiles onto the profile's base images (no plan needed); say what changed and what is unmapped."""
    target = load_target_profile(profile, Path.cwd())
    build_args = {}
    for item in build_arg or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--build-arg {item}: write NAME=VALUE")
        build_args[key] = value
    texts = {path: read_dockerfile(path) for path in files}
    # Every file is rebased before any is written: a bad one leaves --out as it was.
    results = {
        path: rebase(
            text,
            target.base_images,
            target.sdk_steps,
            name=str(path),
            build_args=build_args,
            target=stage,
            platform=platform,
        )
        for path, text in texts.items()
    }
    # Keep the files' relative layout under --out, so two files named Dockerfile do not collide.
    common = Path(os.path.commonpath([p.resolve().parent for p in files]))
    names = {path: str(path.resolve().relative_to(common)) for path in files}
    inputs = {path.resolve() for path in files}
    for path, result in results.items():
        overwritten = [f for f in (out_dir / names[path], out_dir / f"{names[path]}.diff") if f.resolve() in inputs]
        if result.rebased and overwritten:
            raise UsageError(f"--out {out_dir}: would write over {overwritten[0]}, an input: choose another folder")
    for path, result in results.items():
        if not result.rebased:
            verdict = "not rebased: no FROM matches a rule of " + target.name
        else:
            written, diff = result.write(out_dir, names[path])
            verdict = f"rebased -> {written} (diff {diff})"
        out.print(f"{path}: {verdict}", markup=False, highlight=False)
        for line in result.report():
            out.print(f"  {line}", markup=False, highlight=False)
