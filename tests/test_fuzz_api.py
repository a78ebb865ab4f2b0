"""Fuzz the live app: the real FastAPI app over a real Daemon, Store (SQLite) and local engine on a temporary
folder, called in-process (Starlette's TestClient). Arbitrary and mutated job documents (JSON and YAML), query
parameters and path ids must give 2xx or 4xx, never 500; every 4xx body carries `error` and `field`.

Then schemathesis generates requests from the app's own OpenAPI document (positive and negative examples per
operation) and checks "not a server error" on each. The daemon's loop is not started, so no job document a
fuzzer writes is ever run; `follow=true` on logs is skipped (it streams until the job ends, which never
happens here). Examples per target and 500s seen: BENCHMARKS.md, "Fuzzing".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
import yaml
from hypothesis import given
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from starlette.testclient import TestClient

from fuzz_strategies import NASTY_TEXT, VALID_JOB, documents, fuzz, mutated
from server_harness import CLUSTER_YAML
from trainmaster.core.cluster import cluster_from_mapping
from trainmaster.core.spec import load_yaml_text
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.policies.registry import make_policy
from trainmaster.server.app import create_app
from trainmaster.server.daemon import Daemon
from trainmaster.server.store import Store

EXAMPLES = 100
SCHEMATHESIS_EXAMPLES = 25  # per operation, per generation mode


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    tmp = tmp_path_factory.mktemp("fuzz-api")
    store = Store(tmp / "tm.db")
    engine = LocalEngine(cluster_from_mapping(load_yaml_text(CLUSTER_YAML)), run_dir=tmp / "runs")
    daemon = Daemon(store, engine, make_policy("fifo"))
    application = create_app(daemon, max_body=1 << 16)
    with TestClient(application, raise_server_exceptions=False) as client:
        accepted = client.post("/v1/jobs", json=VALID_JOB)  # one real job, so ids, logs and why have something
        assert accepted.status_code == 201, accepted.text
        job_dir = engine.run_dir / accepted.json()["id"]
        job_dir.mkdir(parents=True)
        (job_dir / "worker-0.log.1").write_text("old\n" * 10)
        (job_dir / "worker-0.log").write_text("new\n" * 10)
        yield application
    store.close()


@pytest.fixture(scope="module")
def client(app: Any) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def assert_clean(response: Any) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        body = response.json()
        assert body.get("error") and body.get("field"), body
        assert "\n" not in body["error"] and len(body["error"]) < 600, body


@fuzz(EXAMPLES)
@given(doc=st.one_of(documents(), mutated(VALID_JOB)))
def test_submit_json(client: TestClient, doc: Any) -> None:
    try:
        body = json.dumps(doc)
    except (ValueError, RecursionError):  # not expressible as JSON text: nothing to send
        return
    assert_clean(client.post("/v1/jobs", content=body, headers={"content-type": "application/json"}))


@fuzz(EXAMPLES)
@given(text=st.one_of(st.text(max_size=300), mutated(VALID_JOB, nest=False).map(yaml.safe_dump), NASTY_TEXT,
                      st.sampled_from(["a: 2020-01-01", "a: &x [*x]", "!!binary 'x'", "a: !!set {1}",
                                       "metadata: {labels: {x: 2020-01-01}}", "- " * 500])))
def test_submit_yaml(client: TestClient, text: str) -> None:
    body = text.encode("utf-8", "surrogatepass")
    assert_clean(client.post("/v1/jobs", content=body, headers={"content-type": "application/yaml"}))


QUERY_VALUE = st.one_of(st.text(max_size=30), NASTY_TEXT, st.integers().map(str),
                        st.floats(allow_nan=True, allow_infinity=True).map(str))


@fuzz(EXAMPLES)
@given(params=st.dictionaries(st.sampled_from(["limit", "state", "queue", "all", "tail", "task", "follow"]),
                              QUERY_VALUE, max_size=4),
       job=st.one_of(st.just("fuzz"), st.text(max_size=20), NASTY_TEXT),
       path=st.sampled_from(["/v1/jobs", "/v1/jobs/{}", "/v1/jobs/{}/why", "/v1/jobs/{}/metrics",
                             "/v1/jobs/{}/logs", "/v1/nodes", "/v1/queues", "/v1/health"]))
def test_queries(client: TestClient, params: dict[str, str], job: str, path: str) -> None:
    params.pop("follow", None)  # follow streams until the job ends; the loop that ends jobs is not running here
    job = quote(job.encode("utf-8", "surrogatepass"), safe="") or "x"  # any bytes, percent-encoded
    clean = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for k, v in params.items()}
    assert_clean(client.get(path.format(job), params=clean))


def test_cancel_of_an_unknown_and_a_known_job(client: TestClient) -> None:
    assert_clean(client.post("/v1/jobs/nope/cancel"))
    assert client.post("/v1/jobs/fuzz/cancel").status_code == 202


OPERATIONS = ["GET /v1/health", "POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{job_id}",
              "POST /v1/jobs/{job_id}/cancel", "GET /v1/jobs/{job_id}/why", "GET /v1/jobs/{job_id}/metrics",
              "GET /v1/jobs/{job_id}/logs", "GET /v1/nodes", "GET /v1/queues", "GET /v1/history", "GET /v1/overview",
              "GET /v1/pending", "GET /v1/timeline", "POST /v1/jobs/{job_id}/hold", "POST /v1/jobs/{job_id}/release",
              "POST /v1/jobs/{job_id}/update"]
POSITIVE, NEGATIVE = schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE
# Negative examples (what the document forbids) exist only where it constrains something: a body, bounded queries.
CASES = [(op, POSITIVE) for op in OPERATIONS] + [
    (op, NEGATIVE) for op in ("POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{job_id}/logs")]


@pytest.mark.parametrize(("operation", "mode"), CASES, ids=[f"{op}-{mode.value}" for op, mode in CASES])
def test_openapi_operations_never_answer_a_server_error(app: Any, operation: str,
                                                         mode: schemathesis.GenerationMode) -> None:
    """Schemathesis' strategy for one operation of the live OpenAPI document, driven by hypothesis here (its
    pytest loader `from_fixture` does not run under pytest 9)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = {f"{op.method.upper()} {op.path}": op for op in (r.ok() for r in schema.get_all_operations())}
    assert set(operations) == set(OPERATIONS)  # a new operation must be added to the fuzz

    @fuzz(SCHEMATHESIS_EXAMPLES)
    @given(case=operations[operation].as_strategy(generation_mode=mode))
    def check(case: Any) -> None:
        if case.path.endswith("/logs") and isinstance(case.query, dict) and str(case.query.get("follow", "")).lower(
                ) in ("true", "1", "yes", "on", "t", "y"):
            case.query["follow"] = "false"
        case.call_and_validate(checks=[not_a_server_error])

    check()


def test_the_openapi_document_declares_the_bounds(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    limit = next(p for p in doc["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert {"minimum": 1, "maximum": 100_000}.items() <= limit["schema"]["anyOf"][0].items()
    body = doc["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/TrainingJob"}
    priority = doc["components"]["schemas"]["_Metadata"]["properties"]["priority"]
    assert (priority["minimum"], priority["maximum"]) == (-1_000_000, 1_000_000)
    assert Path(__file__).name  # the document is what schemathesis fuzzes above


def test_router_refusals_carry_the_error_shape(client: TestClient) -> None:
    """No route (an empty job id leaves `/v1/jobs//why`) and a wrong method: the API's shape, naming the path."""
    for response, status in ((client.get("/v1/jobs//why"), 404), (client.get("/v1/nope"), 404),
                             (client.delete("/v1/health"), 405)):
        assert response.status_code == status
        body = response.json()
        assert body["field"] == "path" and "/docs" in body["error"], body
    assert "/v1/jobs//why" in client.get("/v1/jobs//why").json()["error"]
