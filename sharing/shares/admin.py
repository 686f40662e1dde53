"""What a provider does with shares at run time — `lakeshare shares`, the admin API and a
console all call these, so each rule lives once:

- a share of the configuration file is read-only here (`ReadOnlyShare`, 409): it changes by
  editing the file and reloading;
- a table is checked like `lakeshare check` before it is committed (its latest snapshot
  opened, its start version within it): one that cannot be served is refused with the
  reason (`TableRefused`, 400), unless `force`;
- each change is one store transaction (sharing.shares.repository), seen by every process
  within `store.cacheSeconds`.

Answers are JSON-ready mappings (camelCase), the same for every caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sharing.catalog import SharedTable
from sharing.config import (
    ConfigError,
    SchemaConfig,
    ServerConfig,
    ShareConfig,
    TableConfig,
    default_table_id,
)
from sharing.config.context import LoadContext
from sharing.config.document import prepare
from sharing.config.loading import validate
from sharing.errors import InvalidParameter, ResourceNotFound, SharingError
from sharing.shares.entries import ENTRY_KEYS, table_entry
from sharing.shares.repository import ShareRepository, StoredShare
from sharing.table_check import Status, TableReport, check_tables
from sharing.tables import TableService

__all__ = ["ReadOnlyShare", "ShareAdmin", "TableRefused", "table_json"]

CHECK_SECONDS = 30.0


class ReadOnlyShare(SharingError):
    status = 409
    error_code = "INVALID_STATE"


class TableRefused(SharingError):
    status = 400
    error_code = "INVALID_PARAMETER_VALUE"

    def __init__(self, message: str, report: TableReport) -> None:
        super().__init__(message)
        self.report = report


def table_json(table: TableConfig) -> dict[str, Any]:
    """A table entry as the provider sees it (camelCase; never inline storage options)."""
    document = table.model_dump(mode="json", by_alias=True, exclude={"storage"})
    return {key: document[key] for key in ENTRY_KEYS if key in document}


def _share_json(share: ShareConfig, source: str, comment: str = "") -> dict[str, Any]:
    return {
        "name": share.name,
        "source": source,
        "comment": comment,
        "schemas": [
            {"name": schema.name, "tables": [table_json(t) for t in schema.tables]}
            for schema in share.schemas
        ],
    }


AuditHook = Callable[[str, str, str | None, str | None], None]


class ShareAdmin:
    def __init__(
        self,
        repository: ShareRepository,
        config: Callable[[], ServerConfig],
        tables: TableService,
        *,
        check_seconds: float = CHECK_SECONDS,
        audit: AuditHook | None = None,
    ) -> None:
        """`config` gives the configuration in force (it may be reloaded); `tables` opens
        tables for the check; `audit(operation, share, schema, table)` hears of each change
        made (the CLI records it; the admin API's requests are audited by the server)."""
        self.repository = repository
        self._config = config
        self._tables = tables
        self._check_seconds = check_seconds
        self._audit = audit

    # -- reads -----------------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        """Every share, the file's first, with its source and table count."""
        config = self._config()
        items = [
            {"name": s.name, "source": "config", "comment": "", "tables": _count(s)}
            for s in config.shares
        ]
        for stored in self.repository.shares(config):
            share = stored.share
            items.append(
                {
                    "name": share.name,
                    "source": "store",
                    "comment": stored.comment,
                    "tables": _count(share),
                }
            )
        return items

    def show(self, name: str) -> dict[str, Any]:
        config = self._config()
        for share in config.shares:
            if share.name.lower() == name.lower():
                return _share_json(share, "config")
        stored = self._stored(name, config)
        return _share_json(stored.share, "store", stored.comment)

    def check(self, name: str) -> Sequence[TableReport]:
        """The `lakeshare check` report of every table of the share (file or store)."""
        share = self._any_share(name)
        tables = [
            SharedTable(share.name, schema.name, table.name, table)
            for schema in share.schemas
            for table in schema.tables
        ]
        return check_tables(self._tables, tables, timeout_seconds=self._check_seconds)

    def check_table(self, share: str, schema: str, table: str) -> dict[str, Any]:
        """One table of either source checked now (`lakeshare check`'s report)."""
        shared = _find(self._any_share(share), schema, table)
        [report] = check_tables(self._tables, [shared], timeout_seconds=self._check_seconds)
        return {"table": table_json(shared.config), "check": report.to_json()}

    def _any_share(self, name: str) -> ShareConfig:
        config = self._config()
        found = next((s for s in config.shares if s.name.lower() == name.lower()), None)
        return found if found is not None else self._stored(name, config).share

    # -- writes ----------------------------------------------------------------------------

    def create(self, name: str, comment: str = "") -> dict[str, Any]:
        config = self._config()
        canonical = _share_name(name)
        if any(share.name.lower() == canonical.lower() for share in config.shares):
            raise ReadOnlyShare(
                f"share '{canonical}' is defined in the configuration file; a share name "
                "lives in the file or in the store, not both"
            )
        self.repository.create(canonical, comment)
        self._audited("create_share", canonical)
        return self.show(canonical)

    def delete(self, name: str) -> dict[str, Any]:
        self._writable(name)
        grants = self.repository.delete(name)
        self._audited("delete_share", name)
        return {"deleted": name, "grantsRemoved": grants}

    def add_table(
        self, share: str, schema: str, fields: Mapping[str, Any], *, force: bool = False
    ) -> dict[str, Any]:
        """Add a table (`fields`: the entry's camelCase keys, `name` and `location`
        required); its check report is in the answer."""
        config = self._config()
        stored = self._writable(share, config)
        schema_name = _schema_name(schema)
        entry = table_entry(fields, config)
        if not entry.id:
            entry = entry.model_copy(
                update={"id": default_table_id(stored.share.name, schema_name, entry.name)}
            )
        report = self._check(SharedTable(stored.share.name, schema_name, entry.name, entry), force)
        self.repository.add_table(share, schema_name, entry)
        self._audited("add_table", stored.share.name, schema_name, entry.name)
        return {"table": table_json(entry), "check": report.to_json()}

    def alter_table(
        self,
        share: str,
        schema: str,
        table: str,
        changes: Mapping[str, Any],
        *,
        force: bool = False,
    ) -> dict[str, Any]:
        """Change some keys of a table's entry (`name` renames it; its id stays); a key
        given as None returns to its default."""
        config = self._config()
        stored = self._writable(share, config)
        current = _find_table(stored, schema, table)
        document = {k: v for k, v in table_json(current).items() if k in ENTRY_KEYS}
        if current.storage_profile is None:
            document.pop("storageProfile", None)
        for key, value in changes.items():
            if value is None:
                document.pop(key, None)
            else:
                document[key] = value
        document.setdefault("id", current.id)
        entry = table_entry(document, config)
        schema_name = _schema_of(stored, schema)
        report = self._check(SharedTable(stored.share.name, schema_name, entry.name, entry), force)
        self.repository.replace_table(share, schema, table, entry)
        self._audited("alter_table", stored.share.name, schema_name, entry.name)
        return {"table": table_json(entry), "check": report.to_json()}

    def remove_table(self, share: str, schema: str, table: str) -> dict[str, Any]:
        stored = self._writable(share)
        current = _find_table(stored, schema, table)
        schema_name = _schema_of(stored, schema)
        self.repository.remove_table(share, schema, table)
        self._audited("remove_table", stored.share.name, schema_name, current.name)
        return {"removed": f"{stored.share.name}.{schema_name}.{current.name}"}

    # -- helpers ---------------------------------------------------------------------------

    def _writable(self, name: str, config: ServerConfig | None = None) -> StoredShare:
        config = config or self._config()
        if any(share.name.lower() == name.lower() for share in config.shares):
            raise ReadOnlyShare(
                f"share '{name}' is defined in the configuration file and is read-only at run "
                "time: edit the file and reload the server (SIGHUP) to change it"
            )
        return self._stored(name, config)

    def _stored(self, name: str, config: ServerConfig) -> StoredShare:
        stored = self.repository.get(name, config)
        if stored is None:
            raise ResourceNotFound(f"share '{name}' not found")
        return stored

    def _check(self, shared: SharedTable, force: bool) -> TableReport:
        [report] = check_tables(self._tables, [shared], timeout_seconds=self._check_seconds)
        if report.status is Status.UNUSABLE and not force:
            raise TableRefused(
                f"table {shared.full_name} at {shared.config.location} cannot be served: "
                f"{'; '.join(report.problems)} (force to add it anyway)",
                report,
            )
        return report

    def _audited(
        self, operation: str, share: str, schema: str | None = None, table: str | None = None
    ) -> None:
        if self._audit is not None:
            self._audit(operation, share, schema, table)


def _count(share: ShareConfig) -> int:
    return sum(len(schema.tables) for schema in share.schemas)


def _find(share: ShareConfig, schema: str, table: str) -> SharedTable:
    for candidate in share.schemas:
        if candidate.name.lower() == schema.lower():
            for entry in candidate.tables:
                if entry.name.lower() == table.lower():
                    return SharedTable(share.name, candidate.name, entry.name, entry)
    raise ResourceNotFound(f"table '{share.name}.{schema}.{table}' not found")


def _find_table(stored: StoredShare, schema: str, table: str) -> TableConfig:
    return _find(stored.share, schema, table).config


def _schema_of(stored: StoredShare, schema: str) -> str:
    for candidate in stored.share.schemas:
        if candidate.name.lower() == schema.lower():
            return candidate.name
    return schema


def _share_name(name: str) -> str:
    return str(_named(ShareConfig, name, "share").name)


def _schema_name(name: str) -> str:
    return str(_named(SchemaConfig, name, "schema").name)


def _named(section: type[ShareConfig] | type[SchemaConfig], name: str, kind: str) -> Any:
    context = LoadContext(strict=True, environ={})
    try:
        document = prepare(section, {"name": name.replace("${", "$${")}, kind, context)
        return validate(section, document, context)
    except ConfigError as exc:
        raise InvalidParameter(f"invalid {kind} name: {exc}") from None
