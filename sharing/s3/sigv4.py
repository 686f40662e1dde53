"""AWS Signature Version 4 as S3 checks it, for the server's own S3 endpoint: the
`Authorization: AWS4-HMAC-SHA256 …` header and presigned `X-Amz-*` query parameters.

Only GET and HEAD are served, so the payload is empty: its hash is what the client put in
`x-amz-content-sha256` (signed, so it cannot be changed) or the empty string's. The
canonical URI is the path exactly as sent (S3 does not normalise or re-encode it); the
canonical query is rebuilt from the decoded parameters, as S3 does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import quote, unquote

from sharing.s3.errors import S3Error

__all__ = ["SignedRequest", "parse_signed_request", "verify"]

ALGORITHM = "AWS4-HMAC-SHA256"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_SKEW_SECONDS = 15 * 60  # S3's allowance for a header-signed request's clock
MAX_PRESIGNED_SECONDS = 7 * 24 * 3600  # S3's longest X-Amz-Expires
_DATE = re.compile(r"[0-9]{8}T[0-9]{6}Z\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What a request's signature states, before it is checked."""

    access_key_id: str
    date: str  # yyyymmdd
    region: str
    service: str
    amz_date: str
    signed_headers: tuple[str, ...]
    signature: str
    session_token: str | None
    presigned_expires: int | None  # X-Amz-Expires of a presigned URL

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def _malformed(message: str) -> S3Error:
    return S3Error(400, "AuthorizationQueryParametersError", message, refused=True)


def _credential(value: str) -> tuple[str, str, str, str]:
    parts = value.split("/")
    if len(parts) != 5 or parts[4] != "aws4_request" or not all(parts):
        raise S3Error(
            400, "AuthorizationHeaderMalformed", "The credential scope is malformed.", refused=True
        )
    return parts[0], parts[1], parts[2], parts[3]


def parse_signed_request(
    headers: Mapping[str, str], query: Sequence[tuple[str, str]]
) -> SignedRequest:
    """The signature of a request, from its header or its query; AccessDenied when it has
    none (an anonymous request: nothing here is public)."""
    params = dict(query)
    header = headers.get("authorization")
    if header is not None:
        scheme, _, rest = header.strip().partition(" ")
        if scheme != ALGORITHM:
            raise S3Error(
                400,
                "InvalidArgument",
                "Only AWS4-HMAC-SHA256 request signatures are supported.",
                refused=True,
            )
        fields: dict[str, str] = {}
        for item in rest.split(","):
            name, _, value = item.strip().partition("=")
            fields[name] = value
        try:
            credential, signed, signature = (
                fields["Credential"],
                fields["SignedHeaders"],
                fields["Signature"],
            )
        except KeyError:
            raise S3Error(
                400,
                "AuthorizationHeaderMalformed",
                "The authorization header is malformed.",
                refused=True,
            ) from None
        amz_date = headers.get("x-amz-date", "")
        token = headers.get("x-amz-security-token")
        expires = None
    elif "X-Amz-Algorithm" in params:
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise _malformed("X-Amz-Algorithm only supports AWS4-HMAC-SHA256.")
        try:
            credential = params["X-Amz-Credential"]
            signed = params["X-Amz-SignedHeaders"]
            signature = params["X-Amz-Signature"]
            amz_date = params["X-Amz-Date"]
            expires_text = params["X-Amz-Expires"]
        except KeyError as missing:
            raise _malformed(f"Query-string authentication requires {missing.args[0]}.") from None
        if not (expires_text.isascii() and expires_text.isdigit()) or (
            int(expires_text) > MAX_PRESIGNED_SECONDS
        ):
            raise _malformed("X-Amz-Expires must be a number of seconds up to 604800.")
        expires = int(expires_text)
        token = params.get("X-Amz-Security-Token")
    else:
        raise S3Error.access_denied("Anonymous access is not allowed: sign the request.")
    key_id, date, region, service = _credential(credential)
    if not _DATE.match(amz_date) or amz_date[:8] != date or _signed_at(amz_date) is None:
        raise S3Error(
            400,
            "AuthorizationHeaderMalformed",
            "X-Amz-Date is missing, malformed, or not the credential scope's date.",
            refused=True,
        )
    if service != "s3":
        raise S3Error(
            400, "AuthorizationHeaderMalformed", "The credential scope must name s3.", refused=True
        )
    names = tuple(signed.split(";"))
    if "host" not in names or any(n != n.lower() or not n for n in names):
        raise S3Error(
            400,
            "AuthorizationHeaderMalformed",
            "SignedHeaders must be lower-case and include host.",
            refused=True,
        )
    if not _HEX64.match(signature):
        raise S3Error.signature_mismatch()
    return SignedRequest(key_id, date, region, service, amz_date, names, signature, token, expires)


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def canonical_query(raw_query: str, *, presigned: bool) -> str:
    """The canonical query string of a raw query (the signature itself left out)."""
    pairs: list[tuple[str, str]] = []
    for item in raw_query.split("&") if raw_query else ():
        name, _, value = item.partition("=")
        name, value = unquote(name), unquote(value)
        if presigned and name == "X-Amz-Signature":
            continue
        pairs.append((_encode(name), _encode(value)))
    pairs.sort()
    return "&".join(f"{n}={v}" for n, v in pairs)


def _header_value(values: list[str]) -> str:
    return ",".join(_SPACES.sub(" ", v.strip()) for v in values)


def string_to_sign(
    signed: SignedRequest,
    method: str,
    raw_path: str,
    raw_query: str,
    header_lists: Mapping[str, list[str]],
) -> str:
    """What the client signed, rebuilt from the request as received."""
    lines = []
    for name in signed.signed_headers:
        values = header_lists.get(name)
        if values is None:
            raise S3Error.signature_mismatch()
        lines.append(f"{name}:{_header_value(values)}\n")
    if signed.presigned_expires is not None:
        payload = UNSIGNED_PAYLOAD
    else:
        payload = (header_lists.get("x-amz-content-sha256") or [EMPTY_SHA256])[0]
    canonical = "\n".join(
        (
            method,
            raw_path,
            canonical_query(raw_query, presigned=signed.presigned_expires is not None),
            "".join(lines),
            ";".join(signed.signed_headers),
            payload,
        )
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return f"{ALGORITHM}\n{signed.amz_date}\n{signed.scope}\n{digest}"


@lru_cache(maxsize=1024)
def _signed_at(amz_date: str) -> datetime | None:
    """The time an X-Amz-Date of the right pattern names; None for no real date."""
    try:
        return datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def signing_key(secret: str, signed: SignedRequest) -> bytes:
    return _derived_key(secret, signed.date, signed.region, signed.service)


@lru_cache(maxsize=1024)
def _derived_key(secret: str, date: str, region: str, service: str) -> bytes:
    """SigV4's key of a secret for a day, region and service: the same for every request
    of a key on a day (four HMACs saved per request; the request's own HMAC is not)."""
    key = hmac.digest(("AWS4" + secret).encode(), date.encode(), "sha256")
    for part in (region, service, "aws4_request"):
        key = hmac.digest(key, part.encode(), "sha256")
    return key


def verify(
    signed: SignedRequest,
    secret: str,
    method: str,
    raw_path: str,
    raw_query: str,
    header_lists: Mapping[str, list[str]],
    now: Callable[[], float],
) -> None:
    """SignatureDoesNotMatch unless the request was signed with `secret`; then AccessDenied
    when a presigned URL has expired or RequestTimeTooSkewed when a signed header's date is
    too far from the server's clock."""
    text = string_to_sign(signed, method, raw_path, raw_query, header_lists)
    expected = hmac.new(signing_key(secret, signed), text.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, signed.signature):
        raise S3Error.signature_mismatch()
    signed_at = _signed_at(signed.amz_date)
    if signed_at is None:  # parse_signed_request refuses it first
        raise S3Error(400, "AuthorizationHeaderMalformed", "X-Amz-Date is not a date.")
    at = signed_at.timestamp()
    current = now()
    if signed.presigned_expires is not None:
        if current > at + signed.presigned_expires or at > current + MAX_SKEW_SECONDS:
            raise S3Error.access_denied("Request has expired")
    elif abs(current - at) > MAX_SKEW_SECONDS:
        raise S3Error(
            403,
            "RequestTimeTooSkewed",
            "The difference between the request time and the server's time is too large.",
            refused=True,
        )
