"""Structured logging: one JSON object per line on stderr, carrying the request id.

The request id lives in a context variable set by the request middleware, so every log line
emitted while serving a request (by any module, on the event loop or in the thread pool that
FastAPI copies the context into) is tagged with it without passing it around.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["JsonFormatter", "configure_logging", "current_request_id", "request_id_var"]

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lakeshare_request_id", default=None
)

# Attributes every LogRecord has; anything else was passed through `extra=` and is emitted.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "color_message"}  # uvicorn's ANSI-coloured duplicate
)


_URL_LOGGING_LIBRARIES = (
    "httpx",
    "httpcore",
    "urllib3",
    "botocore",
    "boto3",
    "s3transfer",
    "azure",
    "google.auth",
    "google.cloud",
)


def current_request_id() -> str | None:
    return request_id_var.get()


class JsonFormatter(logging.Formatter):
    """Formats a record as compact JSON: time, level, logger, message, request id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode("utf-8")


def configure_logging(level: str = "INFO") -> None:
    """Route every logger (ours, uvicorn's, libraries') to one JSON handler on stderr."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_lakeshare", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler._lakeshare = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The JSON lines never name the source line, thread or process of a call, so records
    # need not look them up: the logging HOWTO's "Optimization" switches. Finding the
    # caller alone walks the stack for every line (two lines per request: access, audit).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # uvicorn's own access log prints query strings (signatures); ours replaces it.
    logging.getLogger("uvicorn.access").disabled = True
    # HTTP and cloud SDK clients print full URLs (pre-signed ones included) and request
    # headers below WARNING: never let them reach the log.
    for name in _URL_LOGGING_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    for name in ("uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
