"""Protocol errors: every error a client can cause becomes one of these, and the app layer
turns it into the protocol's JSON body `{"errorCode": ..., "message": ...}` with `status`."""

from __future__ import annotations


class SharingError(Exception):
    """An error response: HTTP status, the protocol's errorCode, and a message safe to show."""

    status: int = 500
    error_code: str = "INTERNAL_ERROR"

    def __init__(self, message: str, *, status: int | None = None, error_code: str | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if error_code is not None:
            self.error_code = error_code

    def body(self) -> dict[str, str]:
        return {"errorCode": self.error_code, "message": self.message}


class Unauthenticated(SharingError):
    status = 401
    error_code = "UNAUTHENTICATED"


class ResourceNotFound(SharingError):
    status = 404
    error_code = "RESOURCE_DOES_NOT_EXIST"


class InvalidParameter(SharingError):
    status = 400
    error_code = "INVALID_PARAMETER_VALUE"


class MalformedRequest(SharingError):
    status = 400
    error_code = "MALFORMED_REQUEST"


class UnsupportedOperation(SharingError):
    status = 400
    error_code = "UNSUPPORTED_OPERATION"


class Forbidden(SharingError):
    status = 403
    error_code = "PERMISSION_DENIED"


class TableAccessDenied(SharingError):
    """The storage service refused the server's own credentials for a table: the
    reference answers as if the table were not there (the provider is told in the log)."""

    status = 400
    error_code = "RESOURCE_DOES_NOT_EXIST"

    def __init__(self) -> None:
        super().__init__("permission denied")


class TableFilesMissing(SharingError):
    """A commit file a change data feed needs is gone (log cleanup): the reference's 400."""

    status = 400
    error_code = "RESOURCE_DOES_NOT_EXIST"


class TableUnreadable(SharingError):
    """The table's log cannot be read (corrupt, unreachable): the provider's problem."""

    def __init__(self) -> None:
        super().__init__("The table cannot be read; the provider has been notified.")
