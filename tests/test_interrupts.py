"""ferry.interrupts without Prefect or a network: a held signal, the rollback's stop between items, failpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from ferry.errors import Interrupted
from ferry.interrupts import deferred, failpoint, one_by_one


def test_a_signal_inside_deferred_is_held_then_delivered_on_leaving() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), deferred() as held:
        signal.raise_signal(signal.SIGINT)
        assert held.is_set() and held.signum == signal.SIGINT
        done.append("the record")  # what the block had to finish, finished
    assert done == ["the record"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_while_one_is_held_stops_at_once() -> None:
    with pytest.raises(Interrupted) as stopped, deferred():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        pytest.fail("the second signal should have raised")
    assert stopped.value.signum == signal.SIGINT


def test_one_by_one_stops_between_items_and_takes_the_signal() -> None:
    undone = []
    with pytest.raises(Interrupted) as stopped, deferred() as held:
        for item in one_by_one(["a", "b", "c"], held):
            undone.append(item)
            if item == "a":
                signal.raise_signal(signal.SIGTERM)  # during the first item: it is finished, then it stops
    assert undone == ["a"] and stopped.value.signum == signal.SIGTERM
    # Taken there: leaving deferred() did not deliver it a second time (no TerminationSignal, no SIG_DFL exit).


def test_one_by_one_without_a_stop_event_is_the_items() -> None:
    assert list(one_by_one(iter("xyz"), None)) == ["x", "y", "z"]


def test_outside_the_main_thread_deferred_holds_nothing() -> None:
    seen = []

    def body() -> None:
        with deferred() as held:
            seen.append(held.is_set())

    worker = threading.Thread(target=body)
    worker.start()
    worker.join()
    assert seen == [False]


def test_a_failpoint_is_a_no_op_unless_armed(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    monkeypatch.delenv("FERRY_FAILPOINTS", raising=False)
    failpoint("gate")
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("FERRY_FAILPOINTS", "commit, gate")
    stop = threading.Event()
    stop.set()
    failpoint("gate", stop)  # armed: it says so, then waits for stop, which is set already
    failpoint("step")  # not named
    assert capfd.readouterr().err == "ferry failpoint: gate\n"


def test_an_armed_failpoint_says_so_and_waits_for_the_signal() -> None:
    code = "from ferry.interrupts import failpoint; failpoint('gate'); print('never')"
    env = {**os.environ, "FERRY_FAILPOINTS": "gate", "FERRY_FAILPOINT_WAIT_S": "60"}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr.readline() == b"ferry failpoint: gate\n"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    # An uncaught KeyboardInterrupt: Python ends the process by the signal itself.
    assert proc.returncode == -signal.SIGINT and b"KeyboardInterrupt" in err and out == b""


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred() as held:
            signal.raise_signal(signal.SIGINT)
            assert not held.is_set()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
