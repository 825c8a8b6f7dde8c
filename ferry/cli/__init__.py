"""`ferry`: the command line. Every error is one line on stderr; bad input exits 2.

One module per command group (plan, runs, sync, iam, images, manifests, golive, server) defines its commands;
this module registers them on the app, in the order `ferry --help` lists them, and turns every way a command can
stop into one line and an exit code (`run`, the console script's entry point).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ferry import __version__, logs
from ferry.cli import golive, iam, images, manifests, plan, runs, server, sync
from ferry.cli.console import debugging, err, out
from ferry.errors import FerryError, Interrupted, UsageError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Move GPU/ML workloads between clouds.",
)


def version() -> None:
    """Print ferry's version."""
    out.print(__version__)


def _print_version(wanted: bool) -> None:
    """--version: print the version as `ferry version` does, then stop before any command runs."""
    if wanted:
        version()
        raise typer.Exit()


@app.callback()
def main(
    _version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print ferry's version and exit")
    ] = False,
) -> None:
    """ferry: move GPU/ML workloads from one cloud to another, verified at every step."""


app.command("run")(runs.run_plan)
app.command()(runs.status)
app.command()(runs.cutover)
app.command()(runs.approve)
app.command()(runs.rollback)
app.command()(server.serve)
app.command()(server.deploy)
app.command()(server.ui)
app.command()(version)
app.command()(sync.sync)
app.add_typer(plan.app, name="plan")
app.add_typer(iam.app, name="iam")
app.add_typer(golive.app, name="golive")
app.add_typer(golive.probe_app, name="probe")
app.add_typer(images.app, name="images")
app.add_typer(manifests.app, name="manifests")


def _single_line(text: object) -> str:
    """text with its line breaks and runs of spaces as single spaces."""
    return " ".join(str(text).split())


def _last_line(outcome: str, message: str, code: int) -> None:
    """Say why ferry stops (`ferry: OUTCOME: MESSAGE`, or the closing JSON event), then exit with code."""
    if logs.json_output():
        logs.write_json(sys.stderr, {"event": "summary", "ok": False, "outcome": outcome, "error": message})
    elif outcome == "interrupted":
        err.print(f"ferry: {message}", markup=False, highlight=False)
    else:
        err.print(f"ferry: {outcome}: {message}", markup=False, highlight=False)
    sys.exit(code)


def run() -> None:
    """Console-script entry point: one line on stderr, never a traceback; exit 2 for bad input, 1 for failures."""
    try:
        code = app(standalone_mode=False)
    except UsageError as exc:
        _last_line("error", str(exc), 2)
    except Interrupted as exc:
        _last_line("interrupted", f"{exc}; {exc.then}", exc.exit_code)
    except FerryError as exc:
        _last_line("failed", str(exc), 1)
    except typer.Abort:  # Ctrl-C at a prompt (`ferry rollback`'s question): nothing was changed
        _last_line("interrupted", "interrupted at the prompt; nothing was changed", 130)
    except KeyboardInterrupt:  # outside anything that turns it into Interrupted
        _last_line("interrupted", "interrupted by SIGINT; run the same command again to resume", 130)
    except typer.TyperException as exc:  # typer's parse errors; it vendors click, so they are not click's classes
        # Its no-args-is-help error has printed the help already and carries no message.
        if message := _single_line(exc.format_message()):
            command = getattr(exc, "ctx", None)
            hint = f"; see '{command.command_path} --help'" if command is not None else ""
            err.print(f"ferry: error: {message.rstrip('.')}{hint}", markup=False, highlight=False)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debugging():
            raise
        err.print(
            f"ferry: internal error: {type(exc).__name__}: {_single_line(exc)} (a bug: please report it with "
            "the output of the same command run with FERRY_DEBUG=1)",
            markup=False,
            highlight=False,
        )
        sys.exit(1)
    if code == 130:  # typer turns Ctrl-C into exit code 130
        err.print("ferry: interrupted; run the same command again to resume", markup=False)
    sys.exit(code if isinstance(code, int) else 0)
