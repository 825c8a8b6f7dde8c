"""`ferry`: the command line. Every error is one line on stderr; bad input exits 2.

One module per command group (plan, runs, sync, iam, images, manifests, golive, server) defines its commands;
this module builds the app of them (`build`: every command in the order `ferry --help` lists them, or only the one
a command line names, so a start imports only what it runs), and turns every way a command can stop into one line
and an exit code (`run`, the console script's entry point).
"""

from __future__ import annotations

import functools
import gc
import sys
from importlib import import_module
from typing import Annotated

import typer

from ferry import __version__, logs
from ferry.cli.console import debugging, err, out
from ferry.errors import FerryError, Interrupted, UsageError
from ferry.malloc import tune as tune_malloc


def version() -> None:
    """Print ferry's version."""
    out.print(__version__)


def _print_version(wanted: bool) -> None:
    """--version: print the version as `ferry version` does, then stop before any command runs."""
    if wanted:
        version()
        raise typer.Exit()


def main(
    _version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print ferry's version and exit")
    ] = False,
) -> None:
    """ferry: move GPU/ML workloads from one cloud to another, verified at every step."""


# Every command, in the order `ferry --help` lists them: (name, its module in ferry.cli, the function or the
# typer app of a group). A command's module is imported only when the command line needs it: `ferry sync` starts
# without the phases, the quote or the images code (about a third of a start's CPU, paid per sync).
_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("run", "runs", "run_plan"),
    ("status", "runs", "status"),
    ("cutover", "runs", "cutover"),
    ("approve", "runs", "approve"),
    ("rollback", "runs", "rollback"),
    ("serve", "server", "serve"),
    ("deploy", "server", "deploy"),
    ("ui", "server", "ui"),
    ("version", "", "version"),
    ("sync", "sync", "sync"),
)
_GROUPS: tuple[tuple[str, str, str], ...] = (
    ("plan", "plan", "app"),
    ("iam", "iam", "app"),
    ("golive", "golive", "app"),
    ("probe", "golive", "probe_app"),
    ("images", "images", "app"),
    ("manifests", "manifests", "app"),
)


def _defined(module: str, attribute: str):
    return getattr(import_module(f"ferry.cli.{module}") if module else sys.modules[__name__], attribute)


@functools.cache
def build(only: str | None = None) -> typer.Typer:
    """ferry's command line: every command, or only the one named (what its run needs imported)."""
    app = typer.Typer(
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        help="Move GPU/ML workloads between clouds.",
    )
    app.callback()(main)
    for name, module, attribute in _COMMANDS:
        if only in (None, name):
            app.command(name)(_defined(module, attribute))
    for name, module, attribute in _GROUPS:
        if only in (None, name):
            app.add_typer(_defined(module, attribute), name=name)
    return app


def __getattr__(name: str) -> typer.Typer:
    """`ferry.cli.app`: the whole command line, built on first use."""
    if name == "app":
        return build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _named(args: list[str]) -> str | None:
    """The command args name first, where ferry has one; None for an option (--help, --version) or anything else."""
    known = {name for name, _, _ in (*_COMMANDS, *_GROUPS)}
    return args[0] if args and args[0] in known else None


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
        # Objects made at start-up live as long as the process: the collector need not walk them again, and young
        # collections run per 50,000 allocations, not per 700 (a copy of many small objects made hundreds).
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)
        tune_malloc()  # before any thread allocates
        code = build(_named(sys.argv[1:]))(standalone_mode=False)
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
