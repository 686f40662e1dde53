"""What nullCount and numRecords say about nulls in a file, against a per-file oracle:
the shortcut for columns without nulls and the general rule give the same masks."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from sharing.skipping.bounds import Mask, null_masks
from sharing.skipping.stats import ColumnStats

COUNTS = st.one_of(st.none(), st.integers(min_value=-1, max_value=3))


def _oracle(nc: int | None, nr: int | None) -> tuple[bool, bool]:
    """(may hold a null, may hold a non-null value): nullCount means something only when
    it is 0 or numRecords; a file without rows holds neither."""
    no_rows = nr == 0
    no_null = nc == 0 or no_rows
    all_null = (nc is not None and nc == nr) or no_rows
    return not no_null, not all_null


def _expand(mask: Mask, n: int) -> list[bool]:
    return [mask] * n if isinstance(mask, bool) else mask.to_pylist()


@settings(deadline=None)  # the first example pays Arrow's lazy imports
@given(st.lists(st.tuples(COUNTS, COUNTS), min_size=1, max_size=30))
def test_null_masks_match_the_oracle(rows: list[tuple[int | None, int | None]]) -> None:
    nc = pa.array([r[0] for r in rows], pa.int64())
    nr = pa.array([r[1] for r in rows], pa.int64())
    stats = ColumnStats(pa.nulls(len(rows), pa.int64()), pa.nulls(len(rows), pa.int64()), nc)
    has_null, has_value = null_masks(stats, nr)
    expected = [_oracle(a, b) for a, b in rows]
    assert _expand(has_null, len(rows)) == [e[0] for e in expected]
    assert _expand(has_value, len(rows)) == [e[1] for e in expected]


def test_a_column_without_nulls_is_settled_without_per_file_masks() -> None:
    nc = pa.array([0, 0, None, 0], pa.int64())
    nr = pa.array([5, None, 3, 1], pa.int64())
    stats = ColumnStats(nc, nc, nc)
    has_null, has_value = null_masks(stats, nr)
    assert has_value is True
    assert not isinstance(has_null, bool) and has_null.to_pylist() == [False, False, True, False]
    has_null, has_value = null_masks(ColumnStats(nc, nc, pa.array([0, 0], pa.int64())), nr[:2])
    assert (has_null, has_value) == (False, True)
