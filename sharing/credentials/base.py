"""What every credential vendor returns or raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sharing.errors import UnsupportedOperation

__all__ = ["CredentialsUnavailable", "NotVendable", "TemporaryCredentials"]


@dataclass(frozen=True)
class TemporaryCredentials:
    """One vended credential: `field` is the response's field name for it
    (`awsTempCredentials`, `azureUserDelegationSas`, `gcpOauthToken`)."""

    location: str
    field: str
    values: dict[str, str]
    expiration_ms: int

    def body(self) -> dict[str, Any]:
        return {
            "credentials": {
                "location": self.location,
                self.field: self.values,
                "expirationTime": self.expiration_ms,
            }
        }

    def __repr__(self) -> str:  # never show the secret values
        return f"TemporaryCredentials({self.location!r}, {self.field}, {self.expiration_ms})"


class NotVendable(Exception):
    """A vendor cannot issue credentials for a table: `reason` is said to the recipient,
    `detail` (what to change, the service's error code) goes to the provider's log only."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class CredentialsUnavailable(UnsupportedOperation):
    """The 400 a recipient gets when a table's credentials cannot be vended: whatever the
    cause (the storage cannot scope them, the server's own credentials are missing or were
    refused), it is the provider's to fix, and retrying the request will not help."""
