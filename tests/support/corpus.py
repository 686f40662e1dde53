"""Where the conformance corpus lives for tests: the copy the repository carries in
tests/data/corpus.tar.xz (extracted once into .cache/test-corpus/), or the directory named by
LAKESHARE_CORPUS (e.g. ../shared/corpus) when that is set.

The archive's origin and licences are in tests/data/NOTICE.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO_ROOT

ARCHIVE = REPO_ROOT / "tests" / "data" / "corpus.tar.xz"
CACHE = REPO_ROOT / ".cache" / "test-corpus"


def _extracted() -> Path:
    """The archive's corpus directory, extracted once per archive content; concurrent test
    processes extract into private folders and the first rename wins."""
    digest = hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()[:16]
    target = CACHE / digest
    if not (target / "corpus").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="extract-", dir=CACHE))
        with tarfile.open(ARCHIVE) as archive:
            archive.extractall(staging, filter="data")
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
    return target / "corpus"


def _locate() -> Path:
    override = os.environ.get("LAKESHARE_CORPUS")
    if override:
        return Path(override).resolve()
    return _extracted()


CORPUS = _locate()


def corpus_table(relative: str) -> Path:
    """The root of a corpus table, e.g. corpus_table('delta-rs/simple_table')."""
    path = CORPUS / relative
    if not path.exists():
        raise FileNotFoundError(f"corpus table {relative} not present at {CORPUS}")
    return path


def manifest() -> list[dict[str, Any]]:
    """The corpus's per-table manifest (origin, log analysis, what deltalake read)."""
    return json.loads((CORPUS / "manifest.json").read_text())


def copy_table(relative: str, dest: Path) -> Path:
    """A writable copy of a corpus table root."""
    target = dest / Path(relative).name
    shutil.copytree(corpus_table(relative), target)
    return target


@pytest.fixture(scope="session")
def corpus() -> Path:
    return CORPUS
