"""Issue 21, item 8: `/admin/docs` works offline and can call the API with the admin token.

The page's Swagger UI scripts and styles come from the server itself (the installed
`fastapi-offline` package ships them), never from a CDN, and the admin OpenAPI declares
bearer authentication, so the page's "Authorize" dialog takes the admin token and "Try it
out" sends it. The browser check runs headless Chromium (Debian's package, driven by
Playwright) with every request outside the server refused, as on a machine with no
internet access.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from sharing.recipients.hashing import hash_token
from tests.support.corpus import CORPUS
from tests.support.requirements import require
from tests.support.server import RunningServer, make_config, run_server

BASIC = CORPUS / "levi/dat/basic_append/delta"
ADMIN_TOKEN = "admin-docs-token-0123456789"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    directory = tmp_path_factory.mktemp("admin-docs")
    table = {"name": "t", "location": str(BASIC)}
    config = make_config(
        {
            "shares": [{"name": "sales", "schemas": [{"name": "d", "tables": [table]}]}],
            "store": {"url": f"sqlite:///{directory / 'state.db'}", "cacheSeconds": 0},
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    with run_server(config, directory / "srv") as running:
        yield running


def _root(server: RunningServer) -> str:
    return server.base_url.rsplit("/delta-sharing", 1)[0]


def test_the_admin_openapi_declares_bearer_auth_on_every_operation(
    server: RunningServer,
) -> None:
    spec = httpx.get(_root(server) + "/admin/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert len(schemes) == 1
    ((name, scheme),) = schemes.items()
    assert scheme["type"] == "http" and scheme["scheme"].lower() == "bearer"
    operations = [op for path in spec["paths"].values() for op in path.values()]
    assert operations
    assert all(op.get("security") == [{name: []}] for op in operations)


def test_the_docs_page_names_no_outside_url(server: RunningServer) -> None:
    page = httpx.get(_root(server) + "/admin/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    links = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text)
    assert links and all(link.startswith("/admin/") for link in links), links
    assert "https://" not in page.text and "http://" not in page.text
    for link in links:  # the assets are served, without the admin token
        asset = httpx.get(_root(server) + link)
        assert asset.status_code == 200 and len(asset.content) > 1000, link
    # The API itself still needs the token.
    assert httpx.get(_root(server) + "/admin/recipients").status_code == 401


@pytest.mark.slow
def test_the_docs_page_renders_offline_and_calls_the_api_with_the_admin_token(
    server: RunningServer,
) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    require(os.path.exists(chromium), "Debian's chromium package (apt-get install chromium)")
    from playwright.sync_api import Route, sync_playwright

    origin = urlsplit(_root(server)).netloc
    outside: list[str] = []
    sent_tokens: list[str | None] = []

    def offline(route: Route) -> None:
        url = urlsplit(route.request.url)
        if url.scheme in ("http", "https") and url.netloc != origin:
            outside.append(route.request.url)
            route.abort("internetdisconnected")
            return
        if url.path == "/admin/recipients":
            sent_tokens.append(route.request.headers.get("authorization"))
        route.continue_()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium,
            args=[
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
            ],
        )
        try:
            context = browser.new_context()
            context.route("**/*", offline)
            page = context.new_page()
            page.goto(_root(server) + "/admin/docs")
            page.locator(".swagger-ui .info .title").wait_for(timeout=20_000)
            assert "Lakeshare admin API" in page.locator(".swagger-ui .info .title").inner_text()

            page.locator(".auth-wrapper button.authorize").click()
            dialog = page.locator(".modal-ux")
            dialog.locator("input").first.fill(ADMIN_TOKEN)
            dialog.locator("button.authorize").click()
            dialog.locator("button.btn-done").click()

            operation = page.locator(".opblock-get", has_text="/recipients").first
            operation.locator(".opblock-summary").click()
            operation.locator("button.try-out__btn").click()
            operation.locator("button.execute").click()
            status = operation.locator(".live-responses-table .response .response-col_status")
            status.first.wait_for(timeout=20_000)
            assert status.first.inner_text().strip() == "200"
            body = operation.locator(".live-responses-table .microlight").first.inner_text()
            assert '"items"' in body
        finally:
            browser.close()
    assert outside == []
    assert sent_tokens == [f"Bearer {ADMIN_TOKEN}"]
