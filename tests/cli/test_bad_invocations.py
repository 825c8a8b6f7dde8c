"""What users get wrong, typed into a shell: the installed `ferry` answers in one line, never with a traceback.

Each case runs the console script the package installs (`.venv/bin/ferry`) as its own process, as a
shell would, so typer's parsing, the entry point's error handling and the exit code are all the real ones.
"""

from __future__ import annotations

import gzip
import random
import sys
from pathlib import Path

import pytest

from ferry import __version__
from tests.support import FERRY, run_ferry

PLAN = """\
name: bad-invocations
source:
  storage: ./src
target:
  storage: ./dst
phases:
  data_sync: {}
"""

FILES: dict[str, bytes] = {
    "src/a.txt": b"a",
    "plan.yaml": PLAN.encode(),
    "empty.yaml": b"",
    "latin1.yaml": "name: caf\xe9\n".encode("latin-1"),
    "utf16.yaml": PLAN.encode("utf-16"),
    "random.yaml": random.Random(8).randbytes(512),
    "plan.yaml.gz": gzip.compress(PLAN.encode(), mtime=0),
    "nul.yaml": PLAN.replace("name: bad", "name: b\0ad").encode(),
    "syntax.yaml": PLAN.replace("data_sync: {}", "data_sync: {threads: 8").encode(),
    "list.yaml": b"- name: x\n- source: ./src\n",
    "scalar.yaml": b"just some words\n",
    "deep.yaml": b"[" * 5000,
    "unknown-key.yaml": (PLAN + "colour: blue\n").encode(),
    "unknown-phase.yaml": PLAN.replace("data_sync: {}", "teleport: {}").encode(),
    "phase-missing-setting.yaml": PLAN.replace("data_sync: {}", "manifests: {}").encode(),
    "bad-cron.yaml": (PLAN + 'schedule: "every night"\n').encode(),
    "bad-size.yaml": PLAN.replace("data_sync: {}", "data_sync: {part_size: 12Q}").encode(),
    "unset-env.yaml": PLAN.replace("./dst", "${FERRY_TEST_UNSET_VAR}").encode(),
    "bad-target-profile.yaml": PLAN.replace("target:\n", "target:\n  profile: moon-base\n").encode(),
    "profiles-secret.yaml": b"profiles:\n  meta:\n    type: s3\n    secret_access_key: hunter2\n",
    "profiles-latin1.yaml": "profiles:\n  m\xe9ta: {type: s3}\n".encode("latin-1"),
    "profiles-list.yaml": b"- meta\n",
    # Valid plans that cannot run here: plan validate refuses them.
    "alias-typo.yaml": PLAN.replace("./dst", "mta://store/x").encode(),
    "cron-25h.yaml": (PLAN + 'schedule: "0 25 * * *"\n').encode(),
    "missing-export.yaml": PLAN.replace("  storage: ./src\n", "  storage: ./src\n  iam: {ldif: gone.ldif}\n")
    .replace("data_sync: {}", "iam: {namespace: ml}")
    .encode(),
    "unset-credential.yaml": (
        PLAN.replace("./dst", "m://store/x")
        + "profiles:\n  m:\n    type: s3\n    credentials: {access_key_id_env: FERRY_TEST_UNSET_KEY}\n"
    ).encode(),
}

# (id, argv, exit code, what stderr must say)
CASES = [
    ("unknown command", ["nosuchcommand"], 2, "No such command 'nosuchcommand'"),
    ("unknown top-level option", ["--bogus"], 2, "No such option: --bogus"),
    ("unknown sync option", ["sync", "--bogus", "a", "b"], 2, "No such option: --bogus"),
    ("sync without arguments", ["sync"], 2, "Missing argument 'source'"),
    ("sync without a target", ["sync", "src"], 2, "Missing argument 'target'"),
    ("extra argument", ["version", "extra"], 2, "unexpected extra argument"),
    ("option without its value", ["sync", "src", "out", "--part-size"], 2, "'--part-size' requires an argument"),
    ("bad size", ["sync", "src", "out", "--part-size", "12Q"], 2, "--part-size: '12Q' is not a size"),
    ("zero size", ["sync", "src", "out", "--memory-budget", "0"], 2, "--memory-budget: '0' is not a positive size"),
    ("bad bandwidth", ["sync", "src", "out", "--bwlimit", "fast"], 2, "--bwlimit: 'fast'"),
    ("zero threads", ["sync", "src", "out", "--threads", "0"], 2, "'--threads'"),
    ("threads not a number", ["sync", "src", "out", "--threads", "abc"], 2, "'--threads'"),
    ("too many threads", ["sync", "src", "out", "--threads", "99999"], 2, "'--threads'"),
    ("zero retries", ["sync", "src", "out", "--retries", "0"], 2, "'--retries'"),
    ("sync log format", ["sync", "src", "out", "--log-format", "xml"], 2, "'xml' is not one of console, json"),
    ("run log format", ["run", "plan.yaml", "--log-format", "xml"], 2, "'xml' is not one of console, json"),
    ("estimate format", ["plan", "estimate", "plan.yaml", "--format", "xml"], 2, "'xml' is not one of table, json"),
    ("estimate prices", ["plan", "estimate", "plan.yaml", "--prices", "nosuch.yaml"], 2, "nosuch.yaml: cannot read"),
    ("estimate probe size", ["plan", "estimate", "plan.yaml", "--probe-bytes", "12Q"], 2, "'12Q' is not a size"),
    ("unknown URL scheme", ["sync", "src", "nosuch://bucket/x"], 2, "unknown scheme 'nosuch'"),
    ("URL without a bucket", ["sync", "src", "s3://"], 2, "no bucket or container"),
    ("missing local source", ["sync", "no-such-dir", "out"], 2, "no such directory"),
    ("missing profiles file", ["sync", "src", "meta://b/x", "--profiles", "none.yaml"], 2, "none.yaml: cannot read"),
    ("profiles with a secret", ["sync", "src", "meta://b/x", "--profiles", "profiles-secret.yaml"], 2, ":4:"),
    ("profiles not UTF-8", ["sync", "src", "meta://b/x", "--profiles", "profiles-latin1.yaml"], 2, "not UTF-8"),
    ("profiles a list", ["sync", "src", "meta://b/x", "--profiles", "profiles-list.yaml"], 2, "expected a mapping"),
    ("profiles a directory", ["sync", "src", "meta://b/x", "--profiles", "src"], 2, "src: cannot read"),
    ("run without a plan", ["run"], 2, "Missing argument 'plan'"),
    ("missing plan", ["run", "nosuch.yaml"], 2, "nosuch.yaml: cannot read"),
    ("plan is a directory", ["plan", "validate", "src"], 2, "src: cannot read"),
    ("empty plan", ["plan", "validate", "empty.yaml"], 2, "empty.yaml: name: Field required"),
    ("plan not UTF-8", ["plan", "validate", "latin1.yaml"], 2, "latin1.yaml:1: not UTF-8"),
    ("plan in UTF-16", ["run", "utf16.yaml"], 2, "utf16.yaml:1: not UTF-8"),
    ("plan of random bytes", ["plan", "validate", "random.yaml"], 2, "random.yaml:1: not UTF-8"),
    ("plan gzipped", ["status", "plan.yaml.gz"], 2, "plan.yaml.gz:1: not UTF-8"),
    ("plan with a NUL", ["plan", "show", "nul.yaml"], 2, "nul.yaml:1: not valid YAML"),
    ("YAML syntax error", ["plan", "validate", "syntax.yaml"], 2, "syntax.yaml:8: not valid YAML"),
    ("top-level list", ["plan", "validate", "list.yaml"], 2, "expected a mapping, found list"),
    ("top-level scalar", ["plan", "validate", "scalar.yaml"], 2, "expected a mapping, found str"),
    ("nested too deeply", ["plan", "validate", "deep.yaml"], 2, "nested too deeply"),
    ("unknown key", ["plan", "validate", "unknown-key.yaml"], 2, ":8: colour: unknown field"),
    ("unknown phase", ["run", "unknown-phase.yaml"], 2, "phases.teleport: unknown field"),
    (
        "phase without a required setting",
        ["plan", "validate", "phase-missing-setting.yaml"],
        2,
        ":7: phases.manifests.sources: Field required",
    ),
    ("bad cron", ["serve", "bad-cron.yaml"], 2, "'every night' is not a"),
    ("bad size in plan", ["plan", "validate", "bad-size.yaml"], 2, "'12Q' is not a size"),
    ("unset environment reference", ["plan", "validate", "unset-env.yaml"], 2, "FERRY_TEST_UNSET_VAR"),
    ("unknown target profile", ["plan", "validate", "bad-target-profile.yaml"], 2, "'moon-base' is not built in"),
    ("rollback without --phase", ["rollback", "plan.yaml"], 2, "Missing option '--phase'"),
    ("rollback of a phase not in the plan", ["rollback", "plan.yaml", "--phase", "iam"], 2, "'iam' is not a phase"),
    ("run --approval-timeout 0", ["run", "plan.yaml", "--approval-timeout", "0"], 2, "'--approval-timeout'"),
    ("serve without a schedule", ["serve", "plan.yaml"], 2, "no cron schedule"),
    ("deploy without --pool", ["deploy", "plan.yaml"], 2, "Missing option '--pool'"),
    ("approve without a run id", ["approve"], 2, "Missing argument 'run_id'"),
    ("approve without PREFECT_API_URL", ["approve", "run-1"], 2, "set PREFECT_API_URL"),
    ("ui port not a number", ["ui", "--port", "abc"], 2, "'--port'"),
    ("undefined scheme alias", ["plan", "validate", "alias-typo.yaml"], 2, ":5: target.storage: mta://store/x"),
    ("cron hour 25", ["plan", "validate", "cron-25h.yaml"], 2, ":8: schedule: '0 25 * * *' is not a cron"),
    ("missing export file", ["plan", "validate", "missing-export.yaml"], 2, ":4: source.iam.ldif:"),
    ("unset credential variable", ["plan", "validate", "unset-credential.yaml"], 2, "FERRY_TEST_UNSET_KEY is not set"),
    ("misspelt --force", ["run", "plan.yaml", "--force", "data_snyc"], 2, "--force: 'data_snyc' is not a phase"),
    ("misspelt --only", ["run", "plan.yaml", "--only", "imagse"], 2, "--only: 'imagse' is not a phase"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-invocations")
    for name, data in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def ferry(workdir: Path, *args: str) -> tuple[int, str, str]:
    """`ferry ARGS` in workdir as a shell runs it, with no Prefect server and state kept in workdir."""
    return run_ferry(*args, cwd=workdir, env={"FERRY_STATE_DIR": str(workdir / "state")})


@pytest.mark.parametrize(("argv", "expected", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_invocation_is_one_line(workdir, argv, expected, needle) -> None:
    exit_code, out, err = ferry(workdir, *argv)
    assert exit_code == expected, (out, err)
    assert "Traceback" not in out + err
    lines = [line for line in err.splitlines() if line.strip()]
    assert 1 <= len(lines) <= 3, err
    assert lines[0].startswith("ferry: error: "), lines[0]
    assert needle in err, err
    assert "hunter2" not in err
    assert not (workdir / ".ferry" / "runs").exists(), "a bad invocation started a run"


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 30 and Path(FERRY).is_file()


@pytest.mark.parametrize("argv", [[], ["plan"]], ids=["ferry", "ferry plan"])
def test_no_command_prints_the_help(workdir, argv) -> None:
    code, out, err = ferry(workdir, *argv)
    assert code == 2  # as click does: a command was expected
    assert "Usage:" in out and "Commands" in out
    assert "Traceback" not in out + err and not err.strip()


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(workdir, argv) -> None:
    code, out, err = ferry(workdir, *argv)
    assert (code, out.strip(), err) == (0, __version__, "")


def test_an_internal_error_is_one_line_unless_debugging(monkeypatch) -> None:
    from ferry import cli
    from ferry.cli import plan as plan_commands
    from tests.support import run_cli

    def broken(path: Path) -> None:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(plan_commands, "load_plan", broken)
    code, _, err = run_cli("plan", "validate", "plan.yaml")
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("ferry: internal error: RuntimeError: a bug over two lines") and "FERRY_DEBUG=1" in err

    monkeypatch.setenv("FERRY_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["ferry", "plan", "validate", "plan.yaml"])
    with pytest.raises(RuntimeError, match="a bug"):
        cli.run()
