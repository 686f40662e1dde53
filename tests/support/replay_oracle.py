"""Helpers shared by the log-reader tests: a counting storage wrapper, deltalake
cross-checks and a tiny independent replay oracle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from deltalog.storage.base import FileInfo
from deltalog.storage.local import LocalStorage


class CountingStorage(LocalStorage):
    """LocalStorage that records what the reader asks of it."""

    def __init__(self) -> None:
        self.reads: list[str] = []
        self.lists: list[tuple[str, str | None]] = []
        self.opened: list[str] = []

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        self.lists.append((prefix, start_after))
        return super().list_from(prefix, start_after)

    def read(self, key: str) -> bytes:
        self.reads.append(key)
        return super().read(key)

    def open_input_file(self, key: str) -> pa.NativeFile:
        self.opened.append(key)
        return super().open_input_file(key)

    def reset(self) -> None:
        self.reads.clear()
        self.lists.clear()
        self.opened.clear()


def deltalake_paths(root: Path, version: int | None = None) -> tuple[int, list[str]]:
    """(version, sorted decoded add paths) as deltalake sees the table."""
    import deltalake

    dt = (
        deltalake.DeltaTable(str(root), version=version)
        if version is not None
        else deltalake.DeltaTable(str(root))
    )
    actions = pa.table(dt.get_add_actions(flatten=True))
    return dt.version(), sorted(unquote(p) for p in actions.column("path").to_pylist())


def our_paths(files: pa.Table) -> list[str]:
    return sorted(unquote(p) for p in files.column("path").to_pylist())


def dv_id(dv: dict[str, Any] | None) -> str | None:
    if not dv:
        return None
    uid = dv["storageType"] + dv["pathOrInlineDv"]
    return uid + (f"@{dv['offset']}" if dv.get("offset") is not None else "")


def oracle_keys(root: Path) -> set[tuple[str, str | None]] | None:
    """Active (path, DV id) keys by a straightforward dict-based replay of the latest
    version: classic/multi-part checkpoint via pyarrow rows, then JSON commits line by
    line. None when the layout is beyond this oracle (V2 checkpoints)."""
    log = root / "_delta_log"
    names = sorted(p.name for p in log.iterdir())
    commits = {
        int(n[:20]): n for n in names if n.endswith(".json") and n[:20].isdigit() and len(n) == 25
    }
    cps = [n for n in names if ".checkpoint." in n and n.endswith(".parquet")]
    if any(len(n.split(".")) == 4 and n.split(".")[2].count("-") == 4 for n in cps):
        return None
    latest = max([*commits, *(int(n[:20]) for n in cps)])
    active: dict[tuple[str, str | None], bool] = {}
    start = 0
    if cps:
        cp_version = max(int(n[:20]) for n in cps)
        for name in (n for n in cps if int(n[:20]) == cp_version):
            table = pq.read_table(log / name)
            if (
                "sidecar" in table.column_names
                and table.column("sidecar").null_count < table.num_rows
            ):
                return None
            if "add" in table.column_names:
                for row in table.column("add").to_pylist():
                    if row and row.get("path"):
                        active[(row["path"], dv_id(row.get("deletionVector")))] = True
        start = cp_version + 1
    for v in range(start, latest + 1):
        for line in (log / commits[v]).read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "add" in action:
                a = action["add"]
                active[(a["path"], dv_id(a.get("deletionVector")))] = True
            elif "remove" in action:
                r = action["remove"]
                active.pop((r["path"], dv_id(r.get("deletionVector"))), None)
    return set(active)


def snapshot_keys(files: pa.Table) -> set[tuple[str, str | None]]:
    return {
        (p, dv_id(d))
        for p, d in zip(
            files.column("path").to_pylist(),
            files.column("deletionVector").to_pylist(),
            strict=True,
        )
    }
