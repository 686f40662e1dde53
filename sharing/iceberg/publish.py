"""Copies a cloud table's generated Iceberg files to its metadata location in the cloud.

A remote Iceberg client reads a cloud table's data files where they are, with credentials
vended for the table; the generated metadata must be somewhere those same credentials
reach. It is generated in the cache as for any table (sharing.iceberg.files), naming its
files under the configured metadata location (`iceberg.metadataLocation`, in the table's
cloud), and then copied there mirroring the cache's layout:

    <metadata location>/<table digest>/from-<base>/metadata/...   and   .../data/...

so one vended credential covers the table's folder and `<metadata location>/<table
digest>/` and nothing else (sharing.credentials, `also`). Generated files never change, so
each is copied once: `<cache folder>/.published` lists the copied names and
`.published-<version>` marks a version whose files are all there. The metadata JSON is
copied last, so a reader who finds it finds every file it names. The copy is made with the
table's own storage credentials, which must be allowed to write there.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from deltalog.storage.base import Storage
from deltalog.storage.kinds import StorageKind
from sharing.credentials.location import CloudLocation, parse_location
from sharing.errors import SharingError, UnsupportedOperation
from sharing.iceberg.files import METADATA_SUFFIX, TableFiles, write_once

__all__ = ["PublishFailed", "probe_write", "publish_version", "same_cloud"]

_RECORD = ".published"
log = logging.getLogger(__name__)


class PublishFailed(SharingError):
    """The generated files could not be copied to the metadata location (503: the
    provider's storage, not the request)."""

    status = 503
    error_code = "SERVICE_UNAVAILABLE"


def same_cloud(storage: Storage, location: str) -> CloudLocation | None:
    """`location` parsed, when it is in the cloud `storage` reads (on Azure, the same
    account); None otherwise."""
    parsed = parse_location(location)
    if parsed is None or parsed.kind is not storage.kind:
        return None
    if parsed.kind is StorageKind.AZURE:
        account = getattr(storage, "account", None)
        if parsed.bucket.split("@", 1)[1].split(".", 1)[0] != account:
            return None
    return parsed


def publish_version(
    storage: Storage, files: TableFiles, version: int, published: str, directory: Path
) -> None:
    """Copy every generated file of `files` up to `version` not copied yet to `published`
    (the metadata location) through `storage`, the metadata JSONs last."""
    marker = files.root / f"{_RECORD}-{version:020d}"
    if marker.exists():
        return
    target = same_cloud(storage, published)
    if target is None:
        raise UnsupportedOperation(
            "The Iceberg metadata location is not in the table's cloud account"
        )
    with files.generating():
        if marker.exists():
            return
        record = files.root / _RECORD
        done = set(record.read_text().splitlines()) if record.exists() else set()
        pending = [
            p
            for folder in (files.data_dir, files.metadata_dir)
            if folder.is_dir()
            for p in sorted(folder.iterdir())
            if not p.name.startswith(".") and p.relative_to(directory).as_posix() not in done
        ]
        pending.sort(key=lambda p: p.name.endswith(METADATA_SUFFIX))  # JSONs last
        copied = []
        try:
            for path in pending:
                relative = path.relative_to(directory).as_posix()
                _put(storage, target, relative, path.read_bytes())
                copied.append(relative)
        finally:
            if copied:
                with open(record, "a", encoding="utf-8") as handle:
                    handle.write("".join(f"{name}\n" for name in copied))
                    handle.flush()
                    os.fsync(handle.fileno())
        write_once(marker, b"")


def _put(storage: Storage, target: CloudLocation, relative: str, data: bytes) -> None:
    key = "/".join([*target.segments, relative])
    try:
        if target.kind is StorageKind.S3:
            storage.client.put_object(Bucket=target.bucket, Key=key, Body=data)  # type: ignore[attr-defined]
        elif target.kind is StorageKind.GCS:
            bucket = storage.client.bucket(target.bucket)  # type: ignore[attr-defined]
            bucket.blob(key).upload_from_string(data)
        elif target.kind is StorageKind.AZURE:
            blob = storage.service.get_blob_client(target.container, key)  # type: ignore[attr-defined]
            blob.upload_blob(data, overwrite=True)
        else:  # pragma: no cover - same_cloud admits clouds only
            raise UnsupportedOperation(f"Cannot publish to {target.kind.label}")
    except SharingError:
        raise
    except Exception as exc:  # the cloud SDKs' own error types; the cause goes to the log
        log.error(
            "generated Iceberg metadata not copied to %s (%s): %s",
            f"{target.kind.value}://{target.bucket}/{key}",
            type(exc).__name__,
            getattr(exc, "response", {}).get("Error", {}).get("Code", "")
            if isinstance(getattr(exc, "response", None), dict)
            else "",
        )
        raise PublishFailed(
            "The table's Iceberg metadata could not be written to its metadata location; "
            "the provider has been notified."
        ) from exc


def probe_write(storage: Storage, location: str) -> str | None:
    """Why the server cannot write generated files under `location` through `storage`
    (a probe file is written there and deleted), or None: `lakeshare check`."""
    target = same_cloud(storage, location)
    if target is None:
        return "it is not in the table's cloud account"
    probe = "/".join([*target.segments, ".lakeshare-probe"])
    try:
        if target.kind is StorageKind.AZURE:
            blob = storage.service.get_blob_client(target.container, probe)  # type: ignore[attr-defined]
            blob.upload_blob(b"", overwrite=True)
            blob.delete_blob()
        else:
            return f"probing {target.kind.label} is not supported"
    except Exception as exc:  # the SDK's own error types: their code is the reason
        return getattr(exc, "error_code", None) or type(exc).__name__
    return None
