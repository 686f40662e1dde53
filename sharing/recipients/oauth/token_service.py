"""The token endpoint's logic (RFC 6749 §4.4 and §5, RFC 7523), without HTTP.

Grants:
- `client_credentials`, the client authenticated by HTTP Basic (client id = credential id,
  client secret; what the official client 1.4.x sends), by `client_id` + `client_secret`
  in the body, or by a private-key JWT `client_assertion` (RFC 7523 §2.2);
- `urn:ietf:params:oauth:grant-type:jwt-bearer` with the client's signed `assertion`
  (RFC 7523 §2.1; what the client sends for `oauth_jwt_bearer_private_key_jwt` profiles).

Either answers `{"access_token", "token_type": "Bearer", "expires_in"[, "scope"]}`. Errors
are RFC 6749 bodies; every failed authentication counts against the client address, and an
address over the limit gets 429 with Retry-After before its credentials are looked at.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qs, unquote_plus

from sharing.errors import Forbidden, Unauthenticated
from sharing.recipients.oauth.access_tokens import AccessTokens
from sharing.recipients.oauth.assertions import AssertionChecker, InvalidAssertion
from sharing.recipients.oauth.clients import ClientKind, ClientRegistry, RegisteredClient
from sharing.recipients.oauth.errors import OAuthError, RateLimited
from sharing.recipients.refusals import Reason, Refusal, refusal_of
from sharing.recipients.throttle import FailedAttempts

__all__ = [
    "CLIENT_ASSERTION_TYPE",
    "CLIENT_CREDENTIALS",
    "JWT_BEARER",
    "MAX_FORM_BYTES",
    "TokenService",
    "parse_form",
]

CLIENT_CREDENTIALS = "client_credentials"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_FORM_BYTES = 64 * 1024
_MAX_SCOPE_CHARS = 1000
_MAX_CLIENT_ID_CHARS = 256
_FAILURES = ("invalid_client", "invalid_grant", "unauthorized_client")


def parse_form(body: bytes) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body; each parameter at most once (RFC 6749
    §3.2), UTF-8."""
    if len(body) > MAX_FORM_BYTES:
        raise OAuthError.invalid_request(f"the request body exceeds {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode("utf-8")
        parsed = parse_qs(text, keep_blank_values=True, strict_parsing=False, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError.invalid_request("the request body is not a valid form") from None
    form: dict[str, str] = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise OAuthError.invalid_request(f"parameter '{name[:50]}' is repeated")
        form[name] = values[0]
    return form


class TokenService:
    def __init__(
        self,
        registry: ClientRegistry,
        tokens: AccessTokens,
        assertions: AssertionChecker,
        failed_attempts: FailedAttempts,
        audiences: Iterable[str] = (),
    ) -> None:
        self.registry = registry
        self.tokens = tokens
        self.assertions = assertions
        self.failed_attempts = failed_attempts
        # What a client assertion's aud may name: fixed by the configuration
        # (access_tokens.assertion_audiences), never taken from a request.
        self.audiences = tuple(dict.fromkeys([tokens.issuer, *audiences]))

    def exchange(
        self,
        form: dict[str, str],
        authorization: str | None,
        address: str | None,
    ) -> dict[str, Any]:
        """The token response for a token request, or OAuthError."""
        wait = self.failed_attempts.retry_after(address)
        if wait is not None:
            raise RateLimited(wait)
        try:
            return self._exchange(form, authorization, address)
        except OAuthError as exc:
            if exc.error in _FAILURES:
                self.failed_attempts.failed(address)
                if exc.refusal is None:
                    failed_login = exc.error != "unauthorized_client"
                    reason = Reason.INVALID_CREDENTIALS if failed_login else Reason.FORBIDDEN
                    exc.refusal = Refusal(reason)
            raise

    def _exchange(
        self,
        form: dict[str, str],
        authorization: str | None,
        address: str | None,
    ) -> dict[str, Any]:
        grant_type = form.get("grant_type", "")
        if not grant_type:
            raise OAuthError.invalid_request("grant_type is missing")
        if grant_type == CLIENT_CREDENTIALS:
            client = self._authenticated_client(form, authorization)
        elif grant_type == JWT_BEARER:
            assertion = form.get("assertion", "")
            if not assertion:
                raise OAuthError.invalid_request("assertion is missing")
            try:
                client = self.assertions.check(assertion, self.audiences)
            except InvalidAssertion as exc:
                raise OAuthError.invalid_grant(str(exc)) from None
        else:
            raise OAuthError.unsupported_grant_type(grant_type)
        try:
            self.registry.admit(client, address)
        except (Unauthenticated, Forbidden) as exc:  # the recipient's state refuses it
            error = (
                OAuthError.invalid_client(exc.message)
                if isinstance(exc, Unauthenticated)
                else OAuthError.unauthorized_client(exc.message)
            )
            error.refusal = refusal_of(exc)
            raise error from None
        scope = form.get("scope") or None
        if scope is not None and len(scope) > _MAX_SCOPE_CHARS:
            raise OAuthError("invalid_scope", f"scope is longer than {_MAX_SCOPE_CHARS}")
        ttl = None
        if client.ends_at is not None:
            ttl = int((client.ends_at - time.time() * 1000) // 1000)
        issued = self.tokens.issue(client.recipient, client.client_id, scope=scope, ttl=ttl)
        response: dict[str, Any] = {
            "access_token": issued.token,
            "token_type": "Bearer",
            "expires_in": issued.expires_in,
        }
        if issued.scope:
            response["scope"] = issued.scope
        return response

    def _authenticated_client(
        self, form: dict[str, str], authorization: str | None
    ) -> RegisteredClient:
        basic = _basic_credentials(authorization)
        assertion_type = form.get("client_assertion_type")
        methods = sum((basic is not None, assertion_type is not None, "client_secret" in form))
        if methods > 1:
            raise OAuthError.invalid_request("use exactly one client authentication method")
        if assertion_type is not None:
            if assertion_type != CLIENT_ASSERTION_TYPE:
                raise OAuthError.invalid_request(
                    f"client_assertion_type must be {CLIENT_ASSERTION_TYPE}"
                )
            try:
                return self.assertions.check(form.get("client_assertion", ""), self.audiences)
            except InvalidAssertion as exc:
                raise OAuthError.invalid_client(str(exc)) from None
        if basic is not None:
            client_id, secret = basic
        elif "client_secret" in form:
            client_id, secret = form.get("client_id", ""), form["client_secret"]
        else:
            raise OAuthError.invalid_client(
                "client authentication is missing: use HTTP Basic with the client id and secret",
                basic=True,
            )
        if "client_id" in form and form["client_id"] != client_id:
            raise OAuthError.invalid_request("client_id differs from the authenticated client")
        client = self._secret_client(client_id, secret)
        if client is None:
            error = OAuthError.invalid_client(
                "client authentication failed (unknown client, wrong secret, or a revoked or "
                "expired credential)",
                basic=basic is not None,
            )
            error.refusal = self._secret_refusal(client_id, secret)
            raise error
        return client

    def _secret_refusal(self, client_id: str, secret: str) -> Refusal | None:
        """For the audit trail: a revoked or expired client whose secret was right is that
        recipient's verified refusal; a known client with a wrong secret, a claim; else
        None (the generic refusal)."""
        if not client_id or not secret or len(client_id) > _MAX_CLIENT_ID_CHARS:
            return None
        claim: Refusal | None = None
        for candidate_id, candidate_secret in dict.fromkeys(
            [(client_id, secret), (unquote_plus(client_id), unquote_plus(secret))]
        ):
            ended = self.registry.ended(candidate_id, candidate_secret)
            if ended is not None and ended.credential_id is not None:  # verified
                return ended
            if claim is None and ended is not None:
                claim = ended
            client = self.registry.client(candidate_id)
            if claim is None and client is not None:
                claim = Refusal.claimed(Reason.INVALID_CREDENTIALS, client.recipient, candidate_id)
        return claim

    def _secret_client(self, client_id: str, secret: str) -> RegisteredClient | None:
        if not client_id or not secret or len(client_id) > _MAX_CLIENT_ID_CHARS:
            return None
        # RFC 6749 §2.3.1 form-encodes both before Basic; the official client does not. Ids
        # and secrets Lakeshare issues contain no character where the two differ.
        for candidate_id, candidate_secret in dict.fromkeys(
            [(client_id, secret), (unquote_plus(client_id), unquote_plus(secret))]
        ):
            client = self.registry.client(candidate_id)
            if client is None or client.kind is not ClientKind.SECRET:
                continue
            if self.registry.secret_matches(client, candidate_secret):
                return client
        return None


def _basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        raise OAuthError.invalid_client("the Authorization header must use the Basic scheme")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise OAuthError.invalid_client("the Basic credentials are not valid base64") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise OAuthError.invalid_client("the Basic credentials have no ':'", basic=True)
    return client_id, secret
