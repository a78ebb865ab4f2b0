"""The dashboard's first paint is light: `/` carries the first screen (a page of the newest jobs, trimmed to the
columns the table draws, counts per state, nodes, queues); older jobs come by server-side paging."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server_harness import CLUSTER_YAML
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.spec import load_yaml_text
from trainmaster.core.states import JobState
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.policies.registry import make_policy
from trainmaster.server.app import create_app
from trainmaster.server.daemon import Daemon
from trainmaster.server.dashboard import FIRST_ROWS, TABLE_COLUMNS
from trainmaster.server.store import Batch, Store

JOBS = 120


def fill(store: Store, jobs: int) -> None:
    batch = Batch()
    for i in range(jobs):
        doc = {"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": f"job-{i}"},
               "spec": {"command": ["sleep", "1"], "roles": {"worker": {"min": 1, "resources": {"cpu": 1}}}}}
        row = store.add_job(doc, f"job-{i}", "default", 0, 1000.0 + i)
        batch.jobs[row["id"]] = {"state": JobState.SUCCEEDED.value, "first_start": 1001.0 + i,
                                 "finish_time": 1010.0 + i, "step": i, "message": "all workers finished"}
    store.write(batch)


@pytest.fixture()
def http(tmp_path: Path) -> Iterator[TestClient]:
    store = Store(tmp_path / "tm.db")
    fill(store, JOBS)
    engine = LocalEngine(cluster_from_mapping(load_yaml_text(CLUSTER_YAML)), run_dir=tmp_path / "runs", grace=5)
    daemon = Daemon(store, engine, make_policy("fifo"), poll=0.05)
    daemon.start()
    try:
        yield TestClient(create_app(daemon))
    finally:
        daemon.stop()
        store.close()


def test_the_page_carries_only_the_first_screen(http: TestClient) -> None:
    page = http.get("/").text
    found = re.search(r'<script id="tm-first" type="application/json">(.*?)</script>', page)
    assert found, "the page does not embed its first screen"
    first = json.loads(found.group(1))
    jobs = first["overview"]["jobs"]
    assert [j["id"] for j in jobs] == [f"job-{i}" for i in range(JOBS - 1, JOBS - 1 - FIRST_ROWS, -1)]  # newest
    assert set().union(*(j.keys() for j in jobs)) <= set(TABLE_COLUMNS)  # no column the table does not draw
    assert first["overview"]["total"] == JOBS and first["overview"]["states"] == {"succeeded": JOBS}
    assert [n["name"] for n in first["nodes"]] == [n["name"] for n in http.get("/v1/nodes").json()]
    assert first["queues"] == http.get("/v1/queues").json()
    assert page.count("tm-first") == 2  # the block, and the script that reads it: nothing else embedded


def test_older_jobs_come_by_server_side_paging(http: TestClient) -> None:
    more = http.get("/v1/overview", params={"limit": FIRST_ROWS * 2}).json()
    assert len(more["jobs"]) == FIRST_ROWS * 2 and more["total"] == JOBS
    assert more["jobs"][FIRST_ROWS]["id"] == f"job-{JOBS - 1 - FIRST_ROWS}"
    assert "priority" in more["jobs"][0]  # the API keeps every stored column


def test_gpu_seconds_are_exposed_from_the_usage_listener(http: TestClient) -> None:
    assert re.search(r"^trainmaster_gpu_allocated_seconds_total 0\.0$", http.get("/metrics").text, re.M)
