"""GCS V4 signatures from the IAM Credentials API, for identities without a private key.

On GCE/GKE (metadata server, workload identity) or with user credentials impersonating a
service account there is no key to sign with locally. `signBlob` signs the V4 string to
sign with the service account's Google-managed key, so the result is an ordinary
GOOG4-RSA-SHA256 signature: the URL is exactly the one a local key would give.

signBlob is one HTTP round trip per URL, so a batch is signed with concurrent calls over
one pool of kept-alive connections, with backoff on 429 and 5xx. The calls go through
urllib3 directly: per call it costs about 60% of the CPU of `requests`, and with thousands
of calls per batch that CPU (GIL-bound) is what limits the rate. Nothing secret is kept beyond the
access token google-auth itself holds; signatures are never cached or logged.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from typing import Any
from urllib.parse import quote

import google.auth
import urllib3
from google.auth.exceptions import DefaultCredentialsError, RefreshError, TransportError
from google.auth.transport.requests import Request as AuthRequest

from sharing.errors import SharingError

IAM_ENDPOINT = "https://iamcredentials.googleapis.com"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# signBlob calls in flight per signing account: ~50 ms each from GCE gives ~600 URLs/s,
# under the API's default quota (60,000 requests per minute per project).
DEFAULT_CONCURRENCY = 32


class BlobSigningError(SharingError):
    """signBlob failed for good (permission denied, retries exhausted): a server-side
    problem, so the client sees a 500 without details."""


class IamBlobSigner:
    """Signs byte strings as a service account through `signBlob`, many at a time.

    Thread-safe: one instance serves every request of the server that signs as the same
    account (see `default_blob_signer`).
    """

    def __init__(
        self,
        credentials: Any,
        *,
        email: str | None = None,
        endpoint: str = IAM_ENDPOINT,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_attempts: int = 5,
        backoff_seconds: float = 0.2,
        timeout_seconds: float = 30.0,
    ) -> None:
        if concurrency < 1 or max_attempts < 1:
            raise ValueError("concurrency and max_attempts must be positive")
        self._credentials = credentials
        self._email = email
        self._endpoint = endpoint.rstrip("/")
        self._max_attempts = max_attempts
        self._backoff = backoff_seconds
        self._lock = threading.Lock()
        self._http = urllib3.PoolManager(
            num_pools=2, maxsize=concurrency, retries=False, timeout=timeout_seconds
        )
        self._auth_request = AuthRequest()
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="gcs-signblob")

    def email(self) -> str:
        """The signing account: the configured one, else the credentials' own (known only
        after a first token refresh on GCE, where it starts as `default`)."""
        if self._email is not None:
            return self._email
        with self._lock:
            email = getattr(self._credentials, "service_account_email", None)
            if email in (None, "default"):
                self._refresh_locked()
                email = getattr(self._credentials, "service_account_email", None)
            if not isinstance(email, str) or email in ("", "default"):
                raise SharingError(
                    "signing GCS URLs without a private key needs a service account: the "
                    "credentials name none, set the signingServiceAccount storage option"
                )
            self._email = email
            return email

    def sign_blobs(self, payloads: Sequence[bytes]) -> list[str]:
        """Hex signatures of `payloads`, in order. The first failure cancels the calls
        not yet started and is raised."""
        email = self.email()
        if len(payloads) == 1:
            return [self._sign_one(email, payloads[0])]
        futures: list[Future[str]] = [self._pool.submit(self._sign_one, email, p) for p in payloads]
        try:
            return [f.result() for f in futures]
        finally:
            for f in futures:
                f.cancel()

    def _sign_one(self, email: str, payload: bytes) -> str:
        url = f"{self._endpoint}/v1/projects/-/serviceAccounts/{quote(email, safe='@')}:signBlob"
        body = b'{"payload":"' + base64.b64encode(payload) + b'"}'
        token = self._token()
        reason = "no attempt"
        for attempt in range(self._max_attempts):
            if attempt:
                time.sleep(self._backoff * (2 ** (attempt - 1)) * (0.5 + random.random()))
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            try:
                response = self._http.request("POST", url, body=body, headers=headers)
            except urllib3.exceptions.HTTPError as exc:  # connection, timeout, protocol
                reason = type(exc).__name__
                continue
            status = response.status
            if status == 200:
                try:
                    return base64.b64decode(json.loads(response.data)["signedBlob"]).hex()
                except (ValueError, KeyError, TypeError) as exc:
                    raise BlobSigningError("the IAM signBlob response is malformed") from exc
            reason = f"HTTP {status}"
            if status == 401:
                token = self._token(stale=token)  # expired or revoked: one refresh, retry
            elif status not in RETRY_STATUSES:
                break
        raise BlobSigningError(f"signing GCS URLs with the IAM signBlob API failed: {reason}")

    def _token(self, stale: str | None = None) -> str:
        """A valid access token; `stale` is one the API refused, refreshed only once
        however many threads saw it fail."""
        with self._lock:
            credentials = self._credentials
            if not credentials.valid or (stale is not None and credentials.token == stale):
                self._refresh_locked()
            return str(credentials.token)

    def _refresh_locked(self) -> None:
        try:
            self._credentials.refresh(self._auth_request)
        except (RefreshError, TransportError) as exc:
            raise BlobSigningError(
                "the credentials for IAM signBlob could not be refreshed"
            ) from exc

    def __repr__(self) -> str:
        return f"IamBlobSigner(email={self._email!r}, endpoint={self._endpoint!r})"


@lru_cache(maxsize=8)
def default_blob_signer(email: str | None) -> IamBlobSigner:
    """The signer over Application Default Credentials, made once per signing account:
    resolving ADC can probe the metadata server, far too slow to repeat per query."""
    try:
        credentials, _ = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    except DefaultCredentialsError as exc:
        raise SharingError(
            "signing GCS URLs needs a service account key (service_account_file or "
            "service_account_info), an HMAC key (hmac_access_id, hmac_secret) or Application "
            "Default Credentials for the IAM signBlob API"
        ) from exc
    return IamBlobSigner(credentials, email=email)
