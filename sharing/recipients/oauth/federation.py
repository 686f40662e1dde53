"""Federation: access tokens of external OpenID Connect issuers (Entra ID, Okta, Keycloak,
...) accepted as bearer tokens, so a provider need not mint secrets for recipients who
already have an identity there.

Per issuer (`oauth.federation[]`): the token must be signed by a key of the issuer's JWKS
(from `jwksUrl`, or the `jwks_uri` of `{issuer}/.well-known/openid-configuration`) with one
of `algorithms` (asymmetric only), name the issuer as `iss` and one of `audience` as `aud`,
and be unexpired. The claim `recipientClaim` (default `sub`) names the recipient, through
`recipientMap` when it is given (a value missing from the map is refused), else directly.
Matching is exact: the map's keys are compared as written, and a claim used directly must
already be a recipient's canonical name (lower-case, no surrounding blanks) — no case
folding or trimming, so that two identities at the issuer never become one recipient here —
and never a reserved name (`_bearer_token`, `_admin`, `anonymous`; see
sharing.recipients.names).

JWKS caching and rotation: the key set is fetched on first use and kept `jwksCacheSeconds`
(default 600 s). A token whose `kid` is not in the cached set triggers one refetch, at most
one per `jwksRefetchMinSeconds` (default 30 s) per issuer, so an issuer's key rotation is
picked up at once while a flood of tokens with made-up kids costs one request to the
issuer per interval. When a refetch fails, the keys already known stay in use.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt

from sharing.config.oauth import FederationConfig
from sharing.recipients.names import is_recipient_name
from sharing.recipients.oauth.public_keys import InvalidPublicKey, PublicKey, load_public_key

__all__ = [
    "MAX_FEDERATED_TOKEN_CHARS",
    "FederatedIssuer",
    "Federation",
    "InvalidFederatedToken",
    "JwksCache",
    "JwksUnavailable",
]

log = logging.getLogger("lakeshare.oauth.federation")

MAX_FEDERATED_TOKEN_CHARS = 8192
_MAX_DOCUMENT_BYTES = 1024 * 1024
_FETCH_TIMEOUT_SECONDS = 5.0

Fetch = Callable[[str], bytes]


class InvalidFederatedToken(ValueError):
    """Why a federated token is refused (never contains the token)."""


class JwksUnavailable(InvalidFederatedToken):
    """The issuer's keys could not be fetched and none are cached."""


def fetch_url(url: str) -> bytes:
    """GET `url` (http/https only) with a timeout and a size bound."""
    if not url.startswith(("https://", "http://")):
        raise OSError(f"refusing to fetch a non-http(s) URL {url[:100]!r}")
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=_FETCH_TIMEOUT_SECONDS) as response:
        body: bytes = response.read(_MAX_DOCUMENT_BYTES + 1)
    if len(body) > _MAX_DOCUMENT_BYTES:
        raise OSError(f"{url[:100]} answered more than {_MAX_DOCUMENT_BYTES} bytes")
    return body


class JwksCache:
    """One issuer's keys by `kid`, refetched when stale or when an unknown kid shows up
    (rate-limited)."""

    def __init__(
        self,
        issuer: str,
        jwks_url: str | None,
        *,
        cache_seconds: float = 600,
        refetch_min_seconds: float = 30,
        fetch: Fetch = fetch_url,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self.jwks_url = jwks_url
        self.cache_seconds = cache_seconds
        self.refetch_min_seconds = refetch_min_seconds
        self._fetch = fetch
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str | None, list[PublicKey]] = {}
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self.fetches = 0  # how many times the key set was requested (for tests and logs)
        self.generation = 0  # bumped each time a fetched key set replaces the cached one

    def keys_for(self, kid: str | None) -> list[PublicKey]:
        """The keys that may have signed a token with this `kid` (all keys when None)."""
        now = self._clock()
        with self._lock:
            stale = self._fetched_at is None or now - self._fetched_at >= self.cache_seconds
            if stale:
                self._refresh(now)
            found = self._matching(kid)
            if not found and kid is not None and self._may_refetch(now):
                self._refresh(now)
                found = self._matching(kid)
            if self._fetched_at is None:
                raise JwksUnavailable(f"the keys of issuer {self.issuer} cannot be fetched")
            return found

    def _matching(self, kid: str | None) -> list[PublicKey]:
        if kid is None:
            return [key for keys in self._keys.values() for key in keys]
        return list(self._keys.get(kid, ()))

    def _may_refetch(self, now: float) -> bool:
        return self._attempted_at is None or now - self._attempted_at >= self.refetch_min_seconds

    def _refresh(self, now: float) -> None:
        if self._attempted_at is not None and now - self._attempted_at < min(
            self.refetch_min_seconds, self.cache_seconds
        ):
            return  # a failed fetch just now: do not hammer the issuer
        self._attempted_at = now
        self.fetches += 1
        try:
            keys = self._load()
        except (OSError, ValueError, urllib.error.URLError) as exc:
            log.warning("federation: fetching the keys of %s failed: %s", self.issuer, exc)
            return
        self._keys = keys
        self._fetched_at = now
        self.generation += 1

    def _load(self) -> dict[str | None, list[PublicKey]]:
        url = self.jwks_url or self._discover()
        document = json.loads(self._fetch(url))
        if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
            raise ValueError(f"{url[:100]} is not a JWK set")
        keys: dict[str | None, list[PublicKey]] = {}
        for entry in document["keys"]:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
                continue
            try:
                key = load_public_key(json.dumps(entry))
            except InvalidPublicKey:
                continue  # a key type we do not verify with; the others still serve
            keys.setdefault(key.key_id, []).append(key)
        return keys

    def _discover(self) -> str:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        document = json.loads(self._fetch(url))
        if not isinstance(document, dict):
            raise ValueError(f"{url[:100]} is not a discovery document")
        if document.get("issuer") != self.issuer:
            raise ValueError(f"{url[:100]} names another issuer")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise ValueError(f"{url[:100]} has no jwks_uri")
        return jwks_uri


class FederatedIssuer:
    def __init__(
        self,
        config: FederationConfig,
        *,
        leeway_seconds: int = 30,
        fetch: Fetch = fetch_url,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.issuer = config.issuer
        self.leeway = leeway_seconds
        self.recipient_map = dict(config.recipient_map)
        self.credential_id = "oidc-" + hashlib.sha256(config.issuer.encode()).hexdigest()[:12]
        self.jwks = JwksCache(
            config.issuer,
            config.jwks_url,
            cache_seconds=config.jwks_cache_seconds,
            refetch_min_seconds=config.jwks_refetch_min_seconds,
            fetch=fetch,
            clock=clock,
        )

    def recipient_of(self, token: str, header: dict[str, Any]) -> str:
        """The recipient a valid token of this issuer stands for."""
        if len(token) > MAX_FEDERATED_TOKEN_CHARS:
            raise InvalidFederatedToken("the access token is too long")
        algorithm = header.get("alg")
        if algorithm not in self.config.algorithms:
            shown = str(algorithm)[:20]
            raise InvalidFederatedToken(f"algorithm '{shown}' is not accepted for this issuer")
        kid = header.get("kid")
        keys = self.jwks.keys_for(kid if isinstance(kid, str) else None)
        keys = [key for key in keys if algorithm in key.algorithms]
        if not keys:
            raise InvalidFederatedToken("the token's key is not in the issuer's key set")
        claims: dict[str, Any] | None = None
        error = "the signature does not verify"
        for key in keys:
            try:
                claims = jwt.decode(
                    token,
                    key.key,
                    algorithms=[algorithm],
                    audience=list(self.config.audience),
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options={"require": ["exp", "iss", "aud"]},
                )
                break
            except jwt.ExpiredSignatureError:
                raise InvalidFederatedToken("the access token has expired") from None
            except jwt.InvalidAudienceError:
                raise InvalidFederatedToken("the access token is for another audience") from None
            except jwt.InvalidTokenError as exc:
                error = (str(exc) or type(exc).__name__)[:200]
        if claims is None:
            raise InvalidFederatedToken(f"the access token is invalid: {error}")
        value = claims.get(self.config.recipient_claim)
        if not isinstance(value, str) or not value:
            raise InvalidFederatedToken(
                f"the access token has no '{self.config.recipient_claim}' claim"
            )
        if self.recipient_map:
            mapped = self.recipient_map.get(value)
            if mapped is None:
                raise InvalidFederatedToken("the token's subject is not mapped to a recipient")
            value = mapped
        if not is_recipient_name(value):
            raise InvalidFederatedToken(
                f"the token's '{self.config.recipient_claim}' is not a recipient name (matched "
                "exactly: lower-case, no blanks, not a reserved name)"
            )
        return value


class Federation:
    """The configured issuers, by `iss`."""

    def __init__(self, issuers: list[FederatedIssuer]) -> None:
        self.issuers = {issuer.issuer: issuer for issuer in issuers}

    @classmethod
    def from_configs(
        cls, configs: tuple[FederationConfig, ...], *, leeway_seconds: int = 30
    ) -> Federation:
        return cls([FederatedIssuer(c, leeway_seconds=leeway_seconds) for c in configs])

    def issuer_for(self, claims: dict[str, Any]) -> FederatedIssuer | None:
        issuer = claims.get("iss")
        return self.issuers.get(issuer) if isinstance(issuer, str) else None
