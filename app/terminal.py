"""What the CLI prints to a terminal: text from the store or from requests made safe to show,
and a reader that goes away early (`lakeshare audit | head`) ending the command quietly."""

from __future__ import annotations

import os
import select
import sys

__all__ = ["printable", "stdout_gone"]

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with every control or format character (newline, ESC, bidi overrides, ...)
    and the backslash written as a backslash escape, so that a value from a request cannot
    forge a line or drive the terminal: `\\n`, `\\x1b`, `\\u202e`, `\\\\`."""
    if text.isprintable() and "\\" not in text:
        return text  # the common case, without a per-character loop
    return "".join(_escaped(char) for char in text)


def _escaped(char: str) -> str:
    known = _ESCAPES.get(char)
    if known is not None:
        return known
    if char.isprintable():  # false for categories C* and Z* other than the space
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (after a
    BrokenPipeError: was it ours?). If so it is pointed at /dev/null, so that the flush at
    exit does not fail again."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR is always reported
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone
