"""structlog set-up: human lines on a terminal, JSON for machines, on stderr.

Events go through the standard `logging` tree under the "ferry" logger, so an orchestrator that
collects that logger (Prefect, with PREFECT_LOGGING_EXTRA_LOGGERS=ferry) gets every line too.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

import structlog

_HANDLER_NAME = "ferry-stderr"
# The format the command chose; the entry point writes its own last line in it too.
_chosen = {"format": "console"}


def json_output() -> bool:
    """True when the command's stderr is JSON lines (--log-format json)."""
    return _chosen["format"] == "json"


def record_event(record: logging.LogRecord) -> dict[str, Any]:
    """A log record as one JSON-able event: ferry's structlog events as they are, anyone else's as a message."""
    message = record.getMessage()
    event: Any = None
    if record.name.startswith("ferry") and message.startswith("{"):
        with contextlib.suppress(ValueError):
            event = json.loads(message)
    if not isinstance(event, dict):
        event = {"event": message}
    event.setdefault("level", record.levelname.lower())
    event.setdefault("logger", record.name)
    event.setdefault("timestamp", datetime.fromtimestamp(record.created, UTC).isoformat())
    for name in ("flow_run_name", "task_run_name"):
        if getattr(record, name, None):
            event[name] = getattr(record, name)
    if record.exc_info and record.exc_info[1] is not None:
        event["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
    return event


def write_json(stream: TextIO, event: dict[str, Any]) -> None:
    """One event as one line of JSON on stream."""
    stream.write(json.dumps(event, default=str, ensure_ascii=False) + "\n")
    stream.flush()


def configure(log_format: str = "console", level: str = "info", *, to_stderr: bool = True) -> None:
    """Render structlog events as console lines or JSON at level and above, via logging.

    to_stderr=False leaves the printing to an orchestrator's handlers (Prefect prints and
    ships the "ferry" logger's lines itself).
    """
    _chosen["format"] = log_format
    if log_format == "json":
        # Python's warnings are log lines too, not raw text between the JSON ones.
        logging.captureWarnings(True)
        warnings_logger = logging.getLogger("py.warnings")
        if not any(h.get_name() == _HANDLER_NAME for h in warnings_logger.handlers):
            warnings_logger.addHandler(_JsonLines(sys.stderr))
            warnings_logger.propagate = False
    renderer = (
        structlog.processors.JSONRenderer()
        if log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric = logging.getLevelName(level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    logger = logging.getLogger("ferry")
    logger.setLevel(numeric)
    if to_stderr and not any(h.get_name() == _HANDLER_NAME for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)


class _JsonLines(logging.StreamHandler):
    """Each record as one JSON object per line."""

    def __init__(self, stream: TextIO):
        super().__init__(stream)
        self.set_name(_HANDLER_NAME)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            write_json(self.stream, record_event(record))
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)
