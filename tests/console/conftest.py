"""A real headless Chromium (Debian's package) driving the console of a real server."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.conftest import running
from tests.support.server import Server

CHROMIUM = os.environ.get("ROCKTIMER_CHROMIUM", "/usr/bin/chromium")
# Without the background-networking flags Chromium keeps dialling Google's hosts, which this
# machine's closed network refuses many at a time.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
KEYS = {"admin-key": "admin", "consumer-key": "consumer", "producer-key": "producer"}


# Module scope, not session: while Playwright's sync API is open it keeps an asyncio loop
# running on the main thread, and every later test that calls asyncio.run() would fail.
@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if path is None:
        pytest.fail(
            f"no Chromium at {CHROMIUM}: the console tests need it "
            "(apt-get install chromium, or set ROCKTIMER_CHROMIUM); make test installs it as root",
            pytrace=False,
        )
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def shots() -> Path:
    """Where the tests leave a screenshot of every page (ROCKTIMER_SCREENSHOTS to keep them)."""
    out = Path(os.environ.get("ROCKTIMER_SCREENSHOTS", "/tmp/rocktimer-console-shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """An open server of the console's own (no API keys): its pages list every topic,
    which the shared server fills with every other package's."""
    with running(tmp_path_factory.mktemp("console") / "data") as srv:
        yield srv


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {"ROCKTIMER_API_KEYS": json.dumps(KEYS)}
    with running(tmp_path_factory.mktemp("console-keys") / "data", env=env) as srv:
        yield srv


Opener = Callable[..., Page]


def _opener(browser: Browser, server: Server) -> Iterator[Opener]:
    pages: list[tuple[Page, list[str]]] = []

    def open_(
        hash_: str = "#/", viewport: dict[str, int] = DESKTOP, key: str | None = None
    ) -> Page:
        page = browser.new_page(viewport=viewport)  # type: ignore[arg-type]
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        pages.append((page, errors))
        page.goto(f"{server.url}/ui{hash_}")
        if key is not None:
            page.get_by_label("API key").fill(key)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_text(f"role: {KEYS[key]}").wait_for()
        return page

    yield open_
    for page, errors in pages:
        page.close()
        assert not errors, f"the page raised: {errors}"


@pytest.fixture
def console(browser: Browser, server: Server) -> Iterator[Opener]:
    """Open a console page on the shared open server; page errors fail the test."""
    yield from _opener(browser, server)


@pytest.fixture
def keyed_console(browser: Browser, keyed_server: Server) -> Iterator[Opener]:
    """The same on a server with API keys (KEYS): pass key= to sign in."""
    yield from _opener(browser, keyed_server)


def api(server: Server, key: str | None = None) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.url, timeout=30, headers=headers)
