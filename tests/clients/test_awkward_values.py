"""Partition values and strings a response line must carry intact, read back through a
real server by the official `delta-sharing` client in both response formats.

The table is written by delta-rs (`deltalake`) under a table root that itself needs
quoting; its partition and string values hold JSON's escapes (quote, backslash, control
characters), characters the line builder's fast paths treat specially (non-ASCII, `%`,
`+`, `?`, `#`, space, `=`) and the characters Python's `str.splitlines` ends a line at
(U+0085, U+2028, U+2029): the client splits responses with requests' `iter_lines`.
"""

from __future__ import annotations

import json
from pathlib import Path

import delta_sharing
import deltalake
import httpx
import pyarrow as pa
import pytest

from tests.support.server import make_config, run_server, sales_share

pytestmark = pytest.mark.slow

AWKWARD = [
    "plain",
    'q"uote',
    "back\\slash",
    "nul\x00x",
    "ctl\x01\x1f\n\t",
    "del\x7f",
    "ls\u2028ps\u2029nel\x85",
    "ümlaut",
    "emoji😀\ud7ff\ue000",
    "%41 pct",
    "sp ace+plus?q#h",
    "c=d",
    "x" * 200,
    None,
]


def _table(root: Path, values: list[str | None]) -> pa.Table:
    data = pa.table(
        {
            "id": pa.array(range(len(values)), pa.int64()),
            "p": pa.array(values, pa.string()),
            "s": pa.array(values, pa.string()),
        }
    )
    deltalake.write_deltalake(str(root), data, partition_by=["p"])
    return data


@pytest.mark.parametrize("delta_format", [False, True])
def test_awkward_values_round_trip(tmp_path: Path, delta_format: bool) -> None:
    """Every row comes back with its partition and string values as written, the response
    has exactly one line per newline, and every line parses on its own."""
    data = _table(tmp_path / 'ro"ot sp%ü', AWKWARD)
    # Only one row in many is awkward: a batch-wide "nothing to escape" check must see it.
    mostly = [f"k{i % 40}" for i in range(300)]
    mostly[137] = 'one\u2028of\x01many"\\'
    data2 = _table(tmp_path / "mostly_plain", mostly)
    config = make_config(
        {
            "shares": [
                sales_share(
                    [
                        {"name": "t", "location": str(tmp_path / 'ro"ot sp%ü')},
                        {"name": "t2", "location": str(tmp_path / "mostly_plain")},
                    ]
                )
            ]
        }
    )
    fmt = "delta" if delta_format else "parquet"
    with run_server(config, tmp_path / "server") as server:
        for name, expected in (("t", data), ("t2", data2)):
            response = httpx.post(
                server.url(f"/shares/sales/schemas/d/tables/{name}/query"),
                headers={
                    **server.auth_headers,
                    "delta-sharing-capabilities": f"responseformat={fmt}",
                },
                json={},
                timeout=60,
            )
            assert response.status_code == 200
            lines = response.text.split("\n")
            assert lines[-1] == ""
            assert lines[:-1] == response.text.splitlines()  # no line break but "\n"
            assert all(json.loads(line) for line in lines[:-1])

            frame = delta_sharing.load_as_pandas(
                server.table_url("sales", "d", name), use_delta_format=delta_format
            )
            got = sorted(
                (row.id, _none(row.p), _none(row.s)) for row in frame.itertuples(index=False)
            )
            want = sorted(
                zip(
                    expected["id"].to_pylist(),
                    expected["p"].to_pylist(),
                    expected["s"].to_pylist(),
                    strict=True,
                )
            )
            assert got == want


def _none(value: object) -> object:
    return None if value is None or value != value else value


def test_names_with_line_separators_list(tmp_path: Path) -> None:
    """Listing bodies are read line by line by the official client as well: a share,
    schema and table name holding U+2028/U+2029/U+0085 lists and reads."""
    _table(tmp_path / "t", ["a", "b"])
    share, schema, table = "s\u2028h", "d\u2029", "t\u2028"
    config = make_config(
        {
            "shares": [
                {
                    "name": share,
                    "schemas": [
                        {
                            "name": schema,
                            "tables": [{"name": table, "location": str(tmp_path / "t")}],
                        }
                    ],
                }
            ]
        }
    )
    with run_server(config, tmp_path / "server") as server:
        client = delta_sharing.SharingClient(str(server.profile_path))
        assert [s.name for s in client.list_shares()] == [share]
        listed = client.list_all_tables()
        assert [(t.share, t.schema, t.name) for t in listed] == [(share, schema, table)]
