"""S3's error replies (an XML `<Error>` with `Code` and `Message`), so S3 clients report
what went wrong in their own terms (boto3's `ClientError` codes, object_store's messages)."""

from __future__ import annotations

from xml.sax.saxutils import escape

from sharing.recipients.refusals import Refusal

__all__ = ["S3Error", "error_xml"]


class S3Error(Exception):
    """An S3 error reply. `refused` marks an authentication failure for the audit trail."""

    def __init__(self, status: int, code: str, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.refused = refused
        self.headers: dict[str, str] = {}
        self.refusal: Refusal | None = None  # the key's holder, once its signature held

    @classmethod
    def access_denied(cls, message: str = "Access Denied") -> S3Error:
        return cls(403, "AccessDenied", message, refused=True)

    @classmethod
    def signature_mismatch(cls) -> S3Error:
        return cls(
            403,
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided.",
            refused=True,
        )

    @classmethod
    def expired_token(cls) -> S3Error:
        return cls(400, "ExpiredToken", "The provided token has expired.", refused=True)

    @classmethod
    def no_such_key(cls) -> S3Error:
        return cls(404, "NoSuchKey", "The specified key does not exist.")

    @classmethod
    def invalid_range(cls, size: int) -> S3Error:
        error = cls(416, "InvalidRange", "The requested range is not satisfiable")
        error.headers["Content-Range"] = f"bytes */{size}"
        return error


def error_xml(error: S3Error, resource: str, request_id: str) -> bytes:
    """The body of an error reply."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>{escape(request_id)}</RequestId>"
        "</Error>"
    ).encode()
