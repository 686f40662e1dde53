"""Which file an object key of a verified grant (sharing.s3.access) names, if the grant
opens it.

Keys under GENERATED_PREFIX are the table's generated Iceberg files (its cache folder for
the holder's slice and this bucket, sharing.iceberg.generator); others are paths in the
table's folder. A key opening the folder reads any of them; a key limited to a slice reads
only what its generated metadata names (sharing.iceberg.named), and anything else — a
file of another partition, of a version outside the shared history, a file that does not
exist — is AccessDenied, as S3 answers a key without list permission: probing tells
nothing about what else is on disk. Listing needs the folder.
"""

from __future__ import annotations

import logging

from sharing.errors import SharingError
from sharing.iceberg.generator import GENERATED_PREFIX, IcebergMetadata
from sharing.iceberg.named import NamedFiles
from sharing.recipients.refusals import Reason, Refusal
from sharing.s3.access import Grant, ListedObject, NotInMemory, TableFolder
from sharing.s3.errors import S3Error

__all__ = ["TableObjects"]

log = logging.getLogger(__name__)


def _denied(grant: Grant, message: str) -> S3Error:
    """AccessDenied for a verified key (the audit names its holder: the signature held)."""
    error = S3Error.access_denied(message)
    claims = grant.claims
    error.refusal = Refusal(Reason.FORBIDDEN, claims.recipient, claims.credential_id)
    return error


class TableObjects:
    """Resolves object keys for grants: the tables' folders and generated files."""

    def __init__(self, metadata: IcebergMetadata, named: NamedFiles | None = None) -> None:
        self.metadata = metadata
        self.named = named if named is not None else NamedFiles(metadata)

    def find(self, grant: Grant, key: str, *, from_memory: bool = False) -> ListedObject:
        """The file `key` names for `grant` (blocking: may read the log and generate the
        slice's metadata), or S3Error. `from_memory`: NotInMemory rather than reading the
        log or generating (the file itself is still resolved and looked up on disk)."""
        if not grant.whole_folder:
            try:
                if from_memory:
                    named_now = self.named.names_from_memory(grant.shared, grant.claims.bucket, key)
                    if named_now is None:
                        raise NotInMemory
                    named = named_now
                else:
                    named = self.named.names(grant.shared, grant.claims.bucket, key)
            except SharingError:
                named = False
            except (OSError, ValueError) as exc:  # the generated files unreadable
                log.error(
                    "S3 endpoint: the files of %s's slice could not be read: %s",
                    grant.shared.full_name,
                    exc,
                    extra={"table": grant.shared.full_name},
                )
                raise S3Error(500, "InternalError", "The object could not be read.") from None
            if not named:
                raise _denied(grant, "The key does not grant access to this object.")
        if not key.startswith(GENERATED_PREFIX):
            return grant.folder().open(key)
        try:
            current = None
            if from_memory:
                current = self.metadata.tables.fresh_latest(grant.shared)
                if current is None:
                    raise NotInMemory
            root = self.metadata.generated_root(grant.shared, grant.claims.bucket, current)
        except SharingError:
            raise S3Error.no_such_key() from None
        return TableFolder(str(root)).open(key[len(GENERATED_PREFIX) :])

    @staticmethod
    def check_listable(grant: Grant) -> None:
        """AccessDenied unless the grant opens the table's folder (a slice's key does
        not list: the folder's names are not all its own)."""
        if not grant.whole_folder:
            raise _denied(
                grant,
                "A key for a slice of the table reads the files its metadata names; "
                "it does not list the table's folder.",
            )
