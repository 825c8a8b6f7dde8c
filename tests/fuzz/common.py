"""What the fuzz tests share: the settings, the count of inputs tried, one CLI call checked against the rule for
bad input, and the mutations (of a parsed document, and of its text).

The rule (README, "Every error is one line on stderr"): bad input is one line on stderr, `ferry: error: ...`,
exit 2, never a traceback, and nothing at the target changes; an unexpected exception ("ferry: internal error")
is a bug. FERRY_FUZZ_EXAMPLES=N runs N times the examples CI runs (a longer exploration, same seeds).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from tests.support import run_cli

# Inputs tried per target, and the ferry commands run on them (a plan gets two), printed at the end of the session
# (conftest.py); a failure message names its input by its number.
TRIED: Counter[str] = Counter()
CALLS: Counter[str] = Counter()
# The longest one call may take: a hang (an alias bomb, say) fails as such instead of running into the test's
# timeout.
CALL_LIMIT_S = float(os.environ.get("FERRY_FUZZ_CALL_LIMIT_S", "30"))


def summary() -> str | None:
    """The session's count of inputs tried, for its last lines (tests/conftest.py prints it); None before any."""
    if not TRIED:
        return None
    counts = ", ".join(f"{target} {n}" for target, n in sorted(TRIED.items()))
    return (
        f"fuzz: {sum(TRIED.values())} inputs tried ({counts}) in {sum(CALLS.values())} ferry commands; "
        f"FERRY_FUZZ_EXAMPLES={examples(1)}"
    )


def examples(n: int) -> int:
    """n, times FERRY_FUZZ_EXAMPLES (1 in CI)."""
    return n * int(os.environ.get("FERRY_FUZZ_EXAMPLES", "1"))


def fuzz_settings(n: int) -> settings:
    """Deterministic (derandomized, no example database) settings for n examples (scaled by examples())."""
    return settings(
        max_examples=examples(n),
        deadline=None,
        derandomize=True,
        database=None,
        # No explain phase: it traces every line (ten times slower, and a slow input then runs past CALL_LIMIT_S),
        # and a failure here says in its message what it was.
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


class TookTooLong(BaseException):
    """A call ran past CALL_LIMIT_S (a BaseException: the CLI's `except Exception` must not swallow it)."""


def _timed_cli(args: tuple[str, ...]) -> tuple[int, str, str]:
    """run_cli(*args) under an interval timer, restoring whatever timer and handler were there (pytest-timeout's)."""

    def expired(signum, frame):
        raise TookTooLong(f"ferry {' '.join(args)} took more than {CALL_LIMIT_S:g} s")

    old_handler = signal.signal(signal.SIGALRM, expired)
    old_left, old_interval = signal.setitimer(signal.ITIMER_REAL, CALL_LIMIT_S)
    started = time.monotonic()
    try:
        return run_cli(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_left:
            signal.setitimer(signal.ITIMER_REAL, max(old_left - (time.monotonic() - started), 0.001), old_interval)


def listing(*folders: Path) -> dict[str, str]:
    """Every path under the folders with a digest of its content ("dir" for a folder): what must not change."""
    found = {}
    for folder in folders:
        if not folder.exists():
            continue
        for path in sorted(folder.rglob("*")):
            if path.is_symlink() or not path.is_file():
                found[str(path)] = "dir" if path.is_dir() else "other"
            else:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def check_cli(
    target: str,
    args: tuple[str, ...],
    *,
    unchanged: tuple[Path, ...] = (),
    must_fail: bool = False,
    ok_codes: tuple[int, ...] = (0,),
    problem_lines: bool = False,
    read_only: bool = False,
    what: str = "",
    same_input: bool = False,
) -> tuple[int, str, str]:
    """Run `ferry ARGS` in this process and hold it to the rule for bad input; (exit code, stdout, stderr).

    unchanged: folders whose listing must be the same afterwards when the input was refused (exit 2).
    must_fail: the input is known to be invalid (exit 2 only). ok_codes: what a valid input may exit with.
    problem_lines: the command lists one problem per line after the first (`plan validate`).
    read_only: the command never writes: the folders are unchanged whatever its exit code.
    what: the input, for the failure message. same_input: another command on the input the last call had.
    """
    TRIED[target] += not same_input
    CALLS[target] += 1
    before = listing(*unchanged)
    code, out, err = _timed_cli(args)
    said = f"[{target} input #{TRIED[target]}] ferry {' '.join(args)}\n{what}\n--- exit {code}\n{out}\n{err}"
    assert "Traceback" not in out + err and 'File "' not in out + err, said
    assert "internal error" not in err, said
    # What a terminal could not show fails there (run_cli's streams take anything): a lone surrogate, say.
    assert (out + err).encode("utf-8", errors="replace") == (out + err).encode("utf-8", errors="surrogatepass"), said
    assert code in (*ok_codes, 2), said
    if must_fail:
        assert code == 2, said
    if code == 2:
        lines = err.splitlines()
        assert lines and lines[0].startswith("ferry: error: "), said
        if problem_lines:  # one problem a line, each naming the file as the first does
            named = lines[0].removeprefix("ferry: error: ").split(":")[0]
            assert all(line.startswith(named) for line in lines[1:]), said
        else:
            assert len(lines) == 1, said
        assert listing(*unchanged) == before, said
    else:
        assert "ferry: error:" not in err, said
    if read_only:
        assert listing(*unchanged) == before, said
    return code, out, err


# -- mutations of a parsed document -------------------------------------------------------------------------

# Values that are wrong somewhere, or right somewhere else: types, sizes, numbers, URLs, text.
ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    -(10**30),
    10**30,
    2**63,
    2**64 + 1,
    3.5,
    -0.0,
    float("inf"),
    float("-inf"),
    float("nan"),
    1e308,
    "",
    " ",
    "12Q",
    "8M",
    "-8M",
    "0",
    "1.5G",
    "1" * 400,
    "9" * 400 + "T",
    "1e400",
    "0x10",
    "1_000",
    "08",
    "nan",
    ".inf",
    "yes",
    "~",
    "s3://",
    "s3:///key",
    "://x",
    "meta:/x",
    "meta://",
    "mta://store/x",
    "http://[::1",
    "http://999.1.1.1:99999/",
    "https://user:pass@host:-1/",
    "az://",
    "memory://x/y",
    "file:///etc",
    "../../../../etc/passwd",
    "/",
    ".",
    "x\0y",
    "line\nbreak",
    "tab\there",
    "\r\n",
    "\u202eevil",
    "ünïcödé",
    "💥🔥",
    "\ud7ff\ue000",
    "x" * 3000,
    "${FERRY_FUZZ_UNSET_VARIABLE}",
    "${",
    "${}",
    "$${X}",
    "*",
    "[unclosed",
    "{unclosed",
    "0 25 * * *",
    "0 2 * * *",
    "H * * * *",
    "@reboot",
    "1.30",
    "1.x",
    "linux/amd64",
    "linux",
    "a:b:c",
    "UPPER",
    "-leading-dash",
    "read",
    "write",
    "admin",
    "none",
    [],
    {},
    [None],
    [1, "two", [3]],
    {"": None},
    {"nested": {"deeper": [{"deepest": "x"}]}},
    {"x\ny": 1},
    {1: 2},
    {None: "null key"},
    {True: "bool key"},
    {3.5: "float key"},
]
ODD_KEYS: list[Any] = ["colour", "", " ", "x\ny", "ünï", "💥", "a" * 500, "${X}", 1, None, True, 3.5, "__class__"]


def nodes(tree: Any, path: tuple = ()) -> list[tuple]:
    """The path of every node of tree (the root is ())."""
    found = [path]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found += nodes(value, (*path, key))
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            found += nodes(value, (*path, index))
    return found


def _parent(tree: Any, path: tuple) -> Any:
    for part in path[:-1]:
        tree = tree[part]
    return tree


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_mutations: int = 3) -> Any:
    """base with one to max_mutations changes: a value replaced, a key dropped, added or renamed, an item
    duplicated, a node wrapped in a list or replaced by a deep nesting."""
    tree = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, max_mutations))):
        path = draw(st.sampled_from(nodes(tree)))
        op = draw(st.sampled_from(["replace", "replace", "drop", "add", "rename", "wrap", "deep", "duplicate"]))
        if not path:
            if op == "replace":
                return _odd(draw)
            op = "add" if isinstance(tree, dict) else "wrap"
        if op == "add" and isinstance(_target(tree, path), dict):
            _target(tree, path)[draw(st.sampled_from(ODD_KEYS))] = _odd(draw)
            continue
        if not path:
            tree = [tree]
            continue
        parent, last = _parent(tree, path), path[-1]
        if op == "drop":
            del parent[last]
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(st.sampled_from(ODD_KEYS))] = parent.pop(last)
        elif op == "wrap":
            parent[last] = [parent[last]]
        elif op == "deep":
            # Written out by dump_yaml (the dumpers themselves recurse): nested lists and maps, a scalar inside.
            parent[last] = f"__DEEP_{draw(st.sampled_from([30, 200, 1000]))}_{draw(st.booleans()):d}__"
        elif op == "duplicate" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(parent[last]))
        else:
            parent[last] = _odd(draw)
    return tree


def _odd(draw: st.DrawFn) -> Any:
    """One of ODD_VALUES, a copy (the tree it goes into is mutated further)."""
    return copy.deepcopy(draw(st.sampled_from(ODD_VALUES)))


def _target(tree: Any, path: tuple) -> Any:
    for part in path:
        tree = tree[part]
    return tree


def dump_yaml(tree: Any, style: str) -> str:
    """tree as YAML ("block", "flow") or as JSON (which YAML reads too); a value YAML cannot hold is written as
    its repr."""
    if style == "json":
        text = json.dumps(tree, ensure_ascii=False, default=repr)
    else:
        text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, default_flow_style=style == "flow", width=80)
    return _DEEP.sub(lambda m: _deep(int(m.group(1)), m.group(2) == "1"), text)


_DEEP = re.compile(r'"?__DEEP_(\d+)_([01])__"?')


def _deep(depth: int, maps: bool) -> str:
    """depth nested flow collections (maps and lists alternating, or lists only) around one scalar."""
    opening = "".join("{k: " if maps and i % 2 else "[" for i in range(depth))
    closing = "".join("}" if maps and i % 2 else "]" for i in reversed(range(depth)))
    return f"{opening}1{closing}"


# -- mutations of text -------------------------------------------------------------------------------------


def _billion_laughs(levels: int) -> str:
    lines = ["bomb0: &b0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"bomb{i}: &b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _insert(text: str, at: float, piece: str) -> str:
    i = int(len(text) * at)
    return text[:i] + piece + text[i:]


# The costliest inputs (PyYAML's scanner is quadratic in nesting) are bigger in a longer exploration only.
_LONG = examples(1) > 1
_DEPTHS = [100, 1000, 5000, 20000] if _LONG else [100, 1000]
_DIGITS = [5000, 100_000] if _LONG else [5000]
_EMPTY = ["", "\n", "---\n", "---\n...\n", "# only a comment\n", "~\n"]
_LOOPS = ["loop: &l [*l]\n", "loop: &l {self: *l}\n", "loop: &l {a: [1, {b: *l}]}\n"]
_TAGS = [
    ": !!binary ",
    ": !!python/object ",
    ": !x ",
    ": !!timestamp ",
    ": !!int ",
    ": !!bool ",
    ": !!set ",
    ": !!merge ",
]
_CONTROLS = list("\x00\x07\x1b\x7f\x85\u2028\ufffe")
_NOT_MAPPINGS = ["- a\n- b\n", "just words\n", "42\n", "[1, 2]\n", "!!set {a, b}\n", "2024-13-01\n"]
_DIRECTIVES = ["%YAML 1.1\n---\n", "%YAML 9.9\n---\n", "%TAG ! tag:x,2000:\n---\n", "%FOO bar\n---\n"]


def _appended(text: str, more: str) -> str:
    return text.rstrip("\n") + "\n" + more


TEXT_MUTATIONS: dict[str, Callable[[str, st.DrawFn], str | bytes]] = {
    "none": lambda text, draw: text,
    "tab indent": lambda text, draw: text.replace("\n  ", "\n\t", draw(st.integers(1, 3))),
    "tab between tokens": lambda text, draw: text.replace(": ", ":\t", draw(st.integers(1, 3))),
    "duplicate a line": lambda text, draw: _duplicate_line(text, draw),
    "duplicate top-level key": lambda text, draw: text + text.split("\n", 1)[0] + "\n",
    "truncated": lambda text, draw: text[: int(len(text) * draw(st.floats(0, 1)))],
    "empty": lambda text, draw: draw(st.sampled_from(_EMPTY)),
    "two documents": lambda text, draw: text + "\n---\n" + text,
    "leading document marker": lambda text, draw: "---\n" + text + "...\n",
    "empty first document": lambda text, draw: "---\n---\n" + text,
    "alias bomb": lambda text, draw: _appended(text, _billion_laughs(draw(st.sampled_from([3, 6, 9])))),
    "recursive alias": lambda text, draw: _appended(text, draw(st.sampled_from(_LOOPS))),
    "anchor and alias": lambda text, draw: _anchor(text, draw),
    "undefined alias": lambda text, draw: _insert(text, draw(st.floats(0, 1)), " *nowhere "),
    "merge key": lambda text, draw: _appended(text, "base: &m {a: 1}\nmerged: {<<: *m, <<: [*m, 3]}\n"),
    "bad merge": lambda text, draw: _appended(text, "merged: {<<: 5}\n"),
    "tag": lambda text, draw: _tagged(text, draw),
    "bad timestamp": lambda text, draw: _appended(text, "when: 2024-13-45\n"),
    "crlf": lambda text, draw: text.replace("\n", "\r\n"),
    "bom": lambda text, draw: "\ufeff" + text,
    "bom twice": lambda text, draw: "\ufeff\ufeff" + text,
    "control character": lambda text, draw: _insert(text, draw(st.floats(0, 1)), draw(st.sampled_from(_CONTROLS))),
    "unicode": lambda text, draw: _insert(text, draw(st.floats(0, 1)), draw(st.text(min_size=1, max_size=8))),
    "deep flow nesting": lambda text, draw: text + "deep: " + "[" * draw(st.sampled_from(_DEPTHS)) + "\n",
    "deep block nesting": lambda text, draw: text + "deep:\n" + "".join(" " * i + "- \n" for i in range(1, 150)),
    "huge scalar": lambda text, draw: text + "huge: " + "9" * draw(st.sampled_from(_DIGITS)) + "\n",
    "non-mapping top level": lambda text, draw: draw(st.sampled_from(_NOT_MAPPINGS)),
    "binary garbage": lambda text, draw: _garbage(text, draw),
    "utf-16": lambda text, draw: text.encode("utf-16"),
    "latin-1": lambda text, draw: (text + "café: 1\n").encode("latin-1", errors="replace"),
    "directive": lambda text, draw: draw(st.sampled_from(_DIRECTIVES)) + text,
    "indentation": lambda text, draw: _insert(text, draw(st.floats(0, 1)), "\n   odd: indent\n"),
}


def _tagged(text: str, draw: st.DrawFn) -> str:
    """text with an explicit tag on one of its values."""
    at = [m.start() for m in re.finditer(": ", text)]
    if not at:
        return text
    i = draw(st.sampled_from(at))
    return text[:i] + draw(st.sampled_from(_TAGS)) + text[i + 2 :]


def _duplicate_line(text: str, draw: st.DrawFn) -> str:
    lines = text.splitlines(keepends=True)
    if not lines:
        return text
    i = draw(st.integers(0, len(lines) - 1))
    return "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])


def _anchor(text: str, draw: st.DrawFn) -> str:
    lines = text.splitlines(keepends=True)
    candidates = [i for i, line in enumerate(lines) if line.rstrip().endswith(":")]
    if candidates:  # else the alias names no anchor
        i = draw(st.sampled_from(candidates))
        lines[i] = lines[i].rstrip("\r\n") + " &anchored\n"
    return _appended("".join(lines), "alias_of_anchored: *anchored\n")


def _garbage(text: str, draw: st.DrawFn) -> bytes:
    data = text.encode()
    junk = draw(st.binary(min_size=1, max_size=64))
    i = draw(st.integers(0, len(data)))
    return data[:i] + junk + data[i:]


@st.composite
def text_of(draw: st.DrawFn, tree: Any) -> tuple[bytes, str]:
    """tree written out (YAML block or flow, or JSON) and maybe mutated as text: (the bytes, what was done)."""
    style = draw(st.sampled_from(["block", "block", "flow", "json"]))
    name = draw(st.sampled_from(list(TEXT_MUTATIONS)))
    text = dump_yaml(tree, style)
    result = TEXT_MUTATIONS[name](text, draw)
    return (result.encode("utf-8", errors="surrogatepass") if isinstance(result, str) else result), f"{style}, {name}"


def write_bytes(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
