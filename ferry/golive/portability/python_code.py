"""Python read with its own parser (`ast`): CUDA-only calls, device and backend literals where a device or a
backend goes, CUDA-only imports, CUDA extensions, setup.py's requirements and os.environ settings; notebooks cell
by cell. A comment or a string that mentions `.cuda()` is no finding: only code is read."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ferry.golive.portability import packages
from ferry.golive.portability.model import Container, Hit, Setting, quote, unreadable
from ferry.golive.portability.rules import Rule, matches

# Where a device goes: the calls taking one as their first argument, the method .to(), and these keywords.
DEVICE_CALLS = ("torch.device", "torch.set_default_device", "torch.autocast", "torch.amp.autocast")
DEVICE_KEYWORDS = ("device", "device_type", "map_location", "pin_memory_device", "device_map")
# Where a collective backend goes: these calls' first argument, and these keywords.
BACKEND_CALLS = ("torch.distributed.init_process_group", "deepspeed.init_distributed")
BACKEND_KEYWORDS = ("backend", "dist_backend", "process_group_backend", "ddp_backend")
# The calls that run a command given as their first argument (a string, or a list of words).
COMMAND_CALLS = (
    "subprocess.run", "subprocess.call", "subprocess.check_call", "subprocess.check_output", "subprocess.Popen",
    "os.system", "os.popen",
)  # fmt: skip
# setup() keywords whose strings are requirements.
REQUIRES_KEYWORDS = ("install_requires", "setup_requires", "extras_require", "requires")
_MAGIC = re.compile(r"^\s*[%!]")
# IPython runs these without a % (automagic).
_AUTOMAGIC = re.compile(r"^\s*(pip|conda|mamba)\s+install\b")
# Cell magics whose body is shell.
_SHELL_CELLS = ("%%bash", "%%sh", "%%script", "%%system")


def literal_texts(expr: ast.expr | None) -> list[str]:
    """The strings an expression may give, as far as they are written in it: a constant, an f-string's or a
    formatted string's leading text, both branches of a conditional, every item of a list."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str | bool):
        return [str(expr.value)]
    if isinstance(expr, ast.JoinedStr) and expr.values:
        return literal_texts(expr.values[0])
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod | ast.Add):
        return literal_texts(expr.left)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):  # a path joined: root / "kernel.cu"
        return literal_texts(expr.right)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "format":
        return literal_texts(expr.func.value)
    if isinstance(expr, ast.IfExp):
        return literal_texts(expr.body) + literal_texts(expr.orelse)
    if isinstance(expr, ast.BoolOp):
        return [t for value in expr.values for t in literal_texts(value)]
    if isinstance(expr, ast.List | ast.Tuple | ast.Set):
        return [t for item in expr.elts for t in literal_texts(item)]
    return []


def _names_device(text: str, device: str) -> bool:
    """'cuda', 'cuda:0', f'cuda:{rank}' name the device type cuda."""
    return text == device or text.startswith(device + ":")


def _names_backend(text: str, backend: str) -> bool:
    """'nccl', or 'cpu:gloo,cuda:nccl' (a backend per device) naming it."""
    return any(item.rpartition(":")[2].strip() == backend for item in text.split(","))


@dataclass
class _Reading:
    """One module (or a notebook's cells joined) being read."""

    source: str
    file: str
    rules: tuple[Rule, ...]
    # Module line -> (cell, line in the cell), for notebooks.
    where: dict[int, tuple[int, int]] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    settings: list[Setting] = field(default_factory=list)

    def place(self, line: int) -> tuple[int, int | None]:
        cell, at = self.where.get(line, (None, line))
        return at, cell

    def segment(self, node: ast.AST) -> str:
        """The source text of node (its first lines: a finding quotes little of it)."""
        if not self.lines:
            self.lines = self.source.splitlines()
        first, last = node.lineno - 1, min(node.end_lineno or node.lineno, node.lineno + 3) - 1
        lines = self.lines[first : last + 1]
        if not lines:
            return ""
        if len(lines) == 1:
            return lines[0][node.col_offset : node.end_col_offset if node.end_lineno == node.lineno else None]
        return "\n".join([lines[0][node.col_offset :], *lines[1:]])

    def hit(self, rule: Rule | None, node: ast.AST, match: str | None = None) -> None:
        if rule is None:
            return
        line, cell = self.place(node.lineno)
        text = match if match is not None else self.segment(node)
        self.hits.append(Hit(self.file, line, rule, quote(text), cell=cell))

    def rule(self, matcher: str, test) -> Rule | None:
        return next((r for r in self.rules if getattr(r, matcher) and test(getattr(r, matcher))), None)

    def qualified(self, expr: ast.expr) -> str | None:
        """The dotted name an expression refers to through the module's imports (`T.cuda` is torch.cuda after
        `import torch as T`); None when it does not start at an import."""
        parts = []
        while isinstance(expr, ast.Attribute):
            parts.append(expr.attr)
            expr = expr.value
        if isinstance(expr, ast.Name) and expr.id in self.aliases:
            return ".".join([self.aliases[expr.id], *reversed(parts)])
        return None


def _imported(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """(name bound, module or object imported) for each name an import binds."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield (alias.asname, alias.name) if alias.asname else (alias.name.split(".")[0], alias.name.split(".")[0])
    elif node.module and not node.level:
        for alias in node.names:
            if alias.name != "*":
                yield alias.asname or alias.name, f"{node.module}.{alias.name}"


def _import_hits(reading: _Reading, node: ast.Import | ast.ImportFrom) -> None:
    """A CUDA-only library imported: one finding per module an import names."""
    if isinstance(node, ast.Import):
        modules = [[alias.name] for alias in node.names]
    elif node.module and not node.level:
        modules = [[node.module, *(f"{node.module}.{a.name}" for a in node.names)]]
    else:
        return
    for candidates in modules:

        def imports(patterns: list[str], candidates: list[str] = candidates) -> bool:
            return any(c == p or c.startswith(p + ".") or matches(c, [p]) for c in candidates for p in patterns)

        reading.hit(reading.rule("imports", imports), node, f"import {candidates[0]}")


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _read(reading: _Reading, tree: ast.Module) -> int:
    """Every finding of the module into reading; the number of device-agnostic places."""
    agnostic = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            reading.aliases.update(_imported(node))
    parents = _parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            _import_hits(reading, node)
        elif isinstance(node, ast.Attribute | ast.Name):
            agnostic += _reference(reading, node, parents.get(id(node)))
        if isinstance(node, ast.Call):
            agnostic += _call(reading, node)
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            _assignment(reading, node)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in DEVICE_KEYWORDS:
                    _device_literal(reading, value, node)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            _defaults(reading, node.args)
    return agnostic


def _defaults(reading: _Reading, args: ast.arguments) -> None:
    """def train(device="cuda", backend="nccl"): a parameter named for a device or a backend, with a literal
    default."""
    positional = [*args.posonlyargs, *args.args]
    pairs = [*zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=True)]
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None]
    for arg, default in pairs:
        _named_literal(reading, arg.arg, default, default)


def _reference(reading: _Reading, node: ast.Attribute | ast.Name, parent: ast.AST | None) -> int:
    """A dotted name as a whole (torch.cuda.synchronize, not its torch.cuda): its rule; 1 if device-agnostic."""
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return 0
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return 0
    name = reading.qualified(node)
    if name is None:
        return 0
    rule = reading.rule("names", lambda p: matches(name, p))
    if rule is not None and rule.kind == "agnostic":
        return 1
    reading.hit(rule, node)
    return 0


def _call(reading: _Reading, call: ast.Call) -> int:
    """A call: x.cuda(), device and backend literals, keyword literals, setup()'s requirements; 1 for a device
    taken from configuration (torch.device(cfg.device))."""
    func = call.func
    name = reading.qualified(func)
    if isinstance(func, ast.Attribute) and reading.qualified(func.value) is None:
        reading.hit(reading.rule("methods", lambda m: func.attr in m), call)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    devices = [keywords[k] for k in DEVICE_KEYWORDS if k in keywords]
    if call.args and (name in DEVICE_CALLS or isinstance(func, ast.Attribute) and func.attr == "to"):
        devices.append(call.args[0])
    # parser.add_argument("--device", default="cuda"), ("--dist-backend", default="nccl"): an option's default.
    if isinstance(func, ast.Attribute) and func.attr == "add_argument" and "default" in keywords:
        option = " ".join(t for arg in call.args for t in literal_texts(arg))
        _named_literal(reading, option, keywords["default"], call)
    found = [_device_literal(reading, expr, call) for expr in devices]
    backends = [keywords[k] for k in BACKEND_KEYWORDS if k in keywords]
    if call.args and name in BACKEND_CALLS:
        backends.append(call.args[0])
    for expr in backends:
        _backend_literal(reading, expr, call)
    for key, value in keywords.items():
        rule = reading.rule("keywords", lambda k, key=key, t=literal_texts(value): _keyword(k, key, t))
        if rule is not None:
            reading.hit(rule, call, f"{reading.segment(func)}(... {key}={reading.segment(value)})")
        if key in REQUIRES_KEYWORDS:
            _requirements(reading, value)
    _environ_call(reading, call, name)
    if call.args and name in COMMAND_CALLS:
        words = literal_texts(call.args[0])
        written = " ".join(words) if isinstance(call.args[0], ast.List | ast.Tuple) else (words or [""])[0]
        reading.hit(reading.rule("commands", lambda c: matches(written, c)), call)
    return int(name == "torch.device" and bool(devices) and not any(found))


def _keyword(patterns: dict[str, str], key: str, texts: list[str]) -> bool:
    """Whether keyword key, with a value that may be texts, is one the patterns name ("*": with any value)."""
    return key in patterns and (patterns[key] == "*" or any(matches(t, [patterns[key]]) for t in texts))


def _device_literal(reading: _Reading, expr: ast.expr, node: ast.AST) -> bool:
    """A device type as a literal at a device's place (expr, inside node): whether one was found."""
    texts = literal_texts(expr)
    rule = reading.rule("device", lambda d: any(_names_device(t, d) for t in texts))
    reading.hit(rule, node)
    return rule is not None or bool(texts)


def _backend_literal(reading: _Reading, expr: ast.expr, node: ast.AST) -> None:
    """A collective backend as a literal at a backend's place (expr, inside node)."""
    texts = literal_texts(expr)
    reading.hit(reading.rule("backend", lambda b: any(_names_backend(t, b) for t in texts)), node)


def _named_literal(reading: _Reading, name: str, expr: ast.expr, node: ast.AST) -> None:
    """A literal given to something named for a device (device, DEVICE, self.device_type) or a collective backend
    (backend, dist_backend): `backend = "nccl"` at the top of a script is the backend its init uses."""
    lowered = name.lower()
    if "device" in lowered:
        _device_literal(reading, expr, node)
    elif "backend" in lowered:
        _backend_literal(reading, expr, node)


def _assignment(reading: _Reading, node: ast.Assign | ast.AnnAssign) -> None:
    """device = "cuda", self.device = "cuda:0", backend = "nccl", os.environ["NCCL_SOCKET_IFNAME"] = "ib0"."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        if isinstance(target, ast.Subscript) and reading.qualified(target.value) == "os.environ":
            _setting(reading, target.slice, node.value, node)
            continue
        last = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else ""
        _named_literal(reading, last, node.value, node)


def _environ_call(reading: _Reading, call: ast.Call, name: str | None) -> None:
    """os.environ.setdefault("K", "v"), os.environ.update(K="v"), os.putenv("K", "v")."""
    if name in ("os.environ.setdefault", "os.putenv") and len(call.args) == 2:
        _setting(reading, call.args[0], call.args[1], call)
    elif name == "os.environ.update":
        for keyword in call.keywords:
            if keyword.arg:
                _setting(reading, ast.Constant(keyword.arg), keyword.value, call)


def _setting(reading: _Reading, key: ast.expr, value: ast.expr, node: ast.AST) -> None:
    values = literal_texts(value)
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and values:
        line, _ = reading.place(node.lineno)
        reading.settings.append(Setting(key.value, values[0], reading.file, line))


def _requirements(reading: _Reading, value: ast.expr) -> None:
    """The requirement strings of install_requires=[...] (extras_require={...}: each list)."""
    lists = value.values if isinstance(value, ast.Dict) else [value]
    for item in lists:
        for element in item.elts if isinstance(item, ast.List | ast.Tuple) else []:
            if isinstance(element, ast.Constant) and isinstance(element.value, str):
                line, cell = reading.place(element.lineno)
                reading.hits += packages.pip_spec(element.value, reading.file, line, reading.rules, cell)


@dataclass
class PythonFindings:
    hits: list[Hit]
    # What os.environ is given, as one container's settings (None when nothing is).
    container: Container | None
    agnostic: int


def _findings(reading: _Reading, tree: ast.Module) -> PythonFindings:
    try:
        agnostic = _read(reading, tree)
    except RecursionError:  # an expression nested deeper than the interpreter recurses (generated code)
        return PythonFindings([unreadable(reading.file, 1, "nested too deeply to read")], None, 0)
    settings = reading.settings
    container = Container(f"{reading.file} (os.environ)", reading.file, 1, settings) if settings else None
    return PythonFindings(reading.hits, container, agnostic)


def _parse(source: str, file: str) -> ast.Module | Hit:
    """The module, or why it cannot be read (at its line)."""
    try:
        return ast.parse(source, filename=file)
    except SyntaxError as exc:
        return unreadable(file, exc.lineno or 1, f"not Python this parser reads: {exc.msg}")
    except (ValueError, RecursionError) as exc:  # a NUL byte; nesting too deep
        return unreadable(file, 1, f"not Python this parser reads: {exc}")


def read_module(source: str, file: str, rules: tuple[Rule, ...]) -> PythonFindings:
    """A .py file's findings (a file that does not parse: one unreadable finding)."""
    tree = _parse(source, file)
    if isinstance(tree, Hit):
        return PythonFindings([tree], None, 0)
    return _findings(_Reading(source, file, rules), tree)


def _cell_code(lines: list[str]) -> tuple[list[str] | None, list[tuple[int, str]]]:
    """A code cell's Python (its shell lines blanked, so lines keep their numbers; None for a cell of another
    language, %%bash, %%writefile of a file that is not Python) and its shell commands as (line, command): `!cmd`,
    `%pip`, IPython's automagic `pip install`, a continued `!cmd \\` whole."""
    magic = lines[0].split() if lines and lines[0].startswith("%%") else []
    if magic and magic[0] in _SHELL_CELLS:
        return None, [(at + 1, line) for at, line in packages.logical_lines("\n".join(lines[1:]))]
    if magic and magic[0] == "%%writefile" and not (len(magic) > 1 and magic[-1].endswith(".py")):
        return None, []
    code, shell, continued = [], [], False
    for at, line in enumerate(lines, 1):
        if continued or _MAGIC.match(line) or _AUTOMAGIC.match(line):
            if not continued:
                shell.append((at, line.strip().lstrip("%!")))
            else:
                shell[-1] = (shell[-1][0], shell[-1][1].rstrip("\\") + " " + line.strip())
            continued = line.rstrip().endswith("\\")
            code.append("")
        else:
            code.append(line)
    return code, shell


def read_notebook(text: str, file: str, rules: tuple[Rule, ...]) -> PythonFindings:
    """An .ipynb notebook cell by cell: a cell that does not parse is unreadable (the others are read, as one
    module: a later cell uses an earlier one's imports); `!pip install` and `%pip install` lines are judged."""
    try:
        notebook = json.loads(text)
        cells = notebook["cells"] if "cells" in notebook else notebook["worksheets"][0]["cells"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        return PythonFindings([unreadable(file, 1, f"not a notebook (nbformat JSON): {exc}")], None, 0)
    hits: list[Hit] = []
    joined: list[str] = []
    where: dict[int, tuple[int, int]] = {}
    for number, cell in enumerate(cells, 1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", cell.get("input", ""))  # nbformat 3 calls it input
        lines = ("".join(source) if isinstance(source, list) else str(source)).splitlines()
        code, shell = _cell_code(lines)
        for at, command in shell:
            hits += packages.command(command, file, at, rules, number)
        if code is None:
            continue
        parsed = _parse("\n".join(code), file)
        if isinstance(parsed, Hit):
            hits.append(unreadable(file, parsed.line, f"cell {number}: {parsed.match}", number))
            continue
        for at in range(1, len(code) + 1):
            where[len(joined) + at] = (number, at)
        joined += code
    source = "\n".join(joined)
    found = _findings(_Reading(source, file, rules, where), ast.parse(source))
    return PythonFindings(hits + found.hits, found.container, found.agnostic)
