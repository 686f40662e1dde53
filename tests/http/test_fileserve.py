"""Signed local file URLs: verification, path confinement, byte ranges, and HTTP serving."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sharing.catalog import Catalog
from sharing.errors import Forbidden, ResourceNotFound
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.presign.local_verify import (
    FileServer,
    RangeNotSatisfiable,
    parse_range,
    resolve_inside,
    url_holder,
)
from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server

SECRET = "unit-test-secret"
HOLDER = UrlHolder("acme", "cred1")


@pytest.fixture
def table_dir(tmp_path: Path) -> Path:
    root = tmp_path / "table"
    (root / "p=1").mkdir(parents=True)
    (root / "p=1" / "data.parquet").write_bytes(b"0123456789")
    (root / "other.parquet").write_bytes(b"abc")
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", root / "escape.parquet")
    os.symlink(tmp_path, root / "updir")
    return root


@pytest.fixture
def catalog(table_dir: Path) -> Catalog:
    config = make_config(
        {
            "shares": [
                {
                    "name": "Share",
                    "schemas": [
                        {"name": "s", "tables": [{"name": "T", "location": str(table_dir)}]}
                    ],
                }
            ]
        }
    )
    return Catalog(config)


def _signer(table_dir: Path, ttl: int = 3600, name: str = "T") -> LocalSigner:
    return LocalSigner(
        secret=SECRET,
        base_url="http://host",
        endpoint="/delta-sharing",
        table=TableRef("Share", "s", name),
        table_root=str(table_dir),
        ttl_seconds=ttl,
        holder=HOLDER,
    )


def _parts(url: str) -> tuple[str, str, str]:
    """The decoded relative path, `exp` and `sig` of a signed URL."""
    parsed = httpx.URL(url)
    return parsed.path.split("/files/Share/s/T/", 1)[1], parsed.params["exp"], parsed.params["sig"]


def test_valid_url_opens_file(table_dir: Path, catalog: Catalog) -> None:
    signed = _signer(table_dir).sign([str(table_dir / "p=1" / "data.parquet")])
    relative, exp, sig = _parts(signed.urls[0])
    found = FileServer(catalog, SECRET).open("share", "S", "t", relative, exp, sig, HOLDER)
    assert found.size == 10 and found.path == str(table_dir / "p=1" / "data.parquet")


def test_tampered_cross_file_and_expired_urls_are_forbidden(
    table_dir: Path, catalog: Catalog
) -> None:
    server = FileServer(catalog, SECRET)
    signed = _signer(table_dir).sign([str(table_dir / "p=1" / "data.parquet")])
    relative, exp, sig = _parts(signed.urls[0])
    flipped = ("0" if sig[0] != "0" else "1") + sig[1:]
    with pytest.raises(Forbidden):
        server.open("Share", "s", "T", relative, exp, flipped, HOLDER)
    with pytest.raises(Forbidden):
        server.open("Share", "s", "T", "other.parquet", exp, sig, HOLDER)
    with pytest.raises(Forbidden):
        server.open("Share", "s", "T", relative, str(int(exp) + 1), sig, HOLDER)
    with pytest.raises(Forbidden):
        server.open("Share", "s", "T", relative, None, sig, HOLDER)
    with pytest.raises(Forbidden):
        server.open("Share", "s", "Other", relative, exp, sig, HOLDER)
    with pytest.raises(Forbidden):
        FileServer(catalog, "another-secret").open("Share", "s", "T", relative, exp, sig, HOLDER)
    with pytest.raises(Forbidden, match="expired"):
        server.open("Share", "s", "T", relative, exp, sig, HOLDER, now_ms=int(exp) + 1)


def test_the_holder_is_signed_and_named_in_the_url(table_dir: Path, catalog: Catalog) -> None:
    """A URL is bound to the recipient and credential it was handed to: naming another, or
    dropping or adding the credential, breaks the signature."""
    server = FileServer(catalog, SECRET)
    signed = _signer(table_dir).sign([str(table_dir / "p=1" / "data.parquet")])
    params = httpx.URL(signed.urls[0]).params
    assert (params["rcp"], params["cid"], params["sp"]) == ("acme", "cred1", "r")
    relative, exp, sig = _parts(signed.urls[0])
    assert url_holder(params["rcp"], params["cid"]) == HOLDER
    for other in (
        UrlHolder("globex", "cred1"),
        UrlHolder("acme", "cred2"),
        UrlHolder("acme", None),
        UrlHolder("acme\x00", "cred1"),
    ):
        with pytest.raises(Forbidden, match="invalid"):
            server.open("Share", "s", "T", relative, exp, sig, other)
    with pytest.raises(Forbidden, match="not signed"):
        server.open("Share", "s", "T", relative, exp, sig, url_holder(None, "cred1"))
    assert url_holder("acme", "c\x00") is None and url_holder("", None) is None


def test_signer_refuses_keys_outside_the_table(table_dir: Path) -> None:
    from sharing.errors import UnsupportedOperation

    with pytest.raises(UnsupportedOperation):
        _signer(table_dir).sign(["/etc/passwd"])


@pytest.mark.parametrize(
    "relative",
    [
        "../secret.txt",
        "/etc/passwd",
        "p=1/../../secret.txt",
        "escape.parquet",
        "updir/secret.txt",
        "",
        ".",
        "a//b",
        "x\x00y",
    ],
)
def test_paths_escaping_the_table_are_forbidden(table_dir: Path, relative: str) -> None:
    with pytest.raises(Forbidden):
        resolve_inside(str(table_dir), relative)


def test_signed_escape_is_still_forbidden(table_dir: Path, catalog: Catalog) -> None:
    """Even a correctly signed symlink that leaves the table is refused."""
    signed = _signer(table_dir).sign([str(table_dir / "escape.parquet")])
    relative, exp, sig = _parts(signed.urls[0])
    with pytest.raises(Forbidden):
        FileServer(catalog, SECRET).open("Share", "s", "T", relative, exp, sig, HOLDER)


def test_missing_file_is_not_found(table_dir: Path, catalog: Catalog) -> None:
    signed = _signer(table_dir).sign([str(table_dir / "gone.parquet")])
    relative, exp, sig = _parts(signed.urls[0])
    with pytest.raises(ResourceNotFound):
        FileServer(catalog, SECRET).open("Share", "s", "T", relative, exp, sig, HOLDER)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-3", (0, 3)),
        ("bytes=4-", (4, 9)),
        ("bytes=-3", (7, 9)),
        ("bytes=-30", (0, 9)),
        ("bytes=5-100", (5, 9)),
        ("bytes=9-9", (9, 9)),
        ("bytes=3-1", None),
        ("items=0-1", None),
        ("bytes=0-1,4-5", None),
        ("bytes=-", None),
    ],
)
def test_parse_range(header: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, 10) == expected


@pytest.mark.parametrize("header", ["bytes=10-", "bytes=10-20", "bytes=-0"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(RangeNotSatisfiable) as info:
        parse_range(header, 10)
    assert info.value.status == 416 and info.value.headers == {"Content-Range": "bytes */10"}


# -- over HTTP -------------------------------------------------------------------------------

BASIC = CORPUS / "levi/dat/basic_append/delta"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [{"name": "basic", "location": str(BASIC)}]
    config = make_config({"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]})
    with run_server(config, tmp_path_factory.mktemp("files")) as running:
        yield running


def _file_urls(server: RunningServer) -> list[tuple[str, int]]:
    response = httpx.post(
        server.url("/shares/s/schemas/d/tables/basic/query"), headers=server.auth_headers, json={}
    )
    assert response.status_code == 200
    files = [orjson.loads(line)["file"] for line in response.text.splitlines()[2:]]
    return [(f["url"], f["size"]) for f in files]


@pytest.mark.slow
def test_http_get_head_and_ranges(server: RunningServer) -> None:
    url, size = _file_urls(server)[0]
    whole = httpx.get(url)
    assert whole.status_code == 200 and len(whole.content) == size
    assert whole.headers["content-type"] == "application/octet-stream"
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.content == (BASIC / httpx.URL(url).path.rsplit("/", 1)[1]).read_bytes()
    head = httpx.head(url)
    assert (
        head.status_code == 200
        and head.headers["content-length"] == str(size)
        and head.content == b""
    )
    part = httpx.get(url, headers={"Range": "bytes=4-11"})
    assert part.status_code == 206 and part.content == whole.content[4:12]
    assert part.headers["content-range"] == f"bytes 4-11/{size}"
    tail = httpx.get(url, headers={"Range": "bytes=-8"})
    assert tail.status_code == 206 and tail.content == whole.content[-8:]
    head_range = httpx.head(url, headers={"Range": "bytes=0-0"})
    assert head_range.status_code == 206 and head_range.headers["content-length"] == "1"
    bad = httpx.get(url, headers={"Range": f"bytes={size}-"})
    assert bad.status_code == 416 and bad.headers["content-range"] == f"bytes */{size}"
    assert bad.json()["errorCode"]


@pytest.mark.slow
def test_http_tampered_urls_are_forbidden(server: RunningServer) -> None:
    (url, _), (other, _) = _file_urls(server)
    for tampered in (
        url.replace(".parquet?", ".orc?"),
        url[:-1] + ("0" if url[-1] != "0" else "1"),
        url.replace("exp=", "exp=1"),
        url.split("?")[0],
        url.split("?")[0] + "?" + other.split("?")[1],
        url.replace("/files/s/d/basic/", "/files/s/d/nope/"),
    ):
        response = httpx.get(tampered)
        assert response.status_code == 403, tampered
        assert response.json()["errorCode"] == "PERMISSION_DENIED"


@pytest.mark.slow
def test_http_no_bearer_token_needed_but_signature_is(server: RunningServer) -> None:
    url, _ = _file_urls(server)[0]
    assert httpx.get(url).status_code == 200
    assert httpx.get(url.replace("sig=", "sig=x")).status_code == 403


def test_a_forged_url_is_refused_before_the_store_is_asked(tmp_path: Path) -> None:
    """An unauthenticated client forging file URLs for made-up recipients makes the server
    check the signature, never look the names up: no statement reaches the real SQLite
    store (counted by SQLAlchemy's own cursor events on the store's engine) while the
    forgeries are refused with the same 403 as ever. A genuine URL of a store recipient
    still opens its file, after the store lookup that its holder's state needs."""
    from fastapi.testclient import TestClient
    from sqlalchemy import event

    from app.main import create_app
    from sharing.config import load_config
    from tests.support.recipients import create_recipient
    from tests.support.server import TEST_BEARER_TOKEN, sales_share, write_test_config

    table = {"name": "t", "location": str(CORPUS / "levi/dat/basic_append/delta")}
    config_file = write_test_config(
        tmp_path / "lakeshare.yaml", [sales_share([table])], tmp_path / "store.db"
    )
    profile = create_recipient(
        config_file,
        "http://testserver/delta-sharing",
        "acme",
        "--share",
        "sales",
        out=tmp_path / "acme.share",
    )
    app = create_app(load_config(config_file))
    store = app.state.recipients.store
    statements: list[str] = []

    def executed(conn: Any, cursor: Any, statement: str, parameters: Any, *rest: Any) -> None:
        statements.append(f"{statement} {parameters}")

    event.listen(store.engine, "before_cursor_execute", executed)
    query = "/delta-sharing/shares/sales/schemas/d/tables/t/query"
    with TestClient(app) as client:
        for token in (TEST_BEARER_TOKEN, profile["bearerToken"]):
            listed = client.post(query, json={}, headers={"Authorization": f"Bearer {token}"})
            assert listed.status_code == 200
        lines = [orjson.loads(line) for line in listed.text.splitlines()]
        genuine = httpx.URL(next(line["file"]["url"] for line in lines if "file" in line))
        assert genuine.params["rcp"] == "acme"
        statements.clear()

        forged = [genuine.copy_merge_params({"rcp": f"mallory-{i}"}) for i in range(20)] + [
            genuine.copy_merge_params({"rcp": f"eve-{i}", "sig": "ab" * 44}) for i in range(20)
        ]
        for url in forged:
            answer = client.get(str(url).removeprefix("http://testserver"))
            assert answer.status_code == 403
            body = answer.json()
            assert body["errorCode"] == "PERMISSION_DENIED"
            assert body["message"].startswith("The URL signature is invalid")
        # What the recipients' side reads: their rows, their credentials, their change
        # counter (the catalog's own counter is read on its schedule, recipients or not).
        lookups = [s for s in statements if "recipient" in s.lower() or "credential" in s]
        assert lookups == []

        opened = client.get(str(genuine).removeprefix("http://testserver"))
        assert opened.status_code == 200
        assert any("recipients" in s for s in statements)
