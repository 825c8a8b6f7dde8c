"""Rebase a Dockerfile onto the target's base images, changing only the bytes it must.

BuildKit's own parser (`dockerfile`) finds the structure (instructions and their line spans, heredocs,
continuations, directives); the edits are made to the original text inside those spans, so comments,
blank lines, heredoc bodies, a BOM and CRLF endings come out byte for byte as they went in.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import dockerfile

from ferry.errors import UsageError
from ferry.images.reference import find_rule, normalise, repository
from ferry.plan import BaseImageRule

# What a FROM names: a rebased image, an earlier stage, scratch, an image already the target's, or an
# image no rule maps (also when an ARG it needs has no default: it cannot be resolved before the build).
BaseKind = Literal["rebased", "stage", "scratch", "target", "unmapped"]
_VAR = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-+?])(?P<word>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>\{[^}]*\}?))"
)
_ONE_VAR = re.compile(r"^\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))$")


class RebaseError(UsageError):
    """The Dockerfile cannot be read or parsed, or an edit cannot be placed in it (one line: file:line: problem)."""


def expand(text: str, args: dict[str, str | None]) -> str | None:
    """text with $NAME, ${NAME} and ${NAME[:]-word}, ${NAME[:]+word}, ${NAME[:]?word} expanded from args.

    None when the text cannot be known before the build: a name without a value, or a form not evaluated here
    (`${NAME#pattern}`, `${NAME/from/to}`...).
    """
    unresolved = False

    def value(m: re.Match[str]) -> str:
        nonlocal unresolved
        if m.group("other") is not None:
            unresolved = True
            return ""
        current = args.get(m.group("braced") or m.group("bare"))
        op = m.group("op") or ""
        # As in the shell: with the colon an empty value counts as unset.
        is_set = current is not None and (current != "" or not op.startswith(":"))
        if op.endswith("-"):
            return current if is_set else m.group("word")
        if op.endswith("+"):
            return m.group("word") if is_set else ""
        if current is None or (op and not is_set):
            unresolved = True
            return ""
        return current

    expanded = _VAR.sub(value, text)
    return None if unresolved else expanded


@dataclass(frozen=True)
class Base:
    """One FROM of the file: what it names (as written and expanded) and what the rebase made of it."""

    line: int
    written: str
    # With ARG defaults expanded; None when an ARG it uses has no default.
    image: str | None
    kind: BaseKind
    # The rebased image (kind "rebased").
    to: str | None = None
    # Whether the build's target (else the last stage) needs this stage, through FROM, COPY --from or a mount.
    used: bool = True


@dataclass
class Rebased:
    """A Dockerfile's rebase: the new text (the old one when nothing matched) and what each FROM became."""

    name: str
    original: str
    text: str
    bases: list[Base] = field(default_factory=list)
    # The image the final stage (the build's target, else the last) starts from, after the rebase (None: scratch,
    # or no FROM at all).
    final_base: str | None = None
    # Why the SDK steps were not added to a rebased file (its final stage starts from scratch), else None.
    sdk_skipped: str | None = None
    # Images named outside a FROM (`COPY --from=`, `RUN --mount=from=`), left as written: (line, how, image, the
    # `to` of the rule that matches it or None), for a person to decide.
    elsewhere: list[tuple[int, str, str, str | None]] = field(default_factory=list)

    @property
    def rebased(self) -> bool:
        return any(b.kind == "rebased" for b in self.bases)

    @property
    def unmapped(self) -> list[Base]:
        """The unmapped bases of the stages the build uses (a stage it never builds is no base of the image)."""
        return [b for b in self.bases if b.kind == "unmapped" and b.used]

    def diff(self) -> str:
        """The unified diff from the original to the rebased text (as `patch` and `git apply` read it)."""
        diff = difflib.unified_diff(_lines(self.original), _lines(self.text), f"a/{self.name}", f"b/{self.name}")
        # difflib leaves a last line without its newline as it is, which runs it into the next diff line.
        return "".join(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in diff)

    def write(self, folder: Path, name: str) -> tuple[Path, Path]:
        """Write the rebased text to folder/name and its diff to folder/name.diff, byte for byte; both paths."""
        file, diff = folder / name, folder / f"{name}.diff"
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(self.text.encode("utf-8"))
            diff.write_bytes(self.diff().encode("utf-8"))
        except OSError as exc:
            raise RebaseError(f"{exc.filename}: cannot write: {exc.strerror}") from None
        return file, diff

    def report(self) -> list[str]:
        """One line per FROM that was rebased or is unmapped, and why the SDK was left out, if it was."""
        lines = [
            f"line {b.line}: {b.image} -> {b.to}"
            if b.kind == "rebased"
            else f"line {b.line}: {b.image}: no rule maps it{'' if b.used else ' (a stage this build does not use)'}"
            if b.image
            else f"line {b.line}: {b.written}: cannot be known before the build (an ARG without a default?)"
            for b in self.bases
            if b.kind in ("rebased", "unmapped")
        ]
        lines += [
            f"line {line}: {how}{image}: an image outside a FROM, left as it is"
            + (f" (a rule maps it to {to})" if to else "")
            for line, how, image, to in self.elsewhere
        ]
        return lines + ([f"no SDK step: {self.sdk_skipped}"] if self.sdk_skipped else [])


def read_dockerfile(path: Path) -> str:
    """The text of a Dockerfile exactly as stored (a BOM and CRLF kept), or RebaseError naming the file."""
    try:
        data = path.read_bytes()
        return data.decode("utf-8")
    except OSError as exc:
        raise RebaseError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        # PowerShell's `>` writes UTF-16 with a BOM; BuildKit reads UTF-8 only.
        utf16 = " (UTF-16: save it as UTF-8)" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise RebaseError(f"{path}: not UTF-8 text (at byte offset {exc.start}){utf16}") from None


def _lines(text: str) -> list[str]:
    # BuildKit numbers lines by "\n" alone (a "\r" stays with its line), unlike str.splitlines.
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def _replace_in_span(
    name: str, lines: list[str], start: int, end: int, skip: Sequence[str], old: str, new: str, *, word: bool = False
) -> None:
    """Replace the first `old` after the keyword and the strings in skip, within lines start..end (1-based).

    word: `old` must not follow a name character (`BASE=` is not found inside `CUDA_BASE=`).
    """
    span = "".join(lines[start - 1 : end])
    keyword = re.match(r"\ufeff?\s*\S+", span)
    pos = keyword.end() if keyword else 0
    for token in skip:
        found = _search(re.compile(re.escape(token)), span, pos)
        pos = found.end() if found else pos
    found_old = _search(re.compile(("(?<![A-Za-z0-9_])" if word else "") + re.escape(old)), span, pos)
    if found_old is None:
        raise RebaseError(f"{name}:{start}: cannot place the rewrite of {old!r} (split across lines?)")
    # The replacement holds no line break, so the span keeps its lines and later spans their numbers.
    lines[start - 1 : end] = _lines(span[: found_old.start()] + new + span[found_old.end() :])


def platform_args(platform: str) -> dict[str, str]:
    """The ARGs BuildKit defines for FROM lines when building for platform (os/arch[/variant]) on that platform."""
    os_name, _, rest = platform.partition("/")
    arch, _, variant = rest.partition("/")
    values = {"PLATFORM": platform, "OS": os_name, "ARCH": arch, "VARIANT": variant}
    # BUILD*: the builds here run on the platform they build for (no emulation).
    return {f"{side}{key}": value for side in ("TARGET", "BUILD") for key, value in values.items()}


def _search(pattern: re.Pattern[str], span: str, pos: int) -> re.Match[str] | None:
    """The first match of pattern in span from pos that is not on a comment line inside the continued instruction."""
    for found in pattern.finditer(span, pos):
        line_start = span.rfind("\n", 0, found.start()) + 1
        # BuildKit drops comment lines inside a continuation: `# nvcr.io/...` there is not the image.
        if line_start == 0 or not span[line_start : found.start()].lstrip().startswith("#"):
            return found
    return None


def _keyword(cmd: dockerfile.Command) -> str:
    """cmd's instruction, upper-cased ("" for the empty node the parser gives a line holding only an escape)."""
    return (cmd.cmd or "").upper()


def _squeeze(instruction: str) -> str:
    """instruction with its keyword upper-cased and its whitespace runs made one space, for comparing steps."""
    keyword, _, rest = instruction.strip().partition(" ")
    return " ".join([keyword.upper(), *rest.split()])


def rebase(
    text: str,
    rules: Sequence[BaseImageRule],
    sdk_steps: Sequence[str] = (),
    *,
    name: str = "Dockerfile",
    target_repositories: Sequence[str] = (),
    build_args: dict[str, str] | None = None,
    target: str | None = None,
    platform: str | None = None,
) -> Rebased:
    """Rebase text: FROM images (and ARG defaults naming them) matching a rule move to its `to`; SDK steps added.

    target_repositories: repositories (or registry prefixes) that are already the target's, so not unmapped
    (the rules' own `to` images always are).
    build_args: values that override ARG defaults when matching (the build passes them).
    target: the stage the build stops at (`--target`), which gets the SDK steps; default: the last stage.
    platform: the one platform built for (os/arch[/variant]): BuildKit's TARGETARCH... for FROM lines.
    """
    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise RebaseError(f"{name}: not a Dockerfile BuildKit can parse: {exc}") from None
    except UnicodeDecodeError:  # the parser's bindings cut some non-ASCII flags mid-character (`COPY --\u0800from=`)
        at = next((i for i, line in enumerate(_lines(text), 1) if re.search(r"--\S*[^\x00-\x7f]", line)), None)
        where = f"{name}:{at}" if at else name
        raise RebaseError(f"{where}: a flag holds a non-ASCII character: not a Dockerfile ferry can parse") from None
    lines = _lines(text)
    overrides = build_args or {}
    automatic = platform_args(platform) if platform else {}
    args: dict[str, str | None] = dict(automatic)
    arg_at: dict[str, tuple[dockerfile.Command, str]] = {}
    # Stage name -> the image its chain of stages starts from (as the build sees it), None for scratch.
    roots: dict[str, str | None] = {}
    # Each FROM, its stage name, and the image it names once rebased (as the parser will read it back).
    froms: list[tuple[dockerfile.Command, Base, str | None, str]] = []
    arg_edits: dict[str, str] = {}
    elsewhere: list[tuple[int, str, str, str | None]] = []
    # Stage name -> its index; for each stage, the earlier stages it reads.
    stage_at: dict[str, int] = {}
    needs: list[set[int]] = []
    targets = [repository(r) for r in [*(rule.to for rule in rules), *target_repositories]]
    for cmd in commands:
        keyword = _keyword(cmd)
        if keyword == "ARG" and not froms:
            # Only ARGs before the first FROM are in scope for FROM lines; a default may use the ARGs before it.
            for item in cmd.value:
                key, eq, default = item.partition("=")
                args[key] = overrides.get(key, expand(_unquote(default), args) if eq else automatic.get(key))
                arg_at[key] = (cmd, default)
            continue
        if keyword != "FROM":
            for how, ref in _reads_from(cmd):
                if needs and (ref.lower() in stage_at or ref.isdigit()):
                    needs[-1].add(stage_at[ref.lower()] if ref.lower() in stage_at else int(ref))
                elif "$" not in ref:  # a reference built from ARGs is not known here
                    rule = find_rule(ref, rules)
                    elsewhere.append((cmd.start_line, how, ref, rule.to if rule else None))
            continue
        if not (len(cmd.value) == 1 and cmd.value[0] or len(cmd.value) == 3 and cmd.value[1].lower() == "as"):
            # As BuildKit's build would say it (a template's `FROM {{ base }}` reads as three words, for example).
            raise RebaseError(f"{name}:{cmd.start_line}: FROM takes an image, then optionally AS and a stage name")
        written = new = cmd.value[0]
        alias = cmd.value[2].lower() if len(cmd.value) == 3 else None
        image = expand(written, args)
        to: str | None = None
        root = image or written
        if image is not None and image.lower() in roots:
            kind: BaseKind = "stage"
            root = roots[image.lower()]
        elif image is not None and image.lower() == "scratch":
            kind, root = "scratch", None
        elif image is None:
            kind = "unmapped"
        elif any(repository(image) == t or normalise(image).startswith(t + "/") for t in targets):
            # Before the rules: a broad rule (`*/pytorch*`) may match its own `to`, which is already the target's.
            kind = "target"
        elif (rule := find_rule(image, rules)) is not None:
            kind, to = "rebased", rule.to
            root = rule.to
            var = _ONE_VAR.match(written)
            var_name = (var.group("braced") or var.group("bare")) if var else None
            if var_name and args.get(var_name) and var_name not in overrides:
                arg_edits[var_name] = rule.to
            else:
                new = rule.to
        else:
            kind = "unmapped" if rules else "target"
        froms.append((cmd, Base(cmd.start_line, written, image, kind, to), alias, new))
        needs.append({stage_at[image.lower()]} if kind == "stage" and image else set())
        if alias:
            roots[alias] = root
            stage_at[alias] = len(froms) - 1
    if target is not None and target.lower() not in roots:
        raise RebaseError(f"{name}: no stage is named {target!r} (the build's target)")
    # The stage the build ends with (the target's, else the last) gets the SDK steps.
    last = max((i for i, f in enumerate(froms) if target is None or f[2] == target.lower()), default=None)
    final_base = roots[target.lower()] if target is not None else root if froms else None
    used, todo = set(), [] if last is None else [last]
    while todo:
        if (i := todo.pop()) not in used and i < len(froms):
            used.add(i)
            todo += needs[i]
    bases = [replace(f[1], used=i in used) for i, f in enumerate(froms)]
    result = Rebased(name, text, text, bases, final_base, elsewhere=elsewhere)
    if not result.rebased or last is None:
        return result
    for var_name, to in arg_edits.items():
        cmd, default = arg_at[var_name]
        old, new = f"{var_name}={default}", f"{var_name}={_requote(default, to)}"
        _replace_in_span(name, lines, cmd.start_line, cmd.end_line, (), old, new, word=True)
    for cmd, base, _alias, new in froms:
        if new != base.written:
            _replace_in_span(name, lines, cmd.start_line, cmd.end_line, cmd.flags, base.written, new)
    final_cmd, final = froms[last][0], froms[last][1]
    stage_end = froms[last + 1][0].start_line if last + 1 < len(froms) else len(lines) + 1
    # A step the stage already runs is not added twice.
    present = {_squeeze(c.original or "") for c in commands if final_cmd.start_line < c.start_line < stage_end}
    steps = [step for step in sdk_steps if _squeeze(step) not in present]
    if result.final_base is None:
        result.sdk_skipped = f"line {final.line}: the final stage starts from scratch"
        steps = []
    elif steps:
        at = final_cmd.end_line - 1
        # The FROM line's own ending (a file may mix them), or the first line's when the FROM ends the file.
        ending = lines[at] if lines[at].endswith("\n") else lines[0]
        eol = "\r\n" if ending.endswith("\r\n") else "\n"
        if not lines[at].endswith("\n"):
            lines[at] += eol
        lines[at] += "".join(step + eol for step in steps)
    result.text = "".join(lines)
    _verify(result, commands, [f[3] for f in froms], final_cmd, steps)
    return result


def _reads_from(cmd: dockerfile.Command) -> list[tuple[str, str]]:
    """What cmd reads from (a stage by name or index, or an image): (how, reference) of `--from=`, `--mount=from=`."""
    found = []
    for flag in cmd.flags:
        name, _, value = flag.partition("=")
        if name.lower() == "--from":
            found.append((f"{_keyword(cmd)} --from=", value))
        elif name.lower() == "--mount":
            fields = dict(item.partition("=")[::2] for item in value.split(","))
            if fields.get("from"):
                found.append(("RUN --mount=from=", fields["from"]))
    return found


def _verify(
    result: Rebased,
    before: Sequence[dockerfile.Command],
    images: list[str],
    after_this: dockerfile.Command,
    steps: Sequence[str],
) -> None:
    """Parse the rebased text again: the same instructions, each FROM naming its new image, each step on its own.

    A line continuation at the very end of a file would swallow an added step, for example: that is refused
    here rather than handed to a build.
    """
    at = before.index(after_this) + 1
    keywords = [_keyword(c) for c in before]
    expected = keywords[:at] + [step.split(maxsplit=1)[0].upper() for step in steps] + keywords[at:]
    try:
        after = dockerfile.parse_string(result.text)
    except (dockerfile.GoParseError, UnicodeDecodeError) as exc:  # a profile's step that is not a whole instruction
        raise RebaseError(f"{result.name}: the rebased file does not parse: {exc} (the profile's sdk_steps?)") from None
    if [_keyword(c) for c in after] != expected or [c.value[0] for c in after if _keyword(c) == "FROM"] != images:
        raise RebaseError(
            f"{result.name}:{after_this.start_line}: the rebased file would not read as the original with its edits "
            "(a line continuation at the end of the file, for example)"
        )


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _requote(written: str, new: str) -> str:
    """new, in the quotes written had (if any)."""
    return f"{written[0]}{new}{written[0]}" if _unquote(written) != written else new
