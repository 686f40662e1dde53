"""Shared test fixtures: where the conformance corpus lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("LAKESHARE_CORPUS", REPO_ROOT.parent / "shared" / "corpus")).resolve()


def corpus_table(relative: str) -> Path:
    """The root of a corpus table, e.g. corpus_table('delta-rs/simple_table')."""
    path = CORPUS / relative
    if not path.exists():
        pytest.skip(f"corpus table {relative} not present at {CORPUS}")
    return path


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"corpus not present at {CORPUS}")
    return CORPUS
