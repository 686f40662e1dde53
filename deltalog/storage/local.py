"""Local filesystem storage: keys are absolute POSIX paths.

Listing is one `os.scandir` of the prefix's directory; only the entries that sort after
`start_after` are stat'ed, so listing the tail of a log with 100k commits stays cheap.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterator

import pyarrow as pa

from deltalog.errors import StorageError
from deltalog.storage.base import FileInfo
from deltalog.storage.common import join_key
from deltalog.storage.kinds import StorageKind


def _mtime_ms(st: os.stat_result) -> int:
    return st.st_mtime_ns // 1_000_000


class LocalStorage:
    """The Storage protocol over the local filesystem.

    Directories are not objects: `list_from` yields the regular files directly inside the
    prefix's directory (object stores would also list nested keys, which the log reader
    ignores either way).
    """

    kind = StorageKind.LOCAL

    def list_from(self, prefix: str, start_after: str | None = None) -> Iterator[FileInfo]:
        if prefix.endswith("/"):
            directory, name_prefix = prefix.rstrip("/") or "/", ""
        else:
            directory, name_prefix = posixpath.split(prefix)
        try:
            with os.scandir(directory) as it:
                entries = [e for e in it if e.name.startswith(name_prefix)]
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(directory) from exc
        except OSError as exc:
            name = posixpath.basename(directory.rstrip("/"))
            raise StorageError(f"cannot list {name}: {exc.strerror}") from exc
        base = directory.rstrip("/") + "/"
        keyed = sorted(((base + e.name, e) for e in entries), key=lambda pair: pair[0])
        return self._infos(keyed, start_after)

    @staticmethod
    def _infos(
        keyed: list[tuple[str, os.DirEntry[str]]], start_after: str | None
    ) -> Iterator[FileInfo]:
        for key, entry in keyed:
            if start_after is not None and key <= start_after:
                continue
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except FileNotFoundError:
                continue  # deleted between listing and stat: it is simply not there
            yield FileInfo(key=key, size=st.st_size, modification_time=_mtime_ms(st))

    def read(self, key: str) -> bytes:
        try:
            with open(key, "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise FileNotFoundError(key) from exc
        except OSError as exc:
            raise StorageError(f"cannot read {posixpath.basename(key)}: {exc.strerror}") from exc

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        try:
            with open(key, "rb") as f:
                f.seek(offset)
                return f.read(length)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
            raise FileNotFoundError(key) from exc
        except OSError as exc:
            raise StorageError(f"cannot read {posixpath.basename(key)}: {exc.strerror}") from exc

    def open_input_file(self, key: str) -> pa.NativeFile:
        if not os.path.isfile(key):
            raise FileNotFoundError(key)
        return pa.OSFile(key, "rb")

    def info(self, key: str) -> FileInfo:
        try:
            st = os.stat(key)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise FileNotFoundError(key) from exc
        if not os.path.isfile(key):
            raise FileNotFoundError(key)
        return FileInfo(key=key, size=st.st_size, modification_time=_mtime_ms(st))

    def join(self, root: str, relative: str) -> str:
        return join_key(root, relative)

    def __repr__(self) -> str:
        return "LocalStorage()"
