"""The objects a recipient's generated Iceberg metadata names on its S3-endpoint bucket.

A key limited to a slice (sharing.s3.scope) opens exactly these: the data files of every
snapshot of the metadata of the table's latest version (as the recipient sees it: its
partition filter, its history range), the generated files those snapshots reach (manifest
lists, manifests, Puffin deletion vectors) and the metadata JSON files of that history.
Nothing else in the table's folder, no version before the history's base.

The set is read back from the generated files themselves, so it is by construction what
the metadata names. It is kept per (table, slice, bucket, history settings) and grown when
the table gets a new version: only the new snapshots' manifest lists and the manifests
not read before are decoded (a carried-over manifest is read once). Memory is bounded by
`max_keys` names over all kept sets, least recently used dropped first.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro
import orjson

from sharing.catalog import SharedTable
from sharing.iceberg.files import METADATA_SUFFIX
from sharing.iceberg.generator import GENERATED_PREFIX, GeneratedVersion, IcebergMetadata

__all__ = ["DEFAULT_MAX_KEYS", "NamedFiles"]

DEFAULT_MAX_KEYS = 1_000_000
"""Object names kept over all slices (about 150 bytes each)."""

_Identity = tuple[str, bool, int]
"""A kept set's key: the cache folder (table, slice, bucket), history shared, start version."""

_METADATA_JSON = re.compile(r"^v(\d{20})" + re.escape(METADATA_SUFFIX) + "$")


@dataclass
class _Named:
    """The names of one (table, slice, bucket, base): up to `version`."""

    root: Path
    base: int
    version: int = -1
    keys: set[str] = field(default_factory=set)
    manifests: set[str] = field(default_factory=set)


class NamedFiles:
    """Answers whether a slice's metadata names an object key (thread-safe)."""

    def __init__(self, metadata: IcebergMetadata, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        self.metadata = metadata
        self.max_keys = max_keys
        self._kept: OrderedDict[_Identity, _Named] = OrderedDict()
        self._lock = threading.Lock()
        self._building = threading.Lock()

    def names(self, shared: SharedTable, bucket: str, key: str) -> bool:
        """Whether the metadata of `shared`'s latest version, named on `bucket`, names
        the object `key`. Blocking: may generate that version's metadata."""
        current = self.metadata.tables.latest(shared)
        root = self.metadata.generated_root(shared, bucket, current)
        # The cache folder is the table, slice and bucket; the history settings choose
        # the base version (with the log's earliest version, which moves only with a
        # commit that writes a checkpoint, so a new version).
        identity = (str(root), shared.config.history_shared, shared.config.start_version)
        found = self._current(identity, current.version)
        if found is None:
            with self._building:
                found = self._current(identity, current.version)
                if found is None:
                    generated = self.metadata.generate(shared, current.version, bucket=bucket)
                    found = self._grow(identity, root, bucket, generated)
        return key in found.keys or self._history_metadata(found, key)

    def names_from_memory(self, shared: SharedTable, bucket: str, key: str) -> bool | None:
        """`names`, when the answer is in memory (the table's latest snapshot fresh, its
        named set kept); None when it would read the log or generate: call `names`."""
        current = self.metadata.tables.fresh_latest(shared)
        if current is None:
            return None
        root = self.metadata.generated_root(shared, bucket, current)
        identity = (str(root), shared.config.history_shared, shared.config.start_version)
        found = self._current(identity, current.version)
        if found is None:
            return None
        return key in found.keys or self._history_metadata(found, key)

    def _current(self, identity: _Identity, version: int) -> _Named | None:
        with self._lock:
            named = self._kept.get(identity)
            if named is None or named.version != version:
                return None
            self._kept.move_to_end(identity)
            return named

    @staticmethod
    def _history_metadata(named: _Named, key: str) -> bool:
        """A metadata JSON of a version of the history (clients holding an earlier load
        may read theirs): `_lakeshare_iceberg/<table>/from-<base>/metadata/v<n>...`."""
        prefix = f"{GENERATED_PREFIX}from-{named.base:020d}/metadata/"
        if not key.startswith(prefix):
            return False
        match = _METADATA_JSON.match(key[len(prefix) :])
        return match is not None and named.base <= int(match.group(1)) <= named.version

    def _grow(
        self, identity: _Identity, root: Path, bucket: str, generated: GeneratedVersion
    ) -> _Named:
        """The names up to a generated version, from the kept set if it has the same base
        and an earlier version."""
        base, version = generated.base, generated.version
        with self._lock:
            kept = self._kept.pop(identity, None)
        grows = kept is not None and kept.base == base and kept.version <= version
        named = kept if kept is not None and grows else _Named(root, base)
        prefix = f"s3://{bucket}/"
        generated_prefix = prefix + GENERATED_PREFIX

        def key_of(location: str) -> str:
            if not location.startswith(prefix):
                raise ValueError(f"a location off the bucket: {location}")
            return location[len(prefix) :]

        def cache_path(location: str) -> Path:
            if not location.startswith(generated_prefix):
                raise ValueError(f"a generated file off the cache: {location}")
            return root / location[len(generated_prefix) :]

        metadata_path = generated.metadata_path
        metadata = orjson.loads(metadata_path.read_bytes())
        named.keys.add(GENERATED_PREFIX + metadata_path.relative_to(root).as_posix())
        for snapshot in metadata["snapshots"]:
            if int(snapshot["snapshot-id"]) - 1 <= named.version:
                continue  # read when the set grew to an earlier version
            listing = snapshot["manifest-list"]
            named.keys.add(key_of(listing))
            for manifest in _records(cache_path(listing)):
                path = str(manifest["manifest_path"])
                if path in named.manifests:
                    continue
                named.manifests.add(path)
                named.keys.add(key_of(path))
                for entry in _records(cache_path(path)):
                    named.keys.add(key_of(str(entry["data_file"]["file_path"])))
        named.version = version
        with self._lock:
            self._kept[identity] = named
            self._evict(identity)
        return named

    def _evict(self, keep: _Identity) -> None:
        total = sum(len(n.keys) + len(n.manifests) for n in self._kept.values())
        for identity in list(self._kept):
            if total <= self.max_keys:
                break
            if identity == keep:
                continue
            dropped = self._kept.pop(identity)
            total -= len(dropped.keys) + len(dropped.manifests)


def _records(path: Path) -> list[dict[str, Any]]:
    """The records of a generated Avro file (manifest list or manifest)."""
    with open(path, "rb") as handle:
        return list(fastavro.reader(handle))  # type: ignore[arg-type]
