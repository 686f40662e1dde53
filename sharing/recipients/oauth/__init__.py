"""OAuth for recipients: Lakeshare's token endpoint (client credentials with HTTP Basic, and
RFC 7523 private-key JWT assertions), the short-lived access tokens it signs, and access
tokens of external OpenID Connect issuers (federation).

- `errors`: RFC 6749 error responses (`invalid_client`, `invalid_grant`, ...).
- `signing`: the key access tokens are signed with, from the configuration.
- `access_tokens`: issuing and verifying Lakeshare's access tokens (JWTs, no database).
- `public_keys`: registered client keys (PEM or JWK), key generation for profiles.
- `assertions`: checking a client's signed assertion (RFC 7523).
- `replay`: the record of assertion ids already used (`jti`), shared by replicas.
- `federation`: external issuers, their JWKS cached with rate-limited refetch on rotation.
- `clients`: what the token endpoint needs to know of a registered client.
- `token_service`: the token endpoint's logic, without HTTP.
- `verifier`: bearer tokens of the two kinds above, for the recipient directory.
- `profiles`: the profile files the official client reads.

This package knows nothing of FastAPI; `app/routes/token.py` is the endpoint.
"""
