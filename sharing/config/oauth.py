"""The `oauth:` section: Lakeshare's own token endpoint (client credentials and private-key
JWT assertions), the access tokens it signs, and the external OpenID Connect issuers whose
access tokens are trusted (federation). See docs/oauth.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, field_serializer, model_validator

from sharing.config.errors import Problem
from sharing.config.values import (
    Boolean,
    Integer,
    NonNegative,
    OptionalText,
    Section,
    Text,
    as_text,
    check,
)

__all__ = [
    "ASSERTION_ALGORITHMS",
    "FEDERATION_ALGORITHMS",
    "FederationConfig",
    "OAuthConfig",
    "PreviousAccessTokenKeyConfig",
]

# Asymmetric algorithms only: a shared-secret (HS*) signature from outside proves nothing
# about who signed it, and `none` proves nothing at all.
FEDERATION_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")
ASSERTION_ALGORITHMS = (*FEDERATION_ALGORITHMS, "EdDSA")
MAX_PREVIOUS_KEYS = 5  # a token with an unknown kid is tried against each: keep it few


def _texts(value: object) -> object:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise Problem("must be a string or a list of strings")
    return tuple(as_text(item) for item in value)


def _path(value: str) -> str:
    path = value.strip()
    if not path.startswith("/") or any(c in path for c in "?#{} ") or path == "/":
        raise Problem("must be a URL path starting with '/'")
    return path.rstrip("/")


def _https_or_loopback_url(value: str | None) -> str | None:
    if not value:
        return None
    url = value.strip()
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Problem("must be an absolute http(s) URL")
    return url.rstrip("/") if parts.path.endswith("/") else url


def _algorithms(values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if value not in FEDERATION_ALGORITHMS:
            raise Problem(
                f"'{value}' is not an accepted algorithm "
                f"(one of {', '.join(FEDERATION_ALGORITHMS)})"
            )
    return values


def _pairs(value: object) -> object:
    if isinstance(value, Mapping):
        return tuple((as_text(k), as_text(v)) for k, v in value.items())
    return value


def _recipients(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A map's values are recipient names (canonical; never a reserved one)."""
    from sharing.recipients.names import InvalidValue, recipient_name

    try:
        return tuple((claim, recipient_name(name)) for claim, name in pairs)
    except InvalidValue as exc:
        raise Problem(str(exc)) from None


Texts = Annotated[tuple[str, ...], BeforeValidator(_texts)]
Pairs = Annotated[tuple[tuple[str, str], ...], BeforeValidator(_pairs)]


class FederationConfig(Section):
    """An external OpenID Connect issuer (Entra ID, Okta, Keycloak...) whose access tokens
    are accepted as bearer tokens: the claim `recipientClaim` names the recipient (through
    `recipientMap` when given, else the claim's value is the recipient's name)."""

    issuer: Annotated[Text, AfterValidator(lambda v: v.strip())] = ""
    jwks_url: Annotated[OptionalText, AfterValidator(_https_or_loopback_url)] = None
    audience: Texts = ()
    recipient_claim: Text = "sub"
    recipient_map: Annotated[Pairs, AfterValidator(_recipients)] = ()
    algorithms: Annotated[Texts, AfterValidator(_algorithms)] = ("RS256", "ES256")
    jwks_cache_seconds: Annotated[
        Integer, check(lambda v: 1 <= v <= 86_400, "between 1 and 86400 seconds")
    ] = 600
    jwks_refetch_min_seconds: Annotated[
        Integer, check(lambda v: 0 <= v <= 3600, "between 0 and 3600 seconds")
    ] = 30

    @model_validator(mode="after")
    def _required(self) -> Self:
        if not self.issuer:
            raise Problem("'issuer' in a federation entry must be provided", named=False)
        if not self.audience:
            raise Problem("'audience' in a federation entry must be provided", named=False)
        return self

    @field_serializer("recipient_map")
    def _map_as_written(self, value: tuple[tuple[str, str], ...]) -> dict[str, str]:
        return dict(value)


def _secret(value: str | None) -> str | None:
    if value and len(value) < 32:
        raise Problem("must be at least 32 characters")
    return value


def _few_keys(
    value: tuple[PreviousAccessTokenKeyConfig, ...],
) -> tuple[PreviousAccessTokenKeyConfig, ...]:
    if len(value) > MAX_PREVIOUS_KEYS:
        raise Problem(f"must hold at most {MAX_PREVIOUS_KEYS} keys, got {len(value)}")
    return value


class PreviousAccessTokenKeyConfig(Section):
    """A key that signed access tokens before the current one, kept for verification only
    (so the signing key rotates without refusing live tokens): exactly one of `keyFile` (a
    PEM public or private key), `secret` (a former `accessTokenSecret`) or `signingSecret`
    (a former `signingSecret`, when the key was derived from it)."""

    key_file: OptionalText = None
    key_id: OptionalText = None
    secret: Annotated[OptionalText, AfterValidator(_secret)] = Field(default=None, repr=False)
    signing_secret: Annotated[OptionalText, AfterValidator(_secret)] = Field(
        default=None, repr=False
    )

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        given = [v for v in (self.key_file, self.secret, self.signing_secret) if v]
        if len(given) != 1:
            raise Problem(
                "a previous access-token key needs exactly one of 'keyFile', 'secret' or "
                "'signingSecret'",
                named=False,
            )
        return self


class OAuthConfig(Section):
    """Lakeshare as an OAuth authorization server for its recipients, and federation."""

    enabled: Boolean = True
    token_path: Annotated[Text, AfterValidator(_path)] = "/oauth/token"
    issuer: Annotated[OptionalText, AfterValidator(_https_or_loopback_url)] = None
    access_token_ttl_seconds: Annotated[
        Integer, check(lambda v: 60 <= v <= 86_400, "between 60 and 86400 seconds")
    ] = 3600
    # Signing key of access tokens: a PEM private key file (RSA -> RS256, EC P-256 -> ES256,
    # Ed25519 -> EdDSA), else an HS256 secret, else HS256 with a key derived from the
    # signing secret (so replicas sharing it agree without more configuration).
    access_token_key_file: OptionalText = None
    access_token_key_id: OptionalText = None
    access_token_secret: Annotated[OptionalText, AfterValidator(_secret)] = Field(
        default=None, repr=False
    )
    # Former signing keys, accepted for verification only until their tokens have expired.
    previous_access_token_keys: Annotated[
        tuple[PreviousAccessTokenKeyConfig, ...], AfterValidator(_few_keys)
    ] = ()
    assertion_max_lifetime_seconds: Annotated[
        Integer, check(lambda v: 1 <= v <= 86_400, "between 1 and 86400 seconds")
    ] = 600
    clock_skew_seconds: Annotated[
        Integer, check(lambda v: 0 <= v <= 600, "between 0 and 600 seconds")
    ] = 30
    failed_attempts_limit: NonNegative = 10  # per client address and window; 0 = no limit
    failed_attempts_window_seconds: Annotated[
        Integer, check(lambda v: 1 <= v <= 86_400, "between 1 and 86400 seconds")
    ] = 60
    federation: tuple[FederationConfig, ...] = ()
