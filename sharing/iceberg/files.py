"""The cache directory of generated Iceberg files, shared by the server's workers.

Layout, one folder per table and base version (the first version the generated history
starts at, see sharing.iceberg.generator):

    <directory>/<table digest>/from-<base, 20 digits>/
        metadata/v<version, 20 digits>.metadata.json   table metadata (written last)
        metadata/snap-<version>.avro                    manifest list
        metadata/m-<version>-<kind>-<n>.avro            manifests
        data/dv-<version>.puffin                        deletion vectors

The digest names the table's storage, root and Delta table id (a table deleted and
recreated at the same location is another table). Every file is written under a temporary
name and renamed into place, so a reader sees a whole file or none; a version's metadata
JSON is renamed last, so when it exists, every file it names does. Processes generating
the same table take a lock file in turn (the second one then finds the versions the first
wrote). The provider's table folder is never written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from sharing.config import ServerConfig
from sharing.tables import SNAPSHOT_CACHE_OFF

METADATA_SUFFIX = ".metadata.json"


def cache_directory(config: ServerConfig) -> Path:
    """Where generated metadata goes: `iceberg.cacheDir`, else beside the snapshot store
    when there is one (shared by the workers), else the system's temporary folder."""
    if config.iceberg.cache_dir is not None:
        return Path(config.iceberg.cache_dir).expanduser()
    directory = config.snapshot_cache_dir
    if directory is not None and directory.lower() != SNAPSHOT_CACHE_OFF:
        return Path(directory) / "iceberg"
    return Path(tempfile.gettempdir()) / "lakeshare-iceberg"


def unwritable(directory: Path) -> str | None:
    """Why generated files cannot be written under `directory` (None: they can). Creates
    the directory, as the first generation would, and writes and removes a probe file."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe.{os.getpid()}.{threading.get_ident()}"
        write_once(probe, b"")
        probe.unlink()
    except OSError as exc:
        return f"{exc.strerror or type(exc).__name__}: {exc.filename or directory}"
    return None


class TableFiles:
    """The generated files of one table from one base version."""

    def __init__(self, directory: Path, identity: str, base: int) -> None:
        self.table_root = self.table_dir(directory, identity)
        self.root = self.table_root / f"from-{base:020d}"
        self.metadata_dir = self.root / "metadata"
        self.data_dir = self.root / "data"

    @staticmethod
    def table_dir(directory: Path, identity: str) -> Path:
        """The folder of a table's generated files, every base version's."""
        return directory / hashlib.sha256(identity.encode()).hexdigest()[:32]

    def metadata_path(self, version: int) -> Path:
        return self.metadata_dir / f"v{version:020d}{METADATA_SUFFIX}"

    def manifest_list_path(self, version: int) -> Path:
        return self.metadata_dir / f"snap-{version:020d}.avro"

    def manifest_path(self, version: int, kind: str, index: int) -> Path:
        return self.metadata_dir / f"m-{version:020d}-{kind}-{index:05d}.avro"

    def puffin_path(self, version: int) -> Path:
        return self.data_dir / f"dv-{version:020d}.puffin"

    def generated_versions(self) -> list[int]:
        """The versions whose metadata is complete, ascending."""
        try:
            names = os.listdir(self.metadata_dir)
        except FileNotFoundError:
            return []
        versions = []
        for name in names:
            if name.startswith("v") and name.endswith(METADATA_SUFFIX):
                digits = name[1 : -len(METADATA_SUFFIX)]
                if digits.isdigit():
                    versions.append(int(digits))
        return sorted(versions)

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Hold the table's lock file (one generating process at a time)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def write_once(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
