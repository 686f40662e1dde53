"""The demo share that `lakeshare serve` serves when it is given no configuration.

A fresh machine has no Delta tables, so the first start builds a few small but real ones
and a configuration sharing them, which makes the README's run command show the features
a recipient cares about rather than an empty server:

- `demo.sales.orders`: partitioned by `region`, five versions (create, append, update,
  delete, append) for time travel, with the change data feed enabled so that the update
  and delete commits carry `_change_data` files.
- `demo.sales.customers`: two data files and two hand-written commits that upgrade the
  protocol to reader 3 / writer 7 with the `deletionVectors` feature and soft-delete rows
  with deletion vectors (`deltalake` cannot write DVs; see `app.dv_writer`).
- `demo.sales.events`: a `timestamp_ntz` column, which needs the `timestampNtz` feature.
- `demo.sales.orders_by_region`: the orders table again, shared with the partition filter
  `region = current_recipient('region')` (sharing.slices), and two configured recipients,
  `north-partner` and `south-partner`, whose `region` properties differ: each reads its own
  slice of the same table name (their profiles are written beside the demo's own, whose
  recipient has no properties and so sees no row of it).

Everything is derived from row numbers, so every build holds the same rows. The tables are
built in a temporary directory that is renamed into place once complete: a start that was
interrupted half-way leaves no table a later start would mistake for a finished one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from deltalake import DeltaTable, write_deltalake

from app.dv_writer import write_deletion_vector_file

logger = logging.getLogger(__name__)

SHARE = "demo"
SCHEMA = "sales"
TABLES = ("orders", "customers", "events")
FILTERED_TABLE = "orders_by_region"
"""The orders table shared again with a partition filter on the recipient's region."""
FILTERED_LOCATION = "orders"
PARTITION_FILTER = "region = current_recipient('region')"
PARTNERS = (("north-partner", "north"), ("south-partner", "south"))
"""Configured recipients of the demo and their `region` property."""

DEMO_FORMAT = 1
"""Bump when the demo tables change, so existing demo directories are rebuilt."""

_MARKER = ".lakeshare-demo.json"
_STALE_TEMP_SECONDS = 600
_COMMIT_SPACING_MS = 60_000
"""Commits are dated a minute apart, so timestamp-based time travel has distinct points."""

_REGIONS = ("north", "south", "east", "west")
_PRODUCTS = (
    ("kayak", Decimal("499.00")),
    ("paddle", Decimal("39.90")),
    ("life vest", Decimal("59.50")),
    ("dry bag", Decimal("24.95")),
    ("tent", Decimal("189.00")),
    ("lantern", Decimal("18.75")),
)
_FIRST_NAMES = ("Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Femi", "Grace", "Hiro", "Ines")
_LAST_NAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Silva", "Novak", "Haddad")
_COUNTRIES = ("DE", "FR", "JP", "BR", "NG", "SE", "US", "CA")
_EVENT_KINDS = ("page_view", "add_to_cart", "checkout")

_ORDERS_SCHEMA = pa.schema(
    [
        ("order_id", pa.int64()),
        ("customer_id", pa.int64()),
        ("region", pa.string()),
        ("order_date", pa.date32()),
        ("product", pa.string()),
        ("quantity", pa.int32()),
        ("amount", pa.decimal128(10, 2)),
        ("status", pa.string()),
    ]
)
_CUSTOMERS_SCHEMA = pa.schema(
    [
        ("customer_id", pa.int64()),
        ("name", pa.string()),
        ("email", pa.string()),
        ("country", pa.string()),
        ("signup_date", pa.date32()),
        ("lifetime_value", pa.float64()),
        ("active", pa.bool_()),
    ]
)
_EVENTS_SCHEMA = pa.schema(
    [
        ("event_id", pa.int64()),
        ("occurred_at", pa.timestamp("us")),
        ("customer_id", pa.int64()),
        ("kind", pa.string()),
    ]
)


def prepare_demo(base_dir: Path) -> Path:
    """Make sure `base_dir` holds the demo tables and a config sharing them; return its path.

    Reuses complete tables and a valid config from an earlier start (so the bearer token in
    a recipient's profile keeps working), rebuilds tables that are missing or incomplete,
    and rewrites the config only when it is missing, unreadable or points elsewhere.
    """
    base_dir = base_dir.resolve()
    base_dir.mkdir(parents=True, exist_ok=True)
    _remove_stale_temp_dirs(base_dir)
    tables_dir = base_dir / "tables"
    if not _tables_complete(tables_dir):
        started = time.monotonic()
        _build_tables(base_dir, tables_dir)
        logger.info("built demo tables in %s (%.1f s)", tables_dir, time.monotonic() - started)
    config_path = base_dir / "config.yaml"
    _ensure_config(config_path, tables_dir)
    return config_path


# --- directory management -------------------------------------------------------------


def _tables_complete(tables_dir: Path) -> bool:
    """Whether `tables_dir` is a finished build of the current demo format."""
    try:
        marker = json.loads((tables_dir / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("format") != DEMO_FORMAT:
        return False
    return all((tables_dir / name / "_delta_log").is_dir() for name in TABLES)


def _remove_stale_temp_dirs(base_dir: Path) -> None:
    """Delete build directories left behind by interrupted starts.

    Only old ones: a young one may belong to another process building right now.
    """
    cutoff = time.time() - _STALE_TEMP_SECONDS
    for candidate in base_dir.glob(".tables-*.tmp"):
        try:
            if candidate.is_dir() and candidate.stat().st_mtime < cutoff:
                shutil.rmtree(candidate, ignore_errors=True)
        except OSError:
            continue


def _build_tables(base_dir: Path, tables_dir: Path) -> None:
    """Build all demo tables in a temporary directory, then rename it to `tables_dir`."""
    staging = Path(tempfile.mkdtemp(prefix=".tables-", suffix=".tmp", dir=base_dir))
    try:
        _create_orders(staging / "orders")
        _create_customers(staging / "customers")
        _create_events(staging / "events")
        (staging / _MARKER).write_text(json.dumps({"format": DEMO_FORMAT}) + "\n")
        if tables_dir.exists() and not _tables_complete(tables_dir):
            # Move the broken build aside atomically before deleting it, so the final
            # rename never sees a half-deleted directory.
            trash = Path(tempfile.mkdtemp(prefix=".tables-", suffix=".tmp", dir=base_dir))
            os.rename(tables_dir, trash / "old")
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(staging, tables_dir)
        except OSError:
            if not _tables_complete(tables_dir):
                raise
            # Another process finished an identical build first; keep theirs.
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# --- configuration ----------------------------------------------------------------------


def _ensure_config(config_path: Path, tables_dir: Path) -> None:
    """Write the demo config unless a usable one for these tables is already there."""
    existing = _read_yaml(config_path)
    token = _nested_str(existing, "authorization", "bearerToken")
    secret = _nested_str(existing, "signingSecret")
    partner_tokens = _partner_tokens(existing)
    if (
        token
        and secret
        and _config_locations(existing) == _expected_locations(tables_dir)
        and set(partner_tokens) == {name for name, _ in PARTNERS}
    ):
        return
    config = _demo_config(
        tables_dir,
        bearer_token=token or secrets.token_urlsafe(32),
        signing_secret=secret or secrets.token_urlsafe(48),
        table_ids=_config_table_ids(existing),
        partner_tokens=partner_tokens,
    )
    header = (
        "# Lakeshare demo configuration, written by `lakeshare serve` on first start.\n"
        "# The bearer token and signing secret were generated for this machine; keep them\n"
        "# private. Delete this directory to start over with new ones.\n"
    )
    text = header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    _write_private(config_path, text)


def _demo_config(
    tables_dir: Path,
    *,
    bearer_token: str,
    signing_secret: str,
    table_ids: dict[str, str],
    partner_tokens: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The configuration (reference server format plus `signingSecret`, the filtered
    table and its two recipients) for the demo."""
    tables: list[dict[str, Any]] = [
        {
            "name": name,
            "location": str(tables_dir / name),
            "id": table_ids.get(name) or str(uuid.uuid4()),
            "historyShared": True,
        }
        for name in TABLES
    ]
    tables.append(
        {
            "name": FILTERED_TABLE,
            "location": str(tables_dir / FILTERED_LOCATION),
            "id": table_ids.get(FILTERED_TABLE) or str(uuid.uuid4()),
            "historyShared": True,
            "partitionFilter": PARTITION_FILTER,
        }
    )
    tokens = partner_tokens or {}
    recipients = [
        {
            "name": name,
            "shares": [SHARE],
            "properties": {"region": region},
            "comment": f"demo partner: sees the {region} slice of {FILTERED_TABLE}",
            "credentials": [{"token": tokens.get(name) or secrets.token_urlsafe(32)}],
        }
        for name, region in PARTNERS
    ]
    return {
        "version": 1,
        "shares": [{"name": SHARE, "schemas": [{"name": SCHEMA, "tables": tables}]}],
        "recipients": recipients,
        "authorization": {"bearerToken": bearer_token},
        "host": "127.0.0.1",
        "port": 8080,
        "endpoint": "/delta-sharing",
        "signingSecret": signing_secret,
    }


def _read_yaml(path: Path) -> Any:
    """The parsed file, or None when it is missing or not YAML."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _nested_str(value: Any, *keys: str) -> str | None:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value if isinstance(value, str) and value else None


def _demo_tables(config: Any) -> list[dict[str, Any]]:
    """The table entries of the demo share's demo schema in a parsed config."""
    if not isinstance(config, dict):
        return []
    for share in config.get("shares") or []:
        if not isinstance(share, dict) or share.get("name") != SHARE:
            continue
        for schema in share.get("schemas") or []:
            if isinstance(schema, dict) and schema.get("name") == SCHEMA:
                return [t for t in schema.get("tables") or [] if isinstance(t, dict)]
    return []


def _config_locations(config: Any) -> dict[str, str]:
    return {str(t.get("name")): str(t.get("location")) for t in _demo_tables(config)}


def _config_table_ids(config: Any) -> dict[str, str]:
    return {str(t["name"]): str(t["id"]) for t in _demo_tables(config) if t.get("id")}


def _expected_locations(tables_dir: Path) -> dict[str, str]:
    expected = {name: str(tables_dir / name) for name in TABLES}
    expected[FILTERED_TABLE] = str(tables_dir / FILTERED_LOCATION)
    return expected


def _partner_tokens(config: Any) -> dict[str, str]:
    """The demo partners' tokens in a parsed config (kept across rewrites, so a partner's
    profile keeps working)."""
    found: dict[str, str] = {}
    partners = {name for name, _ in PARTNERS}
    recipients = config.get("recipients") if isinstance(config, dict) else None
    for entry in recipients if isinstance(recipients, list) else []:
        if not isinstance(entry, dict) or entry.get("name") not in partners:
            continue
        credentials = entry.get("credentials")
        first = credentials[0] if isinstance(credentials, list) and credentials else None
        token = _nested_str(first, "token")
        if token:
            found[str(entry["name"])] = token
    return found


def _write_private(path: Path, text: str) -> None:
    """Atomically replace `path` with `text`, readable by the owner only (it holds secrets)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- orders: partitions, time travel, change data feed ---------------------------------


def _orders(first_id: int, count: int) -> pa.Table:
    """Orders `first_id ..` : every 17th is cancelled, the rest pending; 20 a day from Oct 1."""
    rows = range(first_id, first_id + count)
    products = [_PRODUCTS[(i * 7) % len(_PRODUCTS)] for i in rows]
    quantities = [1 + (i * 13) % 4 for i in rows]
    return pa.table(
        {
            "order_id": list(rows),
            "customer_id": [1 + (i * 37) % 300 for i in rows],
            "region": [_REGIONS[i % len(_REGIONS)] for i in rows],
            "order_date": [dt.date(2026, 10, 1) + dt.timedelta(days=(i - 1) // 20) for i in rows],
            "product": [name for name, _ in products],
            "quantity": quantities,
            "amount": [price * q for (_, price), q in zip(products, quantities, strict=True)],
            "status": ["cancelled" if i % 17 == 0 else "pending" for i in rows],
        },
        schema=_ORDERS_SCHEMA,
    )


def _create_orders(path: Path) -> None:
    """Versions 0-4: create (240 rows), append (120), ship old orders, drop cancelled, append (60).

    Row counts per version: 240, 360, 360, 339, 399.
    """
    uri = str(path)
    write_deltalake(
        uri,
        _orders(1, 240),
        partition_by=["region"],
        name="orders",
        description="Orders of the demo shop, partitioned by region.",
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    write_deltalake(uri, _orders(241, 120), mode="append", partition_by=["region"])
    table = DeltaTable(uri)
    table.update(
        updates={"status": "'shipped'"},
        predicate="status = 'pending' AND order_date < '2026-10-10'",
    )
    table.delete("status = 'cancelled'")
    write_deltalake(uri, _orders(361, 60), mode="append", partition_by=["region"])
    _spread_commit_times(path)


# --- customers: deletion vectors --------------------------------------------------------


def _customers(first_id: int, count: int) -> pa.Table:
    rows = range(first_id, first_id + count)
    first = [_FIRST_NAMES[i % len(_FIRST_NAMES)] for i in rows]
    last = [_LAST_NAMES[(i * 3) % len(_LAST_NAMES)] for i in rows]
    return pa.table(
        {
            "customer_id": list(rows),
            "name": [f"{f} {n}" for f, n in zip(first, last, strict=True)],
            "email": [
                f"{f.lower()}.{n.lower()}.{i}@example.com"
                for f, n, i in zip(first, last, rows, strict=True)
            ],
            "country": [_COUNTRIES[(i * 5) % len(_COUNTRIES)] for i in rows],
            "signup_date": [dt.date(2024, 1, 1) + dt.timedelta(days=(i * 11) % 700) for i in rows],
            "lifetime_value": [round(((i * 7919) % 250_000) / 100, 2) for i in rows],
            "active": [i % 9 != 0 for i in rows],
        },
        schema=_CUSTOMERS_SCHEMA,
    )


def _create_customers(path: Path) -> None:
    """Versions 0-3: two files of 150 customers, then two DV commits.

    Version 2 enables deletion vectors and soft-deletes every 15th customer of the first
    file (10 rows). Version 3 replaces that DV with a larger one (also every 25th: 14 rows)
    and gives the second file its first DV (every 40th: 4 rows); both DVs share one file
    under a random-prefix directory, at different offsets. Rows per version: 150, 300,
    290, 282.
    """
    uri = str(path)
    write_deltalake(
        uri,
        _customers(1, 150),
        name="customers",
        description="Customers of the demo shop; erased customers are soft-deleted.",
    )
    write_deltalake(uri, _customers(151, 150), mode="append")
    first_file, second_file = _active_adds(path, expected=2)

    metadata = _latest_action(path, "metaData")
    metadata["configuration"] = {
        **(metadata.get("configuration") or {}),
        "delta.enableDeletionVectors": "true",
    }
    protocol = {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        # appendOnly and invariants are implied by the table's old writer version 2 and
        # must be listed explicitly once the table uses table features.
        "writerFeatures": ["appendOnly", "invariants", "deletionVectors"],
    }
    first_rows = _row_indexes(path, first_file, lambda cid: cid % 15 == 0)
    [first_dv] = write_deletion_vector_file(path, [first_rows])
    first_with_dv = _with_deletion_vector(first_file, first_dv.descriptor())
    _commit(
        path,
        2,
        [
            {"protocol": protocol},
            {"metaData": metadata},
            {"remove": _remove_of(first_file)},
            {"add": first_with_dv},
        ],
        operation="DELETE",
        parameters={"predicate": "customer_id % 15 = 0"},
    )

    grown_rows = _row_indexes(path, first_file, lambda cid: cid % 15 == 0 or cid % 25 == 0)
    second_rows = _row_indexes(path, second_file, lambda cid: cid % 40 == 0)
    grown_dv, second_dv = write_deletion_vector_file(path, [grown_rows, second_rows], prefix="dv")
    _commit(
        path,
        3,
        [
            {"remove": _remove_of(first_with_dv)},
            {"add": _with_deletion_vector(first_file, grown_dv.descriptor())},
            {"remove": _remove_of(second_file)},
            {"add": _with_deletion_vector(second_file, second_dv.descriptor())},
        ],
        operation="DELETE",
        parameters={"predicate": "customer_id % 25 = 0 OR customer_id % 40 = 0"},
    )
    _spread_commit_times(path)


def _row_indexes(path: Path, add: dict[str, Any], deleted: Callable[[int], bool]) -> list[int]:
    """Positions (from 0) of the rows of `add`'s data file whose customer id is `deleted`."""
    ids = pq.read_table(path / add["path"], columns=["customer_id"])
    return [index for index, cid in enumerate(ids["customer_id"].to_pylist()) if deleted(cid)]


def _active_adds(path: Path, *, expected: int) -> list[dict[str, Any]]:
    """The active add actions, in commit order; the DV commits rely on one file per write."""
    adds: dict[str, dict[str, Any]] = {}
    for action in _log_actions(path):
        if "add" in action:
            adds[action["add"]["path"]] = action["add"]
        elif "remove" in action:
            adds.pop(action["remove"]["path"], None)
    if len(adds) != expected:
        raise RuntimeError(f"expected {expected} data files in {path}, found {len(adds)}")
    return list(adds.values())


def _with_deletion_vector(add: dict[str, Any], descriptor: dict[str, Any]) -> dict[str, Any]:
    """`add` re-added with a DV; stats keep `numRecords` (the file's rows) as the spec asks."""
    stats = json.loads(add["stats"])
    if "numRecords" not in stats:
        raise RuntimeError(f"{add['path']} has no numRecords statistic")
    stats["tightBounds"] = False
    result = {k: v for k, v in add.items() if v is not None and k != "deletionVector"}
    result["dataChange"] = True
    result["stats"] = json.dumps(stats, separators=(",", ":"))
    result["deletionVector"] = descriptor
    return result


def _remove_of(add: dict[str, Any]) -> dict[str, Any]:
    """The remove action for the logical file (path and DV) that `add` added."""
    remove: dict[str, Any] = {
        "path": add["path"],
        "deletionTimestamp": int(time.time() * 1000),
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": add.get("partitionValues") or {},
        "size": add["size"],
    }
    if add.get("deletionVector"):
        remove["deletionVector"] = add["deletionVector"]
    return remove


# --- events: timestamp without time zone ------------------------------------------------


def _create_events(path: Path) -> None:
    """One version of 96 web events whose `occurred_at` is a `timestamp_ntz`."""
    rows = range(1, 97)
    start = dt.datetime(2026, 10, 1, 8, 0)
    events = pa.table(
        {
            "event_id": list(rows),
            "occurred_at": [start + dt.timedelta(minutes=37 * i) for i in rows],
            "customer_id": [1 + (i * 53) % 300 for i in rows],
            "kind": [_EVENT_KINDS[(i * i) % len(_EVENT_KINDS)] for i in rows],
        },
        schema=_EVENTS_SCHEMA,
    )
    write_deltalake(
        str(path),
        events,
        name="events",
        description="Web events with local (time-zone-less) timestamps.",
    )
    _spread_commit_times(path)


# --- the Delta log, by hand -------------------------------------------------------------


def _log_files(path: Path) -> list[Path]:
    return sorted((path / "_delta_log").glob("[0-9]" * 20 + ".json"))


def _log_actions(path: Path) -> Iterable[dict[str, Any]]:
    for commit in _log_files(path):
        for line in commit.read_text().splitlines():
            if line.strip():
                yield json.loads(line)


def _latest_action(path: Path, kind: str) -> dict[str, Any]:
    latest: dict[str, Any] | None = None
    for action in _log_actions(path):
        if kind in action:
            latest = action[kind]
    if latest is None:
        raise RuntimeError(f"no {kind} action in {path}")
    return dict(latest)


def _commit(
    path: Path,
    version: int,
    actions: list[dict[str, Any]],
    *,
    operation: str,
    parameters: dict[str, str],
) -> None:
    """Write commit `version`; fails rather than overwrite, as Delta's put-if-absent demands."""
    commit_info = {
        "commitInfo": {
            "timestamp": int(time.time() * 1000),
            "operation": operation,
            "operationParameters": parameters,
            "engineInfo": "lakeshare-demo",
        }
    }
    lines = [commit_info, *actions]
    target = path / "_delta_log" / f"{version:020d}.json"
    with target.open("x") as handle:
        for action in lines:
            handle.write(json.dumps(action, separators=(",", ":")) + "\n")


def _spread_commit_times(path: Path) -> None:
    """Date the commit files a minute apart, ending now.

    Readers take a commit's timestamp from its file's modification time; commits written
    within the same few milliseconds would make timestamp-based time travel ambiguous.
    """
    commits = _log_files(path)
    now_ms = int(time.time() * 1000)
    for index, commit in enumerate(commits):
        stamp = (now_ms - (len(commits) - 1 - index) * _COMMIT_SPACING_MS) / 1000
        os.utime(commit, (stamp, stamp))
