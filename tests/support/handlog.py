"""Small hand-written Delta logs for unit tests: a few JSON commit files with chosen
modification times."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SCHEMA = {
    "type": "struct",
    "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "name", "type": "string", "nullable": True, "metadata": {}},
    ],
}


def protocol(reader: int = 1, writer: int = 4, **features: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {"minReaderVersion": reader, "minWriterVersion": writer}
    body.update(features)
    return {"protocol": body}


def metadata(configuration: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metaData": {
            "id": "00000000-0000-0000-0000-000000000001",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(SCHEMA),
            "partitionColumns": [],
            "configuration": configuration or {},
            "createdTime": 1_600_000_000_000,
            **extra,
        }
    }


def commit_info(operation: str = "WRITE", **extra: Any) -> dict[str, Any]:
    return {"commitInfo": {"timestamp": 1, "operation": operation, **extra}}


def add(path: str, *, data_change: bool = True, size: int = 100, **extra: Any) -> dict[str, Any]:
    body = {
        "path": path,
        "partitionValues": {},
        "size": size,
        "modificationTime": 1,
        "dataChange": data_change,
        **extra,
    }
    return {"add": body}


def remove(path: str, *, data_change: bool = True, size: int = 100) -> dict[str, Any]:
    body = {
        "path": path,
        "deletionTimestamp": 1,
        "dataChange": data_change,
        "partitionValues": {},
        "size": size,
    }
    return {"remove": body}


def cdc(path: str, size: int = 100) -> dict[str, Any]:
    return {"cdc": {"path": path, "partitionValues": {}, "size": size, "dataChange": False}}


def write_commit(
    root: Path, version: int, actions: Sequence[dict[str, Any]], mtime_ms: int | None = None
) -> Path:
    """Write `_delta_log/<version>.json`; set its modification time when given."""
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    path = log / f"{version:020d}.json"
    path.write_text("".join(json.dumps(a) + "\n" for a in actions))
    if mtime_ms is not None:
        set_mtime(path, mtime_ms)
    return path


def set_mtime(path: Path, mtime_ms: int) -> None:
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
