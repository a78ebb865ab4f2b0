"""The dashboard's routes and `/metrics` on a live daemon running real `sh -c` jobs on two virtual nodes.

`/metrics` is parsed with prometheus_client's own parser and checked against
the API's `/v1/jobs` and `/v1/nodes`. The order is explicit: a blocker holds
the whole cluster until the test creates a marker file.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from server_harness import CLUSTER_YAML, job_yaml
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.spec import load_yaml_text
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.policies.registry import make_policy
from trainmaster.server.app import create_app
from trainmaster.server.daemon import Daemon
from trainmaster.server.prom import WHOLE, DaemonCollector, DecisionTimer
from trainmaster.server.report import render_page
from trainmaster.server.store import Store

TOKEN = "metrics-t0ken"
GRAFANA = Path(__file__).resolve().parents[1] / "grafana" / "trainmaster.json"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Env:
    def __init__(self, tmp: Path) -> None:
        self.store = Store(tmp / "tm.db")
        engine = LocalEngine(cluster_from_mapping(load_yaml_text(CLUSTER_YAML)), run_dir=tmp / "runs", grace=5)
        self.daemon = Daemon(self.store, engine, make_policy("fifo"), poll=0.05)
        self.daemon.start()
        self.http = TestClient(create_app(self.daemon, token=TOKEN), headers=AUTH)

    def wait(self, what: str, check: Callable[[dict[str, dict[str, Any]]], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout  # a hang guard: the states are brought about by the test
        while not check({j["id"]: j for j in self.http.get("/v1/jobs").json()}):
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def close(self) -> None:
        self.daemon.stop()
        self.store.close()


@pytest.fixture()
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.close()


def scrape(http: TestClient) -> dict[str, list[Any]]:
    r = http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(r.text):
        out.setdefault(family.name, []).extend(family.samples)
    return out


def value(samples: list[Any], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return float(found[0])


def check_against_api(env: Env) -> dict[str, list[Any]]:
    m = scrape(env.http)
    jobs = env.http.get("/v1/jobs").json()
    by_state = Counter((j["state"], j["queue"]) for j in jobs)
    assert {(s.labels["state"], s.labels["queue"]): s.value for s in m["trainmaster_jobs"]} == by_state
    nodes = env.http.get("/v1/nodes").json()
    for kind, name in (("cpu", "trainmaster_cpu_cores"), ("gpu", "trainmaster_gpus")):
        capacity = sum(n["capacity"][kind] for n in nodes)
        held = sum(n["capacity"][kind] - n["free"][kind] for n in nodes)
        labels = {"node_type": "cpu", "capacity_type": "on-demand"}
        assert value(m[f"{name}_capacity"], f"{name}_capacity", **labels) == capacity
        assert value(m[f"{name}_allocated"], f"{name}_allocated", **labels) == held
    assert value(m["trainmaster_nodes"], "trainmaster_nodes", node_type="cpu") == len(nodes)
    started = [j for j in jobs if j["first_start"] is not None]
    hist = m["trainmaster_job_pending_seconds"]
    assert value(hist, "trainmaster_job_pending_seconds_count") == len(started)
    assert value(hist, "trainmaster_job_pending_seconds_sum") == pytest.approx(
        sum(j["first_start"] - j["submit_time"] for j in started))
    restarts = sum(j["restarts"] for j in jobs)
    assert sum(s.value for s in m["trainmaster_job_restarts"] if s.name.endswith("_total")) == restarts
    return m


def test_metrics_match_the_api_while_jobs_wait_run_and_finish(env: Env, tmp_path: Path) -> None:
    release = tmp_path / "release"
    env.http.post("/v1/jobs", content=job_yaml("quick", "echo quick"))
    env.wait("quick to finish", lambda j: j["quick"]["state"] == "succeeded")
    hold = job_yaml("blocker", f"while [ ! -f {release} ]; do sleep 0.05; done", cpu=2, workers=2)
    assert env.http.post("/v1/jobs", content=hold).status_code == 201
    assert env.http.post("/v1/jobs", content=job_yaml("behind", "echo behind")).status_code == 201
    env.wait("the blocker to hold the cluster", lambda j: j["blocker"]["state"] in ("starting", "running")
             and j["behind"]["state"] == "pending")

    m = check_against_api(env)
    assert value(m["trainmaster_cpu_cores_allocated"], "trainmaster_cpu_cores_allocated") == 4
    decisions = value(m["trainmaster_decisions"], "trainmaster_decisions_total")
    assert decisions >= 2
    latency = m["trainmaster_decision_duration_seconds"]
    assert value(latency, "trainmaster_decision_duration_seconds_count", phase=WHOLE) <= decisions
    assert value(latency, "trainmaster_decision_duration_seconds_bucket", phase=WHOLE, le="+Inf") >= 1
    assert value(m["trainmaster_cost_dollars"], "trainmaster_cost_dollars_total") == 0

    overview = env.http.get("/v1/overview", params={"limit": 2}).json()
    assert [j["id"] for j in overview["jobs"]] == ["behind", "blocker"]  # newest first, `limit` of them
    assert overview["total"] == 3 and sum(overview["states"].values()) == 3
    assert overview["states"]["succeeded"] == overview["states"]["pending"] == 1
    pending = env.http.get("/v1/pending").json()
    assert [p["job"] for p in pending["jobs"]] == ["behind"]
    assert pending["jobs"][0]["category"] in ("gang", "priority", "waiting") and pending["jobs"][0]["reason"]
    timeline = env.http.get("/v1/timeline", params={"limit": 2}).json()
    assert [j["id"] for j in timeline["jobs"]] == ["blocker", "behind"]
    assert "starting" in [state for _, state in timeline["jobs"][0]["changes"]]  # holds the cluster from here

    release.touch()
    env.wait("every job to finish", lambda j: all(r["state"] == "succeeded" for r in j.values()))
    m = check_against_api(env)
    assert value(m["trainmaster_jobs"], "trainmaster_jobs", state="succeeded", queue="default") == 3
    assert value(m["trainmaster_cpu_cores_allocated"], "trainmaster_cpu_cores_allocated") == 0
    assert value(m["trainmaster_decisions"], "trainmaster_decisions_total") > decisions

    # Every series the sample Grafana dashboard queries is one this daemon exposes.
    exposed = {sample.name for samples in m.values() for sample in samples}
    dashboard = json.loads(GRAFANA.read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in re.findall(r"trainmaster_[a-z_]+", target["expr"])}
    assert len(queried) >= 12 and queried <= exposed, sorted(queried - exposed)


def test_the_page_needs_the_token_once_in_its_url_and_the_api_always_in_the_header(env: Env) -> None:
    anonymous = TestClient(env.http.app)
    assert anonymous.get("/").status_code == 401
    assert anonymous.get("/", params={"token": "wrong"}).status_code == 401
    page = anonymous.get("/", params={"token": TOKEN})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "sessionStorage" in page.text  # where the page keeps the token for its fetches
    assert "http://" not in page.text and "https://" not in page.text  # no CDN
    assert page.headers["referrer-policy"] == "no-referrer"
    assert anonymous.get("/v1/jobs", params={"token": TOKEN}).status_code == 401  # the query token opens `/` only
    assert anonymous.get("/metrics").status_code == 401
    assert env.http.get("/").status_code == 200


@pytest.mark.parametrize(("path", "bad"), [("/v1/timeline", "0"), ("/v1/timeline", "5000"), ("/v1/timeline", "many"),
                                         ("/v1/overview", "-1"), ("/v1/overview", "1e23")])
def test_a_bad_limit_is_a_400_naming_the_field(env: Env, path: str, bad: str) -> None:
    r = env.http.get(path, params={"limit": bad})
    assert r.status_code == 400 and "limit" in r.json()["error"], r.text


def test_decision_timer_records_each_phase_once_plans_carry_timings() -> None:
    class Phased:
        name, interval = "phased", None

        def decide(self, snapshot: object) -> Any:
            return SimpleNamespace(allocations={}, timings={"admit": 0.002, "place": 0.3})

    timer = DecisionTimer(Phased())  # type: ignore[arg-type]
    for _ in range(3):
        timer.decide(None)  # type: ignore[arg-type]
    samples = [s for f in timer.latency.collect() for s in f.samples]
    assert value(samples, "trainmaster_decision_duration_seconds_count", phase="admit") == 3
    assert value(samples, "trainmaster_decision_duration_seconds_bucket", phase="place", le="0.25") == 0
    assert value(samples, "trainmaster_decision_duration_seconds_sum", phase="place") == pytest.approx(0.9)
    assert value(samples, "trainmaster_decision_duration_seconds_count", phase=WHOLE) == 3
    assert timer.name == "phased"
    timer.inner.interval = 7.0  # a policy that changes its interval as it decides (tiresias) is read live
    assert timer.interval == 7.0


def test_embedded_report_data_cannot_close_its_script_element() -> None:
    html = render_page({"workload": "</script><script>alert(1)</script><!--"}, title="<b>x</b>")
    assert "<script>alert(1)" not in html and "<!--\"" not in html
    assert "<title>&lt;b&gt;x&lt;/b&gt;</title>" in html
    assert html.count("</script>") == 2  # the data block's and the dashboard script's


def test_a_node_that_leaves_the_view_counts_as_a_revocation() -> None:
    def node(name: str, transient: bool) -> dict[str, Any]:
        cap = {"cpu": 8.0, "memory_gib": 32.0, "gpu": 4}
        return {"name": name, "gpu_type": "v100", "zone": "a", "transient": transient, "capacity": cap,
                "free": {**cap, "gpu": 1}, "tasks": ()}

    store = Store(":memory:")
    daemon = SimpleNamespace(store=store, nodes_view=(node("spot-0", True), node("od-0", False)),
                             controller=SimpleNamespace(clock=SimpleNamespace(now=lambda: 0.0)))
    timer = DecisionTimer(make_policy("fifo"))
    collector = DaemonCollector(daemon, timer)  # type: ignore[arg-type]

    def scrape_once() -> list[Any]:
        return [s for family in collector.collect() for s in family.samples]

    first = scrape_once()
    assert value(first, "trainmaster_node_revocations_total") == 0
    assert value(first, "trainmaster_gpus_allocated", node_type="v100", capacity_type="transient") == 3
    daemon.nodes_view = (node("od-0", False),)  # the transient node was revoked
    assert value(scrape_once(), "trainmaster_node_revocations_total") == 1
    assert value(scrape_once(), "trainmaster_node_revocations_total") == 1  # counted once
    store.close()
