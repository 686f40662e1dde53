"""The standing adversarial suite, part 2: hypothesis against the inputs a client controls
that the OpenAPI description can only call "a string" — page and refresh tokens, signed
file URLs, Range headers, predicate hints (SQL and JSON). Arbitrary text and mutations of
real values (a token or URL the server issued, with characters changed, cut or added)
always get a 2xx/206/4xx, never a 500, and every 4xx is the JSON error body; a mutated
token or signature never reads data.

The app runs in-process (Starlette's TestClient over the real `create_app`, real corpus
tables); the serving layer's own limits are tested in test_hardening_limits.py.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from app.main import create_app
from tests.support.corpus import CORPUS
from tests.support.server import TEST_BEARER_TOKEN, make_config

TABLE = "/delta-sharing/shares/s/schemas/d/tables/parts"
AUTH = {"Authorization": f"Bearer {TEST_BEARER_TOKEN}"}
FUZZ = settings(
    max_examples=int(os.environ.get("LAKESHARE_FUZZ_EXAMPLES", "60")),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    tables = [
        {"name": "parts", "location": str(CORPUS / "levi/dat/basic_partitioned/delta")},
        {"name": "basic", "location": str(CORPUS / "levi/dat/basic_append/delta")},
    ]
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]},
        evaluatePredicateHints=True,
    )
    with TestClient(create_app(config), raise_server_exceptions=False) as running:
        yield running


def _assert_answer(response: httpx.Response) -> None:
    status = response.status_code
    assert status < 500, (status, response.content[:300])
    if status >= 400 and response.request.method != "HEAD":
        body = orjson.loads(response.content)
        assert set(body) == {"errorCode", "message"}, body


def _mutations(value: str) -> st.SearchStrategy[str]:
    """`value` with a character replaced, a cut, or text inserted — and arbitrary text."""
    alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",))

    def replace(i: int, c: str) -> str:
        i %= max(len(value), 1)
        return value[:i] + c + value[i + 1 :]

    def insert(i: int, text: str) -> str:
        i %= len(value) + 1
        return value[:i] + text + value[i:]

    return st.one_of(
        st.builds(replace, st.integers(0, 10_000), alphabet),
        st.builds(lambda n: value[: n % (len(value) + 1)], st.integers(0, 10_000)),
        st.builds(insert, st.integers(0, 10_000), st.text(alphabet, min_size=1, max_size=8)),
        st.text(alphabet, max_size=200),
    ).filter(lambda v: v != value)


def _real_page_token(client: TestClient) -> tuple[str, str]:
    response = client.post(
        TABLE + "/query", headers=AUTH, json={"maxFiles": 1, "includeRefreshToken": True}
    )
    assert response.status_code == 200
    lines = [orjson.loads(line) for line in response.text.splitlines()]
    end = next(line["endStreamAction"] for line in lines if "endStreamAction" in line)
    return end["nextPageToken"], end["refreshToken"]


@pytest.mark.slow
def test_mutated_page_and_refresh_tokens_are_4xx(client: TestClient) -> None:
    page, refresh = _real_page_token(client)
    assert client.post(TABLE + "/query", headers=AUTH, json={"pageToken": page}).status_code == 200

    @FUZZ
    @given(token=_mutations(page), field=st.sampled_from(["pageToken", "refreshToken"]))
    def check(token: str, field: str) -> None:
        response = client.post(TABLE + "/query", headers=AUTH, json={field: token})
        _assert_answer(response)
        assert response.status_code != 200 or token.strip() == page.strip()

    check()

    @FUZZ
    @given(token=_mutations(refresh))
    def check_refresh(token: str) -> None:
        _assert_answer(client.post(TABLE + "/query", headers=AUTH, json={"refreshToken": token}))

    check_refresh()

    @FUZZ
    @given(token=_mutations(page))
    def check_changes(token: str) -> None:
        response = client.get(
            TABLE.replace("/parts", "/basic") + "/changes",
            headers=AUTH,
            params={"startingVersion": "0", "pageToken": token},
        )
        _assert_answer(response)

    check_changes()


def _file_url(client: TestClient) -> str:
    response = client.post(TABLE + "/query", headers=AUTH, json={})
    lines = [orjson.loads(line) for line in response.text.splitlines()]
    return str(next(line["file"]["url"] for line in lines if "file" in line))


@pytest.mark.slow
def test_mutated_signed_urls_are_refused(client: TestClient) -> None:
    url = httpx.URL(_file_url(client))
    prefix, rest = url.path.split("/files/", 1)
    exp, sig = url.params["exp"], url.params["sig"]
    assert client.get(str(url)).status_code == 200

    @FUZZ
    @given(
        part=st.sampled_from(["path", "exp", "sig"]),
        data=st.data(),
        method=st.sampled_from(["GET", "HEAD"]),
    )
    def check(part: str, data: st.DataObject, method: str) -> None:
        values = {"path": rest, "exp": exp, "sig": sig}
        values[part] = data.draw(_mutations(values[part]))
        target = (
            f"{prefix}/files/{quote(values['path'], safe='/=')}"
            f"?exp={quote(values['exp'], safe='')}&sig={quote(values['sig'], safe='')}"
        )
        response = client.request(method, target)
        _assert_answer(response)
        # Only the URL the server signed reads the file (`exp` is signed as a number: the
        # same number with leading zeros names the same expiry, which is no forgery).
        same = part == "exp" and values["exp"].lstrip("0") == exp.lstrip("0")
        assert same or response.status_code not in (200, 206), target

    check()


_DIGITS = st.one_of(
    st.just(""), st.integers(-5, 10**6).map(str), st.text("0123456789٣²", max_size=6)
)
_RANGE_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda a, b, unit: f"{unit}={a}-{b}",
        st.one_of(
            st.just(""), st.integers(-5, 10**6).map(str), st.text("0123456789٣²", max_size=6)
        ),
        st.one_of(
            st.just(""), st.integers(-5, 10**6).map(str), st.text("0123456789٣²", max_size=6)
        ),
        st.sampled_from(["bytes", "Bytes", "items", " bytes"]),
    ),
    st.integers(4290, 4310).map(lambda n: "bytes=" + "9" * n + "-"),
)


@pytest.mark.slow
def test_range_headers_are_a_range_the_whole_file_or_416(client: TestClient) -> None:
    url = _file_url(client)
    whole = client.get(url).content
    size = len(whole)

    @FUZZ
    @given(header=_RANGE_TEXT)
    def check(header: str) -> None:
        try:
            response = client.get(url, headers={"Range": header})
        except (UnicodeEncodeError, httpx.LocalProtocolError):
            return  # not sendable as an HTTP header
        _assert_answer(response)
        assert response.status_code in (200, 206, 400, 416), response.status_code
        if response.status_code == 200:
            assert response.content == whole
        elif response.status_code == 206:
            first, last = map(int, response.headers["content-range"][6:].split("/")[0].split("-"))
            assert 0 <= first <= last < size and response.content == whole[first : last + 1]
        elif response.status_code == 416:
            assert response.headers["content-range"] == f"bytes */{size}"

    check()


_SQL = st.one_of(
    st.text(max_size=80),
    st.builds(
        lambda col, op, value: f"{col} {op} {value}",
        st.sampled_from(["letter", "number", "a_float", "`letter`", "x", "1"]),
        st.sampled_from(["=", "<", ">=", "<>", "IS NULL", "LIKE", "IN", "==", ""]),
        st.one_of(st.text(max_size=10), st.integers().map(str), st.just("'a'")),
    ),
)
_JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)
)
_JSON_VALUE = st.recursive(
    _JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(["op", "children", "name", "value", "valueType", "x"]),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)
_JSON_HINT = st.one_of(
    st.text(max_size=80),
    _JSON_VALUE.map(json.dumps),
    st.builds(
        lambda op, name, value_type, value: orjson.dumps(
            {
                "op": op,
                "children": [
                    {"op": "column", "name": name, "valueType": value_type},
                    {"op": "literal", "value": value, "valueType": value_type},
                ],
            }
        ).decode(),
        st.sampled_from(["equal", "lessThan", "greaterThanOrEqual", "and", "not", "isNull", "x"]),
        st.sampled_from(["letter", "number", "a_float", "nope", ""]),
        st.sampled_from(["string", "int", "long", "double", "date", "boolean", "bogus"]),
        st.one_of(st.text(max_size=8), st.integers(-(10**20), 10**20).map(str)),
    ),
)


@pytest.mark.slow
def test_predicate_hints_never_fail_the_query(client: TestClient) -> None:
    full = client.post(TABLE + "/query", headers=AUTH, json={})
    # Found by this test: an `op` or `valueType` that is a list or an object was a 500.
    for hint in (
        {"op": ["equal"], "children": []},
        {"op": {}},
        {"op": "column", "name": "letter", "valueType": ["string"]},
        {"op": "equal", "children": [{"op": "literal", "value": "a", "valueType": {}}]},
    ):
        response = client.post(
            TABLE + "/query", headers=AUTH, json={"jsonPredicateHints": orjson.dumps(hint).decode()}
        )
        assert response.status_code == 200, (hint, response.content)
    all_files = {line for line in full.text.splitlines()[2:]}

    @FUZZ
    @given(sql=st.lists(_SQL, max_size=3), json_hint=st.one_of(st.none(), _JSON_HINT))
    def check(sql: list[str], json_hint: str | None) -> None:
        body: dict[str, Any] = {"predicateHints": sql}
        if json_hint is not None:
            body["jsonPredicateHints"] = json_hint
        response = client.post(TABLE + "/query", headers=AUTH, json=body)
        _assert_answer(response)
        if response.status_code == 200:
            # Hints only ever skip files; they never invent one.
            files = {line for line in response.text.splitlines()[2:]}
            assert {orjson.loads(f)["file"]["id"] for f in files} <= {
                orjson.loads(f)["file"]["id"] for f in all_files
            }

    check()
