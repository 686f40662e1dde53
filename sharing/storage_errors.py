"""Recognising a storage 'access denied' behind a deltalog error.

deltalog's backends raise `StorageError` from the SDK's exception (`raise ... from exc`),
so the cause chain still holds the service's answer. A 401/403 there means the server's
own credentials cannot read the table: the provider must fix them, the recipient can only
be told the table is not readable. Looked up by attribute, so no cloud SDK is imported.
"""

from __future__ import annotations

from typing import Any

__all__ = ["access_denied"]

_DENIED_STATUS = frozenset({401, 403})
_DENIED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "AuthenticationFailed",
        "AuthorizationFailure",
        "AuthorizationPermissionMismatch",
        "InsufficientAccountPermissions",
    }
)


def _status(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):  # botocore ClientError
        code = response.get("Error", {}).get("Code")
        if code in _DENIED_CODES:
            return 403
        return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if getattr(exc, "error_code", None) in _DENIED_CODES:  # azure-core HttpResponseError
        return 403
    status = getattr(exc, "status_code", None)  # azure-core
    if status is None:
        status = getattr(exc, "code", None)  # google.api_core exceptions
    return status


def access_denied(exc: BaseException) -> bool:
    """Whether `exc` or any exception it was raised from is a storage 401/403."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, PermissionError) or _status(current) in _DENIED_STATUS:
            return True
        current = current.__cause__ or current.__context__
    return False
