"""Dashboard page load with 1,000 jobs in history, in a real headless chromium, as a ratio to an empty history.

Starts a real `trainmaster server` on a data directory whose store already
holds N finished jobs (each with its accepted/start/succeeded events), opens
`/` in Debian's chromium through Playwright (no download: the system browser)
and reads the page's own `tm-jobs-rendered` performance mark: milliseconds
from navigation start until the job table is in the DOM with every row of its
first page (the rows the page itself carries: server/dashboard.py FIRST_ROWS). The
same with an empty store gives the baseline; the ratio is what to compare
across machines.

    .venv/bin/python -m bench.dashboard_load [--jobs 1000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.submit_load import start_server
from trainmaster.core.states import JobState
from trainmaster.server.dashboard import FIRST_ROWS
from trainmaster.server.store import Batch, Store

GOAL_MS = 300.0
PAGE_ROWS = FIRST_ROWS  # the page comes with the newest jobs' rows; more on request (dashboard.js PAGE)


def fill(data: Path, jobs: int) -> None:
    """Write `jobs` finished jobs into a fresh store, as a daemon would have left them."""
    data.mkdir(parents=True, exist_ok=True)
    store = Store(data / "trainmaster.db")
    batch = Batch()
    t = 1.7e9
    for i in range(jobs):
        doc = {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": f"job-{i}"},
               "spec": {"command": ["sleep", "1"], "roles": {"worker": {"min": 1, "resources": {"cpu": 1}}}}}
        row = store.add_job(doc, f"job-{i}", "default", 0, t + i)
        start, end = t + i + 2, t + i + 30
        batch.jobs[row["id"]] = {"state": JobState.SUCCEEDED.value, "first_start": start, "finish_time": end,
                                 "step": 100, "loss": 0.1, "allocation": "", "message": "all workers finished"}
        batch.events += [(start, row["id"], "start", "starting", "worker=1@n-0", 0, 1, ""),
                         (start + 1, row["id"], "running", "running", "worker=1@n-0", 0, 1, ""),
                         (end, row["id"], "succeeded", "succeeded", "", 0, 0, "")]
    store.write(batch)
    store.close()


def load_ms(browser: Any, url: str, rows: int) -> float:
    """Open the page once; milliseconds from navigation start to the job table laid out (the page's own mark)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url)
        page.wait_for_selector("#jobs", state="attached", timeout=60_000)  # marked in the same task
        shown = page.locator("#jobs tbody tr").count()
        assert shown == rows, f"rendered {shown} rows, expected {rows}"
        return float(page.evaluate("performance.getEntriesByName('tm-jobs-rendered')[0].startTime"))
    finally:
        page.close()


def measure(jobs: int, repeat: int, chromium: str) -> tuple[list[float], list[float]]:
    """Load times of an empty history and of `jobs` finished jobs, interleaved so load drift hits both alike."""
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        servers = []
        try:
            for n in (0, jobs):
                data = Path(tmp) / f"data-{n}"
                fill(data, n)
                servers.append(start_server(data, "fifo"))
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            (_, empty_url), (_, full_url) = servers
            empty, full = [], []
            for i in range(repeat + 1):  # the first round warms the servers and the browser: not counted
                e, f = load_ms(browser, f"{empty_url}/", 0), load_ms(browser, f"{full_url}/", min(jobs, PAGE_ROWS))
                if i:
                    empty.append(e)
                    full.append(f)
            browser.close()
            return empty, full
        finally:
            for proc, _ in servers:
                proc.terminate()
                proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--chromium", default="/usr/bin/chromium", help="the system browser (apt: chromium)")
    args = ap.parse_args(argv)
    if not Path(args.chromium).is_file():
        print(f"no browser at {args.chromium}: apt-get install chromium, or pass --chromium", file=sys.stderr)
        return 2
    empty, full = measure(args.jobs, args.repeat, args.chromium)
    e, f = statistics.median(empty), statistics.median(full)
    ratios = [b / a for a, b in zip(empty, full, strict=True)]
    print(f"empty history: median {e:.0f} ms (min {min(empty):.0f}, max {max(empty):.0f}) over {args.repeat} loads")
    print(f"{args.jobs:,} jobs:    median {f:.0f} ms (min {min(full):.0f}, max {max(full):.0f}) "
          f"over {args.repeat} loads")
    print(f"ratio of medians {f / e:.2f}; median of per-round ratios {statistics.median(ratios):.2f}; "
          f"goal < {GOAL_MS:.0f} ms: {'met' if f < GOAL_MS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
