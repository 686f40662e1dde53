"""Signed tokens: round trips, kind binding, tampering, expiry."""

from __future__ import annotations

import base64

import pytest

from sharing.tokens import ExpiredToken, InvalidToken, TokenCodec

SECRET = b"0123456789abcdef0123456789abcdef"


def test_round_trip_and_url_safety() -> None:
    codec = TokenCodec(SECRET)
    payload = {"o": 3, "s": "share/ü", "nested": {"a": [1, 2]}}
    token = codec.encode("list-shares", payload)
    assert codec.decode("list-shares", token) == payload
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")
    assert "=" not in token


def test_a_token_is_valid_only_for_its_kind_and_secret() -> None:
    token = TokenCodec(SECRET).encode("list-shares", {"o": 1})
    with pytest.raises(InvalidToken):
        TokenCodec(SECRET).decode("list-schemas", token)
    with pytest.raises(InvalidToken):
        TokenCodec(b"another-secret-of-enough-length").decode("list-shares", token)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: "",
        lambda t: "garbage",
        lambda t: t + "x",
        lambda t: t[:-2],
        lambda t: t.replace(".", ""),
        lambda t: "." + t,
        lambda t: t + ".",
        lambda t: t.replace("-", "+").replace("_", "/") + "=",
        lambda t: "é" + t,
        lambda t: t.split(".")[0] + "." + t.split(".")[0],
    ],
)
def test_malformed_or_tampered_tokens_are_invalid(mangle) -> None:
    codec = TokenCodec(SECRET)
    token = codec.encode("k", {"o": 1})
    mangled = mangle(token)
    if mangled == token:
        pytest.skip("mangling left the token unchanged")
    with pytest.raises(InvalidToken):
        codec.decode("k", mangled)


def test_edited_payload_fails_the_signature() -> None:
    codec = TokenCodec(SECRET)
    _body, mac = codec.encode("k", {"o": 1}).split(".")
    forged_body = base64.urlsafe_b64encode(b'{"p":{"o":999}}').rstrip(b"=").decode()
    with pytest.raises(InvalidToken):
        codec.decode("k", f"{forged_body}.{mac}")


def test_expiry() -> None:
    now = [1_000_000]
    codec = TokenCodec(SECRET, clock_ms=lambda: now[0])
    token = codec.encode("k", {"v": 1}, expires_at_ms=now[0] + 10)
    assert codec.decode("k", token) == {"v": 1}
    now[0] += 10
    with pytest.raises(ExpiredToken):
        codec.decode("k", token)
    # A token without an expiry never expires.
    assert codec.decode("k", codec.encode("k", {"v": 2})) == {"v": 2}


def test_short_secret_rejected_and_repr_hides_it() -> None:
    with pytest.raises(ValueError):
        TokenCodec(b"short")
    assert "0123" not in repr(TokenCodec(SECRET))
