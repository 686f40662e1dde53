"""`lakeshare shares ...`: shares, schemas and tables created, changed and removed at run
time in the server's store (sharing.shares). Every command takes `--config FILE`, the file
`lakeshare serve` reads, to find the store and the storage profiles; running servers serve
a change within the store's `cacheSeconds`. Each change is one transaction, checked first
(a table that cannot be opened is refused with the reason, unless --force), and recorded
in the audit trail as the admin's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from app.cli_recipients import _fail, _table
from sharing.config import ConfigError, ServerConfig, load_config
from sharing.errors import SharingError
from sharing.recipients.audit import AuditEvent, insert_events
from sharing.recipients.names import ADMIN_RECIPIENT
from sharing.shares.admin import ShareAdmin, TableRefused
from sharing.shares.repository import ShareRepository
from sharing.store import Store, StoreError, open_store
from sharing.store.clock import now_ms
from sharing.tables import TableService

__all__ = ["add_share_commands"]


def add_share_commands(commands: Any) -> None:
    shares = commands.add_parser(
        "shares",
        help="manage the shares of the store (tables added without a restart)",
        description="Create, change and remove shares and their tables at run time. Shares "
        "of the configuration file are listed too, and are read-only here.",
    )
    sub = shares.add_subparsers(dest="shares_command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=help_text, description=help_text
        )
        parser.add_argument("--config", metavar="FILE", required=True, help="server config")
        parser.set_defaults(handler=handler)
        return parser

    listing = command("list", "list the shares (configuration file and store)", _list)
    listing.add_argument("--format", choices=("table", "json"), default="table")
    show = command("show", "show a share's schemas and table entries (JSON)", _show)
    show.add_argument("share")
    create = command("create", "create a share in the store", _create)
    create.add_argument("share")
    create.add_argument("--comment", default="")
    delete = command("delete", "delete a store share, its tables and its grants", _delete)
    delete.add_argument("share")

    add = command("add-table", "add a table to a store share (checked first)", _add_table)
    add.add_argument("table", metavar="SHARE.SCHEMA.TABLE")
    add.add_argument("--location", required=True, metavar="URI", help="table root")
    _entry_options(add)
    alter = command("alter-table", "change a table's entry (checked first)", _alter_table)
    alter.add_argument("table", metavar="SHARE.SCHEMA.TABLE")
    alter.add_argument("--location", metavar="URI", help="table root")
    alter.add_argument("--rename", metavar="NAME", help="new table name (its id stays)")
    alter.add_argument(
        "--unset", action="append", default=[], metavar="KEY", help="back to the default"
    )
    _entry_options(alter)
    remove = command("remove-table", "remove a table from a store share", _remove_table)
    remove.add_argument("table", metavar="SHARE.SCHEMA.TABLE")


def _entry_options(parser: argparse.ArgumentParser) -> None:
    history = parser.add_mutually_exclusive_group()
    history.add_argument(
        "--history-shared",
        dest="history_shared",
        action="store_const",
        const=True,
        help="share the history (time travel, change data feed, streaming)",
    )
    history.add_argument(
        "--no-history-shared", dest="history_shared", action="store_const", const=False
    )
    parser.add_argument("--start-version", type=int, metavar="N")
    copy = parser.add_mutually_exclusive_group()
    copy.add_argument(
        "--compatible-copy",
        dest="compatible_copy",
        action="store_const",
        const=True,
        help="keep a plain copy for parquet-only clients (`lakeshare views refresh`)",
    )
    copy.add_argument(
        "--no-compatible-copy", dest="compatible_copy", action="store_const", const=False
    )
    parser.add_argument("--comment")
    parser.add_argument("--storage-profile", metavar="NAME", help="a storageProfiles entry")
    parser.add_argument("--id", help="table id (default: derived from the name)")
    parser.add_argument(
        "--partition-filter",
        metavar="SQL",
        help="each recipient sees the files this predicate on partition columns selects "
        "(current_recipient('key') reads its properties; docs/slices.md)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other key of a configuration file's table (camelCase; VALUE is YAML)",
    )
    parser.add_argument(
        "--force", action="store_true", help="commit even if the table cannot be opened"
    )


# --- plumbing ------------------------------------------------------------------------------


def _run(args: argparse.Namespace, body: Any) -> int:
    try:
        config = load_config(Path(args.config))
        if not config.store.url:
            raise StoreError("no store is configured")
        store = open_store(config.store.url)
        try:
            admin = ShareAdmin(
                ShareRepository(store),
                lambda: config,
                TableService(config),
                audit=_auditor(store),
            )
            return int(body(config, admin) or 0)
        finally:
            store.close()
    except ConfigError as exc:
        return _fail(f"invalid configuration: {exc}", 2)
    except StoreError as exc:
        return _fail(str(exc))
    except TableRefused as exc:
        return _fail(exc.message)
    except SharingError as exc:
        return _fail(exc.message)


def _auditor(store: Store) -> Any:
    """Changes made here are the admin's, in the same audit trail as the admin API's."""

    def record(operation: str, share: str, schema: str | None, table: str | None) -> None:
        event = AuditEvent(
            at=now_ms(),
            operation=operation,
            status=200,
            recipient=ADMIN_RECIPIENT,
            client="cli",
            user_agent="lakeshare-cli",
            share=share,
            schema=schema,
            table=table,
        )
        insert_events(store, [event])

    return record


def _three_part(name: str) -> tuple[str, str, str]:
    parts = name.split(".")
    if len(parts) != 3 or not all(parts):
        raise SharingError(f"'{name}' is not SHARE.SCHEMA.TABLE (three names separated by dots)")
    return parts[0], parts[1], parts[2]


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, value in (
        ("location", args.location),
        ("historyShared", args.history_shared),
        ("startVersion", args.start_version),
        ("comment", args.comment),
        ("storageProfile", args.storage_profile),
        ("id", args.id),
        ("partitionFilter", args.partition_filter),
        ("compatibleCopy", args.compatible_copy),
    ):
        if value is not None:
            fields[key] = value
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SharingError(f"--set wants KEY=VALUE, got '{item}'")
        try:
            fields[key.strip()] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            raise SharingError(f"--set {key}: not a YAML value: {exc}") from None
    return fields


def _report(answer: dict[str, Any]) -> None:
    check = answer.get("check") or {}
    table = answer.get("table") or {}
    status = check.get("status", "-")
    line = f"{check.get('table', table.get('name'))}: {status}"
    if check.get("version") is not None:
        line += f", version {check['version']}, {check.get('num_files')} file(s)"
    print(line)
    for problem in check.get("problems", []):
        print(f"    problem: {problem} (committed with --force)")


# --- commands ------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        items = admin.list()
        if args.format == "json":
            print(json.dumps({"items": items}, indent=2))
            return 0
        rows = [(i["name"], i["source"], str(i["tables"]), i["comment"] or "-") for i in items]
        _table(("SHARE", "SOURCE", "TABLES", "COMMENT"), rows)
        return 0

    return _run(args, body)


def _show(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        print(json.dumps(admin.show(args.share), indent=2, ensure_ascii=False))
        return 0

    return _run(args, body)


def _create(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        share = admin.create(args.share, args.comment)
        print(f"created share {share['name']}")
        return 0

    return _run(args, body)


def _delete(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        answer = admin.delete(args.share)
        print(f"deleted share {args.share} ({answer['grantsRemoved']} grant(s) removed)")
        return 0

    return _run(args, body)


def _add_table(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        share, schema, table = _three_part(args.table)
        fields = {**_fields(args), "name": table}
        _report(admin.add_table(share, schema, fields, force=args.force))
        return 0

    return _run(args, body)


def _alter_table(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        share, schema, table = _three_part(args.table)
        changes: dict[str, Any] = {key: None for key in args.unset}
        changes.update(_fields(args))
        if args.rename:
            changes["name"] = args.rename
        if not changes:
            return _fail("nothing to change (give an option)", 2)
        _report(admin.alter_table(share, schema, table, changes, force=args.force))
        return 0

    return _run(args, body)


def _remove_table(args: argparse.Namespace) -> int:
    def body(config: ServerConfig, admin: ShareAdmin) -> int:
        share, schema, table = _three_part(args.table)
        print(f"removed {admin.remove_table(share, schema, table)['removed']}")
        return 0

    return _run(args, body)
