"""structlog set-up: human lines on a terminal, JSON for machines, on stderr.

Events go through the standard `logging` tree under the "ferry" logger, so an orchestrator that
collects that logger (Prefect, with PREFECT_LOGGING_EXTRA_LOGGERS=ferry) gets every line too.
"""

from __future__ import annotations

import logging
import sys

import structlog

_HANDLER_NAME = "ferry-stderr"


def configure(log_format: str = "console", level: str = "info", *, to_stderr: bool = True) -> None:
    """Render structlog events as console lines or JSON at level and above, via logging.

    to_stderr=False leaves the printing to an orchestrator's handlers (Prefect prints and
    ships the "ferry" logger's lines itself).
    """
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
