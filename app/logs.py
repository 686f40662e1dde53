"""Structured logging: one JSON object per line on stderr, carrying the request id.

The request id lives in a context variable set by the request middleware, so every log line
emitted while serving a request (by any module, on the event loop or in the thread pool that
FastAPI copies the context into) is tagged with it without passing it around.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import math
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

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


# A record's own attributes come first in its __dict__, then those passed through `extra=`.
_FIRST_EXTRA = len(vars(logging.LogRecord("", 0, "", 0, "", None, None)))
_second: tuple[int, str] = (-1, "")  # the last second formatted, as "YYYY-MM-DDTHH:MM:SS"


def _timestamp(created: float) -> str:
    """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, with the
    date and time of day formatted once per second (two log lines per request)."""
    global _second
    fraction, whole = math.modf(created)
    micros = round(fraction * 1e6)  # datetime rounds to microseconds half-even, as round()
    if micros >= 1_000_000:
        whole += 1
        micros -= 1_000_000
    second, text = _second
    if second != int(whole):
        second = int(whole)
        text = datetime.fromtimestamp(second, UTC).isoformat()[:19]
        _second = (second, text)
    return f"{text}.{micros // 1000:03d}+00:00"


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
            "ts": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or request_id_var.get()
        if request_id:
            entry["request_id"] = request_id
        for key, value in itertools.islice(vars(record).items(), _FIRST_EXTRA, None):
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode("utf-8")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment a record is emitted.

    A handler that kept the stream it was built with would go on writing to it after it
    is replaced and closed (an in-process CLI call under a test's capture, a daemon's
    redirect), and every later record would end in "I/O operation on closed file".
    """

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        """StreamHandler's constructor assigns a stream; the current one is always used."""


def configure_logging(level: str = "INFO") -> None:
    """Route every logger (ours, uvicorn's, libraries') to one JSON handler on stderr."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_lakeshare", False):
            root.removeHandler(handler)
    handler = _StderrHandler()
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
