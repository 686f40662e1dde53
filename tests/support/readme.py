"""The documentation's examples run as a reader runs them: the code block under a heading,
in a directory laid out like the repository root while `make run` serves the demo."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app import demo
from sharing.config import load_config
from tests.support import REPO_ROOT
from tests.support.server import run_server


def snippet(document: str, heading: str) -> str:
    """The first Python code block after `heading` in `document`, as a reader copies it."""
    text = (REPO_ROOT / document).read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no Python example under {heading!r} in {document}"
    return match.group(1)


@contextmanager
def demo_checkout(workdir: Path) -> Iterator[Path]:
    """A checkout-like directory holding `.lakeshare/demo/profile.share` of a running
    server that serves the demo (built under `workdir`)."""
    built = demo.prepare_demo(workdir / "demo")
    root = workdir / "checkout"
    root.mkdir()
    config = load_config(built, environ={})
    with run_server(config, root / ".lakeshare" / "demo"):
        yield root
