"""Grouping a per-row view's output rows by source-file key (pipeline.writer.key_runs):
the same groups, in the same order and with the same rows, as filtering the rows once per
distinct key, whether the keys come in runs (as a per-row query yields them) or not."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from pipeline.writer import key_runs


def _filtered(keys: pa.ChunkedArray, data: pa.Table) -> list[tuple[str, list[dict[str, int]]]]:
    return [(k, data.filter(pc.equal(keys, k)).to_pylist()) for k in pc.unique(keys).to_pylist()]


@pytest.mark.parametrize("seed", range(20))
def test_groups_equal_one_filter_per_key(seed: int) -> None:
    chooser = random.Random(seed)
    rows = chooser.randint(0, 60)
    if seed % 2:  # runs, as a per-row query keeps each source file's rows together
        keys = sorted(chooser.choice("abcd") for _ in range(rows))
    else:
        keys = [chooser.choice("abcd") for _ in range(rows)]
    split = chooser.randint(0, rows)
    chunked = pa.chunked_array(
        [pa.array(keys[:split], pa.string()), pa.array(keys[split:], pa.string())]
    )
    data = pa.table({"row": list(range(rows))})
    grouped = [(k, t.to_pylist()) for k, t in key_runs(chunked, data)]
    assert grouped == _filtered(chunked, data)
