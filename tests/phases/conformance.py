"""The shared phase conformance suite: every real phase passes it, as every connector passes
tests/connectors/conformance.py.

A phase's test file defines its PhaseCase (how to write a plan for the phase into a folder, and observe(): everything
the phase may change, as one comparable value) and a `case` fixture, then runs every check with it:

    @pytest.mark.parametrize("check", checks())
    def test_conformance(case, check) -> None:
        check(case)

Each check is a plain function of the case, driving the phase through its contract alone (tests/phases/
test_contract.py proves the pipeline does no more): summary() does no I/O, a dry run changes nothing, a rerun with
nothing to do reports unchanged, a second rollback is a no-op, an interrupt mid-step keeps what was verified.
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import io
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import pytest

from connectors.registry import open_connector
from ferry import interrupts
from ferry.audit import AuditFolder
from ferry.errors import Interrupted, PermanentError, TransientError
from ferry.phases.base import Phase, Progress, Reporter, StepResult, open_phase
from ferry.plan import load_plan
from ferry.results import Status

Observation = dict[str, Any]


class PhaseCase(abc.ABC):
    """One phase set up against real local servers (or local folders) in a folder of its own."""

    # The phase's registered name.
    name: ClassVar[str]
    # Whether a run changes the target (go-live measures: it leaves nothing behind, and its changes() says what
    # it creates for a while, then removes).
    changes_target: ClassVar[bool] = True
    # Where the interrupt arrives, mid-step: a failpoint (ferry/interrupts.py), the window the CLI's interrupt tests
    # signal the installed ferry at; or one of HOOKS: when the step calls that hook of its reporter. Each case says
    # why it is that one.
    interrupt_at: ClassVar[str]

    def __init__(self, root: Path):
        self.root = root
        self.plan = self.write_plan(root)
        loaded = load_plan(self.plan)
        self.layout, self.plan_name = loaded.layout, loaded.plan.name

    @abc.abstractmethod
    def write_plan(self, root: Path) -> Path:
        """Write a plan for the phase (and what it reads, and what its target holds before a run) under root."""

    @abc.abstractmethod
    def target(self) -> Observation:
        """What the target holds that the phase may change: files and their bytes, tags and digests, objects."""

    def observe(self) -> Observation:
        """Everything the phase may change: the target, and what a phase publishes under the state directory."""
        published = (self.layout.bindings(self.plan_name), self.layout.digest_map(self.plan_name))
        files = {f"published {p.relative_to(self.layout.root)}": p.read_bytes() for p in published if p.exists()}
        return {**files, **self.target()}

    def after_rollback(self, before: Observation) -> Observation:
        """What observe() holds after the first run is rolled back, given what it held before: the same, where the
        phase's rollback restores exactly."""
        return before

    def phase(self) -> Phase:
        """The phase opened on the plan as a new process would: loaded afresh, nothing cached from an earlier call."""
        return open_phase(load_plan(self.plan), self.name)

    def audit(self, run: str) -> AuditFolder:
        return AuditFolder(self.layout.run(run))

    def run(self, run: str) -> list[StepResult]:
        """Every step of a run, through the contract, as the pipeline runs them (no Prefect)."""
        phase, audit = self.phase(), self.audit(run)
        phase.prepare()
        return [phase.run(step, audit, Reporter()) for step in phase.steps()]


def listed(url: str, name: str) -> Observation:
    """The objects a storage URL holds as its connector lists them, each with its bytes, keyed `<name> <key>` (a
    directory marker too; an unfinished upload is not an object)."""
    storage = open_connector(url, {})
    try:
        return {f"{name} {i.key}": storage.open_range(i.key, 0, i.size) for i in storage.list()}
    finally:
        storage.close()


def changed(before: Observation, after: Observation) -> dict[str, tuple[Any, Any]]:
    """Each key whose value differs between two observations: (before, after), None where absent."""
    keys = sorted(before.keys() | after.keys())
    return {k: (before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)}


class IOAttempted(Exception):
    """summary() tried I/O (raised in it, and recorded even if the phase swallows it)."""


@contextlib.contextmanager
def no_io() -> Iterator[list[str]]:
    """Sockets, subprocesses and file opening fail in this thread while inside; yields the attempts made."""
    attempts: list[str] = []
    here = threading.get_ident()

    def refusing(what: str, original: Callable) -> Callable:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != here:  # another test's server thread, say: not the call under test
                return original(*args, **kwargs)
            attempts.append(f"{what}{args[:2]!r}")
            raise IOAttempted(f"{what} called")

        return refuse

    patched = [
        (socket.socket, "connect"),
        (socket, "getaddrinfo"),
        (subprocess, "Popen"),
        (builtins, "open"),
        (os, "open"),
        (io, "open"),
    ]
    with contextlib.ExitStack() as stack:
        for owner, attribute in patched:
            what = f"{owner.__name__}.{attribute}"
            stack.enter_context(mock.patch.object(owner, attribute, refusing(what, getattr(owner, attribute))))
        yield attempts


def summary_does_no_io(case: PhaseCase) -> None:
    """summary() is for `ferry plan show`: from the plan alone, no socket, process or file opened."""
    phase = case.phase()  # loading the plan reads files: before the patches
    with no_io() as attempts:
        try:
            text = phase.summary()
        except IOAttempted:
            text = ""
    assert not attempts, f"summary() did I/O: {attempts}"
    assert isinstance(text, str) and text.strip()


def dry_run_changes_nothing(case: PhaseCase) -> None:
    """changes() (a dry run, for approvals) leaves the target as it found it, and says there is work before a run."""
    before = case.observe()
    said = case.phase().changes()
    assert not changed(before, case.observe()), f"the dry run changed: {changed(before, case.observe())}"
    assert said.text
    if case.changes_target:
        assert not said.empty, f"nothing to change before the first run? {said}"


def rerun_reports_unchanged(case: PhaseCase) -> None:
    """A run, then a run with nothing to do: every step of the second says changed=False and changes nothing."""
    first = case.run("r1")
    if case.changes_target:
        assert any(r.changed for r in first), f"the first run changed nothing: {first}"
    done = case.observe()
    second = case.run("r2")
    assert [r.changed for r in second] == [False] * len(second), f"the rerun says it changed something: {second}"
    assert not changed(done, case.observe()), f"the rerun changed: {changed(done, case.observe())}"


def rollback_twice_is_a_no_op(case: PhaseCase) -> None:
    """A run rolled back (the pre-run state back, where the phase can restore it), then again: nothing to undo."""
    before = case.observe()
    case.run("r1")
    first = case.phase().rollback(case.audit("r1"))
    assert first.failed == 0, first
    rolled = case.observe()
    expected = case.after_rollback(before)
    assert not changed(expected, rolled), f"the rollback left, against what it should: {changed(expected, rolled)}"
    second = case.phase().rollback(case.audit("r1"))
    assert second.text.startswith("nothing to undo"), second
    assert (second.items, second.failed) == ([], 0), second
    assert not changed(rolled, case.observe()), f"the second rollback changed: {changed(rolled, case.observe())}"


# The reporter's hooks a step calls, where an interrupt may arrive instead of at a failpoint.
HOOKS = ("progress", "markdown")


class ArrivesAtFailpoint(threading.Event):
    """A stop event set by the interrupt arriving while a step waits at the armed failpoint, as the CLI's interrupt
    tests signal ferry when the failpoint says so on stderr (there the signal handler sets the run's stop event)."""

    def wait(self, timeout: float | None = None) -> bool:
        if sys._getframe(1).f_code is interrupts.failpoint.__code__:
            self.set()
        return super().wait(timeout)


class Interrupting(Reporter):
    """The pipeline's reporter, as far as a step sees it, in a run interrupted at `at`: an armed failpoint (the
    interrupt arrives while the step waits there) or one of HOOKS (it arrives when the step calls it)."""

    def __init__(self, at: str):
        super().__init__(ArrivesAtFailpoint())
        self.at = at

    def markdown(self, key: str, text: str, description: str) -> None:
        if self.at == "markdown":
            self.stopping.set()

    def progress(self, key: str, description: str) -> Progress:
        if self.at == "progress":
            self.stopping.set()
        return Progress()

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """FERRY_FAILPOINTS naming the failpoint while inside (nothing, for a hook)."""
        with mock.patch.dict(os.environ, {} if self.at in HOOKS else {"FERRY_FAILPOINTS": self.at}):
            yield


def interrupt_keeps_what_was_verified(case: PhaseCase) -> None:
    """An interrupt mid-step: the step returns or raises one of ferry's errors; the next run completes, its gate
    does not fail, and what the interrupted run left on the target is still there."""
    before = case.observe()
    reporter = Interrupting(case.interrupt_at)
    with reporter.armed():
        phase, audit = case.phase(), case.audit("r1")
        for step in phase.steps():
            if reporter.stopping.is_set():
                break  # as the pipeline: no step starts after an interrupt
            try:
                phase.run(step, audit, reporter)
            except (Interrupted, TransientError, PermanentError):
                break
    assert reporter.stopping.is_set(), f"no step reached {case.interrupt_at}: the interrupt never arrived"
    interrupted = case.observe()
    case.run("r2")
    failed = [r for r in case.phase().gate(case.audit("r2")) if r.status == Status.FAIL]
    assert not failed, f"the run after the interrupted one fails its gate: {failed}"
    after = case.observe()
    left = changed(before, interrupted)
    lost = {k: (now, after.get(k)) for k, (_, now) in left.items() if after.get(k) != now}
    assert not lost, f"what the interrupted run left is gone or changed after the next run: {lost}"
    if not case.changes_target:
        assert not left, f"the interrupted run left: {left}"
        assert not changed(before, after), f"the run after it left: {changed(before, after)}"


CHECKS = [
    summary_does_no_io,
    dry_run_changes_nothing,
    rerun_reports_unchanged,
    rollback_twice_is_a_no_op,
    interrupt_keeps_what_was_verified,
]


def checks(xfail: dict[Callable[[PhaseCase], None], str] | None = None) -> list:
    """The checks as pytest parameters, each named; xfail: the checks a phase is known to fail, with the defect."""
    known = xfail or {}
    return [
        pytest.param(check, id=check.__name__, marks=[pytest.mark.xfail(strict=True, reason=known[check])])
        if check in known
        else pytest.param(check, id=check.__name__)
        for check in CHECKS
    ]
