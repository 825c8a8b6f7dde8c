"""The console handler ferry gives Prefect: a record's message and its exception on one line, no traceback."""

from __future__ import annotations

import io
import logging

from flows.console import OneLineConsoleHandler


def test_console_line_keeps_the_cause_and_other_handlers_keep_the_traceback() -> None:
    console_out, other_out = io.StringIO(), io.StringIO()
    console = OneLineConsoleHandler(stream=console_out)
    console.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    other = logging.StreamHandler(other_out)
    logger = logging.getLogger("tests.flows.console")
    logger.propagate = False
    # The other handler formats first, as Prefect's API handler does: the copy must not reuse its traceback.
    for handler in (other, console):
        logger.addHandler(handler)
    try:
        try:
            raise ValueError("the cause")
        except ValueError as exc:
            logger.error("Encountered exception during execution: %r", exc, exc_info=True)
            logger.exception("a step failed")
    finally:
        for handler in (other, console):
            logger.removeHandler(handler)

    assert console_out.getvalue().splitlines() == [
        "ERROR Encountered exception during execution: ValueError('the cause')",
        "ERROR a step failed (ValueError: the cause)",
    ]
    assert other_out.getvalue().count("Traceback (most recent call last)") == 2
