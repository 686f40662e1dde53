"""Request credentials from a profile: bearer tokens, HTTP basic, and OAuth 2.0 tokens.

OAuth profiles exchange their client credentials (a secret, or a private-key JWT
assertion per RFC 7523) at the token endpoint for an access token, which is reused until
shortly before it expires. Tokens are cached per process and profile, so the many
requests of one Spark worker share one exchange.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import requests

from client.errors import ProfileError, SharingServerError
from client.profile import Profile

RENEWAL_THRESHOLD_SECONDS = 600
"""Renew an OAuth token this long before it expires (or at half its life if shorter)."""
TOKEN_EXCHANGE_RETRIES = 5
TOKEN_EXCHANGE_TIMEOUT_SECONDS = 60


class Credentials(Protocol):
    def headers(self) -> dict[str, str]:
        """The headers that authenticate one request."""
        ...

    def invalidate(self) -> None:
        """Forget a cached token after the server refused it."""
        ...


@dataclass(frozen=True)
class BearerCredentials:
    token: str

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def invalidate(self) -> None:
        return None


@dataclass(frozen=True)
class BasicCredentials:
    username: str
    password: str

    def headers(self) -> dict[str, str]:
        pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {pair}"}

    def invalidate(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class AccessToken:
    value: str
    expires_at: float  # time.time() seconds
    lifetime: float

    def fresh(self, now: float) -> bool:
        margin = min(RENEWAL_THRESHOLD_SECONDS, self.lifetime / 2)
        return self.expires_at - now > margin


class OAuthCredentials:
    """An access token from the profile's token endpoint, renewed before it expires."""

    def __init__(self, profile: Profile, session: requests.Session | None = None) -> None:
        self._profile = profile
        self._session = session

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token().value}"}

    def invalidate(self) -> None:
        with _CACHE_LOCK:
            _TOKENS.pop(_cache_key(self._profile), None)

    def _token(self) -> AccessToken:
        key = _cache_key(self._profile)
        with _CACHE_LOCK:
            lock = _KEY_LOCKS.setdefault(key, threading.Lock())
        with lock:
            cached = _TOKENS.get(key)
            if cached is not None and cached.fresh(time.time()):
                return cached
            token = _exchange(self._profile, self._session or requests.Session())
            _TOKENS[key] = token
            return token


_TOKENS: dict[tuple[str | None, ...], AccessToken] = {}
_KEY_LOCKS: dict[tuple[str | None, ...], threading.Lock] = {}
_CACHE_LOCK = threading.Lock()


def _cache_key(profile: Profile) -> tuple[str | None, ...]:
    return (
        profile.type,
        profile.token_endpoint,
        profile.client_id,
        profile.client_secret,
        profile.private_key_file,
        profile.scope,
        profile.audience,
        profile.resource,
    )


def credentials_for(profile: Profile) -> Credentials:
    """The credentials a profile's type calls for."""
    if profile.type == "bearer_token":
        assert profile.bearer_token is not None  # the profile parser requires it
        return BearerCredentials(profile.bearer_token)
    if profile.type == "basic":
        assert profile.username is not None and profile.password is not None
        return BasicCredentials(profile.username, profile.password)
    if profile.type in ("oauth_client_credentials", "oauth_jwt_bearer_private_key_jwt"):
        return OAuthCredentials(profile)
    raise ProfileError(f"unsupported profile type {profile.type!r}")


def _exchange(profile: Profile, session: requests.Session) -> AccessToken:
    """POST the grant to the token endpoint; retry on 429, 5xx and network errors."""
    assert profile.token_endpoint is not None
    delay = 0.5
    for attempt in range(TOKEN_EXCHANGE_RETRIES + 1):
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        if profile.type == "oauth_client_credentials":
            pair = f"{profile.client_id}:{profile.client_secret}".encode()
            headers["Authorization"] = f"Basic {base64.b64encode(pair).decode('ascii')}"
            form = {"grant_type": "client_credentials"}
            if profile.scope:
                form["scope"] = profile.scope
        else:
            form = {
                "grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer",
                "assertion": private_key_jwt(profile),
            }
        try:
            response = session.post(
                profile.token_endpoint,
                data=form,
                headers=headers,
                timeout=TOKEN_EXCHANGE_TIMEOUT_SECONDS,
            )
        except requests.RequestException:
            if attempt == TOKEN_EXCHANGE_RETRIES:
                raise
        else:
            if response.status_code == 200:
                return _parse_token(response)
            if response.status_code != 429 and response.status_code < 500:
                raise SharingServerError(
                    response.status_code,
                    "OAUTH_TOKEN_EXCHANGE_FAILED",
                    _oauth_error(response),
                    f"POST {profile.token_endpoint}",
                )
            if attempt == TOKEN_EXCHANGE_RETRIES:
                raise SharingServerError(
                    response.status_code,
                    "OAUTH_TOKEN_EXCHANGE_FAILED",
                    _oauth_error(response),
                    f"POST {profile.token_endpoint}",
                )
        time.sleep(delay)
        delay = min(delay * 2, 10.0)
    raise AssertionError("unreachable")


def _oauth_error(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200] or response.reason
    if isinstance(body, dict) and "error" in body:
        detail = body.get("error_description")
        return f"{body['error']}: {detail}" if detail else str(body["error"])
    return response.text[:200]


def _parse_token(response: requests.Response) -> AccessToken:
    """An RFC 6749 §5.1 token response (`expires_in` given as a number or a string)."""
    try:
        body = response.json()
    except ValueError as exc:
        raise ProfileError("the OAuth token endpoint did not answer JSON") from exc
    token = body.get("access_token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise ProfileError("the OAuth token response has no 'access_token'")
    try:
        lifetime = float(body["expires_in"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError("the OAuth token response has no numeric 'expires_in'") from exc
    return AccessToken(token, time.time() + lifetime, lifetime)


# Private-key JWT (RFC 7523 client assertion) ------------------------------------------


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def private_key_jwt(profile: Profile, now: dt.datetime | None = None) -> str:
    """A signed JWT asserting the profile's client id to its token endpoint's issuer."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils

    algorithm = (profile.algorithm or "RS256").upper()
    digests = {"256": hashes.SHA256(), "384": hashes.SHA384(), "512": hashes.SHA512()}
    if algorithm[:2] not in ("RS", "ES") or algorithm[2:] not in digests:
        raise ProfileError(f"unsupported private key JWT algorithm {algorithm!r}")
    assert profile.private_key_file is not None
    try:
        with open(profile.private_key_file, "rb") as handle:
            key = serialization.load_pem_private_key(handle.read(), password=None)
    except (OSError, ValueError) as exc:
        raise ProfileError(f"cannot load the private key {profile.private_key_file}") from exc
    issued = int((now or dt.datetime.now(dt.UTC)).timestamp())
    header: dict[str, str] = {"alg": algorithm, "typ": "JWT"}
    if profile.key_id:
        header["kid"] = profile.key_id
    claims: dict[str, object] = {
        "iss": profile.client_id,
        "sub": profile.client_id,
        # As the official client: the profile's `issuer` is the assertion's audience, and
        # its `audience` (the sharing endpoint) goes in the `resource` claim.
        "aud": profile.issuer or profile.token_endpoint,
        "iat": issued,
        "exp": issued + 120,
        "jti": str(uuid.uuid4()),
    }
    if profile.scope:
        claims["scope"] = profile.scope
    if profile.resource or profile.audience:
        claims["resource"] = profile.resource or profile.audience
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":")).encode()) for part in (header, claims)
    ).encode("ascii")
    digest = digests[algorithm[2:]]
    if algorithm.startswith("RS"):
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ProfileError(f"{algorithm} needs an RSA private key")
        signature = key.sign(signing_input, padding.PKCS1v15(), digest)
    else:
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ProfileError(f"{algorithm} needs an EC private key")
        r, s = utils.decode_dss_signature(key.sign(signing_input, ec.ECDSA(digest)))
        size = (key.curve.key_size + 7) // 8
        signature = r.to_bytes(size, "big") + s.to_bytes(size, "big")
    return f"{signing_input.decode('ascii')}.{_b64url(signature)}"
