"""The landing page at `/` and at the endpoint URL: HTML for a browser, JSON on request,
no token needed and no share or table name given away. The browser check loads the page
in headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.routes.landing import server_version
from tests.support.corpus import corpus_table
from tests.support.requirements import require
from tests.support.server import make_config, run_server

SECRET_NAMES = ("topsecretshare", "hiddenschema", "privatetable")


def _config():  # type: ignore[no-untyped-def]
    table = {"name": SECRET_NAMES[2], "location": str(corpus_table("levi/dat/basic_append/delta"))}
    schema = {"name": SECRET_NAMES[1], "tables": [table]}
    return make_config({"shares": [{"name": SECRET_NAMES[0], "schemas": [schema]}]})


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(_config()))


@pytest.mark.parametrize("path", ["/", "/delta-sharing", "/delta-sharing/"])
def test_html_without_a_token(client: TestClient, path: str) -> None:
    response = client.get(path, headers={"Accept": "text/html"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    body = response.text
    assert "Delta Sharing" in body
    assert server_version() in body
    assert "http://testserver/delta-sharing/" in body
    assert '"shareCredentialsVersion": 1' in body
    assert not any(name in body for name in SECRET_NAMES)


def test_json_on_request(client: TestClient) -> None:
    response = client.get("/delta-sharing/", headers={"Accept": "application/json"})
    assert response.status_code == 200
    summary = response.json()
    assert summary["server"] == "Lakeshare"
    assert summary["version"] == server_version() != "unknown"
    assert summary["endpoint"] == "http://testserver/delta-sharing/"
    assert summary["profileExample"]["endpoint"] == summary["endpoint"]
    assert not any(name in response.text for name in SECRET_NAMES)


def test_public_url_names_the_endpoint() -> None:
    config = make_config(publicUrl="https://sharing.example.com")
    client = TestClient(create_app(config))
    summary = client.get("/", headers={"Accept": "application/json"}).json()
    assert summary["endpoint"] == "https://sharing.example.com/delta-sharing/"


def test_protocol_routes_still_need_a_token(client: TestClient) -> None:
    assert client.get("/delta-sharing/shares").status_code == 401


@pytest.mark.slow
def test_a_browser_finds_the_endpoint_and_instructions(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    require(os.path.exists(chromium), "Debian's chromium package (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with run_server(_config(), tmp_path) as server, sync_playwright() as playwright:
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
            page = browser.new_page()
            page.goto(server.base_url + "/")
            assert "Lakeshare" in page.title()
            assert page.locator("#endpoint").inner_text().strip() == server.base_url + "/"
            assert '"shareCredentialsVersion": 1' in page.locator("#profile").inner_text()
            assert page.get_by_text("load_as_pandas").count() == 1
            content = page.content()
            assert not any(name in content for name in SECRET_NAMES)
        finally:
            browser.close()
