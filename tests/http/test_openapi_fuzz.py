"""The standing adversarial suite, part 1: schemathesis drives the server from its own
OpenAPI description (`{endpoint}/openapi.json`) with a valid bearer token. Whatever it sends
— valid requests and deliberately invalid ones (negative mode) — the server never answers
a status >= 500, and every 4xx carries the protocol's JSON error body.

The path parameters are widened in the test (not in the served document, which names no
tables) so that examples hit real shares and tables often, not only 404s. Bounded: a fixed
number of examples per operation and mode (LAKESHARE_FUZZ_EXAMPLES to change it), so it
fits CI time.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from tests.support.corpus import CORPUS
from tests.support.server import RunningServer, make_config, run_server

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = int(os.environ.get("LAKESHARE_FUZZ_EXAMPLES", "25"))
TABLES = {
    "basic": CORPUS / "levi/dat/basic_append/delta",
    "parts": CORPUS / "levi/dat/basic_partitioned/delta",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tables = [
        {"name": name, "location": str(path), "historyShared": True}
        for name, path in TABLES.items()
        if path.exists()
    ]
    config = make_config(
        {"shares": [{"name": "s", "schemas": [{"name": "d", "tables": tables}]}]},
        # Slow-client limits stay large: hypothesis may pause between requests.
        limits={"idleTimeoutSeconds": 60, "maxQueryBodyBytes": 262144},
    )
    with run_server(config, tmp_path_factory.mktemp("fuzz")) as running:
        yield running


def _document(server: RunningServer) -> dict[str, Any]:
    response = httpx.get(server.url("/openapi.json"))  # no token: it names nothing secret
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    return dict(response.json())


def _widened(document: dict[str, Any]) -> dict[str, Any]:
    """Path parameters that are often the real names (any string otherwise)."""
    names = {"share": ["s", "S"], "schema": ["d"], "table": sorted(TABLES)}
    widened = copy.deepcopy(document)
    for item in widened["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", ()):
                known = names.get(parameter["name"])
                if parameter["in"] == "path" and known:
                    parameter["schema"] = {"anyOf": [{"enum": known}, {"type": "string"}]}
    return widened


def test_the_document_is_valid_openapi(server: RunningServer) -> None:
    from openapi_spec_validator import validate

    document = _document(server)
    validate(document)
    assert "/shares/{share}/schemas/{schema}/tables/{table}/query" in document["paths"]
    assert server.config.authorization is not None
    assert server.config.authorization.bearer_token not in orjson.dumps(document).decode()


def _check(response: Any, label: str) -> None:
    status = response.status_code
    assert status < 500, f"{label}: {status} {response.content[:300]!r}"
    if 400 <= status < 500 and response.request.method != "HEAD":
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            pytest.fail(f"{label}: {status} without a JSON body: {response.content[:200]!r}")
        assert isinstance(body, dict) and {"errorCode", "message"} <= set(body), (label, body)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_no_5xx_and_json_errors_from_the_openapi_description(
    server: RunningServer, mode: str
) -> None:
    schema = schemathesis.openapi.from_dict(_widened(_document(server)))
    generation_mode = schemathesis.GenerationMode(mode)
    seen: dict[int, int] = {}
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        label = f"{operation.method.upper()} {operation.path} ({mode})"
        strategy = operation.as_strategy(generation_mode=generation_mode)
        _fuzz(strategy, label, server.base_url, server.auth_headers, seen)
    print(f"statuses ({mode}):", dict(sorted(seen.items())))
    assert operations >= 12
    assert any(200 <= status < 300 for status in seen), seen  # real tables were reached


def _fuzz(
    strategy: Any, label: str, base_url: str, headers: dict[str, str], seen: dict[int, int]
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        _check(response, label)

    run()
