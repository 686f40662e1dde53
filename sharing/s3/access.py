"""What a request to the S3 endpoint may read, decided afresh for every request.

The signature proves the key's claims (sharing.s3.keys); this module then asks the same
sources as a bearer-token request: the recipient directory (the same recipient of the same
generation — not one re-created under its name —, disabled, expired, revoked or deleted
credential, IP allow-list: cached for at most `store.cacheSeconds`) and the live catalog as
that recipient sees it (the table still shared with it, and as the key's scope says: read
whole with its history shared for a key opening the folder, the same slice for a key
limited to one — sharing.s3.scope). Only then is the object key resolved
(sharing.s3.objects), inside the table's folder, symlinks included.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from deltalog.storage import resolve
from deltalog.storage.kinds import StorageKind
from sharing.catalog import Catalog, SharedTable
from sharing.errors import Forbidden, ResourceNotFound, SharingError
from sharing.presign.local_verify import resolve_under
from sharing.recipients.directory import RecipientDirectory
from sharing.recipients.model import Principal
from sharing.recipients.refusals import Reason, Refusal
from sharing.s3 import keys, sigv4
from sharing.s3.errors import S3Error
from sharing.s3.scope import reads_whole, slice_scope
from sharing.slices import Viewer

__all__ = ["Grant", "KeyChecker", "NotInMemory", "TableFolder"]


class LiveCatalog(Protocol):
    def visible_to(self, shares: frozenset[str], viewer: Viewer | None = None) -> Catalog: ...
    def answers_from_memory(self) -> bool: ...


class NotInMemory(Exception):
    """Raised by a check asked to answer from memory only (`from_memory=True`) when it
    would have to read the recipient store, the log or the disk beyond one file: the
    caller runs the same check again off the event loop."""


@dataclass(frozen=True, slots=True)
class Grant:
    """A verified key as it stands now: whom it was vended to and the table it opens."""

    claims: keys.KeyClaims
    shared: SharedTable

    @property
    def whole_folder(self) -> bool:
        """Whether the key opens the table's folder, not only a slice's files."""
        return self.claims.scope is None

    def folder(self) -> TableFolder:
        return TableFolder(self.shared.config.location)


def _refusal(reason: Reason, claims: keys.KeyClaims | None) -> Refusal:
    if claims is None:
        return Refusal(reason)
    return Refusal(reason, claims.recipient, claims.credential_id)


class KeyChecker:
    """Verifies signed requests against vended keys and the server's current state."""

    def __init__(
        self,
        signing_secret: str | bytes,
        directory: RecipientDirectory,
        catalog: LiveCatalog,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = signing_secret
        self._directory = directory
        self._catalog = catalog
        self._clock = clock

    def check(
        self,
        bucket: str,
        method: str,
        raw_path: str,
        raw_query: str,
        headers: Mapping[str, str],
        header_lists: Mapping[str, list[str]],
        query: list[tuple[str, str]],
        client: str | None,
        *,
        from_memory: bool = False,
    ) -> Grant:
        """The grant of a request's key, or S3Error (whose `refusal` names the key's holder
        once the signature held). `from_memory`: NotInMemory rather than reading the
        recipient store or the catalog's (every check is made either way)."""
        signed = sigv4.parse_signed_request(headers, query)
        if signed.session_token is None:
            raise S3Error(403, "InvalidToken", "A session token is required.", refused=True)
        try:
            facts = keys.token_facts(self._secret, signed.session_token)
        except keys.MalformedKey:
            raise S3Error(
                400,
                "InvalidToken",
                "The provided token is malformed or otherwise invalid.",
                refused=True,
            ) from None
        claims = facts.claims
        if facts.access_key_id != signed.access_key_id:
            raise S3Error(
                403,
                "InvalidAccessKeyId",
                "The access key id does not go with the session token.",
                refused=True,
            )
        try:
            sigv4.verify(
                signed, facts.secret, method, raw_path, raw_query, header_lists, self._clock
            )
        except S3Error as exc:  # the holder the token names is only claimed
            exc.refusal = Refusal.claimed(
                Reason.INVALID_CREDENTIALS, claims.recipient, claims.credential_id
            )
            raise
        # The signature holds: the claims are the server's own.
        if claims.expires_ms <= int(self._clock() * 1000):
            raise _verified(S3Error.expired_token(), Reason.CREDENTIAL_EXPIRED, claims)
        principal = self._principal(claims, client, from_memory)
        shared = self._table(claims, principal)
        if bucket != claims.bucket:
            raise _verified(
                S3Error.access_denied("The key does not grant access to this bucket."),
                Reason.FORBIDDEN,
                claims,
            )
        return Grant(claims, shared)

    def _principal(
        self, claims: keys.KeyClaims, client: str | None, from_memory: bool
    ) -> Principal:
        """The key's holder as it stands now (sharing.recipients.directory.derived: the
        same recipient, generation and usable credential it was vended to, admitted)."""
        try:
            if not from_memory:
                return self._directory.derived(
                    claims.recipient, claims.credential_id, claims.generation, client
                )
            if not self._catalog.answers_from_memory():
                raise NotInMemory
            principal = self._directory.derived_from_memory(
                claims.recipient, claims.credential_id, claims.generation, client
            )
            if principal is None:
                raise NotInMemory
            return principal
        except SharingError as exc:
            refusal = getattr(exc, "refusal", None)
            reason = refusal.reason if isinstance(refusal, Refusal) else Reason.FORBIDDEN
            raise _verified(S3Error.access_denied(), reason, claims) from None

    def _table(self, claims: keys.KeyClaims, principal: Principal) -> SharedTable:
        viewer = Viewer(principal.recipient, principal.properties, principal.generation)
        catalog = self._catalog.visible_to(principal.shares, viewer)
        try:
            shared = catalog.get_table(claims.share, claims.schema, claims.table)
        except ResourceNotFound:
            raise _verified(
                S3Error.access_denied("The table is no longer shared with this key's holder."),
                Reason.FORBIDDEN,
                claims,
            ) from None
        if claims.scope is None and not reads_whole(shared):
            raise _verified(
                S3Error.access_denied("The table's folder is not open to this key's holder."),
                Reason.FORBIDDEN,
                claims,
            )
        if claims.scope is not None and claims.scope != slice_scope(shared):
            raise _verified(
                S3Error.access_denied(
                    "What this key's holder sees of the table has changed: load it again."
                ),
                Reason.FORBIDDEN,
                claims,
            )
        return shared


def _verified(error: S3Error, reason: Reason, claims: keys.KeyClaims) -> S3Error:
    """An error for a request whose signature held: the audit names the key's holder."""
    error.refusal = _refusal(reason, claims)
    return error


@dataclass(frozen=True, slots=True)
class ListedObject:
    """A file as S3 lists it (`key` relative to the table; a real path from `open`)."""

    key: str
    size: int
    modified: float
    etag: str


def entity_tag(st: os.stat_result) -> str:
    """An entity tag that changes when the file does (S3 clients require one)."""
    return _entity_tag(st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=4096)
def _entity_tag(size: int, mtime_ns: int, inode: int) -> str:
    text = f"{size}:{mtime_ns}:{inode}".encode()
    return '"' + hashlib.md5(text, usedforsecurity=False).hexdigest() + '"'


# A table folder's real path, by location, for ROOT_SECONDS: resolving it walks every
# component of the path (an lstat each) on every request otherwise. A folder moved or
# re-linked is followed within that time; what lies inside is resolved on every request.
ROOT_SECONDS = 2.0
_MAX_ROOTS = 1024
_roots: dict[str, tuple[str, float]] = {}


def _real_root(location: str) -> str:
    now = time.monotonic()
    known = _roots.get(location)
    if known is not None and now - known[1] < ROOT_SECONDS:
        return known[0]
    storage, root = resolve(location)
    if storage.kind is not StorageKind.LOCAL:
        raise S3Error.access_denied("Only local tables are served by this endpoint.")
    real = os.path.realpath(root)
    if len(_roots) >= _MAX_ROOTS:
        _roots.clear()
    _roots[location] = (real, now)
    return real


class TableFolder:
    """A local table's folder as S3 objects: keys are paths relative to the table root."""

    def __init__(self, location: str) -> None:
        self.root = _real_root(location)

    def open(self, key: str) -> ListedObject:
        """The file an object key names, or NoSuchKey (outside the folder, a directory,
        missing: all the same, so probing reveals nothing about the disk)."""
        try:
            path = resolve_under(self.root, key)
        except Forbidden:
            raise S3Error.no_such_key() from None
        try:
            st = os.stat(path)
        except OSError:
            raise S3Error.no_such_key() from None
        if not stat.S_ISREG(st.st_mode):
            raise S3Error.no_such_key()
        return ListedObject(path, st.st_size, st.st_mtime, entity_tag(st))

    def walk(self, prefix: str, *, collapse: bool = False) -> Iterator[ListedObject]:
        """Every file whose key starts with `prefix`, in key order (S3's listing order: by
        UTF-8 bytes). Only directories the prefix can reach are entered; symlinks leading
        outside the folder are left out. With `collapse` (a listing delimited by "/"), a
        directory wholly under the prefix is one entry, its key ending in "/", instead of
        its files: a delimited listing of the table root does not walk every data file."""
        yield from self._walk("", prefix, collapse)

    def _walk(self, relative_dir: str, prefix: str, collapse: bool) -> Iterator[ListedObject]:
        directory = os.path.join(self.root, relative_dir) if relative_dir else self.root
        try:
            entries = list(os.scandir(directory))
        except OSError:
            return
        named: list[tuple[str, os.DirEntry[str], bool]] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            key = relative_dir + entry.name + ("/" if is_dir else "")
            named.append((key, entry, is_dir))
        # A directory sorts as its keys do: by its name followed by "/".
        named.sort(key=lambda item: item[0].encode())
        for key, entry, is_dir in named:
            if is_dir:
                if not self._inside(entry.path):
                    continue
                if collapse and key.startswith(prefix) and key != prefix:
                    yield ListedObject(key, 0, 0.0, "")
                elif key.startswith(prefix) or prefix.startswith(key):
                    yield from self._walk(key, prefix, collapse)
                continue
            if not key.startswith(prefix) or not self._inside(entry.path):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield ListedObject(key, st.st_size, st.st_mtime, entity_tag(st))

    def _inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return os.path.commonpath([self.root, real]) == self.root and real != self.root
