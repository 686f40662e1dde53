"""The server's SigV4 check (sharing.s3.sigv4) against botocore's own signers: requests
signed by botocore (header and presigned, S3's unsigned and hashed payloads, keys with
characters S3 clients percent-encode, query parameters) verify; any change to what was
signed does not. botocore is the reference implementation here, not a mock."""

from __future__ import annotations

import datetime as dt
from urllib.parse import unquote, urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from sharing.s3 import keys, sigv4
from sharing.s3.errors import S3Error

SECRET = "server-signing-secret-0123456789abcdef"
NOW = dt.datetime(2026, 11, 27, 10, 0, 0, tzinfo=dt.UTC)


def _key() -> keys.AccessKey:
    return keys.mint(
        SECRET,
        share="s",
        schema="d",
        table="t",
        recipient="acme",
        credential_id="c1",
        validity_seconds=3600,
        now_ms=int(NOW.timestamp() * 1000),
    )


def _sign(url: str, *, presign: bool, key: keys.AccessKey | None = None) -> AWSRequest:
    key = key or _key()
    credentials = Credentials(key.access_key_id, key.secret_access_key, key.session_token)
    request = AWSRequest(method="GET", url=url, headers={"Range": "bytes=0-9"})
    signer = (
        S3SigV4QueryAuth(credentials, "s3", "us-east-1", expires=300)
        if presign
        else S3SigV4Auth(credentials, "s3", "us-east-1")
    )
    signer.add_auth(request)  # signed at the current time: checks run at that time + `after`
    return request


def _check(
    request: AWSRequest, *, method: str = "GET", secret: str | None = None, after: float = 1
) -> None:
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    headers = {k.lower(): v for k, v in prepared.headers.items()}
    headers.setdefault("host", parts.netloc)
    lists = {k: [v] for k, v in headers.items()}
    query = [
        tuple(item.split("=", 1)) if "=" in item else (item, "")
        for item in parts.query.split("&")
        if item
    ]
    decoded = [(unquote(k), unquote(v)) for k, v in query]
    signed = sigv4.parse_signed_request(headers, decoded)
    token = signed.session_token or ""
    secret = secret if secret is not None else keys.secret_for(SECRET, token)
    at = dt.datetime.strptime(signed.amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    now = at.timestamp() + after
    sigv4.verify(signed, secret, method, parts.path, parts.query, lists, lambda: now)


URLS = [
    "http://127.0.0.1:8080/delta-sharing/s3/lst-abc/part-00000.snappy.parquet",
    "http://127.0.0.1:8080/delta-sharing/s3/lst-abc/date%3D2021-04-28/p%20q%2Br.parquet",
    "http://127.0.0.1:8080/delta-sharing/s3/lst-abc/%C3%A9t%C3%A9/x~y.parquet",
    "http://127.0.0.1:8080/delta-sharing/s3/lst-abc?list-type=2&prefix=_delta_log%2F&start-after=_delta_log%2F0001.json",
]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("presign", [False, True])
def test_botocore_signatures_verify(url: str, presign: bool) -> None:
    _check(_sign(url, presign=presign))


@pytest.mark.parametrize("presign", [False, True])
def test_changes_to_signed_parts_are_refused(presign: bool) -> None:
    url = URLS[1]
    with pytest.raises(S3Error) as error:  # the wrong secret
        _check(_sign(url, presign=presign), secret="another secret")
    assert error.value.code == "SignatureDoesNotMatch"
    with pytest.raises(S3Error) as error:  # another method than was signed
        _check(_sign(url, presign=presign), method="HEAD")
    assert error.value.code == "SignatureDoesNotMatch"
    request = _sign(url, presign=presign)
    request.url = request.url.replace("p%20q", "p%20z")  # another key
    with pytest.raises(S3Error) as error:
        _check(request)
    assert error.value.code == "SignatureDoesNotMatch"


def test_a_changed_range_header_is_refused() -> None:
    request = _sign(URLS[0], presign=False)
    assert "range" in request.headers["Authorization"].lower()
    request.headers.replace_header("Range", "bytes=0-99")
    with pytest.raises(S3Error) as error:
        _check(request)
    assert error.value.code == "SignatureDoesNotMatch"


def test_stale_signatures_are_refused() -> None:
    _check(_sign(URLS[0], presign=True), after=299)
    with pytest.raises(S3Error) as error:  # past its X-Amz-Expires
        _check(_sign(URLS[0], presign=True), after=301)
    assert error.value.code == "AccessDenied"
    _check(_sign(URLS[0], presign=False), after=14 * 60)
    with pytest.raises(S3Error) as error:  # a header-signed request from too long ago
        _check(_sign(URLS[0], presign=False), after=16 * 60)
    assert error.value.code == "RequestTimeTooSkewed"


def test_token_claims_bind_the_key() -> None:
    key = _key()
    claims = keys.read_token(key.session_token)
    assert (claims.share, claims.schema, claims.table, claims.recipient) == ("s", "d", "t", "acme")
    assert keys.access_key_id(key.session_token) == key.access_key_id
    other = keys.mint(
        SECRET,
        share="s",
        schema="d",
        table="u",
        recipient="acme",
        credential_id="c1",
        validity_seconds=3600,
        now_ms=int(NOW.timestamp() * 1000),
    )
    assert other.secret_access_key != key.secret_access_key
    assert keys.bucket_for("s", "d", "t") != keys.bucket_for("s", "d", "u")
    with pytest.raises(keys.MalformedKey):
        keys.read_token("LS3.!!!")


class _NoSuchTime:
    """What botocore's clock gives the signer: a timestamp of no real date."""

    def strftime(self, _format: str) -> str:
        return "20261399T999999Z"


@pytest.mark.parametrize("presign", [False, True])
def test_a_signed_date_that_is_no_date_is_refused(
    presign: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Failed before the fix: the date passed the pattern, the signature held, and parsing
    # the date raised ValueError (a 500 for any key holder signing such a date).
    monkeypatch.setattr("botocore.auth.get_current_datetime", _NoSuchTime)
    request = _sign(URLS[0], presign=presign)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    headers = {k.lower(): v for k, v in prepared.headers.items()}
    headers.setdefault("host", parts.netloc)
    query = [tuple(item.split("=", 1)) for item in parts.query.split("&") if item]
    decoded = [(unquote(k), unquote(v)) for k, v in query]
    lists = {k: [v] for k, v in headers.items()}
    with pytest.raises(S3Error) as error:
        signed = sigv4.parse_signed_request(headers, decoded)
        secret = keys.secret_for(SECRET, signed.session_token or "")
        sigv4.verify(signed, secret, "GET", parts.path, parts.query, lists, lambda: 0.0)
    assert (error.value.status, error.value.code) == (400, "AuthorizationHeaderMalformed")
