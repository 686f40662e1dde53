"""Serving local table files behind the URLs of `presign.local`: the other half of the
local signer, verifying what it signed.

A request is honoured only when its signature matches the table, relative path, holder
(recipient and credential), expiry and stamp tag it names; the expiry is in the future;
the holder's current generation and properties (`UrlHolder.stamp`) give that tag; the
holder is still admitted
as its bearer token would be — the credential usable, the recipient enabled and not
expired (sharing.recipients.directory.derived) — and still granted the table's share; the
table is in the configuration; and the path, once symlinks are resolved, stays inside that
table's directory (its compatible copy's, for a URL marked as a copy's: sharing.copies).
The holder's state comes from the directory's cache, so a URL stops working within
`store.cacheSeconds` of a delete, re-creation, property change, revocation, disable or
ungrant, as the bearer token does. The signature and the expiry are checked first, from
the URL and the configuration alone: a forged URL costs an HMAC, never a lookup of the
recipient it names (a store query on a cache miss). Any failure of the signature or the
path is the same 403, so probing reveals nothing about the disk.
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol

from deltalog.storage import resolve
from deltalog.storage.kinds import StorageKind
from sharing.catalog import SharedTable
from sharing.copies import copy_location
from sharing.errors import Forbidden, ResourceNotFound, SharingError
from sharing.numbers import INT64, NotAnInteger, OutOfRange, parse_integer
from sharing.presign.local import (
    SIGNATURE_CHARS,
    STAMP_TAG_CHARS,
    UrlHolder,
    derive_master_key,
    stamp_tag,
    table_key,
    url_signature,
)
from sharing.recipients.generations import holder_stamp
from sharing.recipients.model import Principal, Recipient
from sharing.recipients.names import Properties
from sharing.recipients.refusals import Reason, Refusal, RefusedForbidden
from sharing.views.materializations import served_entry

log = logging.getLogger("lakeshare.files")

CHUNK_BYTES = 1024 * 1024
_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)\Z")
_SIGNATURE = re.compile(rf"[0-9a-f]{{{SIGNATURE_CHARS}}}\Z")


class RangeNotSatisfiable(SharingError):
    """416 with the `Content-Range: bytes */<size>` header the RFC asks for."""

    status = 416
    error_code = "INVALID_PARAMETER_VALUE"

    def __init__(self, size: int) -> None:
        super().__init__(f"Requested range not satisfiable: the file has {size} bytes.")
        self.headers = {"Content-Range": f"bytes */{size}"}


@dataclass(frozen=True, slots=True)
class LocalFile:
    """A verified file: its real path and size."""

    path: str
    size: int


class TableLookup(Protocol):
    def get_table(self, share: str, schema: str, table: str) -> SharedTable: ...


class Holders(Protocol):
    """The recipients' side (sharing.recipients.directory.RecipientDirectory)."""

    def current(self, name: str) -> Recipient | None: ...

    def holds(
        self, recipient: Recipient, credential_id: str | None, client: str | None = None
    ) -> Principal: ...


class FileServer:
    """Checks signed file URLs against the catalog and finds the file on disk."""

    def __init__(
        self,
        catalog: TableLookup,
        secret: str | bytes,
        views_location: str | None = None,
        *,
        holders: Holders | None = None,
    ) -> None:
        """`catalog` is asked on every download: a table no longer served has no files.
        Compatible copies and views' materializations live under `views_location` (None:
        none are served); a view's files are those of the materialization of the tuple the
        URL holder's current properties give. `holders` says who holds a URL now (None:
        a server without recipients, whose URLs are signed for an empty stamp and checked
        by their signature alone)."""
        self._catalog = catalog
        self._master = derive_master_key(secret)
        self._holders = holders
        self._views_location = views_location

    def open(
        self,
        share: str,
        schema: str,
        table: str,
        relative: str,
        expires: str | None,
        signature: str | None,
        holder: UrlHolder | None,
        now_ms: int | None = None,
        *,
        copy: bool = False,
    ) -> LocalFile:
        """The file a signed URL names, or Forbidden / ResourceNotFound. `holder` is what
        the URL's `rcp` and `cid` parameters name (see `url_holder`); `copy`, whether it
        is marked as a file of the table's compatible copy."""
        if expires is None or signature is None or holder is None:
            raise _not_signed(holder)
        try:
            expires_ms = parse_integer(expires, INT64, signs="")
        except NotAnInteger:
            raise _not_signed(holder) from None
        except OutOfRange:  # never signed: no expiry this server makes is that far away
            raise _invalid_signature(holder) from None
        if not _SIGNATURE.match(signature):
            raise _invalid_signature(holder)
        try:
            shared = self._catalog.get_table(share, schema, table)
        except ResourceNotFound:
            raise _invalid_signature(holder) from None
        # The signature first, from the URL alone: the stamp it was signed for travels in
        # it as a tag, so nobody makes the server look up a name without a valid signature.
        key = table_key(self._master, shared.share, shared.schema, shared.name, copy)
        tag = signature[:STAMP_TAG_CHARS]
        expected = url_signature(key, relative, expires_ms, holder, tag)
        if not hmac.compare_digest(expected, signature):
            raise _invalid_signature(holder)
        # The signature holds: from here on, the holder is verified.
        now = int(time.time() * 1000) if now_ms is None else now_ms
        if expires_ms < now:
            raise RefusedForbidden(
                "The URL has expired.",
                Refusal(Reason.URL_EXPIRED, holder.recipient, holder.credential_id),
            )
        holders = self._holders
        current = holders.current(holder.recipient) if holders is not None else None
        if holders is not None:
            # Signed for the recipient of the name it held then: it must be the one now.
            stamp = "" if current is None else holder_stamp(current.generation, current.properties)
            if current is None or not hmac.compare_digest(stamp_tag(key, stamp), tag):
                raise _invalid_signature(holder)
        properties: Properties = ()
        if holders is not None and current is not None:
            # As its bearer token would be now (URLs are fetched from anywhere: like a
            # cloud's pre-signed URLs, they are not held to the IP allow-list).
            principal = holders.holds(current, holder.credential_id)
            if not principal.may_see(shared.share):
                raise RefusedForbidden(
                    "The table is no longer shared with the recipient this URL was issued to.",
                    Refusal(Reason.FORBIDDEN, holder.recipient, holder.credential_id),
                )
            properties = principal.properties
        location = shared.config.location
        if shared.is_view:
            view, _ = served_entry(
                shared.config, shared.full_name, self._views_location, properties
            )
            location = view.location
        elif copy:
            if not shared.config.compatible_copy or self._views_location is None:
                raise _invalid_signature(holder)  # no longer served from a copy
            location = copy_location(self._views_location, shared.full_name)
        try:
            path = resolve_inside(location, relative)
        except RefusedForbidden:
            raise
        except Forbidden as exc:
            refusal = Refusal(Reason.FORBIDDEN, holder.recipient, holder.credential_id)
            raise RefusedForbidden(exc.message, refusal) from None
        try:
            st = os.stat(path)
        except OSError:
            raise ResourceNotFound("The file does not exist (it may have been vacuumed).") from None
        if not stat.S_ISREG(st.st_mode):
            raise ResourceNotFound("The file does not exist (it may have been vacuumed).")
        return LocalFile(path=path, size=st.st_size)


def _not_signed(holder: UrlHolder | None) -> RefusedForbidden:
    return RefusedForbidden("The URL is not signed.", _claimed(Reason.URL_NOT_SIGNED, holder))


def _invalid_signature(holder: UrlHolder | None) -> RefusedForbidden:
    return RefusedForbidden(
        "The URL signature is invalid, or the recipient it was issued to is no longer the "
        "one holding its name (deleted, re-created, or its properties changed): query the "
        "table again for new URLs.",
        _claimed(Reason.URL_SIGNATURE_INVALID, holder),
    )


def _claimed(reason: Reason, holder: UrlHolder | None) -> Refusal:
    """A refusal naming the holder the URL claims (its signature did not prove it)."""
    if holder is None:
        return Refusal(reason)
    return Refusal.claimed(reason, holder.recipient, holder.credential_id)


def url_holder(recipient: str | None, credential_id: str | None) -> UrlHolder | None:
    """The holder a URL's `rcp` and `cid` parameters name; None when there is no recipient
    or a value holds NUL (which no signed holder does: such a URL is not signed)."""
    if not recipient or "\x00" in recipient or (credential_id and "\x00" in credential_id):
        return None
    return UrlHolder(recipient, credential_id or None)


def resolve_inside(location: str, relative: str) -> str:
    """The real path of `relative` under the table at `location`; Forbidden when it is
    absolute, climbs with `..`, or resolves (through symlinks) outside the table."""
    storage, root = resolve(location)
    if storage.kind is not StorageKind.LOCAL:
        raise Forbidden("Only local tables are served by this endpoint.")
    return resolve_under(os.path.realpath(root), relative)


def resolve_under(real_root: str, relative: str) -> str:
    """`resolve_inside` for a table root already resolved (a real path)."""
    parts = relative.split("/")
    if (
        not relative
        or relative.startswith("/")
        or "\x00" in relative
        or "\\" in relative
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise Forbidden("The file path is not allowed.")
    candidate = os.path.realpath(os.path.join(real_root, *parts))
    if os.path.commonpath([real_root, candidate]) != real_root or candidate == real_root:
        raise Forbidden("The file path is not allowed.")
    return candidate


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range of a single-range `Range` header, or None to send the whole
    file (no header, a malformed one, or several ranges: all may be ignored per RFC 9110).
    RangeNotSatisfiable when the range starts beyond the end of the file."""
    if header is None:
        return None
    match = _RANGE.match(header.strip())
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # suffix range: the last n bytes
        length = _offset(last)
        if length == 0 or size == 0:
            raise RangeNotSatisfiable(size)
        return max(0, size - length), size - 1
    start = _offset(first)
    end = _offset(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise RangeNotSatisfiable(size)
    return start, min(end, size - 1)


def _offset(digits: str) -> int:
    """A byte offset or length of a `Range` header; any value beyond int64 is beyond every
    file, so it stands for int64's maximum (the range is then cut or unsatisfiable as the
    exact value would make it)."""
    try:
        return parse_integer(digits, INT64, signs="")
    except OutOfRange:
        return INT64.high


@dataclass(frozen=True, slots=True)
class FileReply:
    """What a GET or HEAD of a verified file answers: status, headers, and the byte span."""

    status: int
    headers: dict[str, str]
    start: int
    length: int


def file_reply(found: LocalFile, range_header: str | None) -> FileReply:
    """The whole file (200), or the one range the `Range` header asks for (206)."""
    byte_range = parse_range(range_header, found.size)
    start, end = byte_range if byte_range is not None else (0, found.size - 1)
    length = max(0, end - start + 1)
    headers = {"Accept-Ranges": "bytes", "Content-Length": str(length)}
    if byte_range is None:
        return FileReply(200, headers, start, length)
    headers["Content-Range"] = f"bytes {start}-{end}/{found.size}"
    return FileReply(206, headers, start, length)


class OpenedFile:
    """A file opened, sized and read from before any response header is sent, so an
    unreadable file becomes an error response rather than a 200 with a cut-off body.

    `reply` is what to answer; `chunks()` streams the body (the first chunk was read while
    opening) and closes the file at the end; `close()` when the body is not wanted (HEAD).
    A body of at most `CHUNK_BYTES` is read whole while opening (`body`, the file already
    closed): it goes out in one send, without the cost of a streamed response.

    `zero_copy`: the server sends the body from the open file itself (`sendfile`): only
    its first byte is read while opening, to know the file can be read; `span()` is what
    to send, and the file stays open until `close()`.
    """

    def __init__(
        self, found: LocalFile, range_header: str | None, *, head: bool, zero_copy: bool = False
    ) -> None:
        self.path = found.path
        try:
            self._file = open(found.path, "rb")  # noqa: SIM115 - closed by chunks()/close()
        except OSError as exc:
            raise _unreadable(found.path, exc) from None
        try:
            # The open file's own size: the reply must match what this descriptor reads.
            size = os.fstat(self._file.fileno()).st_size
            self.reply = file_reply(LocalFile(found.path, size), range_header)
            self._file.seek(self.reply.start)
            self._remaining = self.reply.length
            want = min(1 if head or zero_copy else CHUNK_BYTES, self._remaining)
            self._first = self._file.read(want) if want else b""
            if len(self._first) < want:
                raise OSError(errno.EIO, "the file is shorter than its size")
            self.body = self._first if not head and want == self._remaining else None
            # Sent from the open file by the server (read here only: the first byte).
            self.zero_copy = zero_copy and not head and self.body is None
            if self.body is not None:
                self.close()
        except OSError as exc:
            self.close()
            raise _unreadable(found.path, exc) from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._file.close()

    def span(self) -> tuple[BinaryIO, int, int]:
        """The open file, and the offset and length of the body in it."""
        return self._file, self.reply.start, self.reply.length

    def chunks(self) -> Iterator[bytes]:
        try:
            if self._first:
                self._remaining -= len(self._first)
                yield self._first
            while self._remaining > 0:
                try:
                    chunk = self._file.read(min(CHUNK_BYTES, self._remaining))
                except OSError as exc:
                    # Headers are out: the client sees a body shorter than Content-Length.
                    log.error("reading %s failed mid-response: %s", self.path, exc.strerror)
                    return
                if not chunk:
                    log.error("%s ended before its size mid-response", self.path)
                    return
                self._remaining -= len(chunk)
                yield chunk
        finally:
            self.close()


def _unreadable(path: str, exc: OSError) -> SharingError:
    """The error response for a verified file the server cannot open or read, logged at
    ERROR for the provider (the client's message says nothing about the disk)."""
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return ResourceNotFound("The file does not exist (it may have been vacuumed).")
    log.error("cannot read data file %s: %s", path, exc.strerror or exc)
    if isinstance(exc, PermissionError):
        return Forbidden("The server is not permitted to read this file.")
    return SharingError("The server could not read this file.")
