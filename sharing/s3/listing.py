"""ListObjectsV2 within one table's folder: what delta-rs asks to find a table's log
(`prefix=_delta_log/`, `start-after`), answered from the folder on disk."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from urllib.parse import quote
from xml.sax.saxutils import escape

from sharing.s3.access import ListedObject, TableFolder
from sharing.s3.errors import S3Error

__all__ = ["ListRequest", "http_date", "list_objects"]

MAX_KEYS = 1000
_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


@dataclass(frozen=True, slots=True)
class ListRequest:
    prefix: str
    delimiter: str
    start_after: str
    continuation: str | None
    max_keys: int
    url_encoded: bool

    @staticmethod
    def parse(params: Mapping[str, str]) -> ListRequest:
        if params.get("list-type") != "2":
            raise S3Error(400, "InvalidArgument", "Only ListObjectsV2 (list-type=2) is supported.")
        text = params.get("max-keys", str(MAX_KEYS))
        if not (text.isascii() and text.isdigit()):
            raise S3Error(400, "InvalidArgument", "max-keys must be a non-negative integer.")
        encoding = params.get("encoding-type")
        if encoding not in (None, "url"):
            raise S3Error(400, "InvalidArgument", "encoding-type must be url.")
        return ListRequest(
            prefix=params.get("prefix", ""),
            delimiter=params.get("delimiter", ""),
            start_after=params.get("start-after", ""),
            continuation=params.get("continuation-token"),
            max_keys=min(int(text[:7]), MAX_KEYS),
            url_encoded=encoding == "url",
        )


def _token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode()


def _position(token: str) -> str:
    try:
        return base64.urlsafe_b64decode(token.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise S3Error(
            400, "InvalidArgument", "The continuation token provided is incorrect."
        ) from None


@lru_cache(maxsize=4096)
def http_date(seconds: float) -> str:
    """`Last-Modified` of a file modified at `seconds` (remembered: every read sends it)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def list_objects(folder: TableFolder, bucket: str, request: ListRequest) -> bytes:
    """The ListBucketResult document for one page."""
    after = request.start_after
    if request.continuation is not None:
        after = max(after, _position(request.continuation))
    contents: list[ListedObject] = []
    prefixes: list[str] = []
    last = ""
    truncated = False
    for item in folder.walk(request.prefix, collapse=request.delimiter == "/"):
        key = item.key
        rest = key[len(request.prefix) :]
        if request.delimiter and request.delimiter in rest:
            common = key[: len(request.prefix) + rest.index(request.delimiter)]
            common += request.delimiter
            if common <= after or (prefixes and prefixes[-1] == common):
                continue
            if len(contents) + len(prefixes) >= request.max_keys:
                truncated = True
                break
            prefixes.append(common)
            last = common
            continue
        if key <= after:
            continue
        if len(contents) + len(prefixes) >= request.max_keys:
            truncated = True
            break
        contents.append(item)
        last = key
    return _document(bucket, request, contents, prefixes, truncated, last)


def _document(
    bucket: str,
    request: ListRequest,
    contents: list[ListedObject],
    prefixes: list[str],
    truncated: bool,
    last: str,
) -> bytes:
    def text(value: str) -> str:
        return escape(quote(value, safe="/") if request.url_encoded else value)

    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        f'<ListBucketResult xmlns="{_XMLNS}">',
        f"<Name>{escape(bucket)}</Name>",
        f"<Prefix>{text(request.prefix)}</Prefix>",
        f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>",
        f"<MaxKeys>{request.max_keys}</MaxKeys>",
    ]
    if request.delimiter:
        parts.append(f"<Delimiter>{text(request.delimiter)}</Delimiter>")
    if request.url_encoded:
        parts.append("<EncodingType>url</EncodingType>")
    parts.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
    if request.continuation is not None:
        parts.append(f"<ContinuationToken>{escape(request.continuation)}</ContinuationToken>")
    if truncated:
        parts.append(f"<NextContinuationToken>{_token(last)}</NextContinuationToken>")
    if request.start_after:
        parts.append(f"<StartAfter>{text(request.start_after)}</StartAfter>")
    for item in contents:
        parts.append(
            f"<Contents><Key>{text(item.key)}</Key>"
            f"<LastModified>{_iso(item.modified)}</LastModified>"
            f"<ETag>{escape(item.etag)}</ETag><Size>{item.size}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
        )
    for common in prefixes:
        parts.append(f"<CommonPrefixes><Prefix>{text(common)}</Prefix></CommonPrefixes>")
    parts.append("</ListBucketResult>")
    return "".join(parts).encode()
