"""The catalog: lookups (case-insensitive, reference messages) and paged listing."""

from __future__ import annotations

import pytest

from sharing.catalog import Catalog, Page, SharedTable
from sharing.config import ServerConfig, parse_config
from sharing.errors import InvalidParameter, ResourceNotFound
from sharing.tokens import TokenCodec

SECRET = "catalog-test-secret-0123456789"


def make_config() -> ServerConfig:
    def table(name: str, **extra: object) -> dict[str, object]:
        return {"name": name, "location": f"/data/{name}", **extra}

    return parse_config(
        {
            "version": 1,
            "signingSecret": SECRET,
            "shares": [
                {
                    "name": "share1",
                    "schemas": [
                        {
                            "name": "default",
                            "tables": [
                                table("table1", id="00000000-0000-0000-0000-000000000001"),
                                table("table3", historyShared=True),
                                table("table7"),
                            ],
                        },
                        {"name": "second", "tables": [table("tableA"), table("tableB")]},
                        {"name": "empty"},
                    ],
                },
                {"name": "Share2", "schemas": [{"name": "s2", "tables": [table("t")]}]},
                {"name": "share3"},
                {"name": "share4"},
                {"name": "share5"},
            ],
        },
        environ={},
    )


@pytest.fixture
def catalog() -> Catalog:
    return Catalog(make_config())


def collect(fetch, max_results: int) -> tuple[list[dict[str, str]], int]:
    """All items of a listing, following tokens; returns items and the number of pages."""
    items: list[dict[str, str]] = []
    token = None
    pages = 0
    while True:
        page: Page = fetch(max_results, token)
        pages += 1
        assert len(page.items) <= max_results
        items.extend(page.items)
        token = page.next_page_token
        if token is None:
            return items, pages
        assert pages < 100


# --- lookups --------------------------------------------------------------------------------


def test_lookups_are_case_insensitive_and_return_canonical_names(catalog: Catalog) -> None:
    assert catalog.get_share("SHARE1").name == "share1"
    assert catalog.get_share("share2").name == "Share2"
    assert catalog.get_schema("sHare1", "DEFAULT").name == "default"
    table = catalog.get_table("sHare1", "deFault", "taBle3")
    assert isinstance(table, SharedTable)
    assert (table.share, table.schema, table.name) == ("share1", "default", "table3")
    assert table.config.history_shared is True
    assert table.full_name == "share1.default.table3"


def test_not_found_messages(catalog: Catalog) -> None:
    with pytest.raises(ResourceNotFound) as info:
        catalog.get_share("nope")
    assert info.value.message == "share 'nope' not found"
    assert info.value.status == 404
    assert info.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    with pytest.raises(ResourceNotFound, match=r"^schema 'nope' not found$"):
        catalog.get_schema("share1", "nope")
    with pytest.raises(ResourceNotFound, match=r"^share 'x' not found$"):
        catalog.get_schema("x", "default")


@pytest.mark.parametrize(
    ("share", "schema", "table"),
    [("share1", "default", "nope"), ("share1", "nope", "table1"), ("nope", "default", "table1")],
)
def test_table_not_found_message_is_the_same_for_every_part(
    catalog: Catalog, share: str, schema: str, table: str
) -> None:
    with pytest.raises(ResourceNotFound) as info:
        catalog.get_table(share, schema, table)
    assert info.value.message == (
        f"[Share/Schema/Table] '{share}/{schema}/{table}' does not exist, "
        "please contact your share provider for further information."
    )


def test_list_shares_unknown_parents(catalog: Catalog) -> None:
    with pytest.raises(ResourceNotFound, match="share 'zz' not found"):
        catalog.list_schemas("zz")
    with pytest.raises(ResourceNotFound, match="share 'zz' not found"):
        catalog.list_all_tables("zz")
    with pytest.raises(ResourceNotFound, match="share 'zz' not found"):
        catalog.list_tables("zz", "default")
    with pytest.raises(ResourceNotFound, match="schema 'zz' not found"):
        catalog.list_tables("share1", "zz")


# --- shapes ---------------------------------------------------------------------------------


def test_list_shapes_follow_the_reference(catalog: Catalog) -> None:
    assert catalog.list_shares().to_json() == {
        "items": [{"name": n} for n in ("share1", "Share2", "share3", "share4", "share5")]
    }
    # schemas echo the share as typed in the request path
    assert catalog.list_schemas("SHARE1").to_json() == {
        "items": [
            {"name": "default", "share": "SHARE1"},
            {"name": "second", "share": "SHARE1"},
            {"name": "empty", "share": "SHARE1"},
        ]
    }
    tables = catalog.list_tables("Share1", "DEFAULT").to_json()["items"]
    assert tables[0] == {
        "name": "table1",
        "schema": "DEFAULT",
        "share": "Share1",
        "id": "00000000-0000-0000-0000-000000000001",
    }
    assert [t["name"] for t in tables] == ["table1", "table3", "table7"]
    assert all(t["id"] for t in tables)
    # all-tables: share as typed, schema canonical, across schemas in order
    everything = catalog.list_all_tables("SHARE1").to_json()["items"]
    assert [(t["schema"], t["name"]) for t in everything] == [
        ("default", "table1"),
        ("default", "table3"),
        ("default", "table7"),
        ("second", "tableA"),
        ("second", "tableB"),
    ]
    assert {t["share"] for t in everything} == {"SHARE1"}


def test_empty_listings_are_empty_objects(catalog: Catalog) -> None:
    assert catalog.list_schemas("share3").to_json() == {}
    assert catalog.list_tables("share1", "empty").to_json() == {}
    assert catalog.list_all_tables("share4").to_json() == {}
    assert (
        Catalog(parse_config({"version": 1, "signingSecret": SECRET})).list_shares().to_json() == {}
    )


# --- paging ---------------------------------------------------------------------------------


@pytest.mark.parametrize("max_results", [1, 2, 3, 4, 5, 6, 500])
def test_paging_visits_every_item_once_for_every_page_size(
    catalog: Catalog, max_results: int
) -> None:
    listings = {
        "shares": (catalog.list_shares, lambda: catalog.list_shares().items),
        "schemas": (
            lambda m, t: catalog.list_schemas("share1", m, t),
            lambda: catalog.list_schemas("share1").items,
        ),
        "tables": (
            lambda m, t: catalog.list_tables("share1", "default", m, t),
            lambda: catalog.list_tables("share1", "default").items,
        ),
        "all-tables": (
            lambda m, t: catalog.list_all_tables("share1", m, t),
            lambda: catalog.list_all_tables("share1").items,
        ),
    }
    for fetch, everything in listings.values():
        expected = list(everything())
        items, pages = collect(fetch, max_results)
        assert items == expected
        assert pages == max(1, -(-len(expected) // max_results))


def test_last_page_has_no_token_and_full_page_then_stops(catalog: Catalog) -> None:
    first = catalog.list_shares(5)
    assert len(first.items) == 5
    assert first.next_page_token is None
    assert "nextPageToken" not in first.to_json()


def test_max_results_zero_returns_no_items_but_a_token(catalog: Catalog) -> None:
    page = catalog.list_shares(0)
    assert page.items == ()
    assert page.next_page_token
    assert page.to_json() == {"nextPageToken": page.next_page_token}
    following = catalog.list_shares(2, page.next_page_token)
    assert [i["name"] for i in following.items] == ["share1", "Share2"]


@pytest.mark.parametrize("max_results", [-1, 501, 10_000])
def test_max_results_out_of_range(catalog: Catalog, max_results: int) -> None:
    with pytest.raises(InvalidParameter) as info:
        catalog.list_shares(max_results)
    assert info.value.message == (
        "Acceptable values of 'maxResults' are 0 to 500, inclusive. (Default: 500)"
    )
    assert info.value.status == 400
    assert info.value.error_code == "INVALID_PARAMETER_VALUE"


@pytest.mark.parametrize("token", ["garbage", "a.b", "x" * 20_000, "eyJwIjp7fX0.AAAA"])
def test_bad_tokens(catalog: Catalog, token: str) -> None:
    with pytest.raises(InvalidParameter, match=r"^invalid 'nextPageToken'$"):
        catalog.list_shares(1, token)


def test_tokens_are_bound_to_their_listing(catalog: Catalog) -> None:
    shares_token = catalog.list_shares(1).next_page_token
    schemas_token = catalog.list_schemas("share1", 1).next_page_token
    tables_token = catalog.list_tables("share1", "default", 1).next_page_token
    all_tables_token = catalog.list_all_tables("share1", 1).next_page_token
    assert None not in (shares_token, schemas_token, tables_token, all_tables_token)
    foreign = [
        lambda: catalog.list_schemas("share1", 1, shares_token),
        lambda: catalog.list_shares(1, schemas_token),
        lambda: catalog.list_schemas("Share2", 1, schemas_token),
        lambda: catalog.list_tables("share1", "second", 1, tables_token),
        lambda: catalog.list_all_tables("share1", 1, tables_token),
        lambda: catalog.list_tables("share1", "default", 1, all_tables_token),
    ]
    for call in foreign:
        with pytest.raises(InvalidParameter, match="invalid 'nextPageToken'"):
            call()
    # The same listing spelled differently is the same listing.
    assert catalog.list_schemas("SHARE1", 1, schemas_token).items[0]["name"] == "second"


def test_tokens_from_another_secret_are_rejected(catalog: Catalog) -> None:
    other = Catalog(make_config(), TokenCodec(b"some-other-secret-0123456789"))
    token = other.list_shares(1).next_page_token
    assert token is not None
    with pytest.raises(InvalidParameter):
        catalog.list_shares(1, token)


def test_tokens_survive_a_restart_with_the_same_secret() -> None:
    token = Catalog(make_config()).list_shares(2).next_page_token
    assert token is not None
    page = Catalog(make_config()).list_shares(2, token)
    assert [i["name"] for i in page.items] == ["share3", "share4"]


def test_offset_beyond_the_listing_is_invalid(catalog: Catalog) -> None:
    codec = TokenCodec(SECRET.encode())
    forged = codec.encode("list-shares", {"o": 99, "s": "", "c": ""})
    with pytest.raises(InvalidParameter):
        catalog.list_shares(1, forged)
    at_end = codec.encode("list-shares", {"o": 5, "s": "", "c": ""})
    assert catalog.list_shares(1, at_end).to_json() == {}


def test_empty_page_token_means_first_page(catalog: Catalog) -> None:
    assert catalog.list_shares(1, "").items == ({"name": "share1"},)
