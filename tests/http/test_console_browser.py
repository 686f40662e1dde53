"""The console in a real browser (Debian's Chromium driven by Playwright) against a running
server, with the official `delta-sharing` client reading what the console set up: sign in,
create a share and add a table, create a recipient and download its profile, read the
table with that profile, disable the recipient and see the client refused within
store.cacheSeconds, and find both in the audit view. Requests without the session or with
a wrong CSRF token are refused. Screenshots of each page are taken along the way; with
LAKESHARE_UPDATE_SCREENSHOTS=1 they replace those of docs/img/console/."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import delta_sharing
import pytest
import requests
from requests.exceptions import HTTPError

from sharing.recipients.hashing import hash_token
from tests.support import REPO_ROOT
from tests.support.corpus import CORPUS
from tests.support.requirements import require
from tests.support.server import make_config, run_server

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "console-browser-admin-token-0123456789"
BASIC = CORPUS / "levi/dat/basic_append/delta"
CACHE_SECONDS = 1
SLACK_SECONDS = 5  # a loaded 2-core machine's answer time on top of cacheSeconds
DOC_SCREENSHOTS = REPO_ROOT / "docs" / "img" / "console"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def test_console_drives_a_share_and_a_recipient_end_to_end(tmp_path: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    require(os.path.exists(chromium), "Debian's chromium package (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    config = make_config(
        {
            "host": "127.0.0.1",
            "store": {
                "url": f"sqlite:///{tmp_path / 'state.db'}",
                "cacheSeconds": CACHE_SECONDS,
            },
            "admin": {"tokenHash": hash_token(ADMIN_TOKEN)},
        }
    )
    shots = tmp_path / "screenshots"
    with run_server(config, tmp_path / "srv") as server, sync_playwright() as playwright:
        root = server.base_url.rsplit("/delta-sharing", 1)[0]
        console = f"{root}/admin/console"
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 800})
            page = context.new_page()
            violations: list[str] = []
            page.on("console", lambda m: violations.append(m.text) if m.type == "error" else None)

            # Sign in: a page first sends the browser to the sign-in form.
            page.goto(f"{console}/shares")
            assert page.url == f"{console}/signin"
            page.screenshot(path=shots / "signin.png")
            page.get_by_label("Admin token").fill(ADMIN_TOKEN)
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Shares")).to_be_visible()

            # A share, and a table in it (checked before it is committed).
            page.get_by_label("Share name").fill("partners")
            page.get_by_label("Comment").fill("tables for our partners")
            page.get_by_role("button", name="Create share").click()
            expect(page.get_by_role("heading", name="Share partners")).to_be_visible()
            page.get_by_label("Schema", exact=True).fill("sales")
            page.get_by_label("Table name", exact=True).fill("orders")
            page.get_by_label("Location", exact=True).fill(str(BASIC))
            page.get_by_role("button", name="Add table").click()
            row = page.get_by_role("row").filter(has_text="orders")
            expect(row).to_contain_text("ok")
            expect(row).to_contain_text("every Delta Sharing client")
            page.screenshot(path=shots / "share.png", full_page=True)

            # A recipient, its profile downloaded (the answer to the form's POST).
            page.get_by_role("link", name="Recipients", exact=True).click()
            page.get_by_label("Recipient name").fill("acme")
            page.get_by_role("checkbox", name="partners").check()
            page.get_by_label("Credential lifetime").fill("30d")
            page.screenshot(path=shots / "recipients.png", full_page=True)
            with page.expect_download() as download_info:
                page.get_by_role("button", name="Create and download profile").click()
            download = download_info.value
            assert download.suggested_filename == "acme.share"
            profile_path = tmp_path / "acme.share"
            download.save_as(profile_path)
            profile = json.loads(profile_path.read_text())
            assert profile["endpoint"] == server.base_url + "/"
            assert profile["bearerToken"] not in page.url

            # The official client reads the table with that profile.
            table_url = f"{profile_path}#partners.sales.orders"
            assert _until(lambda: _reads(table_url), CACHE_SECONDS + SLACK_SECONDS), (
                "the table added in the console was not readable with the downloaded profile"
            )
            frame = delta_sharing.load_as_pandas(table_url)
            assert len(frame) > 0

            # Disable the recipient in the console: the client is refused.
            page.goto(f"{console}/recipients/acme")
            page.get_by_role("button", name="Disable recipient").click()
            expect(page.locator("#state")).to_have_text("disabled")
            page.screenshot(path=shots / "recipient.png", full_page=True)
            assert _until(lambda: _refused(table_url), CACHE_SECONDS + SLACK_SECONDS), (
                "the disabled recipient could still read"
            )

            # Both in the audit view: the read and the refusal.
            page.get_by_role("link", name="Audit", exact=True).click()
            page.get_by_label("Recipient", exact=True).fill("acme")
            page.get_by_role("button", name="Filter").click()
            # The filter is a GET form: its navigation must land before the page is reloaded
            # (a reload during it fails with "Not attached to an active page").
            expect(page).to_have_url(re.compile(r"/audit\?.*recipient=acme"))
            page.wait_for_load_state()
            audit = page.locator("#audit")

            def both_recorded() -> bool:
                page.goto(page.url)
                text = audit.inner_text()
                return "recipient_disabled" in text and "orders" in text

            assert _until(both_recorded, 10), audit.inner_text()
            page.screenshot(path=shots / "audit.png")
            page.get_by_label("Refused authentications only").check()
            page.get_by_role("button", name="Filter").click()
            expect(page).to_have_url(re.compile(r"/audit\?.*failed=1"))
            page.wait_for_load_state()
            refused_rows = audit.get_by_role("row").filter(has_text="recipient_disabled")
            assert refused_rows.count() >= 1
            assert audit.get_by_role("row").filter(has_text="200").count() == 0

            page.get_by_role("link", name="Activity", exact=True).click()
            page.get_by_label("Per").select_option("recipient")
            page.get_by_role("button", name="Show").click()
            expect(page.get_by_role("heading", name="Recipient acme")).to_be_visible()
            expect(page.get_by_role("img", name="Requests of acme", exact=False)).to_be_visible()
            page.screenshot(path=shots / "activity.png", full_page=True)
            assert not [v for v in violations if "Content Security Policy" in v], violations

            # Refusals: no session, and a session with a wrong CSRF token.
            anonymous = playwright.request.new_context()
            answer = anonymous.post(f"{console}/shares", form={"name": "x", "csrf": "x"})
            assert answer.status == 403
            anonymous.dispose()
            forged = context.request.post(
                f"{console}/shares", form={"name": "forged", "csrf": "not-the-token"}
            )
            assert forged.status == 403
            page.goto(f"{console}/shares")
            expect(page.get_by_role("link", name="forged")).to_have_count(0)
        finally:
            browser.close()
    if os.environ.get("LAKESHARE_UPDATE_SCREENSHOTS") == "1":
        DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for shot in shots.iterdir():
            shutil.copy2(shot, DOC_SCREENSHOTS / shot.name)


def _reads(table_url: str) -> bool:
    try:
        delta_sharing.load_as_pandas(table_url)
    except HTTPError:
        return False
    return True


def _refused(table_url: str) -> bool:
    try:
        delta_sharing.load_as_pandas(table_url)
    except HTTPError as exc:
        return exc.response is not None and exc.response.status_code == 403
    except FileNotFoundError as exc:
        # The query was still answered (within store.cacheSeconds) but its file URL,
        # checked on use against the recipient's state, was refused: fsspec reports any
        # failed open as not found, so ask the URL itself.
        return requests.get(str(exc.args[0]), timeout=10).status_code == 403
    return False
