"""A real browser for the dashboard's end-to-end tests: Debian's chromium driven by
Playwright for Python (``executable_path``; Playwright's own browser download cannot work
here). Under ``CI=true`` a missing browser fails the run; elsewhere the tests skip and say so.

    async with open_browser() as browser:
        page = await browser.new_page()
        await page.goto(url)
        await screenshot(page, "approvals")          # tests/web/artifacts/approvals.png
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

CHROMIUM = os.environ.get("PML_TEST_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# As the machine's probe starts it: no sandbox as root, and nothing that reaches the network.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str:
    """The browser to drive, or a skip (a failure under CI) when there is none."""
    found = CHROMIUM if os.access(CHROMIUM, os.X_OK) else shutil.which("chromium")
    if found is None:
        message = f"no chromium at {CHROMIUM}: run .ci/ensure-chromium (apt-get install chromium)"
        if IN_CI:
            pytest.fail(f"{message} (CI=true requires the browser tests)")
        pytest.skip(message)
    return found


@asynccontextmanager
async def open_browser() -> AsyncGenerator[Browser]:
    """A headless chromium for one test."""
    executable = chromium_path()
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=executable, headless=True, args=FLAGS
        )
        try:
            yield browser
        finally:
            await browser.close()


async def screenshot(page: Page, name: str) -> Path:
    """A full-page PNG of ``page`` kept as a test artifact (``tests/web/artifacts``)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


async def sign_in_through_the_form(page: Page, url: str, key: str, path: str) -> None:
    """Open ``path`` signed out, land on the login form, sign in with ``key``, be sent back."""
    await page.goto(f"{url}{path}")
    await expect(page).to_have_url(f"{url}/ui/login?next={path}")
    await page.get_by_label("Admin API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(f"{url}{path}")
