"""The REST API through real HTTP: uvicorn on a free loopback port, the daemon on the local engine, real SQLite."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

import trainmaster
from server_harness import CLUSTER_YAML, free_port, job_yaml
from trainmaster.cli.client import ApiError, Client
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.errors import TrainmasterError
from trainmaster.core.spec import load_yaml_text
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.policies.registry import make_policy
from trainmaster.server.app import create_app
from trainmaster.server.auth import check_bind
from trainmaster.server.daemon import Daemon
from trainmaster.server.store import Store

TOKEN = "s3cret-token"


class Live:
    def __init__(self, tmp: Path) -> None:
        self.store = Store(tmp / "tm.db")
        self.engine = LocalEngine(cluster_from_mapping(load_yaml_text(CLUSTER_YAML)), run_dir=tmp / "runs", grace=5)
        self.daemon = Daemon(self.store, self.engine, make_policy("fifo"), poll=0.05)
        self.daemon.start()
        self.servers: list[uvicorn.Server] = []
        self.http = httpx.Client(base_url=self.serve(), timeout=30)
        self.db_path = tmp / "tm.db"

    def serve(self, token: str | None = None, max_body: int = 4096) -> str:
        port = free_port()
        app = create_app(self.daemon, token=token, max_body=max_body, log_poll=0.05)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.02)
        self.servers.append(server)
        return f"http://127.0.0.1:{port}"

    def wait(self, job_id: str, until: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row: dict[str, Any] = self.http.get(f"/v1/jobs/{job_id}").json()
            if until(row):
                return row
            time.sleep(0.05)
        raise AssertionError(f"{job_id} stuck in {row}")

    def close(self) -> None:
        for server in self.servers:
            server.should_exit = True
        self.daemon.stop()
        self.store.close()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    env = Live(tmp_path_factory.mktemp("server"))
    yield env
    env.close()


def ended(row: dict[str, Any]) -> bool:
    return row["state"] in ("succeeded", "failed", "cancelled", "rejected")


def test_submit_yaml_and_json_commits_then_runs_to_completion(live: Live) -> None:
    text = job_yaml("hello", "echo hello from $TM_ROLE-$TM_INDEX; sleep 0.2")
    r = live.http.post("/v1/jobs", content=text, headers={"content-type": "application/yaml"})
    assert r.status_code == 201, r.text
    first = r.json()
    # Durable before the answer: a second connection to the SQLite file already sees the job.
    with sqlite3.connect(live.db_path) as db:
        assert db.execute("SELECT state FROM jobs WHERE id = ?", (first["id"],)).fetchone() is not None
    r = live.http.post("/v1/jobs", json=load_yaml_text(text))
    assert r.status_code == 201, r.text
    second = r.json()
    assert (first["id"], second["id"]) == ("hello", "hello-1")
    for jid in (first["id"], second["id"]):
        row = live.wait(jid, ended)
        assert row["state"] == "succeeded", row
        assert row["jct"] is not None and row["jct"] > 0
    listed = [j["id"] for j in live.http.get("/v1/jobs").json()]
    assert listed.index("hello") < listed.index("hello-1")
    changes = live.http.get("/v1/jobs/hello/metrics").json()["allocations"]
    assert [c["what"] for c in changes][-1] == "succeeded"
    assert any(c["allocation"].startswith("worker=1@n-") for c in changes)
    assert "hello from worker-0" in live.http.get("/v1/jobs/hello/logs").text
    r = live.http.get("/v1/jobs/hello/logs", params={"task": "../../trainmaster"})
    assert r.status_code == 400 and "not a task name" in r.json()["error"]
    r = live.http.get("/v1/jobs/hello/logs", params={"task": "worker-9"})
    assert r.status_code == 404 and r.json()["fix"] == "use one of worker-0"


BAD_INPUT = [
    ("bad yaml", "apiVersion: [unclosed", "application/yaml", 400, "malformed YAML at line 1"),
    ("bad json", '{"apiVersion": ', "application/json", 400, "malformed JSON"),
    ("not a mapping", "- just\n- a list\n", "application/yaml", 400, "must be a mapping"),
    ("empty", "", "application/yaml", 400, "empty body"),
    ("unknown field", job_yaml("x", "true", extra="  colour: blue\n"), "application/yaml", 422,
     "spec.colour: unknown field"),
    ("unknown queue", job_yaml("x", "true", meta=", queue: nowhere"), "application/yaml", 422,
     "unknown queue 'nowhere'"),
    ("impossible resources", job_yaml("x", "true", cpu=64), "application/yaml", 422, "impossible resources"),
    ("gang larger than the cluster", job_yaml("x", "true", cpu=2, workers=3), "application/yaml", 422,
     "impossible resources"),
    ("oversized body", "#" * 10_000, "application/yaml", 413, "over the 4096-byte limit"),
]


@pytest.mark.parametrize(("case", "body", "ctype", "status", "message"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_input_is_a_clear_error_and_the_server_keeps_serving(
        live: Live, case: str, body: str, ctype: str, status: int, message: str) -> None:
    before = live.store.count()
    r = live.http.post("/v1/jobs", content=body, headers={"content-type": ctype})
    assert r.status_code == status, r.text
    assert message in r.json()["error"]
    assert "\n" not in r.json()["error"]
    assert live.store.count() == before  # nothing half-accepted
    assert live.http.get("/v1/health").json()["ok"] is True


def test_unknown_job_is_404_everywhere(live: Live) -> None:
    for method, path in (("GET", "/v1/jobs/ghost"), ("POST", "/v1/jobs/ghost/cancel"), ("GET", "/v1/jobs/ghost/why"),
                         ("GET", "/v1/jobs/ghost/logs"), ("GET", "/v1/jobs/ghost/metrics")):
        r = live.http.request(method, path)
        assert r.status_code == 404, (path, r.text)
        assert "no job 'ghost'" in r.json()["error"]


def test_cancel_stops_the_processes_and_cannot_be_repeated(live: Live) -> None:
    jid = live.http.post("/v1/jobs", content=job_yaml("sleeper", "echo up; sleep 60")).json()["id"]
    live.wait(jid, lambda r: r["state"] == "starting")
    deadline = time.monotonic() + 10
    while not live.engine.pids(jid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.engine.pids(jid)
    r = live.http.post(f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 202 and r.json()["cancel_requested"] is True
    assert live.wait(jid, ended)["state"] == "cancelled"
    deadline = time.monotonic() + 10
    while live.engine.pids(jid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert live.engine.pids(jid) == {}
    r = live.http.post(f"/v1/jobs/{jid}/cancel")
    assert r.status_code == 409 and "already cancelled" in r.json()["error"]


def test_why_nodes_and_queues_show_a_blocked_gang(live: Live) -> None:
    big = live.http.post("/v1/jobs", content=job_yaml("big", "sleep 60", cpu=2, workers=2)).json()["id"]
    live.wait(big, lambda r: r["state"] in ("starting", "running"))
    small = live.http.post("/v1/jobs", content=job_yaml("small", "sleep 60", cpu=1)).json()["id"]
    deadline = time.monotonic() + 10
    while not any(w in (why := live.http.get(f"/v1/jobs/{small}/why").json())["reason"] for w in ("gang", "waiting")):
        assert time.monotonic() < deadline, why
        time.sleep(0.05)
    assert why["state"] == "pending" and why["source"] == "controller"
    assert "needs cpu=1" in why["reason"] or "big" in why["reason"]
    nodes = live.http.get("/v1/nodes").json()
    assert sorted(n["name"] for n in nodes) == ["n-0", "n-1"]
    assert sorted(t for n in nodes for t in n["tasks"]) == ["big/worker-0", "big/worker-1"]
    assert all(n["free"]["cpu"] == 0 for n in nodes)
    (default,) = live.http.get("/v1/queues").json()
    assert (default["name"], default["running"], default["pending"], default["cpu"]) == ("default", 1, 1, 4.0)
    for jid in (big, small):
        live.http.post(f"/v1/jobs/{jid}/cancel")
        assert live.wait(jid, ended)["state"] == "cancelled"
    assert [d["text"] for d in live.http.get(f"/v1/jobs/{small}/why").json()["decisions"]][-1] \
        == "cancelled by the user"


def test_follow_streams_lines_as_they_are_written_until_the_job_ends(live: Live, tmp_path: Path) -> None:
    """Order, not timing, shows the streaming: the job writes its last lines only after the test has received the
    first ones (it waits for a marker file the test creates then, and fails without it), so they cannot all have
    come at the end."""
    marker = tmp_path / "go"
    jid = live.http.post("/v1/jobs", content=job_yaml(
        "ticker", f"echo tick 1; echo tick 2; n=0; while [ ! -f {marker} ] && [ $n -lt 1200 ]; "
                  f"do sleep 0.05; n=$((n+1)); done; [ -f {marker} ] || exit 1; echo tick 3; echo tick 4")).json()["id"]
    got: list[str] = []
    with live.http.stream("GET", f"/v1/jobs/{jid}/logs", params={"follow": "true"}) as r:
        for line in r.iter_lines():
            got.append(line)
            if line.endswith("tick 2"):
                assert not marker.exists()
                marker.touch()  # only now may the job go on
    assert [line for line in got if "tick" in line] == [f"[worker-0] tick {i}" for i in range(1, 5)]
    assert live.http.get(f"/v1/jobs/{jid}").json()["state"] == "succeeded"  # the stream ended with the job


def test_openapi_is_served(live: Live) -> None:
    spec = live.http.get("/openapi.json").json()
    for path in ("/v1/jobs", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/cancel", "/v1/jobs/{job_id}/logs",
                 "/v1/jobs/{job_id}/why", "/v1/jobs/{job_id}/metrics", "/v1/nodes", "/v1/queues"):
        assert path in spec["paths"]


def test_with_a_token_every_request_needs_it(live: Live) -> None:
    url = live.serve(token=TOKEN)
    for path in ("/v1/health", "/v1/jobs", "/openapi.json", "/docs"):
        assert httpx.get(url + path).status_code == 401
        assert httpx.get(url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = httpx.post(url + "/v1/jobs", content=job_yaml("nope", "true"))
    assert r.status_code == 401 and "token" in json.loads(r.text)["error"]
    ok = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(url + "/v1/health", headers=ok).status_code == 200
    r = httpx.post(url + "/v1/jobs", content=job_yaml("authorized", "true"), headers=ok)
    assert r.status_code == 201
    assert live.wait(r.json()["id"], ended)["state"] == "succeeded"
    # The SDK (`trainmaster.Client`, imported lazily) sends the token it is given, or TRAINMASTER_TOKEN.
    assert trainmaster.Client is Client
    with Client(url, token=TOKEN) as sdk:
        assert sdk.job(r.json()["id"])["state"] == "succeeded"
    with Client(url, token="wrong") as sdk, pytest.raises(ApiError, match="token") as refused:
        sdk.jobs()
    assert refused.value.status == 401 and refused.value.exit_code == 2


def test_non_loopback_bind_needs_a_token() -> None:
    for host in ("0.0.0.0", "192.168.1.10", "example.org", "::"):
        with pytest.raises(TrainmasterError, match="without a token"):
            check_bind(host, None)
        check_bind(host, TOKEN)
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_bind(host, None)


NUMBERS = [
    ('{"metadata": {"name": "x", "priority": 1000000000000000000000000000000}}', "metadata.priority",
     "between -1000000 and 1000000"),
    ('{"metadata": {"name": "x", "priority": 1e308}}', "metadata.priority", "between"),
    ('{"metadata": {"name": "x", "priority": Infinity}}', "metadata.priority", "between"),
    ('{"metadata": {"name": "x", "priority": 99999999999999999999}}', "metadata.priority", "between"),
    ('{"metadata": {"name": "x"}, "cpu": NaN}', "spec.roles.worker.resources.cpu", "between 0 and 1000000"),
    ('{"metadata": {"name": "x"}, "cpu": 1e308}', "spec.roles.worker.resources.cpu", "between 0 and 1000000"),
    ('{"metadata": {"name": "x"}, "memory": "99999999999999999999999Ti"}', "spec.roles.worker.resources.memory",
     "between 0 and 1Ei"),
    ('{"metadata": {"name": "x"}, "min": 1e9}', "spec.roles.worker.min", "between 0 and 10000"),
    ('{"metadata": {"name": "x"}, "maxRestarts": -1}', "spec.maxRestarts", "between 0 and 1000"),
    ('{"metadata": {"name": "x"}, "every": 1e400}', "spec.checkpoint.every", "between 0 and 2592000"),
    ('{"metadata": {"name": "x", "priority": ' + "9" * 5000 + '}}', "body", "malformed JSON"),
]


def _json_job(case: str) -> str:
    """A JSON job with the case's fields spliced in as raw text (NaN, Infinity and huge numbers stay as written)."""
    parts = json.loads(case.replace("NaN", '"@nan"').replace("Infinity", '"@inf"').replace("1e400", '"@big"')
                       .replace("9" * 5000, "0")) if "9" * 5000 not in case else {}
    if not parts:
        return '{"apiVersion": "trainmaster/v1", "kind": "TrainingJob", ' + case[1:]
    meta = json.dumps(parts["metadata"])
    res = {"cpu": 1}
    for key in ("cpu", "memory"):
        if key in parts:
            res[key] = parts[key]
    role = {"min": parts.get("min", 1), "resources": res}
    spec = {"command": ["sh", "-c", "true"], "roles": {"worker": role}, "maxRestarts": parts.get("maxRestarts", 1),
            "checkpoint": {"every": parts.get("every", "5s")}}
    text = f'{{"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {meta}, "spec": {json.dumps(spec)}}}'
    return text.replace('"@nan"', "NaN").replace('"@inf"', "Infinity").replace('"@big"', "1e400")


@pytest.mark.parametrize(("case", "field", "words"), NUMBERS, ids=[f"{f}:{c[:50]}" for c, f, _ in NUMBERS])
def test_out_of_range_numbers_are_4xx_naming_the_field(live: Live, case: str, field: str, words: str) -> None:
    before = live.store.count()
    doc = _json_job(case)
    url = live.serve(max_body=1 << 20) if len(doc) > 4096 else str(live.http.base_url).rstrip("/")
    r = httpx.post(url + "/v1/jobs", content=doc, headers={"content-type": "application/json"})
    assert r.status_code in (400, 422), r.text
    body = r.json()
    assert body["field"] == field and words in body["error"] and "\n" not in body["error"], body
    assert live.store.count() == before
    yaml_case = doc.replace("NaN", ".nan").replace("Infinity", ".inf")
    r = httpx.post(url + "/v1/jobs", content=yaml_case, headers={"content-type": "application/yaml"})
    assert r.status_code in (400, 422) and r.json()["field"] in (field, "body"), r.text


@pytest.mark.parametrize("limit", ["1e23", "-1", "0", "99999999999999999999", "abc", "100001"])
def test_query_params_out_of_range_are_400_naming_the_param(live: Live, limit: str) -> None:
    r = live.http.get("/v1/jobs", params={"limit": limit})
    assert r.status_code == 400, r.text
    assert r.json()["field"] == "query.limit" and "limit" in r.json()["error"]
    assert live.http.get("/v1/jobs", params={"limit": "100000"}).status_code == 200


def test_a_job_that_cannot_start_here_is_refused_at_submit(live: Live, tmp_path: Path) -> None:
    cases = [
        (job_yaml("x", "true", extra="  workdir: /nonexistent\n"), "spec.workdir", "'/nonexistent': no such folder"),
        (job_yaml("x", "true").replace("  command: [sh, -c, 'true']\n", ""), "spec.command", "is required"),
        (job_yaml("x", "true").replace("[sh, -c, 'true']", "[/no/such/binary]"), "spec.command",
         "no such executable"),
        (job_yaml("x", "true").replace("[sh, -c, 'true']", "[python, absent_train.py]"), "spec.command",
         "'absent_train.py': no such file"),
    ]
    before = live.store.count()
    for body, field, words in cases:
        r = live.http.post("/v1/jobs", content=body)
        assert r.status_code == 422 and r.json()["field"] == field and words in r.json()["error"], r.text
    assert live.store.count() == before
    (tmp_path / "train.py").write_text("print('trained in', __import__('os').getcwd())\n")
    ok = job_yaml("pyjob", "true", extra=f"  workdir: {tmp_path}\n").replace("[sh, -c, 'true']", "[python, train.py]")
    r = live.http.post("/v1/jobs", content=ok)
    assert r.status_code == 201, r.text
    assert live.wait(r.json()["id"], ended)["state"] == "succeeded"
    assert f"trained in {tmp_path}" in live.http.get(f"/v1/jobs/{r.json()['id']}/logs").text


def test_logs_tail_and_rotated_parts_through_the_api(live: Live) -> None:
    jid = live.http.post("/v1/jobs", content=job_yaml("lines", "for i in 1 2 3; do echo now $i; done")).json()["id"]
    assert live.wait(jid, ended)["state"] == "succeeded"
    job_dir = live.engine.run_dir / jid
    (job_dir / "worker-0.log.1").write_text("".join(f"before {i}\n" for i in range(4)))  # as a rotation leaves it
    full = live.http.get(f"/v1/jobs/{jid}/logs", params={"task": "worker-0"}).text.splitlines()
    assert [line for line in full if not line.startswith("===")] == \
        [f"before {i}" for i in range(4)] + [f"now {i}" for i in (1, 2, 3)]  # `===` lines: the engine's headers
    r = live.http.get(f"/v1/jobs/{jid}/logs", params={"tail": 5})  # four lines of .log, one of .log.1
    assert len(r.text.splitlines()) == 5
    assert [line for line in r.text.splitlines() if "===" not in line] == \
        ["[worker-0] before 3"] + [f"[worker-0] now {i}" for i in (1, 2, 3)]
    followed = live.http.get(f"/v1/jobs/{jid}/logs", params={"tail": 1, "follow": "true"}).text
    assert followed == "[worker-0] now 3\n"  # an ended job: last line, then the stream ends
    for bad in ("-1", "1e9", "x"):
        r = live.http.get(f"/v1/jobs/{jid}/logs", params={"tail": bad})
        assert r.status_code == 400 and r.json()["field"] == "query.tail", r.text
