"""The dashboard in a real headless chromium: a live daemon running real jobs, and a static simulate report.

The order is explicit: a blocker holds the whole cluster until the test creates
a marker file, and the watched trainer finishes only after a second marker.
Screenshots land in tests/artifacts/ (or TM_ARTIFACTS).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from browser import browser_page, screenshot, why_not
from server_harness import ServerProcess, cli, job_yaml

pytestmark = [pytest.mark.slow, pytest.mark.skipif(why_not() is not None, reason=why_not() or "")]

TOKEN = "dash-t0ken"
STEPS = 15
TRAINER = """
import os, sys, time
import trainmaster.train as tm

session = tm.init()
session.restore()
for step in session.steps(int(sys.argv[2]), state=lambda: {"w": 1}):
    time.sleep(0.2)
    session.report(step + 1, loss=1.0 / (step + 1))
    print(f"trainer step {step + 1} loss {1.0 / (step + 1):.4f}", flush=True)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("trainer done", flush=True)
"""
WAIT = 60_000  # ms: a hang guard only; every step below waits for a state the test itself brings about


def trainer_yaml(script: Path, marker: Path) -> str:
    return ("apiVersion: trainmaster/v1\nkind: TrainingJob\nmetadata: {name: trainer}\nspec:\n"
            f"  command: [python, {script}, {marker}, '{STEPS}']\n"
            "  roles: {worker: {min: 1, resources: {cpu: 1}}}\n  checkpoint: {every: 30s}\n")


def state_of(page: Any, job: str, *states: str) -> None:
    either = ", ".join(f'#jobs tr[data-job="{job}"] .state.{state}' for state in states)
    page.wait_for_selector(either, timeout=WAIT)


def test_live_dashboard_follows_a_job_to_success_and_shows_its_curves_and_logs(tmp_path: Path) -> None:
    script, release, finish = tmp_path / "train.py", tmp_path / "release", tmp_path / "finish"
    script.write_text(TRAINER)
    server = ServerProcess(tmp_path / "data", token=TOKEN).start()
    try:
        http = httpx.Client(base_url=server.url, headers=server.headers, timeout=30)
        assert httpx.get(f"{server.url}/").status_code == 401  # the page is behind the token too
        # The blocker holds both 2-CPU nodes until `release` exists, so under fifo the trainer waits.
        blocker = job_yaml("blocker", f"while [ ! -f {release} ]; do sleep 0.05; done", cpu=2, workers=2)
        assert http.post("/v1/jobs", content=blocker).status_code == 201
        assert http.post("/v1/jobs", content=trainer_yaml(script, finish)).status_code == 201

        with browser_page() as page:
            page.goto(f"{server.url}/?token={TOKEN}")
            page.evaluate("window.__loaded_once = true")  # gone if the page ever reloads
            state_of(page, "blocker", "starting", "running")  # a task that never reports stays `starting`
            state_of(page, "trainer", "pending")
            page.wait_for_selector('#pending-table a[href="#/job/trainer"]', timeout=WAIT)
            assert "blocker" in page.inner_text("#nodes-table")  # what runs where
            screenshot(page, "live-1-trainer-pending", full_page=True)

            release.touch()
            state_of(page, "trainer", "running")
            state_of(page, "blocker", "succeeded")
            screenshot(page, "live-2-trainer-running", full_page=True)

            deadline = time.monotonic() + 60  # the trainer reports its last step before it waits on `finish`
            while http.get("/v1/jobs/trainer").json()["step"] < STEPS:
                assert time.monotonic() < deadline, "the trainer never reported its last step"
                time.sleep(0.1)
            finish.touch()
            state_of(page, "trainer", "succeeded")
            assert page.evaluate("window.__loaded_once === true"), "the page reloaded"
            screenshot(page, "live-3-trainer-succeeded", full_page=True)

            page.click('#jobs a[href="#/job/trainer"]')
            page.wait_for_selector("#job-head .state.succeeded", timeout=WAIT)
            page.wait_for_selector("#logs-mode:text('the job ended')", timeout=WAIT)  # the follow stream closed
            logs = page.inner_text("#job-logs")
            assert f"trainer step {STEPS} loss" in logs and "[worker-0] trainer done" in logs
            reported = [r for r in http.get("/v1/jobs/trainer/metrics").json()["reports"] if r["loss"] is not None]
            assert len(reported) >= 2
            page.wait_for_selector(f'svg.loss path[data-points="{len(reported)}"]', timeout=WAIT)  # one per report
            assert page.locator("svg.alloc path").count() >= 1
            assert page.evaluate("window.__loaded_once === true")
            screenshot(page, "live-4-job-page", full_page=True)
            assert page.errors == []
    finally:
        release.touch()
        finish.touch()
        server.stop()


def test_static_simulate_report_renders_without_a_server(tmp_path: Path) -> None:
    out = tmp_path / "report"
    done = cli("simulate", "--workload", "synthetic:30", "--cluster", "4x4", "--policy", "fifo,tiresias",
               "--out", str(out), "--no-plots")
    assert done.returncode == 0, done.stderr
    html = (out / "index.html").read_text()
    assert "http://" not in html and "https://" not in html  # nothing is fetched: one file to share

    with browser_page() as page:
        page.goto((out / "index.html").as_uri())
        page.wait_for_selector("#compare", timeout=WAIT)
        assert [h.strip() for h in page.locator("#compare th").all_inner_texts()] == ["metric", "fifo", "tiresias"]
        assert page.locator("svg.cdf path").count() == 2  # one JCT CDF per policy
        assert page.locator("svg.util").count() == 2
        assert page.locator("#jobs tbody tr").count() == 30
        assert page.locator("svg.gantt rect.run").count() >= 30  # every job ran at least once
        screenshot(page, "static-1-overview", full_page=True)

        page.click('.tabs a:text-is("tiresias")')
        page.wait_for_selector(".tabs a.on:text-is('tiresias')", timeout=WAIT)
        first = page.locator("#jobs tbody tr a").first
        job = first.inner_text()
        first.click()
        page.wait_for_selector("#job", timeout=WAIT)
        assert job in page.inner_text("#job h2") and "tiresias" in page.inner_text("#job h2")
        assert page.locator("svg.alloc path").count() == 1
        screenshot(page, "static-2-job-page", full_page=True)
        assert page.errors == []
