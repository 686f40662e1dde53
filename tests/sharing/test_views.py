"""Shared views without a JVM: the SQL checks (with the line and column of each problem),
the configuration's refusals, the rewrite for Spark (current_recipient as a parameter
marker, never a value in the text) and the catalog serving each recipient the
materialization of its own tuple."""

from __future__ import annotations

from typing import Any

import pytest

from sharing.catalog import Catalog
from sharing.config import ConfigError
from sharing.s3.scope import iceberg_scope, reads_whole, slice_scope
from sharing.slices import Viewer
from sharing.views.materializations import view_tuple
from sharing.views.sql import SourceRef, ViewSqlError, parse_view
from tests.support.server import make_config

VIEW = """SELECT o.id, CASE WHEN current_recipient('tier') = 'gold' THEN o.amount END AS amount,
       "current_recipient('x')" AS note
FROM sales.eu.orders o JOIN `sales`.`eu`.`customer list` c ON o.c = c.id
WHERE o.country = current_recipient('country')"""


def test_a_view_reads_its_keys_and_sources() -> None:
    query = parse_view(VIEW)
    assert query.keys == ("country", "tier")
    assert [str(s) for s in query.sources] == ["sales.eu.orders", "sales.eu.customer list"]
    assert [(u.line, u.column) for u in query.uses] == [(3, 6), (3, 29)]


def test_spark_sql_binds_current_recipient_as_parameters_on_the_tree() -> None:
    query = parse_view(VIEW)
    names = {source: f"v{i}" for i, source in enumerate(query.sources)}
    sql, parameters = query.spark_sql(names)
    assert parameters == {"r0": "country", "r1": "tier"}
    assert "WHEN :r1 = 'gold'" in sql and "o.country = :r0" in sql
    # The string literal that merely spells current_recipient is left as it is.
    assert "'current_recipient(\\'x\\')' AS note" in sql and sql.count(":r") == 2
    assert "FROM `v0` AS o JOIN `v1` AS c" in sql
    assert "sales" not in sql


def test_delta_locations_are_sources() -> None:
    query = parse_view("SELECT id FROM delta.`s3://bucket/path/t` WHERE id > 1")
    assert query.sources == (SourceRef(uri="s3://bucket/path/t"),)
    assert query.spark_sql({query.sources[0]: "v0"})[0] == "SELECT id FROM `v0` WHERE id > 1"


@pytest.mark.parametrize(
    ("sql", "line", "column", "message"),
    [
        ("SELECT id,\n  rand() AS r FROM a.b.c", 2, 3, "rand() is not deterministic"),
        ("SELECT id FROM a.b.c\nWHERE ts < now()", 2, 12, "now() is not deterministic"),
        ("SELECT uuid() AS u FROM a.b.c", 1, 8, "uuid() is not deterministic"),
        ("SELECT shuffle(xs) AS s FROM a.b.c", 1, 8, "shuffle() is not deterministic"),
        ("SELECT randn() AS r FROM a.b.c", 1, 8, "randn() is not deterministic"),
        ("SELECT id FROM a.b.c\n  WHERE my_udf(id)", 2, 9, "unknown function my_udf()"),
        ("SELECT cat.fn(id) AS x FROM a.b.c", 1, 8, "calls a function of a catalog"),
        ("SELECT id FROM a.b.c;\n\n  SELECT 1 AS one", 3, 3, "several statements"),
        ("INSERT INTO a.b.c VALUES (1)", 1, 1, "not INSERT"),
        ("DROP TABLE a.b.c", 1, 1, "not DROP"),
        ("SELECT id FROM\n   b.c", 2, 4, "is not a table a view can read"),
        ("SELECT id FROM parquet.`/data`", 1, 16, "is not a table a view can read"),
        ("SELECT * FROM range(10)", 1, 15, "not a table-valued function"),
        ("SELECT upper(name) FROM a.b.c", 1, 8, "column 1 (UPPER(name)) needs a name"),
        ("SELECT id FROM a.b.c WHERE id = :p", 1, 28, "parameter markers are not allowed"),
        ("SELECT current_recipient(id) AS k FROM a.b.c", 1, 8, "one string literal"),
        ("SELECT id FROM a.b.c TABLESAMPLE (5 PERCENT)", 1, 35, "TABLESAMPLE"),
        ("SELECT id FROM a.b.c WHERE", 1, 1, "not valid Spark SQL"),
    ],
)
def test_refusals_name_the_problem_and_where(
    sql: str, line: int, column: int, message: str
) -> None:
    with pytest.raises(ViewSqlError) as raised:
        parse_view(sql)
    assert message in raised.value.message
    if message != "not valid Spark SQL":
        assert (raised.value.line, raised.value.column) == (line, column)
    assert str(raised.value).startswith(f"line {raised.value.line}, column {raised.value.column}:")


def _config(*tables: dict[str, Any], **settings: Any) -> Any:
    shares = [{"name": "sales", "schemas": [{"name": "eu", "tables": list(tables)}]}]
    return make_config({"shares": shares, **settings})


ORDERS = {"name": "orders", "location": "/tmp/orders"}


def test_the_configuration_refuses_a_view_naming_an_unknown_table() -> None:
    view = {"name": "v", "view": "SELECT id\nFROM sales.eu.orders JOIN sales.eu.nope n ON true"}
    with pytest.raises(ConfigError) as raised:
        _config(ORDERS, view)
    assert raised.value.path == "shares[0].schemas[0].tables[1].view"
    assert "line 2, column 27: unknown table sales.eu.nope" in raised.value.message


def test_the_configuration_reports_sql_problems_at_the_view_key() -> None:
    with pytest.raises(ConfigError) as raised:
        _config(ORDERS, {"name": "v", "view": "SELECT id FROM sales.eu.orders\nWHERE rand() > 0.5"})
    assert raised.value.path == "shares[0].schemas[0].tables[1].view"
    assert "invalid view: line 2, column 7: rand() is not deterministic" in raised.value.message


def test_a_view_nested_too_deeply_is_a_configuration_error() -> None:
    # Failed before the fix: the parser's RecursionError escaped the configuration's check.
    nested = "(" * 3000 + "1" + ")" * 3000
    view = {"name": "v", "view": f"SELECT {nested} AS n FROM sales.eu.orders"}
    with pytest.raises(ConfigError) as raised:
        _config(ORDERS, view)
    assert raised.value.path == "shares[0].schemas[0].tables[1].view"
    assert "invalid view: line 1, column 1: the query is nested too deeply" in raised.value.message


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"location": "/tmp/x"}, "either 'location' or 'view'"),
        ({"partitionFilter": "a = 'x'"}, "'partitionFilter' does not apply to a view"),
        ({"compatibleCopy": True}, "'compatibleCopy' does not apply to a view"),
    ],
)
def test_view_entries_refuse_table_settings(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(ORDERS, {"name": "v", "view": "SELECT id FROM sales.eu.orders", **extra})


def test_a_view_of_a_view_is_refused() -> None:
    first = {"name": "v1", "view": "SELECT id FROM sales.eu.orders"}
    second = {"name": "v2", "view": "SELECT id FROM sales.eu.v1"}
    with pytest.raises(ConfigError, match=r"sales\.eu\.v1 is a view"):
        _config(ORDERS, first, second)


def test_each_recipient_is_served_the_materialization_of_its_current_tuple() -> None:
    view = {"name": "v", "view": "SELECT id FROM sales.eu.orders WHERE c = current_recipient('c')"}
    config = _config(ORDERS, view, views={"location": "/lake/views"})
    catalog = Catalog(config)
    everything = frozenset({"*"})

    def served(recipient: str, **properties: str) -> Any:
        viewer = Viewer(recipient, tuple(sorted(properties.items())))
        return catalog.visible_to(everything, viewer).get_table("sales", "eu", "v")

    fr, de = served("a", c="FR", other="x"), served("b", c="DE")
    assert fr.is_view and fr.config.location != de.config.location
    assert fr.config.location.startswith("/lake/views/views/sales.eu.v/")
    assert fr.slice_key != de.slice_key and fr.slice_key.startswith("view:")
    # Same values, same materialization (properties the view does not read do not count).
    assert served("c", c="FR").config.location == fr.config.location
    # Properties changed: another tuple at once; no property: the NULL tuple.
    assert served("a", c="DE").config.location == de.config.location
    assert served("a").config.location not in (fr.config.location, de.config.location)
    assert fr.config.history_shared and fr.partition_filter is None
    listed = catalog.visible_to(everything).list_tables("sales", "eu").items
    assert [t["name"] for t in listed] == ["orders", "v"]


def test_a_view_offers_no_directory_access() -> None:
    """A view's temporary credentials are refused, so its listing offers no `location` /
    `dir` access even with `historyShared`; and an S3-endpoint key for it (loadTable) is
    never the materialization's whole folder, whose log records the tuple's values and
    every source's version."""
    view = {
        "name": "v",
        "view": "SELECT id FROM sales.eu.orders WHERE c = current_recipient('c')",
        "historyShared": True,
    }
    orders = {**ORDERS, "historyShared": True}
    catalog = Catalog(_config(orders, view, views={"location": "/lake/views"}))
    everything = frozenset({"*"})
    listed = {t["name"]: t for t in catalog.visible_to(everything).list_tables("sales", "eu").items}
    assert "accessModes" in listed["orders"]  # a local table with history: directory access
    assert "location" not in listed["v"] and "accessModes" not in listed["v"]
    served = catalog.visible_to(everything, Viewer("a", (("c", "FR"),))).get_table(
        "sales", "eu", "v"
    )
    assert not reads_whole(served)
    assert iceberg_scope(served) == slice_scope(served)


def test_tuples_take_the_view_keys_in_order() -> None:
    query = parse_view(VIEW)
    values = view_tuple(query, (("tier", "gold"), ("zone", "z")))
    assert values.as_dict == {"country": None, "tier": "gold"}
    assert values.id("sales.eu.v") != view_tuple(query, (("tier", "silver"),)).id("sales.eu.v")


def test_table_checks_describe_a_view_without_reading_storage() -> None:
    """`lakeshare check` and the admin API's check of one table (which failed with a 500
    before: a view was left out of the reports)."""
    from sharing.table_check import check_tables, configured_tables
    from sharing.tables import TableService

    view = {"name": "v", "view": "SELECT id FROM sales.eu.orders"}
    config = _config(ORDERS, view)
    tables = [t for t in configured_tables(config) if t.name == "v"]
    [report] = check_tables(TableService(config), tables, timeout_seconds=5)
    assert report.table == "sales.eu.v" and report.status.value == "ok"
    assert "a shared view" in report.notes[0]
