"""The web dashboard on a large cluster: how soon the grid is painted, and
what its refresh every 2 s costs the server.

For each size, a demo's data (``berth demo --providers N``), then ``berth
serve --api`` on it as a process of its own, and Debian's Chromium driven by
Playwright:

- first paint: a fresh tab opens ``/`` until the grid's first cells are in
  the page and a frame has been drawn after them (its first screenful), as
  the page's own clock counts from the navigation's start; then until every
  provider's cell is in (the page adds them a few blocks a task after the
  first screenful); and the browser's first contentful paint, which the
  page's header reaches sooner; the median of ``--loads``. On a machine
  shared with other work these swing widely, so also: the wall time of the
  page's main-thread tasks until that first paint (Chromium's TaskDuration:
  scripts, style, layout, paint, stretched too by a loaded machine), the
  time the grid's data took to come, the CPU time the browser's processes
  and the server spent until that first paint (what a quiet machine would
  need, about), and the load average;
- the server's CPU: the serve process's user and system time over
  ``--window-s`` seconds, first with no page open (the writers and the
  scheduler idle), then with one tab on the grid, refreshing every 2 s.

    python -m bench.dashboard [--providers 1000,10000] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common import note

CHROMIUM = "/usr/bin/chromium"
PARTITIONS = 8
TICKS_S = os.sysconf("SC_CLK_TCK")
NEXT_FRAME = "new Promise(r => requestAnimationFrame(() => r(performance.now())))"
"""The page's clock (from the navigation's start) at its next frame."""
CLUSTER_SERVED = (
    "performance.getEntriesByType('resource').filter(e => e.name.includes('/v1/cluster'))"
    ".map(e => e.responseEnd - e.requestStart)[0]"
)
"""How long the grid's data took, from the request sent to its last byte."""


def _cpu_s(pid: int) -> float:
    """User and system time of ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_S


def _descendants_cpu_s(root: int) -> float:
    """User and system time so far of every living process under ``root``
    (the browser's, started by Playwright's driver under this process)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
    total = 0.0
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor is not None and ancestor != root and ancestor > 1:
            ancestor = parents.get(ancestor)
        if ancestor == root:
            try:
                total += _cpu_s(pid)
            except OSError:
                continue
    return total


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _demo(data: Path, providers: int) -> None:
    if (data / "view.db").exists():
        note(f"reusing {data}")
        return
    note(f"berth demo --providers {providers} ...")
    argv = [sys.executable, "-m", "berth.cli", "demo", "--data-dir", str(data), "--json"]
    argv += ["--providers", str(providers), "--requests", str(min(3000, providers))]
    argv += ["--partitions", str(PARTITIONS)]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def _ready(url: str, providers: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/cluster", timeout=30) as response:
                if json.loads(response.read())["providers"] == providers:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("serve did not answer with every provider")
        time.sleep(0.2)


def measure(data: Path, providers: int, loads: int, window_s: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "berth.cli", "serve", "--data-dir", str(data)]
    argv += ["--partitions", str(PARTITIONS), "--api", f"127.0.0.1:{port}"]
    serve = subprocess.Popen(argv, stderr=subprocess.DEVNULL)
    try:
        _ready(url, providers)
        time.sleep(2)  # whatever serve does after starting, done
        note("serve idle ...")
        before = _cpu_s(serve.pid)
        time.sleep(window_s)
        idle = (_cpu_s(serve.pid) - before) / window_s
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            painted, complete, contentful, busy, served = [], [], [], [], []
            browser_cpu: list[float] = []
            server_cpu: list[float] = []
            for load in range(loads):
                note(f"first paint, load {load + 1} of {loads} ...")
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                devtools = page.context.new_cdp_session(page)
                devtools.send("Performance.enable")
                browser_before = _descendants_cpu_s(os.getpid())
                server_before = _cpu_s(serve.pid)
                page.goto(url + "/")
                # the first cells are in, and the next frame drew them: the
                # grid's first screenful painted
                page.wait_for_function(
                    "document.querySelector('#grid a') !== null", polling="raf", timeout=60_000
                )
                painted.append(page.evaluate(NEXT_FRAME))
                browser_cpu.append(_descendants_cpu_s(os.getpid()) - browser_before)
                server_cpu.append(_cpu_s(serve.pid) - server_before)
                metrics = devtools.send("Performance.getMetrics")["metrics"]
                busy.append(next(m["value"] for m in metrics if m["name"] == "TaskDuration"))
                served.append(page.evaluate(CLUSTER_SERVED))
                page.wait_for_function(
                    f"document.querySelectorAll('#grid a').length === {providers}",
                    polling="raf",
                    timeout=60_000,
                )
                complete.append(page.evaluate(NEXT_FRAME))
                contentful.append(
                    page.evaluate(
                        "performance.getEntriesByName('first-contentful-paint')[0].startTime"
                    )
                )
                page.close()
                time.sleep(1)
            note(f"one tab refreshing the grid for {window_s:g} s ...")
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url + "/")
            page.locator("#grid a").first.wait_for(timeout=60_000)
            time.sleep(3)  # past the first load and its first refresh
            before = _cpu_s(serve.pid)
            started = page.evaluate("Number(document.querySelector('main').dataset.refreshed)")
            time.sleep(window_s)
            refreshing = (_cpu_s(serve.pid) - before) / window_s
            last = page.evaluate("Number(document.querySelector('main').dataset.refreshed)")
            assert last > started, "the grid did not refresh"
            browser.close()
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    n = providers
    return {
        f"load_average_1m_{n}": round(os.getloadavg()[0], 2),
        f"first_paint_ms_{n}": round(statistics.median(painted)),
        f"first_paint_ms_runs_{n}": [round(p) for p in painted],
        f"first_contentful_paint_ms_{n}": round(statistics.median(contentful)),
        f"first_paint_main_thread_busy_ms_{n}": round(1000 * statistics.median(busy)),
        f"cluster_reply_ms_{n}": round(statistics.median(served)),
        f"first_paint_browser_cpu_ms_{n}": round(1000 * statistics.median(browser_cpu)),
        f"first_paint_server_cpu_ms_{n}": round(1000 * statistics.median(server_cpu)),
        f"every_cell_ms_{n}": round(statistics.median(complete)),
        f"every_cell_ms_runs_{n}": [round(p) for p in complete],
        f"server_cpu_percent_{n}": round(100 * refreshing, 2),
        f"server_idle_cpu_percent_{n}": round(100 * idle, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="1000,10000")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--window-s", type=float, default=20.0)
    parser.add_argument("--data-dir", type=Path, default=None, help="keep each demo's data here")
    args = parser.parse_args()
    figures: dict[str, Any] = {"window_s": args.window_s}
    with tempfile.TemporaryDirectory(prefix="berth-bench-dashboard-") as tmp:
        root = args.data_dir or Path(tmp)
        for providers in (int(n) for n in args.providers.split(",") if n):
            data = root / f"demo-{providers}"
            _demo(data, providers)
            figures |= measure(data, providers, args.loads, args.window_s)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
