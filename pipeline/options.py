"""The options of the `deltalog` format, parsed once on the driver with clear errors."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from deltalog.file_groups import DEFAULT_MAX_GROUP_BYTES, DEFAULT_OPEN_COST
from deltalog.timestamps import parse_timestamp

COMMIT_INFO = "commitInfo"
"""A JSON object of string values added to the written commit's commitInfo (writes only;
one option, as Spark may change the case of option names)."""
STORAGE_PREFIX = "storage."
"""Options under this prefix are the table's storage options (as in the server's
configuration: `storage.aws_region`, `storage.azure_storage_account_name`...)."""


class OptionError(ValueError):
    """An option of the `deltalog` format is missing or malformed."""


@dataclass(frozen=True)
class DeltaOptions:
    path: str
    version_as_of: int | None = None
    timestamp_as_of: int | None = None  # ms since the epoch
    max_partition_bytes: int = DEFAULT_MAX_GROUP_BYTES
    open_cost_bytes: int = DEFAULT_OPEN_COST
    min_partitions: int = 2
    storage_options: dict[str, str] = field(default_factory=dict)
    app_id: str | None = None
    app_version: int | None = None
    partition_by: tuple[str, ...] = ()
    commit_info: dict[str, str] = field(default_factory=dict)
    # Reads: only these source files (their log paths; None: all). Reads add, writes group
    # files by, a string column of this name holding the key of the source file each row
    # comes from (pipeline.copies.output_key): each written file is derived from one source
    # file and named after its key (incremental views, pipeline.views).
    files: tuple[str, ...] | None = None
    file_key_column: str | None = None
    # Writes: files to remove in the same commit ({path, size, partitionValues}).
    remove_files: tuple[dict[str, Any], ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> DeltaOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        path = options.get("path") or lowered.get("path")
        if not path:
            raise OptionError("the table's location is missing: use load(path) or save(path)")
        version = _int(lowered, "versionasof")
        timestamp_text = lowered.get("timestampasof")
        if version is not None and timestamp_text is not None:
            raise OptionError("give either 'versionAsOf' or 'timestampAsOf', not both")
        timestamp = None
        if timestamp_text is not None:
            try:
                timestamp = parse_timestamp(timestamp_text)
            except ValueError as exc:
                raise OptionError(f"'timestampAsOf' is not a timestamp: {exc}") from exc
        app_id = lowered.get("txnappid")
        app_version = _int(lowered, "txnversion")
        if (app_id is None) != (app_version is None):
            raise OptionError("'txnAppId' and 'txnVersion' go together")
        partition_text = lowered.get("partitionby", "")
        partition_by = tuple(p.strip() for p in partition_text.split(",") if p.strip())
        return cls(
            path=path,
            version_as_of=version,
            timestamp_as_of=timestamp,
            max_partition_bytes=_int(lowered, "maxpartitionbytes") or DEFAULT_MAX_GROUP_BYTES,
            open_cost_bytes=_int(lowered, "opencostinbytes") or DEFAULT_OPEN_COST,
            min_partitions=_int(lowered, "minpartitions") or 2,
            storage_options={
                k[len(STORAGE_PREFIX) :]: v
                for k, v in options.items()
                if k.lower().startswith(STORAGE_PREFIX)
            },
            app_id=app_id,
            app_version=app_version,
            partition_by=partition_by,
            commit_info=_commit_info(lowered.get(COMMIT_INFO.lower())),
            files=_json_list(lowered, "files"),
            file_key_column=lowered.get("filekeycolumn"),
            remove_files=tuple(_json_list(lowered, "removefiles") or ()),
        )


def _int(options: Mapping[str, str], key: str) -> int | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {key!r} must be an integer, got {text!r}") from None
    if value < 0:
        raise OptionError(f"option {key!r} must not be negative, got {value}")
    return value


def _commit_info(text: str | None) -> dict[str, str]:
    if text is None:
        return {}
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict) or not all(isinstance(v, str) for v in document.values()):
        raise OptionError(f"option {COMMIT_INFO!r} must be a JSON object of strings")
    return {str(k): v for k, v in document.items()}


def _json_list(options: Mapping[str, str], key: str) -> tuple[Any, ...] | None:
    text = options.get(key)
    if text is None:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, list):
        raise OptionError(f"option {key!r} must be a JSON list")
    return tuple(document)
