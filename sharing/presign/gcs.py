"""GCS V4 signed GET URLs, with a service-account RSA key or an HMAC interoperability key.

Both share the V4 canonical request (path-style `/{bucket}/{object}`, signed header
`host`, `UNSIGNED-PAYLOAD`); they differ in the last step:

* GOOG4-RSA-SHA256: an RSA PKCS#1 v1.5 signature of the string to sign with the service
  account's private key — byte-identical to `Blob.generate_signed_url(version="v4")`, and
  costly (one RSA private-key operation per URL);
* GOOG4-HMAC-SHA256: an HMAC with a key derived once per day from the HMAC secret (the
  same chain as AWS SigV4, prefixed `GOOG4`) — one HMAC per URL, much faster. Prefer it for
  large tables.

Without a private key (GCE metadata, workload identity, impersonation) the RSA signature
comes from the IAM Credentials API (`gcs_iam`): same string to sign, same URL. RSA and IAM
signers are slow, so they ask the response body to sign batches ahead (`parallel_batches`).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlsplit

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from deltalog.storage.gcs import GcsStorage, split_key
from sharing.errors import SharingError, UnsupportedOperation
from sharing.presign.base import ABSOLUTE_PATHS, SignedUrls
from sharing.presign.gcs_iam import IamBlobSigner, default_blob_signer
from sharing.presign.prepared_hmac import PreparedHmac
from sharing.presign.url_paths import PathEncoder

DEFAULT_ENDPOINT = "https://storage.googleapis.com"
MAX_EXPIRES = 7 * 24 * 3600
RSA_ALGORITHM = "GOOG4-RSA-SHA256"
HMAC_ALGORITHM = "GOOG4-HMAC-SHA256"
# Batches signed ahead of the response writer (see sharing.presign.base.parallel_batches).
# A local RSA signature holds the GIL: two batches signed at once each take twice as long,
# which delays the first line, so one batch is signed ahead. signBlob calls of all batches
# share one bounded pool and run in batch order, so a second batch ahead costs no latency.
RSA_PARALLEL_BATCHES = 1
IAM_PARALLEL_BATCHES = 2


@lru_cache(maxsize=16)
def _load_private_key(pem: str) -> Any:
    """Parsing a PEM key takes about a millisecond: done once per key, not per signer."""
    return serialization.load_pem_private_key(pem.encode(), password=None)


@dataclass(frozen=True, slots=True)
class RsaKey:
    """A service account's email and private key."""

    email: str
    private_key: rsa.RSAPrivateKey

    @classmethod
    def from_service_account(cls, info: Mapping[str, Any]) -> RsaKey:
        """From a service account key file's JSON (`client_email`, `private_key`)."""
        try:
            key = _load_private_key(info["private_key"])
            email = info["client_email"]
        except (KeyError, ValueError, TypeError) as exc:
            raise SharingError("the GCS service account key cannot be loaded") from exc
        if not isinstance(key, rsa.RSAPrivateKey):
            raise SharingError("the GCS service account key is not an RSA key")
        return cls(email, key)

    def __repr__(self) -> str:
        return f"RsaKey(email={self.email!r})"


@dataclass(frozen=True, slots=True)
class HmacKey:
    """An HMAC interoperability key: access id and secret."""

    access_id: str
    secret: str

    def __repr__(self) -> str:
        return f"HmacKey(access_id={self.access_id!r})"


@dataclass(frozen=True, slots=True)
class IamKey:
    """A service account that signs through the IAM Credentials API (no local key)."""

    blob_signer: IamBlobSigner


@lru_cache(maxsize=32)
def hmac_signing_key(secret: str, datestamp: str) -> PreparedHmac:
    """The GOOG4 signing key for one day (location `auto`, service `storage`)."""
    key = hmac.digest(f"GOOG4{secret}".encode(), datestamp.encode(), "sha256")
    for part in (b"auto", b"storage", b"goog4_request"):
        key = hmac.digest(key, part, "sha256")
    return PreparedHmac(key)


def _quote_query(value: str) -> str:
    return quote(value, safe="~")


class GcsSigner:
    """Signs GETs for the objects of one table stored on GCS."""

    def __init__(
        self,
        key: RsaKey | HmacKey | IamKey,
        *,
        table_root: str,
        ttl_seconds: int,
        endpoint: str = DEFAULT_ENDPOINT,
    ) -> None:
        if ttl_seconds <= 0:
            raise ValueError("ttl_seconds must be positive")
        self._key = key
        self.parallel_batches = (
            0
            if isinstance(key, HmacKey)
            else IAM_PARALLEL_BATCHES
            if isinstance(key, IamKey)
            else RSA_PARALLEL_BATCHES
        )
        self._ttl = min(int(ttl_seconds), MAX_EXPIRES)
        self._root_prefix = table_root.rstrip("/") + "/"
        bucket, _ = split_key(self._root_prefix)
        self._bucket_cut = len(bucket) + 1
        endpoint = endpoint.rstrip("/")
        self._host = urlsplit(endpoint).netloc
        self._resource_prefix = f"/{bucket}/"
        self._url_prefix = f"{endpoint}/{bucket}/"
        self._encode_path = PathEncoder()  # the object name in the URL and canonical request

    @classmethod
    def for_storage(
        cls,
        storage: GcsStorage,
        *,
        table_root: str,
        ttl_seconds: int,
        endpoint: str | None = None,
    ) -> GcsSigner:
        """HMAC signing when the options hold an HMAC key, else RSA with the service account
        key, else signBlob as `signing_service_account` or the Application Default
        Credentials' account. URLs point at `endpoint`, else the storage's own (an
        emulator), else Google's."""
        options = storage.options
        key: RsaKey | HmacKey | IamKey
        if options.hmac_access_id and options.hmac_secret:
            key = HmacKey(options.hmac_access_id, options.hmac_secret)
        elif storage.service_account_info is not None:
            key = RsaKey.from_service_account(storage.service_account_info)
        elif not (options.anonymous or options.endpoint):
            # The storage reads with Application Default Credentials (GcsStorage uses
            # anonymous ones with an emulator endpoint): sign as that identity.
            key = IamKey(default_blob_signer(options.signing_service_account))
        else:
            raise SharingError(
                "signing GCS URLs needs a service account key (service_account_file or "
                "service_account_info), an HMAC key (hmac_access_id, hmac_secret) or, "
                "without endpoint and anonymous, Application Default Credentials"
            )
        endpoint = endpoint or options.endpoint or DEFAULT_ENDPOINT
        return cls(key, table_root=table_root, ttl_seconds=ttl_seconds, endpoint=endpoint)

    def _finisher(self, datestamp: str) -> tuple[str, str, Callable[[Sequence[bytes]], list[str]]]:
        """(algorithm, credential id, strings to sign -> hex signatures) for the batch."""
        key = self._key
        if isinstance(key, HmacKey):
            hexdigest = hmac_signing_key(key.secret, datestamp).hexdigest
            return HMAC_ALGORITHM, key.access_id, lambda data: list(map(hexdigest, data))
        if isinstance(key, IamKey):
            blob_signer = key.blob_signer
            return RSA_ALGORITHM, blob_signer.email(), blob_signer.sign_blobs
        private_key = key.private_key
        pkcs1, sha256 = padding.PKCS1v15(), hashes.SHA256()
        return (
            RSA_ALGORITHM,
            key.email,
            lambda data: [private_key.sign(d, pkcs1, sha256).hex() for d in data],
        )

    def sign(self, keys: Sequence[str], now: float | None = None) -> SignedUrls:
        """One URL per key (keys are `bucket/name` storage keys under the table root)."""
        seconds = int(time.time() if now is None else now)
        timestamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(seconds))
        datestamp = timestamp[:8]
        algorithm, credential_id, sign_all = self._finisher(datestamp)
        scope = f"{datestamp}/auto/storage/goog4_request"
        query = (
            f"X-Goog-Algorithm={algorithm}"
            f"&X-Goog-Credential={_quote_query(f'{credential_id}/{scope}')}"
            f"&X-Goog-Date={timestamp}&X-Goog-Expires={self._ttl}&X-Goog-SignedHeaders=host"
        )
        request_head = f"GET\n{self._resource_prefix}"
        request_tail = f"\n{query}\nhost:{self._host}\n\nhost\nUNSIGNED-PAYLOAD"
        to_sign_head = f"{algorithm}\n{timestamp}\n{scope}\n"
        url_tail = f"?{query}&X-Goog-Signature="

        root, cut, url_prefix = self._root_prefix, self._bucket_cut, self._url_prefix
        sha256 = hashlib.sha256
        encode = self._encode_path
        paths: list[str] = []
        to_sign: list[bytes] = []
        for key in keys:
            if not key.startswith(root):
                raise UnsupportedOperation(ABSOLUTE_PATHS)
            path = encode(key[cut:])
            digest = sha256(f"{request_head}{path}{request_tail}".encode()).hexdigest()
            paths.append(path)
            to_sign.append(f"{to_sign_head}{digest}".encode())
        signatures = sign_all(to_sign) if to_sign else []
        urls = [
            f"{url_prefix}{path}{url_tail}{signature}"
            for path, signature in zip(paths, signatures, strict=True)
        ]
        return SignedUrls(urls=urls, expiration_ms=(seconds + self._ttl) * 1000)
