"""The JSON log handler follows ``sys.stderr`` when it is replaced after start-up."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from app.logs import configure_logging


def test_records_go_to_the_current_stderr_after_the_old_one_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    try:
        configure_logging("INFO")
        logging.getLogger("lakeshare.test").info("one")
        assert orjson.loads(first.getvalue())["msg"] == "one"

        first.close()  # what a test capture or a redirect does to the stream it replaced
        second = io.StringIO()
        monkeypatch.setattr("sys.stderr", second)
        logging.getLogger("lakeshare.test").info("two")
        lines = second.getvalue().splitlines()
        assert [orjson.loads(line)["msg"] for line in lines] == ["two"]  # no logging error
    finally:
        for handler in list(root.handlers):
            if getattr(handler, "_lakeshare", False):
                root.removeHandler(handler)
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
