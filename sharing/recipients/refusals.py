"""Why an authentication failed, and who the request came from: what the audit trail records
of a refused request (never the secret that was presented).

`recipient` and `credential_id` are set only when the server verified them — the request
presented the credential's secret, a password that matched, a signature or an access token
the server checked — and refused it for another reason (revoked, expired, disabled, address
not allowed). What a request only *claimed* (a known credential id with a wrong secret, a
user name with a wrong password, the `rcp`/`cid` of a URL whose signature does not match)
goes in `claimed_recipient` and `claimed_credential_id`: anyone can claim to be anyone.

The directory raises its 401s and 403s with a `Refusal` attached (`refusal_of` reads it);
other refusals (e.g. an OAuth verifier's 401) get the generic reason of their status.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sharing.errors import Forbidden, SharingError

__all__ = ["Reason", "Refusal", "RefusedForbidden", "refusal_of"]


class Reason(StrEnum):
    """The `reason` of a refused request's audit record."""

    MISSING_CREDENTIALS = "missing_credentials"
    INVALID_CREDENTIALS = "invalid_credentials"  # unknown, malformed or wrong secret
    CREDENTIAL_REVOKED = "credential_revoked"
    CREDENTIAL_EXPIRED = "credential_expired"  # its expiry or its rotation grace has passed
    RECIPIENT_DISABLED = "recipient_disabled"
    RECIPIENT_EXPIRED = "recipient_expired"
    ADDRESS_NOT_ALLOWED = "address_not_allowed"
    TOO_MANY_FAILED_LOGINS = "too_many_failed_logins"  # throttled before any check (429)
    FORBIDDEN = "forbidden"
    # Signed file URLs (sharing.presign.local_verify).
    URL_NOT_SIGNED = "url_not_signed"
    URL_SIGNATURE_INVALID = "url_signature_invalid"
    URL_EXPIRED = "url_expired"


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: Reason
    recipient: str | None = None  # verified (see the module doc)
    credential_id: str | None = None
    claimed_recipient: str | None = None  # claimed, not verified
    claimed_credential_id: str | None = None

    @staticmethod
    def claimed(reason: Reason, recipient: str | None, credential_id: str | None = None) -> Refusal:
        """A refusal of a request that named a recipient or credential it did not prove."""
        return Refusal(reason, claimed_recipient=recipient, claimed_credential_id=credential_id)


class RefusedForbidden(Forbidden):
    """A 403 of the directory (disabled, expired, address not allowed) naming its refusal."""

    def __init__(self, message: str, refusal: Refusal) -> None:
        super().__init__(message)
        self.refusal = refusal


def refusal_of(error: SharingError) -> Refusal:
    """The refusal an authentication error carries, or the generic one of its status."""
    found = getattr(error, "refusal", None)
    if isinstance(found, Refusal):
        return found
    return Refusal(Reason.INVALID_CREDENTIALS if error.status == 401 else Reason.FORBIDDEN)
