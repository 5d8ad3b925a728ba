"""The web dashboard in a real browser: Debian's Chromium driven by
Playwright against ``berth serve --api`` (a real process) on a demo's data,
with credentials. Every page loads with no console error and shows what the
view holds; the grid's counts are the view's; a decision published during
the test reaches the live page within a deadline; the keyboard moves
through the grid; a token's role decides what the page offers to change. A
screenshot of each page is saved under the test run's tmp dir.

Chromium missing is a failure, not a skip: `.ci/run` installs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
from sqlalchemy import create_engine, select

from berth.api.credentials import digest
from projections.view.tables import inventories, providers
from tests.http_calls import call
from tests.kafka_broker import free_port
from tests.polling import wait_for
from tests.processes import berth_running

CHROMIUM = "/usr/bin/chromium"
PARTITIONS = 4
PROVIDERS = 60
TOKENS = {"admin": "dash-admin", "operator": "dash-operator", "project:demo": "dash-project"}
DEADLINE_MS = 10_000
"""How long the page may take to show what the test waits for."""


@dataclass
class Served:
    url: str
    data: Path
    shots: Path
    request_id: str = "dash-vm-1"
    console: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("dashboard")
    data = root / "data"
    demo = [sys.executable, "-m", "berth.cli", "demo", "--data-dir", str(data)]
    demo += ["--providers", str(PROVIDERS), "--requests", "300", "--partitions", str(PARTITIONS)]
    subprocess.run([*demo, "--json"], check=True, stdout=subprocess.DEVNULL, timeout=240)
    credentials = root / "credentials"
    credentials.write_text("".join(f"{r} sha256:{digest(t)}\n" for r, t in TOKENS.items()))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["serve", "--data-dir", str(data), "--partitions", str(PARTITIONS)]
    argv += ["--api", f"127.0.0.1:{port}", "--api-credentials", str(credentials)]

    def up() -> bool:
        try:
            return call(url, "/v1/whoami", token=TOKENS["admin"])[0] == 200
        except OSError:
            return False

    with berth_running(*argv, ready=up, what="the API to answer"):
        served = Served(url, data, root / "screenshots")
        served.shots.mkdir()
        request = {
            "request_id": served.request_id,
            "ts_ms": int(time.time() * 1000),
            "project_id": "demo",
            "resources": {"VCPU": 1, "MEMORY_MB": 512},
        }
        status, reply = call(url, "/v1/requests?wait=30", request, token=TOKENS["project:demo"])
        assert status == 200 and reply["answers"][served.request_id]["placed"], reply
        yield served
    print(f"dashboard screenshots: {served.shots}")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), f"no {CHROMIUM}: apt-get install -y chromium"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()


def open_page(browser: Browser, served: Served, role: str | None = "admin") -> Page:
    """A new tab, its token set (``role``'s) before the page's own code runs,
    its console errors and uncaught exceptions collected."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(DEADLINE_MS)
    if role is not None:
        page.add_init_script(f"sessionStorage.setItem('berth-token', {json.dumps(TOKENS[role])})")
    served.console.clear()

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            served.console.append(f"{message.type}: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: served.console.append(f"exception: {error}"))
    return page


def view_rows(served: Served) -> tuple[list[Any], list[Any]]:
    engine = create_engine(f"sqlite:///{served.data / 'view.db'}")
    try:
        with engine.connect() as conn:
            found = conn.execute(select(providers)).all()
            usage = conn.execute(select(inventories)).all()
    finally:
        engine.dispose()
    return list(found), list(usage)


def bucket(used: int, capacity: int) -> str:
    share = used / capacity
    return (
        "u0"
        if share < 0.25
        else "u1"
        if share < 0.5
        else "u2"
        if share < 0.75
        else ("u3" if share < 0.9 else "u4")
    )


def shoot(page: Page, served: Served, name: str) -> None:
    page.screenshot(path=str(served.shots / f"{name}.png"), full_page=True)


def test_the_grid_counts_what_the_view_holds(browser: Browser, served: Served) -> None:
    page = open_page(browser, served)
    page.goto(served.url + "/")
    page.select_option("#class", "VCPU")
    summary = page.locator(f"#summary[data-total='{PROVIDERS}']")
    summary.wait_for()
    rows, _ = view_rows(served)
    assert len(rows) == PROVIDERS
    page.wait_for_function(
        f"document.querySelectorAll('#grid a').length === {PROVIDERS}", timeout=DEADLINE_MS
    )

    def counted() -> bool:
        """The legend's counts, and the cells drawn, are the view's (usage
        moves while serve runs: compared until the page's refresh catches up)."""
        _, usage = view_rows(served)
        expected = Counter(
            bucket(r.held + r.consumed, r.capacity) if r.capacity else "none"
            for r in usage
            if r.resource_class == "VCPU"
        )
        expected["none"] += PROVIDERS - sum(expected.values())
        shown = {
            name: int(page.locator(f"[data-bucket-count='{name}']").inner_text())
            for name in ("u0", "u1", "u2", "u3", "u4", "none")
        }
        cells = page.locator("#grid a").evaluate_all("cells => cells.map(c => c.dataset.bucket)")
        return +Counter(shown) == +expected == Counter(cells)

    wait_for(counted, "the grid's counts to be the view's", timeout_s=DEADLINE_MS / 1000)
    zones = Counter(r.availability_zone or "" for r in rows)
    zone, members = max(zones.items(), key=lambda kv: kv[1])
    page.select_option("#filter-zone", label=zone or "(none)")
    page.locator(f"#summary[data-shown='{members}']").wait_for()
    assert page.locator("#grid a").count() == members
    disabled = sum(1 for r in rows if r.state != "enabled")
    page.select_option("#filter-zone", value="")
    page.select_option("#filter-state", label="enabled")
    page.locator(f"#summary[data-shown='{PROVIDERS - disabled}']").wait_for()
    shoot(page, served, "cluster")
    assert served.console == []
    page.context.close()


def test_every_page_loads_without_a_console_error(browser: Browser, served: Served) -> None:
    rows, _ = view_rows(served)
    provider_id = sorted(r.provider_id for r in rows)[0]
    page = open_page(browser, served)
    pages = {
        "provider": (f"#/provider/{provider_id}", "text=Inventory and usage"),
        "queue": ("#/queue", "#headroom table"),
        "live": ("#/live", "#stream-state[data-open='2']"),
        "writers": ("#/lag", "#lag table"),
        "request": (f"#/request/{served.request_id}", "#explanation table"),
    }
    page.goto(served.url + "/")
    page.locator("#grid a").first.wait_for()
    for name, (where, shows) in pages.items():
        page.goto(f"{served.url}/{where}")
        page.locator(shows).first.wait_for()
        shoot(page, served, name)
        assert served.console == [], name
    assert "placed" in page.locator("#answer").inner_text()
    assert page.locator("#reservations table").count() == 1
    # the answer's recorded ranking, and the request placed again as decided
    assert page.locator("#decided table tbody tr").count() >= 1
    page.locator("button", has_text="Place it again as decided").click()
    page.locator("#replayed", has_text="the same pick").wait_for(timeout=60_000)
    assert served.console == []
    page.context.close()


def test_a_decision_appears_in_the_live_stream(browser: Browser, served: Served) -> None:
    rows, _ = view_rows(served)
    provider_id = sorted(r.provider_id for r in rows)[0]
    page = open_page(browser, served)
    page.goto(served.url + "/#/live")
    page.locator("#stream-state[data-open='2']").wait_for()
    event_id = f"too-big-{time.time_ns()}"
    claim = {
        "type": "claim",
        "event_id": event_id,
        "ts_ms": int(time.time() * 1000),
        "partition_key": provider_id,
        "reservation_id": event_id,
        "consumer_id": event_id,
        "project_id": "demo",
        "items": [{"provider_id": provider_id, "resources": {"VCPU": 1_000_000}}],
    }
    published = time.monotonic()
    assert call(served.url, "/v1/events", claim, token=TOKENS["admin"])[0] == 202
    item = page.locator(f"#events li[data-event-id='{event_id}']")
    item.wait_for(timeout=DEADLINE_MS)
    print(f"decision on the live page {time.monotonic() - published:.2f} s after publishing")
    assert "rejected" in item.inner_text()
    reasons = page.locator("#counts table").nth(1).inner_text()
    assert "INSUFFICIENT" in reasons or "CAPACITY" in reasons, reasons
    assert served.console == []
    page.context.close()


def test_the_keyboard_moves_through_the_grid(browser: Browser, served: Served) -> None:
    page = open_page(browser, served)
    page.goto(served.url + "/")
    first = page.locator("#grid a[tabindex='0']")
    first.wait_for()
    # from the page's start, Tab reaches the grid through the controls, one stop for all cells
    page.keyboard.press("Tab")
    for _ in range(30):
        if page.evaluate("document.activeElement.closest('#grid') !== null"):
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement === document.querySelector('#grid a')")
    page.keyboard.press("ArrowRight")
    second = page.evaluate("document.activeElement.getAttribute('href')")
    assert second == page.locator("#grid a").nth(1).get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/{second}")
    page.locator("text=Inventory and usage").wait_for()
    assert served.console == []
    page.context.close()


def test_the_token_decides_what_the_page_offers(browser: Browser, served: Served) -> None:
    rows, _ = view_rows(served)
    provider_id = sorted(r.provider_id for r in rows if r.state == "enabled")[-1]
    page = open_page(browser, served, role=None)
    page.goto(served.url + "/")
    page.locator("#error", has_text="needs a token").wait_for()
    assert all("401" in line for line in served.console), served.console
    page.fill("#token", TOKENS["project:demo"])
    page.press("#token", "Enter")
    page.locator("#role", has_text="as project:demo").wait_for()
    page.goto(f"{served.url}/#/provider/{provider_id}")
    page.locator("#unseen").wait_for()  # a project's token: no provider's page, nothing to change
    assert page.locator("button", has_text="Disable").count() == 0
    page.goto(f"{served.url}/#/lag")
    page.locator("#lag", has_text="an operator's to read").wait_for()
    served.console.clear()
    page.fill("#token", TOKENS["operator"])
    page.press("#token", "Enter")
    page.locator("#role", has_text="as operator").wait_for()
    page.goto(f"{served.url}/#/provider/{provider_id}")
    page.locator("button", has_text="Disable").click()
    page.locator("button:has-text('Disable')[disabled]").wait_for()

    def disabled() -> bool:
        found, _ = view_rows(served)
        return any(r.provider_id == provider_id and r.state == "disabled" for r in found)

    wait_for(disabled, "the view to hold the provider disabled", timeout_s=DEADLINE_MS / 1000)
    page.locator("button", has_text="Enable").click()
    page.locator("button:has-text('Enable')[disabled]").wait_for()
    assert served.console == []
    page.context.close()
