"""Commit timestamps, timestamp parsing and version-by-timestamp lookups."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from deltalog.errors import CorruptLogError, TimestampOutOfRangeError, VersionNotFoundError
from deltalog.history import (
    commit_timestamp,
    commit_timestamps,
    format_instant,
    parse_timestamp,
    version_at_or_after,
    version_at_or_before,
)
from deltalog.table import DeltaTable
from tests.support.corpus import corpus_table
from tests.support.handlog import commit_info, metadata, protocol, set_mtime, write_commit

# --------------------------------------------------------------------------------------
# parse_timestamp


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2022-11-13T08:10:41Z", 1668327041000),
        ("2022-11-13T08:10:41z", 1668327041000),
        ("2022-11-13t08:10:41Z", 1668327041000),
        ("2022-11-13T08:10:41.5Z", 1668327041500),
        ("2022-11-13T08:10:41.123456789Z", 1668327041123),
        ("2022-11-13T09:10:41+01:00", 1668327041000),
        ("2022-11-13T03:10:41-05:00", 1668327041000),
        ("2022-11-13T08:10:41+00:00:00", 1668327041000),
        ("2022-11-13T08:10Z", 1668327000000),
        ("2000-01-01T00:00:00Z", 946684800000),
        ("1969-12-31T23:59:59Z", -1000),
        ("2022-11-13 08:10:41", 1668327041000),
        ("2022-11-13 08:10:41.25", 1668327041250),
        ("2022-1-3 8:10:41", 1641197441000),
        (" 2022-11-13 08:10:41 ", 1668327041000),
    ],
)
def test_parse_timestamp_accepts_iso_and_java_sql_forms(text: str, expected: int) -> None:
    assert parse_timestamp(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("abc", "Text 'abc' could not be parsed at index 0"),
        ("", "Text '' could not be parsed at index 0"),
        ("2021-01-01", "Text '2021-01-01' could not be parsed at index 10"),
        ("2022-11-13T08:10:41", "Text '2022-11-13T08:10:41' could not be parsed at index 19"),
        ("2022-1-13T00:00:00Z", "could not be parsed at index 5"),
        ("2022-11-13T08:10:41Zx", "unparsed text found at index 20"),
        ("2022-13-01T00:00:00Z", "Invalid value for MonthOfYear (valid values 1 - 12): 13"),
        ("2022-02-30T00:00:00Z", "Invalid date 'FEBRUARY 30'"),
        ("2023-02-29T00:00:00Z", "Invalid date 'February 29' as '2023' is not a leap year"),
        ("2022-11-13T24:00:00Z", "Invalid value for HourOfDay (valid values 0 - 23): 24"),
        ("2022-11-13T08:10:41+19:00", "Zone offset hours not in valid range"),
        ("2022-11-13 08:10:41.", "could not be parsed at index 10"),
        ("2022-11-13 25:10:41", "could not be parsed at index 10"),
        ("２０２２-11-13T08:10:41Z", "could not be parsed at index 0"),
    ],
)
def test_parse_timestamp_rejects_with_java_like_messages(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_timestamp(text)
    assert message in str(info.value)


def test_format_instant_matches_java_instant_text() -> None:
    assert format_instant(1668327041000) == "2022-11-13T08:10:41Z"
    assert format_instant(1668327041120) == "2022-11-13T08:10:41.120Z"
    assert format_instant(10**17) == f"{10**17} ms"


# --------------------------------------------------------------------------------------
# A hand-written log with chosen modification times


def _table(root: Path, mtimes: list[int], configuration: dict[str, str] | None = None) -> Path:
    for version, mtime in enumerate(mtimes):
        actions = [commit_info()]
        if version == 0:
            actions += [protocol(), metadata(configuration)]
        write_commit(root, version, actions, mtime)
    return root


@pytest.fixture
def timed(tmp_path: Path) -> DeltaTable:
    """Versions 0..3 committed at 10 s, 20 s, 30 s, 40 s."""
    _table(tmp_path, [10_000, 20_000, 30_000, 40_000])
    return DeltaTable(str(tmp_path))


def test_commit_timestamps_are_file_times(timed: DeltaTable) -> None:
    assert [commit_timestamp(timed, v) for v in range(4)] == [10_000, 20_000, 30_000, 40_000]
    with pytest.raises(VersionNotFoundError):
        commit_timestamp(timed, 4)


@pytest.mark.parametrize(
    ("ts", "expected"),
    [(10_000, 0), (10_001, 0), (19_999, 0), (20_000, 1), (29_999, 1), (30_000, 2), (40_000, 3)],
)
def test_version_at_or_before(timed: DeltaTable, ts: int, expected: int) -> None:
    assert version_at_or_before(timed, ts) == expected


@pytest.mark.parametrize(
    ("ts", "expected"),
    [(0, 0), (9_999, 0), (10_000, 0), (10_001, 1), (20_000, 1), (30_001, 3), (40_000, 3)],
)
def test_version_at_or_after(timed: DeltaTable, ts: int, expected: int) -> None:
    assert version_at_or_after(timed, ts) == expected


def test_before_first_commit(timed: DeltaTable) -> None:
    with pytest.raises(TimestampOutOfRangeError) as info:
        version_at_or_before(timed, 9_999)
    assert info.value.before_first
    message = str(info.value)
    assert (
        "9999 ms (1970-01-01T00:00:09.999Z) is before the earliest available version 0" in message
    )
    assert "greater than or equal to 10000 ms (1970-01-01T00:00:10Z)" in message
    with pytest.raises(TimestampOutOfRangeError) as info:
        version_at_or_after(timed, 9_999, before_first_is_error=True)
    assert info.value.before_first


def test_after_last_commit(timed: DeltaTable) -> None:
    for lookup in (version_at_or_before, version_at_or_after):
        with pytest.raises(TimestampOutOfRangeError) as info:
            lookup(timed, 40_001)
        assert not info.value.before_first
        message = str(info.value)
        assert (
            "40001 ms (1970-01-01T00:00:40.001Z) is after the latest available version 3" in message
        )
        assert "less than or equal to 40000 ms" in message


def test_latest_caps_the_search(timed: DeltaTable) -> None:
    assert version_at_or_before(timed, 25_000, latest=2) == 1
    assert version_at_or_after(timed, 25_000, latest=2) == 2
    with pytest.raises(TimestampOutOfRangeError, match="latest available version 1"):
        version_at_or_before(timed, 25_000, latest=1)


def test_file_times_are_monotonised(tmp_path: Path) -> None:
    """Each commit is at least 1 ms after the one before, as the reference makes them."""
    table = DeltaTable(str(_table(tmp_path, [5_000, 3_000, 3_000, 7_000, 7_000])))
    assert commit_timestamps(table, 0, 4) == [5_000, 5_001, 5_002, 7_000, 7_001]
    assert commit_timestamps(table, 2, 3) == [5_002, 7_000]
    assert version_at_or_before(table, 5_001) == 1
    assert version_at_or_after(table, 5_001) == 1
    assert version_at_or_after(table, 5_003) == 3


def test_new_commits_extend_the_cached_timeline(timed: DeltaTable, tmp_path: Path) -> None:
    assert commit_timestamp(timed, 3) == 40_000
    write_commit(tmp_path, 4, [commit_info()], 35_000)
    write_commit(tmp_path, 5, [commit_info()], 50_000)
    assert commit_timestamp(timed, 4) == 40_001
    assert version_at_or_before(timed, 50_000) == 5
    assert version_at_or_before(timed, 49_999) == 4


def test_a_replaced_log_is_reread(timed: DeltaTable, tmp_path: Path) -> None:
    """A search without `latest` lists the log, and sees the last commit rewritten."""
    assert commit_timestamp(timed, 3) == 40_000
    for version in range(4):
        set_mtime(tmp_path / "_delta_log" / f"{version:020d}.json", 100_000 + version)
    assert version_at_or_before(timed, 100_001) == 1
    assert commit_timestamp(timed, 0) == 100_000


def test_each_table_keeps_its_own_timeline(timed: DeltaTable, tmp_path: Path) -> None:
    """The timeline lives on the table (and goes with it), not in a process-wide cache
    keyed by the storage's repr, which two tables with different credentials may share."""
    from deltalog.history import timeline

    assert timeline(timed) is timed.commit_timeline and timed.commit_timeline.built
    other = DeltaTable(str(tmp_path))
    assert other.commit_timeline is not timed.commit_timeline
    assert not other.commit_timeline.built
    assert commit_timestamp(other, 2) == commit_timestamp(timed, 2) == 30_000
    assert timeline(other, through=3) is other.commit_timeline


def test_timestamps_come_from_one_listing(timed: DeltaTable, monkeypatch) -> None:
    assert not timed.commit_timeline.built  # the table's own timeline, not built yet
    storage = timed.storage
    calls = {"info": 0, "list": 0}
    original_list, original_info = storage.list_from, storage.info

    def counting_list(*args, **kwargs):
        calls["list"] += 1
        return original_list(*args, **kwargs)

    def counting_info(*args, **kwargs):
        calls["info"] += 1
        return original_info(*args, **kwargs)

    monkeypatch.setattr(storage, "list_from", counting_list)
    monkeypatch.setattr(storage, "info", counting_info)
    assert [commit_timestamp(timed, v) for v in range(4)] == [10_000, 20_000, 30_000, 40_000]
    assert calls == {"info": 0, "list": 1}
    # A caller that names the latest version it works with saves the listing.
    assert version_at_or_before(timed, 25_000, latest=3) == 1
    assert version_at_or_after(timed, 25_000, latest=3) == 2
    assert calls == {"info": 0, "list": 1}
    # Without it, the search must first look for new commits.
    assert version_at_or_before(timed, 25_000) == 1
    assert calls == {"info": 0, "list": 2}


# --------------------------------------------------------------------------------------
# In-commit timestamps


def test_ict_from_enablement_version(tmp_path: Path) -> None:
    """Before the enablement version: file times; from it on: commitInfo.inCommitTimestamp
    (whatever the files' modification times say)."""
    write_commit(tmp_path, 0, [commit_info(), protocol(1, 7), metadata()], 10_000)
    write_commit(tmp_path, 1, [commit_info()], 20_000)
    enable = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "2",
        "delta.inCommitTimestampEnablementTimestamp": "25000",
    }
    write_commit(tmp_path, 2, [commit_info(inCommitTimestamp=25_000), metadata(enable)], 999_000)
    write_commit(tmp_path, 3, [commit_info(inCommitTimestamp=31_000)], 1_000)
    table = DeltaTable(str(tmp_path))
    assert [commit_timestamp(table, v) for v in range(4)] == [10_000, 20_000, 25_000, 31_000]
    assert version_at_or_before(table, 24_999) == 1
    assert version_at_or_before(table, 25_000) == 2
    assert version_at_or_after(table, 25_001) == 3
    assert version_at_or_before(table, 31_000) == 3
    with pytest.raises(TimestampOutOfRangeError, match="after the latest available version 3"):
        version_at_or_before(table, 999_000)


def test_ict_missing_from_a_commit_is_a_corrupt_log(tmp_path: Path) -> None:
    on = {"delta.enableInCommitTimestamps": "true"}
    write_commit(tmp_path, 0, [commit_info(inCommitTimestamp=5), protocol(1, 7), metadata(on)])
    write_commit(tmp_path, 1, [commit_info()])
    write_commit(tmp_path, 2, [commit_info(inCommitTimestamp=9)])
    table = DeltaTable(str(tmp_path))
    assert commit_timestamp(table, 2) == 9
    with pytest.raises(CorruptLogError, match="inCommitTimestamp"):
        commit_timestamp(table, 1)


def test_corpus_ict_table() -> None:
    """delta-rs/cdc_ict_table: ICT on from creation; its v1 ICT was set a year back by the
    writer of the fixture (the ICT wins over commitInfo.timestamp, as in deltalake)."""
    table = DeltaTable(str(corpus_table("delta-rs/cdc_ict_table")))
    icts = [1783874203271, 1683874206883, 1783874212175, 1783874213881]
    assert [commit_timestamp(table, v) for v in range(4)] == icts
    assert version_at_or_before(table, icts[3]) == 3
    assert version_at_or_before(table, icts[3] - 1) == 2
    assert version_at_or_after(table, icts[2]) == 2
    assert version_at_or_after(table, icts[2] + 1) == 3
    with pytest.raises(TimestampOutOfRangeError, match="latest available version 3"):
        version_at_or_after(table, icts[3] + 1)


def test_streaming_notnull_to_null_style_lookup(tmp_path: Path) -> None:
    """REFERENCE §1.18: ISO timestamps at whole seconds select versions 0..3."""
    base = parse_timestamp("2022-11-13T08:10:41Z")
    offsets = [0, 5_000, 7_000, 9_000]
    _table(tmp_path, [base + o for o in offsets])
    table = DeltaTable(str(tmp_path))
    for version, text in enumerate(
        [
            "2022-11-13T08:10:41Z",
            "2022-11-13T08:10:46Z",
            "2022-11-13T08:10:48Z",
            "2022-11-13T08:10:50Z",
        ]
    ):
        assert version_at_or_before(table, parse_timestamp(text)) == version


def test_ict_never_goes_below_the_file_times_before_enablement(tmp_path: Path) -> None:
    """A copied table: file times (copy time) lie after the original in-commit timestamps.
    The timeline stays ordered, so binary search stays correct."""
    write_commit(tmp_path, 0, [commit_info(), protocol(1, 7), metadata()], 900_000)
    enable = {
        "delta.enableInCommitTimestamps": "true",
        "delta.inCommitTimestampEnablementVersion": "1",
    }
    write_commit(tmp_path, 1, [commit_info(inCommitTimestamp=5_000), metadata(enable)], 900_000)
    write_commit(tmp_path, 2, [commit_info(inCommitTimestamp=950_000)], 900_000)
    table = DeltaTable(str(tmp_path))
    assert [commit_timestamp(table, v) for v in range(3)] == [900_000, 900_001, 950_000]
    assert version_at_or_before(table, 900_001) == 1


def test_cleaned_up_log_starts_at_the_oldest_checkpoint() -> None:
    """Commits 0-4 are gone; the checkpoint at 5 is the earliest readable version. Corpus
    copies share one modification time, so monotonising spaces the commits 1 ms apart."""
    table = DeltaTable(str(corpus_table("delta-rs/checkpoints_vacuumed")))
    times = [commit_timestamp(table, v) for v in range(5, 13)]
    assert all(b > a for a, b in itertools.pairwise(times))
    assert version_at_or_after(table, 0) == 5
    assert version_at_or_before(table, times[3]) == 8
    with pytest.raises(TimestampOutOfRangeError, match="earliest available version 5"):
        version_at_or_before(table, times[0] - 1)
    with pytest.raises(VersionNotFoundError):
        commit_timestamp(table, 4)
