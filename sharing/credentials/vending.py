"""Temporary table credentials (`POST …/temporary-table-credentials`), dispatched on the
kind of the table's storage to one vendor module per cloud.

Checked here, in this order, before any cloud is asked: the table shares its history (the
reference's rule) and the requested location lies within the table (`location.py`). Then
the vendor checks that it can issue credentials reaching no more than that location and
asks its cloud. Whatever stops it — a storage that cannot scope them, the server's own
credentials missing or refused — the recipient gets a 400 naming why and the provider an
ERROR log line saying what to change; never a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from deltalog.storage.base import Storage
from deltalog.storage.kinds import StorageKind
from sharing.catalog import SharedTable
from sharing.credentials.base import CredentialsUnavailable, NotVendable, TemporaryCredentials
from sharing.credentials.location import NOT_CLOUD, CloudLocation, check_location, parse_location
from sharing.errors import Forbidden, InvalidParameter, UnsupportedOperation
from sharing.views.materializations import refuse_view_history

__all__ = ["VendingSupport", "require_history_for_credentials", "vend", "vending_support"]

log = logging.getLogger(__name__)


class Vendor(Protocol):
    """What each cloud's module (`sharing.credentials.s3`, `.azure`, `.gcs`) offers."""

    def check(self, storage: Storage, table: CloudLocation) -> None:
        """NotVendable when no credentials limited to `table` can be issued."""
        ...

    def vend(
        self,
        storage: Storage,
        table: CloudLocation,
        location: str,
        requested: CloudLocation,
        validity_seconds: int,
        also: Sequence[CloudLocation] = (),
    ) -> TemporaryCredentials:
        """Credentials for `requested` (within `table`) and the `also` locations (the
        table's generated Iceberg metadata, outside it), or NotVendable."""
        ...


def _vendor(kind: StorageKind) -> Vendor:
    """The vendor for a cloud, imported on first use (each imports its cloud's SDK)."""
    if kind is StorageKind.S3:
        from sharing.credentials import s3

        return s3
    if kind is StorageKind.AZURE:
        from sharing.credentials import azure

        return azure
    if kind is StorageKind.GCS:
        from sharing.credentials import gcs

        return gcs
    raise UnsupportedOperation(NOT_CLOUD)


def require_history_for_credentials(shared: SharedTable) -> None:
    """Credentials reach the table's whole directory: refused (403) for a table that this
    recipient sees a slice of (sharing.slices: the filter would be bypassed), and, as the
    reference does, for a table without shared history."""
    if shared.partition_filter is not None:
        raise Forbidden(
            f"Temporary table credentials are not available for table {shared.full_name}: "
            "it is shared with a partition filter, which direct access to its files would "
            "bypass. Read it through the query APIs."
        )
    refuse_view_history(shared.config, shared.full_name, "temporary table credentials")
    if not shared.config.history_shared:
        raise InvalidParameter(
            "Temporary table credentials are not supported because history sharing is not "
            f"enabled on table: {shared.full_name}"
        )


def _table_location(shared: SharedTable) -> CloudLocation:
    root = parse_location(shared.config.location)
    if root is None:
        raise UnsupportedOperation(NOT_CLOUD)
    return root


def vend(
    shared: SharedTable,
    storage: Storage,
    requested: str | None,
    validity_seconds: int,
    also: Sequence[str] = (),
) -> TemporaryCredentials:
    """Credentials for `requested` (default: the table root) of a history-shared table whose
    log is read through `storage`, valid for at most `validity_seconds`; with `also`, the
    same credentials reach those locations too (the Iceberg catalog's generated metadata
    of this table, sharing.iceberg.publish; never given by a recipient)."""
    require_history_for_credentials(shared)
    location, wanted = check_location(shared.config.location, requested)
    table = _table_location(shared)
    vendor = _vendor(storage.kind)
    extra = []
    for uri in also:
        parsed = parse_location(uri)
        if parsed is None or parsed.kind is not storage.kind:
            raise UnsupportedOperation(NOT_CLOUD)
        extra.append(parsed)
    try:
        return vendor.vend(storage, table, location, wanted, validity_seconds, extra)
    except NotVendable as exc:
        log.error(
            "temporary credentials for table %s not issued: %s",
            shared.full_name,
            exc.detail,
            extra={"table": shared.full_name, "storage": storage.kind.value},
        )
        raise CredentialsUnavailable(_message(shared, exc.reason)) from exc


def _message(shared: SharedTable, reason: str) -> str:
    return f"Temporary table credentials are not available for table {shared.full_name}: {reason}."


@dataclass(frozen=True, slots=True)
class VendingSupport:
    """Whether temporary credentials can be vended for a table; if not, why (as the
    recipient is told) and what the provider can change."""

    possible: bool
    reason: str = ""
    detail: str = ""


def vending_support(shared: SharedTable, storage: Storage) -> VendingSupport:
    """Whether `POST …/temporary-table-credentials` can succeed for this table, and if not,
    why — for `lakeshare check`. May ask the cloud (e.g. whether an Azure account has a
    hierarchical namespace), as a request would."""
    if not shared.config.history_shared:
        return VendingSupport(
            False,
            "history sharing is not enabled on the table",
            "set historyShared: true on the table to offer temporary credentials",
        )
    if storage.kind is StorageKind.LOCAL:  # keys for the server's own S3 endpoint (sharing.s3)
        return VendingSupport(True)
    table = parse_location(shared.config.location)
    if table is None or not storage.kind.is_cloud:
        return VendingSupport(False, NOT_CLOUD, "the table is not on S3, GCS or Azure")
    try:
        _vendor(storage.kind).check(storage, table)
    except NotVendable as exc:
        return VendingSupport(False, _message(shared, exc.reason), exc.detail)
    return VendingSupport(True)
