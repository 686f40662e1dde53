"""Serving compatible copies without a server: which requests a copy serves, how a source
version maps onto the copy version holding it (exactly, or an older one only when no
commit in between changed anything), the errors for versions the copy does not hold,
and the marker that keeps page/refresh tokens and local file URLs of a copy and of its
original apart.

The source is a real Delta table written by delta-rs; its "copy" is a real Delta table
written by delta-rs with the app transactions the refresher commits (pipeline/ needs
Spark; tests/pipeline/test_copy_serving.py runs the real refresher end to end)."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import orjson
import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sharing.catalog import SharedTable
from sharing.config import TableConfig
from sharing.copies import (
    CopyLacksVersion,
    CopyNotMaterialized,
    copy_app_id,
    copy_location,
    serves_copy,
)
from sharing.errors import InvalidParameter, MalformedRequest, TableUnreadable
from sharing.presign.local import LocalSigner, TableRef, UrlHolder
from sharing.presign.local_verify import FileServer
from sharing.query.capabilities import parse
from sharing.query.kinds import PinnedVersion
from sharing.query.plan import QueryPlan
from sharing.query.request import PollRequest, QueryInputs, QueryRequest
from sharing.tables import TableService
from sharing.tokens import TokenCodec
from tests.support.server import make_config

NAME = "s.d.t"
SECRET = "0123456789abcdef0123456789abcdef"
HOLDER = UrlHolder("acme", "cred-1")


def _rows(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64())})


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """v0 ids 0-9; v1 appends 10-14; v2 compacts (dataChange=false only); v3 deletes
    id < 3; v4 appends 20-21; v5 sets a table property (metadata only)."""
    path = tmp_path / "source"
    write_deltalake(str(path), _rows(range(10)))
    write_deltalake(str(path), _rows(range(10, 15)), mode="append")
    DeltaTable(str(path)).optimize.compact()
    DeltaTable(str(path)).delete("id < 3")
    write_deltalake(str(path), _rows(range(20, 22)), mode="append")
    DeltaTable(str(path)).alter.set_table_properties({"delta.appendOnly": "false"})
    assert DeltaTable(str(path)).version() == 5
    return path


def _materialize(views: Path, source: Path, version: int) -> None:
    """What a refresh commits: the source's rows at `version`, with the app transaction."""
    rows = DeltaTable(str(source), version=version).to_pyarrow_table()
    write_deltalake(
        copy_location(str(views), NAME),
        rows,
        mode="overwrite",
        commit_properties=CommitProperties(
            app_transactions=[Transaction(copy_app_id(NAME), version)]
        ),
    )


def _service(views: Path) -> TableService:
    return TableService(make_config({"views": {"location": str(views)}}))


def _shared(source: Path, **config: object) -> SharedTable:
    table = TableConfig(
        name="t", location=str(source), id="t-id", history_shared=True, compatible_copy=True
    )
    return SharedTable("s", "d", "t", table.model_copy(update=config), recipient="acme")


def _ids(service: TableService, copy: SharedTable, version: int | None) -> list[int]:
    snapshot = service.resolve(copy, version=version, timestamp=None).snapshot
    return sorted(
        DeltaTable(snapshot.table_root, version=snapshot.version)
        .to_pyarrow_table()["id"]
        .to_pylist()
    )


def test_parquet_only_requests_on_a_table_with_a_copy_are_served_from_it() -> None:
    with_copy = TableConfig(name="t", location="/x", compatible_copy=True)
    without = TableConfig(name="t", location="/x")
    assert serves_copy(with_copy, parse(None))  # no header: parquet
    assert serves_copy(with_copy, parse("responseformat=parquet"))
    assert not serves_copy(with_copy, parse("responseformat=delta"))
    assert not serves_copy(with_copy, parse("responseformat=delta,parquet"))
    assert not serves_copy(without, parse("responseformat=parquet"))


def test_source_versions_map_onto_the_copy_versions_holding_them(
    tmp_path: Path, source: Path
) -> None:
    views = tmp_path / "views"
    for version in (1, 3):
        _materialize(views, source, version)  # copy v0 holds source v1, copy v1 source v3
    service = _service(views)
    copy = service.copy_of(_shared(source))
    assert copy.from_copy and copy.source == _shared(source)
    assert copy.config.location == copy_location(str(views), NAME)

    latest = service.resolve(copy, version=None, timestamp=None)
    assert (latest.version, latest.snapshot.version, latest.time_travel) == (3, 1, False)
    assert _ids(service, copy, None) == [*range(3, 15)]

    at_one = service.resolve(copy, version=1, timestamp=None)
    assert (at_one.version, at_one.snapshot.version, at_one.time_travel) == (1, 0, True)
    assert at_one.commit_timestamp is not None  # the source's (see the timestamp test)
    assert _ids(service, copy, 1) == [*range(15)]
    # v2 only compacted files: the copy of v1 holds exactly its rows, under number 2
    at_two = service.resolve(copy, version=2, timestamp=None)
    assert (at_two.version, at_two.snapshot.version) == (2, 0)
    assert service.pinned(copy, 2, time_travel=True).snapshot.version == 0
    assert service.pinned(copy, 3, time_travel=False).snapshot.version == 1


@pytest.mark.parametrize(
    ("version", "why"),
    [
        (0, "is older than the table's compatible copy"),
        (4, "is newer than the last refresh of the table's compatible copy (it lags)"),
    ],
)
def test_a_version_the_copy_does_not_hold_is_refused(
    tmp_path: Path, source: Path, version: int, why: str
) -> None:
    views = tmp_path / "views"
    for held in (1, 3):
        _materialize(views, source, held)
    service = _service(views)
    copy = service.copy_of(_shared(source))
    with pytest.raises(CopyLacksVersion) as refused:
        service.resolve(copy, version=version, timestamp=None)
    assert refused.value.status == 400
    assert refused.value.message.startswith(f"Version {version} of table s.d.t {why}")
    assert "holds versions 1, 3." in refused.value.message


def test_changed_data_between_two_held_versions_is_not_bridged(
    tmp_path: Path, source: Path
) -> None:
    """v3 deleted rows: a copy holding v1 and v4 cannot answer v3."""
    views = tmp_path / "views"
    for held in (1, 4):
        _materialize(views, source, held)
    service = _service(views)
    copy = service.copy_of(_shared(source))
    with pytest.raises(CopyLacksVersion, match="is not held by the table's compatible copy"):
        service.resolve(copy, version=3, timestamp=None)
    # v5 changed only metadata: not bridged either (the schema or properties may differ)
    with pytest.raises(CopyLacksVersion, match="is newer than the last refresh"):
        service.resolve(copy, version=5, timestamp=None)
    with pytest.raises(MalformedRequest, match="Cannot load table version 9 as it does not exist"):
        service.resolve(copy, version=9, timestamp=None)


def test_a_new_refresh_is_seen_and_timestamps_resolve_on_the_source(
    tmp_path: Path, source: Path
) -> None:
    views = tmp_path / "views"
    _materialize(views, source, 1)
    service = _service(views)
    copy = service.copy_of(_shared(source))
    with pytest.raises(CopyLacksVersion):
        service.resolve(copy, version=4, timestamp=None)
    _materialize(views, source, 4)
    assert service.resolve(copy, version=4, timestamp=None).snapshot.version == 1
    assert service.resolve(copy, version=1, timestamp=None).snapshot.version == 0
    # the source commit's timestamp, as the client is given it, travels back to it
    stamp = service.resolve(copy, version=1, timestamp=None).commit_timestamp
    assert stamp is not None
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp / 1000))
    iso += f".{stamp % 1000:03d}Z"
    by_time = service.resolve(copy, version=None, timestamp=iso)
    assert (by_time.version, by_time.snapshot.version) == (1, 0)


def test_a_copy_not_made_yet_asks_to_retry(tmp_path: Path, source: Path) -> None:
    service = _service(tmp_path / "views")
    copy = service.copy_of(_shared(source))
    with pytest.raises(CopyNotMaterialized) as missing:
        service.resolve(copy, version=None, timestamp=None)
    assert missing.value.status == 404
    assert missing.value.headers == {"Retry-After": "300"}
    assert "Table s.d.t is served to clients reading the parquet format" in missing.value.message


def test_a_copy_without_the_refreshers_transaction_is_never_served(
    tmp_path: Path, source: Path
) -> None:
    views = tmp_path / "views"
    write_deltalake(copy_location(str(views), NAME), _rows(range(3)))
    service = _service(views)
    with pytest.raises(TableUnreadable):
        service.resolve(service.copy_of(_shared(source)), version=None, timestamp=None)


def test_page_and_refresh_tokens_of_a_copy_only_continue_on_the_copy(
    tmp_path: Path, source: Path
) -> None:
    from sharing.query.tokens import QueryTokens

    tokens = QueryTokens(TokenCodec(SECRET.encode()), page_ttl_ms=60_000, refresh_ttl_ms=60_000)
    original = _shared(source)
    copy = _service(tmp_path / "views").copy_of(original)
    request = QueryRequest(max_files=1)
    for minted, other in ((copy, original), (original, copy)):
        page = tokens.page_token(minted, request, PinnedVersion(3, 0, False), 1)
        continued = QueryRequest(max_files=1, page_token=page)
        assert tokens.read_page_token(minted, continued) == PinnedVersion(3, 1, False)
        with pytest.raises(InvalidParameter, match="Please restart the query") as crossed:
            tokens.read_page_token(other, continued)
        served = "its compatible copy" if minted.from_copy else "the original table"
        assert f"served from {served} of s.d.t" in crossed.value.message
        refresh = tokens.refresh_token(minted, 3)
        assert tokens.read_refresh_token(minted, refresh) == PinnedVersion(3)
        with pytest.raises(InvalidParameter, match="The refresh token was issued for a query"):
            tokens.read_refresh_token(other, refresh)


class _Catalog:
    def __init__(self, shared: SharedTable) -> None:
        self.shared = shared

    def get_table(self, share: str, schema: str, table: str) -> SharedTable:
        return self.shared


def _signed(copy: bool, root: Path, relative: str) -> dict[str, str]:
    signer = LocalSigner(
        secret=SECRET,
        base_url="http://h",
        endpoint="/delta-sharing",
        table=TableRef("s", "d", "t", copy),
        table_root=str(root),
        ttl_seconds=60,
        holder=HOLDER,
    )
    url = signer.sign([f"{root}/{relative}"]).urls[0]
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    assert ("cp" in query) == copy
    return query


def test_local_file_urls_of_a_copy_open_the_copys_files_only(tmp_path: Path, source: Path) -> None:
    views = tmp_path / "views"
    _materialize(views, source, 1)
    copy_root = Path(copy_location(str(views), NAME))
    # the same relative name in both tables, to show which one a URL opens
    (copy_root / "same.parquet").write_bytes(b"copy")
    (source / "same.parquet").write_bytes(b"original")
    server = FileServer(_Catalog(_shared(source)), SECRET, str(views))

    def opened(query: dict[str, str], copy: bool) -> bytes:
        found = server.open(
            "s", "d", "t", "same.parquet", query["exp"], query["sig"], HOLDER, copy=copy
        )
        return Path(found.path).read_bytes()

    of_copy = _signed(True, copy_root, "same.parquet")
    of_original = _signed(False, source, "same.parquet")
    assert opened(of_copy, copy=True) == b"copy"
    assert opened(of_original, copy=False) == b"original"
    for query, copy in ((of_copy, False), (of_original, True)):  # the marker edited
        with pytest.raises(Exception, match="The URL signature is invalid"):
            opened(query, copy)
    # a table that no longer keeps a copy serves no copy file
    without = FileServer(_Catalog(_shared(source, compatible_copy=False)), SECRET, str(views))
    with pytest.raises(Exception, match="The URL signature is invalid"):
        without.open(
            "s", "d", "t", "same.parquet", of_copy["exp"], of_copy["sig"], HOLDER, copy=True
        )


def test_the_fast_path_of_a_repeated_query_answers_from_the_copy(
    tmp_path: Path, source: Path
) -> None:
    """A repeated small query on a fresh latest snapshot is answered without I/O
    (Planner.query_ready): from the copy's cached selection, with the source's version,
    never from the original's (which is cached too, for delta-format clients)."""
    from sharing.query.capabilities import Capabilities
    from sharing.query.planner import Planner
    from sharing.query.request import QueryInputs

    views = tmp_path / "views"
    _materialize(views, source, 3)
    config = make_config({"views": {"location": str(views)}}, refreshWindowMs=60_000)
    planner = Planner(config, TableService(config), TokenCodec(SECRET.encode()))
    shared = _shared(source)
    parquet = QueryInputs(shared, QueryRequest(), parse("responseformat=parquet"), None)
    delta = QueryInputs(shared, QueryRequest(), parse("responseformat=delta"), None)
    for inputs in (parquet, delta):
        assert planner.query_ready(inputs, "http://h", HOLDER) is None  # nothing cached yet
        planner.query_response(inputs, "http://h", HOLDER)
    ready = planner.query_ready(parquet, "http://h", HOLDER)
    assert ready is not None
    plan, body = ready
    assert plan.version == 3 and plan.response_format == "parquet"
    assert b"&cp=1&" in body and str(views).encode() not in body
    ready = planner.query_ready(delta, "http://h", HOLDER)
    assert ready is not None and ready[0].version == 5 and b"&cp=1" not in ready[1]
    assert isinstance(parquet.caps, Capabilities)


def test_which_table_serves_a_request(tmp_path: Path, source: Path) -> None:
    """Parquet alone: the copy, decided without reading anything; parquet among other
    formats: the copy only when the original (its latest version) would be refused."""
    from sharing.query.planner import Planner
    from tests.support.corpus import corpus_table

    config = make_config({"views": {"location": str(tmp_path / "views")}}, refreshWindowMs=0)
    planner = Planner(config, TableService(config), TokenCodec(SECRET.encode()))
    plain = _shared(source)  # reader version 1: readable as parquet
    dv = _shared(Path(corpus_table("delta-kernel-rs/golden_data/dv-with-columnmapping/delta")))
    either = parse("responseformat=delta,parquet")
    for shared in (plain, dv):
        assert planner.served_at_once(shared, parse(None)) == planner.tables.copy_of(shared)
        assert planner.served(shared, parse("responseformat=parquet")).from_copy
        assert planner.served(shared, parse("responseformat=delta")) is shared
        assert planner.served_at_once(shared, either) is None  # needs the log: not at once
    assert planner.served(plain, either) is plain
    assert planner.served(dv, either).from_copy
    features = parse("responseformat=delta,parquet;readerfeatures=deletionvectors,columnmapping")
    assert planner.served(dv, features) is dv
    without = _shared(source, compatible_copy=False)
    assert planner.served_at_once(without, parse(None)) is without


def test_a_table_leaving_the_catalog_takes_its_copys_readers_along(
    tmp_path: Path, source: Path
) -> None:
    views = tmp_path / "views"
    for version in (1, 3):
        _materialize(views, source, version)
    service = _service(views)
    shared = _shared(source)
    service.resolve(service.copy_of(shared), version=1, timestamp=None)  # copy and its map
    service.resolve(shared, version=None, timestamp=None)
    assert service.forget([shared], [shared]) == 0  # still served
    assert service.forget([shared], []) == 2  # the original's location and the copy's
    assert service.forget([shared], []) == 0
    assert service.resolve(service.copy_of(shared), version=1, timestamp=None).version == 1


def _file_ids(plan: QueryPlan) -> list[str]:
    lines = [orjson.loads(line) for line in plan.render().splitlines()]
    return [line["file"]["id"] for line in lines if "file" in line]


def test_an_async_query_is_bound_to_the_copy_that_serves_it(tmp_path: Path, source: Path) -> None:
    """The stored inputs of an async query the copy serves carry the copy marker: decoded
    on the original (a later poll), they give back the copy; unmarked inputs give the
    original even when decoded on the copy. The pages then equal the synchronous query's,
    whatever the poll's capabilities, under the source's version numbers."""
    from sharing.query.async_service import AsyncQueryService, AsyncResult
    from sharing.query.async_service import _decode_inputs as decode
    from sharing.query.async_service import _encode_inputs as encode
    from sharing.query.async_store import PENDING, SqliteQueryStore
    from sharing.query.planner import Planner

    views = tmp_path / "views"
    _materialize(views, source, 3)
    _materialize(views, source, 4)  # the copy's latest holds source version 4 (of 5)
    config = make_config({"views": {"location": str(views)}}, refreshWindowMs=0)
    planner = Planner(config, TableService(config), TokenCodec(SECRET.encode()))
    tables = planner.tables
    shared = _shared(source)
    caps = parse("responseformat=parquet;asyncquery=true")
    submitted = QueryInputs(shared, QueryRequest(idempotency_key="k1"), caps, None)
    bound = planner.async_inputs(submitted)
    assert bound.shared == tables.copy_of(shared)
    # the marker round trip
    for polled_on in (shared, bound.shared):
        assert decode(encode(bound), polled_on, tables).shared == bound.shared
        assert decode(encode(bound), polled_on, tables) == bound
    delta = replace(submitted, caps=parse("responseformat=delta;asyncquery=true"))
    on_original = planner.async_inputs(delta)
    assert on_original.shared is shared
    assert decode(encode(on_original), bound.shared, tables).shared is shared
    with pytest.raises(InvalidParameter, match="no longer keeps"):
        decode(encode(bound), _shared(source, compatible_copy=False), tables)

    # the async result equals the synchronous copy-served query
    service = AsyncQueryService(
        SqliteQueryStore(None), tables=tables, tokens=planner.query_tokens, ttl_ms=60_000
    )
    plan = partial(planner.query, base_url="http://lakeshare", holder=HOLDER)
    stored = service.submit(bound, plan)
    poll = PollRequest()
    deadline = time.monotonic() + 30
    outcome = service.poll(shared, stored.query_id, poll, caps, plan)
    while not isinstance(outcome, AsyncResult):
        assert outcome.status == PENDING and time.monotonic() < deadline
        time.sleep(0.05)
        outcome = service.poll(shared, stored.query_id, poll, caps, plan)
    synchronous = planner.query(replace(submitted, caps=parse(None)), "http://lakeshare", HOLDER)
    assert synchronous.version == outcome.plan.version == 4
    assert _file_ids(outcome.plan) == _file_ids(synchronous) != []
    # the copy's files, not the original's
    original = planner.query(replace(delta, caps=parse("responseformat=delta")), "x", HOLDER)
    assert set(_file_ids(original)).isdisjoint(_file_ids(synchronous))
    # a poll asking for delta still pages the copy the query was bound to
    as_delta = service.poll(shared, stored.query_id, poll, parse("responseformat=delta"), plan)
    assert isinstance(as_delta, AsyncResult)
    assert _file_ids(as_delta.plan) == _file_ids(synchronous)
    assert as_delta.plan.version == 4
    # the same key on the original (delta) is another query: refused, not the copy's
    with pytest.raises(InvalidParameter, match="different parameters"):
        service.submit(on_original, plan)
