"""Parsing one JSON commit file (`_delta_log/<version>.json`) into CommitActions.

Commits are small, so lines are parsed one by one with orjson; the file actions are then
turned into Arrow tables column-wise (one `from_pylist` per action kind), so no per-file
object outlives the call.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import orjson
import pyarrow as pa

from deltalog.actions import (
    ADD_SCHEMA,
    CDC_SCHEMA,
    REMOVE_SCHEMA,
    CommitActions,
    Metadata,
    Protocol,
)
from deltalog.errors import CorruptLogError, MissingLogFileError
from deltalog.storage.base import FileInfo, Storage

LOG_DIR = "_delta_log"
ICT_ENABLED_KEY = "delta.enableInCommitTimestamps"

_SCHEMAS_NO_VERSION = {
    "add": pa.schema([f for f in ADD_SCHEMA if f.name != "version"]),
    "remove": pa.schema([f for f in REMOVE_SCHEMA if f.name != "version"]),
    "cdc": pa.schema([f for f in CDC_SCHEMA if f.name != "version"]),
}
_FULL_SCHEMAS = {"add": ADD_SCHEMA, "remove": REMOVE_SCHEMA, "cdc": CDC_SCHEMA}


def commit_name(version: int) -> str:
    """The file name of a commit inside `_delta_log/`."""
    return f"{version:020d}.json"


def commit_key(storage: Storage, table_root_key: str, version: int) -> str:
    return storage.join(table_root_key, f"{LOG_DIR}/{commit_name(version)}")


def file_actions_table(kind: str, rows: list[dict[str, Any]], version: int, name: str) -> pa.Table:
    """An Arrow table in the contract schema for the `kind` ('add', 'remove', 'cdc') rows.

    Unknown fields are dropped, missing optional fields become null; a field with the wrong
    JSON type, or a missing path, makes the log corrupt.
    """
    full = _FULL_SCHEMAS[kind]
    if not rows:
        return full.empty_table()
    try:
        table = pa.Table.from_pylist(rows, schema=_SCHEMAS_NO_VERSION[kind])
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise CorruptLogError(f"{name}: malformed {kind} action: {exc}") from exc
    if table.column("path").null_count:
        raise CorruptLogError(f"{name}: {kind} action without a path")
    table = table.append_column(full.field("version"), pa.array([version] * len(rows), pa.int64()))
    return table.cast(full)


EMPTY_SCHEMA_STRING = '{"type":"struct","fields":[]}'


def metadata_from_action(action: dict[str, Any]) -> Metadata:
    """Metadata from a metaData action. A missing or null `schemaString` (Delta Live
    Tables writes such a placeholder when it creates a table) stands for an empty schema;
    `raw` keeps the action as written."""
    if action.get("schemaString") is None:
        return replace(
            Metadata.from_action({**action, "schemaString": EMPTY_SCHEMA_STRING}), raw=action
        )
    return Metadata.from_action(action)


def in_commit_timestamps_enabled(metadata: Metadata | None) -> bool:
    """Whether the metaData in effect enables in-commit timestamps."""
    if metadata is None:
        return False
    return metadata.configuration.get(ICT_ENABLED_KEY, "false").lower() == "true"


def json_actions(data: bytes, name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, action) for each non-blank line of a newline-delimited JSON log file
    (a commit or a V2 JSON checkpoint); a line that is not a JSON object is a corrupt log."""
    for lineno, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise CorruptLogError(f"{name}: invalid JSON on line {lineno}") from exc
        if not isinstance(action, dict):
            raise CorruptLogError(f"{name}: line {lineno} is not a JSON object")
        yield lineno, action


def parse_commit(
    data: bytes,
    version: int,
    file_modification_time: int,
    *,
    name: str = "",
    ict_enabled: bool | None = None,
) -> CommitActions:
    """CommitActions from the bytes of a commit file.

    `ict_enabled` is whether in-commit timestamps are enabled by the metaData in effect
    before this commit. A commit carrying its own metaData is governed by it instead.
    When None (the caller does not know), the presence of `commitInfo.inCommitTimestamp`
    decides: writers only put it there while the feature is enabled.
    """
    name = name or commit_name(version)
    rows: dict[str, list[dict[str, Any]]] = {"add": [], "remove": [], "cdc": []}
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    commit_info: dict[str, Any] | None = None
    txns: dict[str, int] = {}
    domains: dict[str, dict[str, Any]] = {}
    for lineno, action in json_actions(data, name):
        try:
            for kind, body in action.items():
                if kind in rows:
                    rows[kind].append(body)
                elif kind == "metaData":
                    metadata = metadata_from_action(body)
                elif kind == "protocol":
                    protocol = Protocol.from_action(body)
                elif kind == "commitInfo":
                    commit_info = body
                elif kind == "txn":
                    txns[str(body["appId"])] = int(body["version"])
                elif kind == "domainMetadata":
                    domains[str(body["domain"])] = body
                # Anything else (unknown actions, misplaced checkpoint-only actions) is
                # not part of replay and is ignored, as the protocol asks of readers.
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptLogError(f"{name}: malformed action on line {lineno}: {exc!r}") from exc

    ict = _in_commit_timestamp(commit_info)
    if metadata is not None:
        # A commit that changes metaData is governed by its own configuration.
        ict_enabled = in_commit_timestamps_enabled(metadata)
    elif ict_enabled is None:
        ict_enabled = ict is not None
    timestamp = ict if (ict_enabled and ict is not None) else file_modification_time
    return CommitActions(
        version=version,
        timestamp=timestamp,
        adds=file_actions_table("add", rows["add"], version, name),
        removes=file_actions_table("remove", rows["remove"], version, name),
        cdcs=file_actions_table("cdc", rows["cdc"], version, name),
        protocol=protocol,
        metadata=metadata,
        commit_info=commit_info,
        txns=txns,
        domain_metadata=domains,
        in_commit_timestamp=ict,
        file_modification_time=file_modification_time,
    )


def _in_commit_timestamp(commit_info: dict[str, Any] | None) -> int | None:
    if not commit_info:
        return None
    value = commit_info.get("inCommitTimestamp")
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def read_commit(
    storage: Storage,
    table_root_key: str,
    version: int,
    file_info: FileInfo | None = None,
    *,
    ict_enabled: bool | None = None,
) -> CommitActions:
    """Read and parse commit `version` of the table at `table_root_key`.

    `file_info` (from a listing) saves a stat call; it supplies the file modification time
    that serves as the commit timestamp when in-commit timestamps are not enabled.
    See `parse_commit` for `ict_enabled`.
    """
    key = file_info.key if file_info is not None else commit_key(storage, table_root_key, version)
    name = posixpath.basename(key)
    try:
        if file_info is None:
            file_info = storage.info(key)
        data = storage.read(key)
    except FileNotFoundError as exc:
        raise MissingLogFileError(f"commit file {name} is missing") from exc
    return parse_commit(
        data, version, file_info.modification_time, name=name, ict_enabled=ict_enabled
    )
