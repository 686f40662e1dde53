"""`lakeshare check`: every configured table opened, with the right verdict and exit code,
on a configuration that mixes good tables, a missing location, a table with a reader
feature we refuse, and a table in S3 (moto)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import main
from sharing.table_check import Status, check_tables, configured_tables
from sharing.tables import TableService
from tests.support.corpus import corpus_table
from tests.support.emulators import moto_client
from tests.support.server import TEST_BEARER_TOKEN, TEST_SIGNING_SECRET, make_config

GOOD = "levi/dat/basic_partitioned/delta"
DV = "delta-kernel-rs/golden_data/dv-partitioned-with-checkpoint/delta"
GEO = "delta-kernel-rs/data/table-with-geo"


def _document(tables: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "authorization": {"bearerToken": TEST_BEARER_TOKEN},
        "signingSecret": TEST_SIGNING_SECRET,
        "shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}],
        **extra,
    }


def _local_tables(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        {"name": "good", "location": str(corpus_table(GOOD))},
        {"name": "dv", "location": str(corpus_table(DV))},
        {"name": "missing", "location": str(tmp_path / "no-such-table")},
        {"name": "geo", "location": str(corpus_table(GEO))},
    ]


def _run(tmp_path: Path, document: dict[str, Any], *args: str) -> int:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(document))
    return main(["check", "--config", str(path), *args])


def test_verdicts_and_exit_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = _run(tmp_path, _document(_local_tables(tmp_path)), "--format", "json")
    reports = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert code == 1
    good, dv = reports["s.d.good"], reports["s.d.dv"]
    assert (good["status"], good["version"], good["num_files"]) == ("ok", 1, 6)
    assert good["formats"] == ["parquet", "delta"] and good["problems"] == []
    assert good["temporary_credentials"].startswith(
        "not available: history sharing is not enabled on the table"
    )
    assert (dv["status"], dv["version"], dv["min_reader_version"]) == ("ok", 15, 3)
    assert dv["reader_features"] == ["deletionVectors"]
    assert dv["formats"] == ["delta"]
    assert "readerfeatures=deletionvectors" in dv["clients"][0]
    missing, geo = reports["s.d.missing"], reports["s.d.geo"]
    assert missing["status"] == "unusable" and missing["version"] is None
    assert "TableNotFoundError" in missing["problems"][0]
    assert geo["status"] == "unusable"
    assert "geospatial" in geo["problems"][0]


def test_all_good_exits_zero_with_a_readable_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _local_tables(tmp_path)[:2]
    assert _run(tmp_path, _document(tables)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "TABLE",
        "STATUS",
        "VERSION",
        "FILES",
        "SIZE",
        "FORMATS",
        "READER",
        "FEATURES",
    ]
    assert out[1].split()[:4] == ["s.d.good", "ok", "1", "6"]
    assert any(line.strip().startswith("note: parquet-format clients") for line in out)
    assert out[-1] == "2 table(s), 0 unusable"


def test_start_version_after_the_latest_is_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = [{"name": "good", "location": str(corpus_table(GOOD)), "startVersion": 5}]
    assert _run(tmp_path, _document(tables), "--format", "json") == 1
    (report,) = json.loads(capsys.readouterr().out)["tables"]
    assert report["status"] == "unusable"
    assert "startVersion 5" in report["problems"][0]


def test_invalid_configuration_exits_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, {"version": 1, "shares": "not a list"}) == 2
    assert "invalid configuration" in capsys.readouterr().err


def test_a_hung_store_is_reported_without_waiting_for_it(tmp_path: Path) -> None:
    """The timeout bounds the whole check, whatever the store does."""

    class HangingService(TableService):
        def latest(self, shared):  # type: ignore[no-untyped-def]
            time.sleep(5)
            return super().latest(shared)

    config = make_config(_document([{"name": "good", "location": str(corpus_table(GOOD))}]))
    started = time.monotonic()
    (report,) = check_tables(HangingService(config), configured_tables(config), timeout_seconds=0.2)
    assert time.monotonic() - started < 2
    assert report.status is Status.UNUSABLE
    assert "no answer" in report.problems[0]


def _typo_document() -> dict[str, Any]:
    """`historyShard:` for `historyShared:`: ignored by the server, so the table quietly
    serves no history."""
    return _document([{"name": "good", "location": str(corpus_table(GOOD)), "historyShard": True}])


TYPO_WARNING = (
    "unknown configuration key 'shares[0].schemas[0].tables[0].historyShard' is ignored; "
    "did you mean 'historyShared'?"
)


def test_unknown_keys_are_reported_in_the_table_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, `check` said nothing and exited 0 (only `serve` logged the warning)."""
    assert _run(tmp_path, _typo_document()) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"warning: {TYPO_WARNING}"
    assert out[1].split()[0] == "TABLE"
    assert _run(tmp_path, _typo_document(), "--strict") == 2
    captured = capsys.readouterr()
    assert f"warning: {TYPO_WARNING}" in captured.out
    assert "1 configuration warning(s) (--strict)" in captured.err


def test_unknown_keys_are_reported_in_the_json_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, _typo_document(), "--format", "json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["warnings"] == [TYPO_WARNING]
    assert [r["table"] for r in document["tables"]] == ["s.d.good"]
    assert _run(tmp_path, _typo_document(), "--format", "json", "--strict") == 2
    assert json.loads(capsys.readouterr().out)["warnings"] == [TYPO_WARNING]


def test_a_clean_configuration_passes_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = [{"name": "good", "location": str(corpus_table(GOOD)), "historyShared": True}]
    assert _run(tmp_path, _document(tables), "--format", "json", "--strict") == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def test_a_misspelt_required_key_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, only "'location' in a table must be provided"."""
    document = _document([{"name": "good", "locaton": str(corpus_table(GOOD))}])
    assert _run(tmp_path, document) == 2
    err = capsys.readouterr().err
    assert "shares[0].schemas[0].tables[0]: 'location' in a table must be provided" in err
    assert "'locaton' is not a key: did you mean 'location'?" in err


@pytest.mark.slow
def test_cloud_table_in_s3(
    tmp_path: Path, moto_s3: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = moto_client(moto_s3)
    client.create_bucket(Bucket="check-bucket")
    root = corpus_table(GOOD)
    for path in root.rglob("*"):
        if path.is_file():
            client.upload_file(str(path), "check-bucket", f"t/{path.relative_to(root)}")
    profile = {
        "endpointUrl": moto_s3,
        "pathStyle": True,
        "region": "us-east-1",
        "accessKeyId": "testing",
        "secretAccessKey": "testing",
    }
    tables = [
        {"name": "cloud", "location": "s3://check-bucket/t", "storageProfile": "moto"},
        {"name": "cloud_missing", "location": "s3://check-bucket/nope", "storageProfile": "moto"},
    ]
    document = _document(tables, storageProfiles={"moto": profile})
    assert _run(tmp_path, document, "--format", "json") == 1
    reports = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert reports["s.d.cloud"]["status"] == "ok"
    assert reports["s.d.cloud"]["num_files"] == 6
    # No historyShared, so no temporary credentials; the report says how to offer them.
    assert reports["s.d.cloud"]["temporary_credentials"].startswith("not available")
    assert "historyShared" in reports["s.d.cloud"]["temporary_credentials"]
    assert reports["s.d.cloud_missing"]["status"] == "unusable"


def test_store_tables_are_checked_and_a_missing_store_is_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`lakeshare check` reports the store's tables (sharing.shares) beside the file's, and
    a configuration whose embedded store does not exist yet does not get one made."""
    tables = _local_tables(tmp_path)[:1]
    assert _run(tmp_path, _document(tables)) == 0
    assert not (tmp_path / "lakeshare-state.db").exists()
    capsys.readouterr()

    assert main(["shares", "create", "live", "--config", str(tmp_path / "config.yaml")]) == 0
    added = main(
        [
            "shares",
            "add-table",
            "live.d.missing",
            "--location",
            str(tmp_path / "no-such-table"),
            "--force",
            "--config",
            str(tmp_path / "config.yaml"),
        ]
    )
    assert added == 0
    capsys.readouterr()
    assert main(["check", "--config", str(tmp_path / "config.yaml"), "--format", "json"]) == 1
    reports = {r["table"]: r for r in json.loads(capsys.readouterr().out)["tables"]}
    assert reports["s.d.good"]["status"] == "ok"
    assert reports["live.d.missing"]["status"] == "unusable"


def test_an_unwritable_iceberg_cache_dir_fails_the_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tables = _local_tables(tmp_path)[:1]
    cache = tmp_path / "iceberg-cache"
    assert _run(tmp_path, _document(tables, iceberg={"cacheDir": str(cache)})) == 0
    assert cache.is_dir() and list(cache.iterdir()) == []  # the probe is gone
    capsys.readouterr()
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    document = _document(tables, iceberg={"cacheDir": str(blocker / "cache")})
    assert _run(tmp_path, document, "--format", "json") == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert len(errors) == 1 and errors[0].startswith("iceberg.cacheDir: the Iceberg metadata")
    assert str(blocker / "cache") in errors[0]
    assert _run(tmp_path, document) == 1
    assert "error: iceberg.cacheDir" in capsys.readouterr().out
