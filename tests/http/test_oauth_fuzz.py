"""Hypothesis against the token endpoint and the bearer header: whatever a client sends —
forms, Basic headers, assertions and tokens mutated from real ones — the answer is a 4xx
with a JSON body (RFC 6749 fields at the token endpoint), never a 500. The app runs
in-process (Starlette's TestClient over the real `create_app` with a SQLite store)."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator

import jwt
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from app.main import create_app
from sharing.config import load_config
from sharing.recipients.model import CredentialType
from sharing.recipients.oauth.public_keys import generate_key_pair
from tests.http.oauth_support import write_config

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
JWT_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"


@pytest.fixture(scope="module")
def app_and_secrets(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TestClient, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("oauth-fuzz")
    # A high limit: the fuzzer's failures must not turn every answer into 429.
    config = load_config(write_config(directory, oauth={"failedAttemptsLimit": 0}))
    app = create_app(config)
    repository = app.state.recipients.directory.repository
    _, secret_client = repository.create("acme", ["sales"], credential_type=CredentialType.OAUTH)
    private, public = generate_key_pair("RS256")
    _, key_client = repository.create(
        "globex",
        ["sales"],
        credential_type=CredentialType.PRIVATE_KEY_JWT,
        public_key=public,
        key_id="k1",
    )
    assert secret_client is not None and key_client is not None
    now = int(time.time())
    claims = {"iss": key_client.credential.id, "exp": now + 300, "jti": str(uuid.uuid4())}
    with TestClient(app, raise_server_exceptions=False) as client:
        url = "http://testserver/delta-sharing/oauth/token"
        assertion = jwt.encode({**claims, "aud": url}, private, "RS256", headers={"kid": "k1"})
        basic = f"{secret_client.credential.id}:{secret_client.secret}"
        token = client.post(
            "/delta-sharing/oauth/token",
            data={"grant_type": "client_credentials"},
            headers={"Authorization": "Basic " + base64.b64encode(basic.encode()).decode()},
        ).json()["access_token"]
        yield client, {"assertion": assertion, "basic": basic, "token": token}


def mutate(text: str, data: st.DataObject) -> str:
    position = data.draw(st.integers(0, max(0, len(text) - 1)))
    kind = data.draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
    if kind == "flip":
        char = data.draw(st.characters(codec="ascii"))
        return text[:position] + char + text[position + 1 :]
    if kind == "cut":
        return text[:position]
    if kind == "insert":
        return text[:position] + data.draw(st.text(max_size=20)) + text[position:]
    return text + text[position:]


def assert_4xx(response: object, *, oauth: bool) -> None:
    status = response.status_code  # type: ignore[attr-defined]
    assert 400 <= status < 500 or status == 200, (status, response.content[:300])  # type: ignore[attr-defined]
    if status >= 400:
        body = orjson.loads(response.content)  # type: ignore[attr-defined]
        assert body["errorCode"] and body["message"]
        if oauth and status != 413:
            assert body["error"] and body["error_description"]


@FUZZ
@given(data=st.data())
def test_mutated_assertions_basic_headers_and_forms(
    app_and_secrets: tuple[TestClient, dict[str, str]], data: st.DataObject
) -> None:
    client, secrets = app_and_secrets
    choice = data.draw(st.sampled_from(["assertion", "basic", "form"]))
    headers: dict[str, str] = {}
    if choice == "assertion":
        form = {"grant_type": JWT_GRANT, "assertion": mutate(secrets["assertion"], data)}
    elif choice == "basic":
        form = {"grant_type": "client_credentials"}
        raw = mutate(secrets["basic"], data).encode("utf-8", "surrogatepass")
        headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
    else:
        form = data.draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "grant_type",
                        "assertion",
                        "client_id",
                        "client_secret",
                        "scope",
                        "client_assertion",
                        "client_assertion_type",
                        "x",
                    ]
                ),
                st.text(max_size=50),
                max_size=5,
            )
        )
    response = client.post("/delta-sharing/oauth/token", data=form, headers=headers)
    assert_4xx(response, oauth=True)


@FUZZ
@given(data=st.data())
def test_mutated_access_tokens_on_a_protocol_route(
    app_and_secrets: tuple[TestClient, dict[str, str]], data: st.DataObject
) -> None:
    client, secrets = app_and_secrets
    token = mutate(secrets["token"], data)
    if not token.isascii() or any(c in token for c in "\r\n\x00"):
        return  # not sendable in an HTTP header by this client
    header = f"Bearer {token}"
    response = client.get("/delta-sharing/shares", headers={"Authorization": header})
    assert_4xx(response, oauth=False)
