"""S3 pre-signed GET URLs (SigV4 query-string authentication), fast and exact.

The output is byte-identical to botocore's `generate_presigned_url('get_object', ...)` with
`signature_version='s3v4'` and the same addressing style, endpoint, credentials and clock
(tests prove it), at a fraction of the cost: the signing key is derived once per
(secret, date, region) and everything that is the same for all URLs of a batch (scope,
query string, host) is built once, so each URL costs one SHA-256 and one HMAC (in the
signing helper process for a big batch: sharing.presign.signing_helper).

A URL never outlives the credentials that signed it: with temporary credentials the
lifetime is cut to their remaining validity, and `expiration_ms` says so.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote, urlsplit

import pyarrow as pa
import pyarrow.compute as pc
from botocore.credentials import Credentials

from deltalog.storage.s3 import S3Storage, split_key
from sharing.errors import SharingError
from sharing.hexdigests import hex_array
from sharing.presign import signing_helper
from sharing.presign.base import SignedColumn, SignedUrls, json_safe
from sharing.presign.prepared_hmac import DIGEST_SIZE, SIGV4, PreparedHmac
from sharing.presign.url_paths import PathEncoder, plain_column, relative_to_root

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_EXPIRES = 7 * 24 * 3600  # SigV4 query auth refuses anything longer
_DNS_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")


@lru_cache(maxsize=64)
def signing_key(secret_key: str, datestamp: str, region: str, service: str = "s3") -> bytes:
    """The SigV4 key for one day, region and service (four chained HMACs)."""
    key = hmac.digest(f"AWS4{secret_key}".encode(), datestamp.encode(), "sha256")
    key = hmac.digest(key, region.encode(), "sha256")
    key = hmac.digest(key, service.encode(), "sha256")
    return hmac.digest(key, b"aws4_request", "sha256")


@lru_cache(maxsize=64)
def _prepared(key: bytes) -> PreparedHmac:
    return PreparedHmac(key)


def _encode_query_value(value: str) -> str:
    return quote(value, safe="-_.~")


def default_host(region: str) -> str:
    """The regional S3 endpoint host botocore uses for a region."""
    suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"s3.{suffix}" if region == "us-east-1" else f"s3.{region}.{suffix}"


@dataclass(frozen=True, slots=True)
class BucketEndpoint:
    """Where URLs for one bucket point: `{base}{encoded key}` signed for `host`."""

    base: str  # scheme://host[/path]/ up to (and including) the slash before the key
    host: str  # the Host header value, as signed
    path_prefix: str  # the canonical URI up to the key

    @classmethod
    def for_bucket(
        cls, bucket: str, region: str, endpoint_url: str | None, path_style: bool
    ) -> BucketEndpoint:
        """Virtual-hosted URLs when the bucket name allows it (DNS-safe, no dots over TLS),
        path-style otherwise or when asked to."""
        if endpoint_url:
            parts = urlsplit(endpoint_url)
            scheme, netloc, root = parts.scheme, parts.netloc, parts.path.rstrip("/")
        else:
            scheme, netloc, root = "https", default_host(region), ""
        virtual = not path_style and bool(_DNS_BUCKET.match(bucket)) and "." not in bucket
        if virtual:
            host = f"{bucket}.{netloc}"
            return cls(f"{scheme}://{host}{root}/", host, f"{root}/")
        return cls(f"{scheme}://{netloc}{root}/{bucket}/", netloc, f"{root}/{bucket}/")


class S3Signer:
    """Signs GETs for the objects of one table stored on S3."""

    signs_with_prefix = True  # sign_column(keys, prefix=...) (see base.sign_column)

    def __init__(
        self,
        credentials: Credentials,
        *,
        region: str,
        table_root: str,
        ttl_seconds: int,
        endpoint_url: str | None = None,
        path_style: bool = False,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._credentials = credentials
        self._region = region
        self._ttl = min(int(ttl_seconds), MAX_EXPIRES)
        self._root_prefix = table_root.rstrip("/") + "/"
        bucket, _ = split_key(self._root_prefix)
        self._bucket_prefix = f"{bucket}/"
        self._endpoint = BucketEndpoint.for_bucket(bucket, region, endpoint_url, path_style)
        self._encode_path = PathEncoder()  # the key in the URL path and the canonical URI
        # The table root's part of every object name, encoded once: percent-encoding works
        # character by character, so a name's encoding is this followed by its relative
        # path's.
        self._root_in_url = quote(self._root_prefix[len(self._bucket_prefix) :], safe="/~")

    @classmethod
    def for_storage(cls, storage: S3Storage, *, table_root: str, ttl_seconds: int) -> S3Signer:
        """A signer with the storage's credentials, endpoint and the bucket's region."""
        credentials = storage.credentials()
        if credentials is None:
            raise SharingError("no AWS credentials available to sign S3 URLs with")
        bucket, _ = split_key(table_root)
        return cls(
            credentials,
            region=storage.bucket_region(bucket),
            table_root=table_root,
            ttl_seconds=ttl_seconds,
            endpoint_url=storage.options.endpoint_url,
            path_style=storage.options.path_style,
        )

    def expires_in(self, now: float) -> int:
        """The URL lifetime: the configured TTL, cut to what the credentials have left."""
        expiry = getattr(self._credentials, "_expiry_time", None)  # set on refreshable creds
        if expiry is None:
            return self._ttl
        remaining = int(expiry.timestamp() - now)
        return max(1, min(self._ttl, remaining))

    def sign(self, keys: Sequence[str], now: float | None = None) -> SignedUrls:
        """One URL per key (keys are `bucket/key` storage keys under the table root)."""
        signed = self.sign_column(pa.array(keys, pa.string()), now)
        return SignedUrls(urls=signed.urls(), expiration_ms=signed.expiration_ms)

    def sign_column(
        self, keys: pa.Array, now: float | None = None, *, prefix: str = ""
    ) -> SignedColumn:
        """The URLs of a column of storage keys (each `prefix` followed by the column's
        value), as pieces: the endpoint, the encoded key, the query and the signature
        column. With the table root as `prefix` (a response's log paths), the values are
        the relative paths as they are, and no key is joined, checked or cut."""
        relative = relative_to_root(keys, prefix, self._root_prefix)
        return self._sign_relative(relative, time.time() if now is None else now)

    def _sign_relative(self, relative: pa.Array, now: float) -> SignedColumn:
        """The URLs of paths relative to the table root."""
        frozen = self._credentials.get_frozen_credentials()  # refreshes when due
        expires = self.expires_in(now)
        seconds = int(now)
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))
        datestamp = amz_date[:8]
        scope = f"{datestamp}/{self._region}/s3/aws4_request"
        key = signing_key(frozen.secret_key, datestamp, self._region)
        prepared = _prepared(key)

        credential = _encode_query_value(f"{frozen.access_key}/{scope}")
        head = (
            f"X-Amz-Algorithm={ALGORITHM}&X-Amz-Credential={credential}"
            f"&X-Amz-Date={amz_date}&X-Amz-Expires={expires}"
        )
        if frozen.token:
            token = f"X-Amz-Security-Token={_encode_query_value(frozen.token)}"
            canonical_query = f"{head}&{token}&X-Amz-SignedHeaders=host"
            url_query = f"?{head}&X-Amz-SignedHeaders=host&{token}&X-Amz-Signature="
        else:
            canonical_query = f"{head}&X-Amz-SignedHeaders=host"
            url_query = f"?{canonical_query}&X-Amz-Signature="
        endpoint = self._endpoint
        root = self._root_in_url
        request_head = f"GET\n{endpoint.path_prefix}{root}"
        request_tail = f"\n{canonical_query}\nhost:{endpoint.host}\n\nhost\nUNSIGNED-PAYLOAD"
        to_sign_head = f"{ALGORITHM}\n{amz_date}\n{scope}\n"

        # Paths of unreserved characters, '/' and '=' (nearly all Delta paths) are encoded
        # by escaping '='; any other batch goes through the general encoder path by path.
        if plain_column(relative):
            path = pc.replace_substring(relative, "=", "%3D")
        else:
            encode = self._encode_path
            path = pa.array([encode(name) for name in relative.to_pylist()], pa.string())
        # The canonical requests and the URLs are joined column-wise; what is left per URL
        # (one SHA-256 and one HMAC) runs in the signing helper for a big batch.
        requests = pc.binary_join_element_wise(request_head, path, request_tail, "")
        joined = signing_helper.digests(
            SIGV4, prepared, key, to_sign_head.encode(), requests.cast(pa.binary())
        )
        signatures = hex_array(joined, DIGEST_SIZE)
        pieces = (endpoint.base + root, path, url_query, signatures)
        return SignedColumn(
            pieces, (seconds + expires) * 1000, json_safe(endpoint.base + root + url_query)
        )
