"""Errors of the token endpoint, in RFC 6749 §5.2 form (`error`, `error_description`) and,
alongside, the protocol's (`errorCode`, `message`), so both kinds of client read them. A
failed client authentication carries its `refusal`, for the audit trail."""

from __future__ import annotations

from sharing.errors import SharingError
from sharing.recipients.refusals import Refusal

__all__ = ["OAuthError", "RateLimited"]


class OAuthError(SharingError):
    """A token endpoint error. `error` is the RFC 6749 code; `status` 400, or 401 for
    `invalid_client` (with a `WWW-Authenticate` challenge when the client used Basic)."""

    def __init__(
        self,
        error: str,
        description: str,
        *,
        status: int = 400,
        headers: dict[str, str] | None = None,
    ) -> None:
        code = {
            "invalid_client": "UNAUTHENTICATED",
            "unauthorized_client": "PERMISSION_DENIED",
            "temporarily_unavailable": "TOO_MANY_REQUESTS",
        }.get(error, "INVALID_PARAMETER_VALUE")
        super().__init__(description, status=status, error_code=code)
        self.error = error
        self.headers = headers or {}
        self.refusal: Refusal | None = None  # set by the token service on a failed login

    def body(self) -> dict[str, str]:
        return {
            "error": self.error,
            "error_description": self.message,
            **super().body(),
        }

    @staticmethod
    def invalid_request(description: str) -> OAuthError:
        return OAuthError("invalid_request", description)

    @staticmethod
    def invalid_client(description: str, *, basic: bool = False) -> OAuthError:
        headers = {"WWW-Authenticate": 'Basic realm="delta-sharing"'} if basic else None
        return OAuthError("invalid_client", description, status=401, headers=headers)

    @staticmethod
    def invalid_grant(description: str) -> OAuthError:
        return OAuthError("invalid_grant", description)

    @staticmethod
    def unsupported_grant_type(grant_type: str) -> OAuthError:
        shown = grant_type[:100]
        return OAuthError(
            "unsupported_grant_type",
            f"grant_type '{shown}' is not supported: use client_credentials or "
            "urn:ietf:params:oauth:grant-type:jwt-bearer",
        )

    @staticmethod
    def unauthorized_client(description: str) -> OAuthError:
        return OAuthError("unauthorized_client", description)


class RateLimited(OAuthError):
    """Too many failed authentications from one client address: 429 with `Retry-After`."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            "temporarily_unavailable",
            f"too many failed authentications from this address; retry in {retry_after} s",
            status=429,
            headers={"Retry-After": str(retry_after)},
        )
        self.retry_after = retry_after
