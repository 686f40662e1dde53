"""The copy-version reader the server and the refresher share: each version of a copy maps
to the source version its commit's app transaction names; commits of another app (or none)
are left out; a copy that does not exist yet has no versions."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from sharing.copies import copy_app_id, copy_location, copy_versions


def _commit(location: Path, app_id: str | None, source_version: int) -> None:
    txns = [] if app_id is None else [Transaction(app_id, source_version)]
    write_deltalake(
        str(location),
        pa.table({"id": [source_version]}),
        mode="append",
        commit_properties=CommitProperties(app_transactions=txns),
    )


def test_each_copy_version_names_the_source_version_it_holds(tmp_path: Path) -> None:
    location = Path(copy_location(str(tmp_path) + "/", "s.d.t"))
    assert location == tmp_path / "copies" / "s.d.t"
    app_id = copy_app_id("s.d.t")
    assert copy_versions(str(location), app_id) == []  # no copy yet
    _commit(location, app_id, 3)  # copy v0 holds source v3
    _commit(location, "lakeshare.copy.other", 9)  # another copy's transaction: not ours
    _commit(location, app_id, 7)  # copy v2 holds source v7
    mapped = copy_versions(str(location), app_id)
    assert [(m.copy_version, m.source_version) for m in mapped] == [(0, 3), (2, 7)]
    assert all(m.timestamp > 0 for m in mapped)
