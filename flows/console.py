"""Prefect's console handler for ferry's commands: every record on one line, tracebacks left to the run's logs.

`ferry` names it in PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS (Prefect's override of its logging.yml), so a
failed flow prints "Encountered exception during execution: GateFailed(...)" and not a stack. The API
handler is a different handler: the run's logs in the Prefect UI keep the full traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prefect.logging.handlers import PrefectConsoleHandler

from ferry.logs import record_event, write_json


def one_line(record: logging.LogRecord, format: Callable[[logging.LogRecord], str]) -> str:
    """record as format renders it without its traceback, its exception's one line after the message."""
    # A copy: other handlers of the same record (the API's) must still see the traceback.
    bare = logging.makeLogRecord(record.__dict__)
    bare.exc_info = bare.exc_text = bare.stack_info = None
    line = format(bare)
    exc = record.exc_info[1] if record.exc_info else None
    # Prefect's own messages already hold the exception's repr; a bare logger.exception("...") does not.
    if exc is not None and str(exc) not in line:
        line += f" ({type(exc).__name__}: {exc})"
    return line


class OneLineConsoleHandler(PrefectConsoleHandler):
    """PrefectConsoleHandler that prints a record's message and its exception's one line, never the traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(record, super().format)


class JsonConsoleHandler(PrefectConsoleHandler):
    """PrefectConsoleHandler for --log-format json: every record, Prefect's and ferry's, as one JSON object a line."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_json(self.stream, record_event(record))
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)
