"""The ray engine on a real Ray cluster of 3 nodes on this machine (`ray.cluster_utils.Cluster`, loopback only).

One cluster serves the whole module (starting a Ray node takes ~15 s here).
Every test runs real `torch` processes from `examples/` as Ray actors; time
is bounded by generous hang guards only, never asserted.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from trainmaster.controller.loop import Controller  # noqa: E402
from trainmaster.core.actions import Action, ActionKind  # noqa: E402
from trainmaster.core.allocation import Allocation, Placement  # noqa: E402
from trainmaster.core.events import Event, JobFinished, JobRunning, NodeAdded, NodeLost, Report, TaskFailed  # noqa: E402
from trainmaster.core.job import JobSpec, Role, Target  # noqa: E402
from trainmaster.core.spec import job_from_mapping, load_job  # noqa: E402
from trainmaster.core.states import JobState  # noqa: E402
from trainmaster.engines.base import Outcome  # noqa: E402
from trainmaster.engines.ray.engine import RayEngine  # noqa: E402
from trainmaster.engines.ray.localcluster import local_ray_cluster, node_args  # noqa: E402
from trainmaster.policies.cycle import Cycle, Sizes, place_in_order  # noqa: E402
from trainmaster.policies.snapshot import JobView, Snapshot  # noqa: E402
from trainmaster.policies.workspace import Workspace  # noqa: E402
from trainmaster.train.checkpoint import load  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """Head `n0` and workers `n1`, `n2`, all on 127.0.0.1; token auth off (loopback only)."""
    with local_ray_cluster(3) as c:
        yield c


@pytest.fixture
def engine(cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., RayEngine]]:
    made: list[RayEngine] = []

    def make(**kw: Any) -> RayEngine:
        kw.setdefault("namespace", f"tm-{uuid.uuid4().hex[:8]}")
        eng = RayEngine(run_dir=tmp_path / "run", address=cluster.address, base_dir=ROOT, grace=15, **kw)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close(grace=0)


def job(name: str, command: list[str], *, steps: int, lo: int = 1, hi: int = 1, cpu: str = "500m",
        every: str = "1s", extra: dict[str, Any] | None = None) -> JobSpec:
    spec: dict[str, Any] = {"command": command, "roles": {"worker": {"min": lo, "max": hi, "resources": {"cpu": cpu}}},
                            "target": {"steps": steps}, "checkpoint": {"every": every}, "maxRestarts": 3}
    spec.update(extra or {})
    return job_from_mapping({"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": name},
                             "spec": spec})


def workers(*nodes: str, ps: tuple[str, ...] = ()) -> Allocation:
    return Allocation.of([Placement(Role.WORKER, n) for n in nodes] + [Placement(Role.PS, n) for n in ps])


def pump(engine: RayEngine, on: Callable[[Event], bool], timeout: float = 180.0) -> list[Event]:
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in engine.wait(0.5):
            seen.append(event)
            if on(event):
                return seen
    raise AssertionError(f"timed out; last events: {seen[-5:]}")


def drive(ctl: Controller, until: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out: {[(r.id, r.state, r.step) for r in ctl.jobs.values()]}"
        ctl.step()


def named_actors(namespace: str) -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == namespace]


def settle(check: Callable[[], bool], engine: RayEngine | None = None, timeout: float = 30.0) -> bool:
    """Poll `check` (driving `engine`) until it holds (a hang guard, not a timing)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        if engine is not None:
            engine.wait(0.2)
        else:
            time.sleep(0.2)
    return True


def test_ray_nodes_become_the_cluster(engine: Callable[..., RayEngine]) -> None:
    eng = engine()
    assert [n.name for n in eng.cluster().nodes] == ["n0", "n1", "n2"]
    assert all(n.capacity.cpu == 2000 and n.capacity.memory > 0 for n in eng.cluster().nodes)
    assert len({eng.node_id(n) for n in ("n0", "n1", "n2")}) == 3


def test_the_three_examples_train_on_different_ray_nodes(engine: Callable[..., RayEngine]) -> None:
    eng = engine()
    # Slow enough that the engine reads its progress while it runs (the actors' node ids are read then).
    digits = job("digits", ["python", "examples/digits/train.py", "--step-time", "0.02"], steps=300, cpu="1")
    cnn = job("cnn", ["python", "examples/cnn/train.py"], steps=200, lo=1, hi=3)
    ps = dataclasses.replace(load_job(ROOT / "examples/ps/job.yaml"), target=Target(steps=300))
    eng.apply([Action(ActionKind.START, "digits", digits, workers("n0", "n1")),
               Action(ActionKind.START, "cnn", cnn, workers("n1", "n2", "n0")),
               Action(ActionKind.START, "ps", ps, workers("n2", "n0", ps=("n1",)))])
    losses: dict[str, list[float]] = {"digits": [], "cnn": [], "ps": []}
    nodes: dict[str, set[str]] = {}
    finished: dict[str, JobFinished] = {}

    def on(event: Event) -> bool:
        if isinstance(event, Report) and event.loss is not None:
            losses[event.job_id].append(event.loss)
        assert not isinstance(event, TaskFailed), event
        if isinstance(event, JobFinished):
            finished[event.job_id] = event
        return len(finished) == 3

    pump(eng, on, timeout=240)
    assert all(f.succeeded for f in finished.values()), finished
    ids = {eng.node_id(n) for n in ("n0", "n1", "n2")}
    for name in losses:  # where Ray says each task's actor ran (read from the runner: a fast job may have ended
        # in the same poll that saw it running, its tasks already released)
        nodes[name] = {host.node_id for t in eng.ray.known_tasks(name) if (host := eng.ray.log_host(name, t))}
    assert nodes["digits"] == {eng.node_id("n0"), eng.node_id("n1")}  # where Ray says the actors ran
    assert nodes["cnn"] == ids and nodes["ps"] == ids
    for name, seen in losses.items():
        assert seen, name  # the daemon heard each job's loss through Ray
        # Each job learned: read every line its chief wrote (how many reports the engine folded them into
        # depends on how often it polled, which depends on how fast this machine is).
        lines = [json.loads(x) for x in (eng.job_dir(name) / "reports" / "attempt-1.jsonl").read_text().splitlines()]
        written = [float(x["loss"]) for x in lines if x.get("loss") is not None]
        assert len(written) >= 2 and written[-1] < 0.5 * written[0], (name, written[:1], written[-1:])
    assert load(eng.job_dir("digits") / "checkpoint")["step"] == 300  # type: ignore[index]
    log = "".join(eng.logs("ps", "worker-1")).splitlines()  # its actor is gone: read on its node by a reader actor
    # The launch line is the engine's own; what the worker itself prints after it varies (warnings, none).
    assert log and log[0].startswith("=== trainmaster: attempt 1 on node ")
    assert log[0].split()[6].rstrip(",") in ("n0", "n2")  # a worker's node, not the server's (n1)
    assert eng.wait(None) == []  # the engine polls until it has killed every ended task's actor
    assert settle(lambda: not named_actors(eng.ray.namespace))


def test_cnn_resized_1_3_2_across_nodes_resumes_at_the_checkpoint(engine: Callable[..., RayEngine]) -> None:
    # Room for both resizes before the target however late a stop lands (each run is decided 100 steps in).
    steps = 600
    eng = engine()
    spec = job("elastic", ["python", "examples/cnn/train.py", "--step-time", "0.01"], steps=steps, lo=1, hi=3)
    eng.apply([Action(ActionKind.START, "elastic", spec, workers("n0"))])
    plan = [workers("n0", "n1", "n2"), workers("n2", "n1")]
    runs: list[list[Report]] = []
    decided: list[int] = []

    def on(event: Event) -> bool:
        assert not isinstance(event, TaskFailed), event
        if isinstance(event, JobRunning):
            runs.append([])
        if isinstance(event, Report):
            runs[-1].append(event)
            if plan and len(decided) < len(runs) and event.step >= (decided[-1] if decided else 0) + 100:
                decided.append(event.step)
                eng.apply([Action(ActionKind.RESIZE, "elastic", spec, plan.pop(0))])
        return isinstance(event, JobFinished)

    events = pump(eng, on)
    assert isinstance(events[-1], JobFinished) and events[-1].succeeded
    assert len(runs) == 3
    log = "".join(eng.logs("elastic", "worker-0"))
    stopped = [int(line.split()[4]) for line in log.splitlines() if line.startswith("trainmaster: stopped at step")]
    stopped = [step for step in stopped if step < steps]  # at `steps` the engine may stop it for its target first
    assert len(stopped) == 2
    for after, at, saved in zip(runs[1:], decided, stopped, strict=True):
        assert at <= saved and after[0].step == saved + 1  # resumed at the checkpoint, not from zero
    worlds = [json.loads(x)["world"] for n in (1, 2, 3)
              for x in (eng.job_dir("elastic") / "reports" / f"attempt-{n}.jsonl").read_text().splitlines()[:1]]
    assert worlds == [1, 3, 2]
    assert runs[-1][-1].step == steps


def _fill(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
    """As many workers as the nodes hold, one per node, within [min, max]."""
    out: Sizes = {}
    for view in jobs:
        role = view.spec.roles[Role.WORKER]
        out[view.id] = {Role.WORKER: max(role.min, min(role.max, len(snap.cluster.nodes)))}
    return out


def test_remove_node_mid_4_node_job_finishes_on_the_rest_without_orphans(cluster: Cluster,
                                                                  engine: Callable[..., RayEngine]) -> None:
    extra = cluster.add_node(**node_args("a3"))
    cluster.wait_for_nodes()
    eng = engine(node_poll=0.5)
    assert "a3" in eng.cluster()
    ctl = Controller(eng, Cycle(name="fill", size=_fill, place=place_in_order(strict=True)), check=True)
    steps: list[tuple[tuple[str, ...], int]] = []
    ctl.report_sinks.append(lambda report, record: steps.append((record.allocation.nodes, report.step)))
    jid = ctl.submit(job("spot", ["python", "examples/cnn/train.py", "--step-time", "0.01"], steps=200, lo=1, hi=4,
                         cpu="2", every="0.5s"))  # a whole node per worker: one on every node
    ctl.cycle()
    drive(ctl, lambda: ctl.jobs[jid].state is JobState.RUNNING and ctl.jobs[jid].step >= 60
          and load(eng.job_dir(jid) / "checkpoint") is not None)
    assert sorted(t.launch.node for t in eng.tasks(jid)) == ["a3", "n0", "n1", "n2"]
    pids = [t.pid for t in eng.tasks(jid)]
    saved = load(eng.job_dir(jid) / "checkpoint")
    assert saved is not None
    cluster.remove_node(extra)  # the machine is gone: its raylet, its actors
    drive(ctl, lambda: ctl.jobs[jid].state.terminal, timeout=240)
    record = ctl.jobs[jid]
    assert record.state is JobState.SUCCEEDED and record.step == 200, record.decisions
    assert "a3" not in ctl.cluster and any("a3" in text for _, text in record.decisions), record.decisions
    assert load(eng.job_dir(jid) / "checkpoint")["step"] == 200  # type: ignore[index]
    after = [step for nodes, step in steps if nodes and "a3" not in nodes]
    assert after and saved["step"] <= after[0]  # resumed on the other nodes from the checkpoint, not from zero
    assert all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)
    assert eng.wait(None) == []
    assert settle(lambda: not named_actors(eng.ray.namespace))


def test_a_placement_ray_cannot_realise_fails_the_start(engine: Callable[..., RayEngine]) -> None:
    eng = engine(place_timeout=3)
    hog = ray.remote(num_cpus=2)(lambda: time.sleep(600)).options(
        scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(eng.node_id("n2"),
                                                                                         soft=False)).remote()
    try:
        spec = job("blocked", ["python", "examples/digits/train.py"], steps=50, cpu="1")
        eng.apply([Action(ActionKind.START, "blocked", spec, workers("n2"))])
        events = pump(eng, lambda e: isinstance(e, TaskFailed | JobFinished), timeout=60)
        assert isinstance(events[-1], TaskFailed) and "could not place worker-0 on node n2" in events[-1].message
        assert eng.ledger.in_use["n2"].cpu == 0  # what it booked is given back
    finally:
        ray.cancel(hog, force=True)


def test_recover_kills_what_a_dead_daemon_left_and_judges_it(engine: Callable[..., RayEngine]) -> None:
    first = engine()
    spec = job("orphan", ["python", "examples/digits/train.py", "--step-time", "0.02"], steps=5000)
    first.apply([Action(ActionKind.START, "orphan", spec, workers("n1", "n2"))])
    pump(first, lambda e: isinstance(e, Report) and e.step >= 20)
    following = first.logs("orphan", "worker-1", follow=True)  # a running task on n2, read through its actor
    assert next(following).startswith("=== trainmaster: attempt 1 on node n2")
    following.close()
    pids = [t.pid for t in first.tasks("orphan")]
    first.ray._tasks.clear()  # the daemon dies (kill -9): nothing of it stops the actors
    first._jobs.clear()
    second = engine(namespace=first.ray.namespace)
    found = second.recover()
    assert found["orphan"].outcome is Outcome.INTERRUPTED and found["orphan"].attempt == 1
    assert not named_actors(first.ray.namespace)
    assert settle(lambda: all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE
                              for p in pids))
    assert second.runner.last_attempt("orphan") == 1


def test_a_joining_ray_node_becomes_node_added(cluster: Cluster, engine: Callable[..., RayEngine]) -> None:
    eng = engine(node_poll=0.2)
    joined = cluster.add_node(**node_args("n4"))
    try:
        events = pump(eng, lambda e: isinstance(e, NodeAdded), timeout=60)
        assert isinstance(events[-1], NodeAdded) and events[-1].node.name == "n4"
    finally:
        cluster.remove_node(joined)
    events = pump(eng, lambda e: isinstance(e, NodeLost), timeout=60)
    assert isinstance(events[-1], NodeLost) and events[-1].node == "n4"


def test_daemon_kill_9_and_restart_on_ray_ends_each_job_once(cluster: Cluster, tmp_path: Path) -> None:
    """The real daemon (`trainmaster server --engine ray`) killed with -9 while its jobs' actors run."""
    from server_harness import ServerProcess
    from test_durability import BARRIER, ENDED, SCRIPT, STEPS, rows, steps_run, trainer, wait_for

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    gates = tmp_path / "gates"
    gates.mkdir()
    namespace = "trainmaster"  # the daemon's; no other test uses it
    server = ServerProcess(tmp_path / "data", cluster_yaml=None,
                           extra_args=("--engine", "ray", "--ray-address", cluster.address))
    try:
        server.start(timeout=120)
        http = httpx.Client(base_url=server.url, timeout=30)
        jobs = [http.post("/v1/jobs", content=trainer(f"t{i}", script, gates)).json()["id"] for i in range(2)]
        wait_for("every trainer at its barrier", lambda: all((gates / f"{j}.at-barrier").exists() for j in jobs))
        left = named_actors(namespace)
        assert len(left) == 2
        server.kill9()
        assert named_actors(namespace) == left  # detached: the actors (and their processes) outlive the daemon
        server.start(timeout=120)
        assert not set(named_actors(namespace)) & set(left)  # recovery killed what the dead daemon left
        for j in jobs:
            (gates / f"{j}.go").touch()
        wait_for("every job to end", lambda: all(rows(http).get(j, {}).get("state") in ENDED for j in jobs), 180)
        final = rows(http)
        assert sorted(final) == sorted(jobs)
        assert {j: final[j]["state"] for j in jobs} == dict.fromkeys(jobs, "succeeded")
        for j in jobs:
            ran = steps_run(server, j)
            assert sorted(step for _, step in ran) == list(range(STEPS)), ran  # every step exactly once
            pids = list(dict.fromkeys(pid for pid, _ in ran))
            assert len(pids) == 2 and next(s for p, s in ran if p == pids[1]) == BARRIER  # resumed at the checkpoint
        assert settle(lambda: not named_actors(namespace))
    finally:
        server.stop()


def test_logs_follow_through_the_api_for_a_task_on_another_ray_node(cluster: Cluster, tmp_path: Path) -> None:
    """`GET /v1/jobs/{id}/logs?follow=true` on `trainmaster server --engine ray` streams a running task's lines from
    a node other than the head (where the daemon's driver attaches), read there through Ray."""
    from server_harness import ServerProcess, cli, job_yaml

    go = tmp_path / "go"
    # Three workers of 2 CPUs on three 2-CPU nodes: one per node. Each prints a marker, then waits for `go`.
    command = f'echo "marker from $TM_NODE rank $RANK"; while [ ! -e {go} ]; do sleep 0.1; done; echo "after go"'
    server = ServerProcess(tmp_path / "data", cluster_yaml=None,
                           extra_args=("--engine", "ray", "--ray-address", cluster.address))
    try:
        server.start(timeout=120)
        http = httpx.Client(base_url=server.url, timeout=60)
        jid = http.post("/v1/jobs", content=job_yaml("spread", command, cpu=2, workers=3)).json()["id"]

        def node_of(task: str) -> str | None:
            r = http.get(f"/v1/jobs/{jid}/logs", params={"task": task})
            first = r.text.splitlines()[0] if r.status_code == 200 and r.text else ""
            return first.split()[6].rstrip(",") if first.startswith("=== trainmaster: attempt 1 on node ") else None

        deadline = time.monotonic() + 120
        where: dict[str, str | None] = {}
        while not (len(where) == 3 and all(where.values())):
            assert time.monotonic() < deadline, f"tasks never started: {where} {server.log()[-2000:]}"
            where = {f"worker-{i}": node_of(f"worker-{i}") for i in range(3)}
            time.sleep(0.2)
        assert sorted(n for n in where.values() if n) == ["n0", "n1", "n2"]
        task = next(t for t, n in where.items() if n == "n2")
        seen = ""
        with http.stream("GET", f"/v1/jobs/{jid}/logs", params={"task": task, "follow": "true"}) as stream:
            chunks = stream.iter_text()
            for chunk in chunks:  # bounded: the job cannot end before `go` exists
                seen += chunk
                if "marker from n2" in seen:
                    break
            assert f"marker from n2 rank {task[-1]}" in seen
            assert http.get(f"/v1/jobs/{jid}").json()["state"] in ("starting", "running")  # read while it runs
            go.touch()
            seen += "".join(chunks)  # the stream ends when the job does
        assert seen.rstrip().endswith("after go")
        assert http.get(f"/v1/jobs/{jid}").json()["state"] == "succeeded"
        shown = cli("logs", jid, "--task", task, "--tail", "1", env={"TRAINMASTER_URL": server.url})
        assert shown.returncode == 0 and shown.stdout.strip() == "after go", shown
        everything = cli("logs", jid, env={"TRAINMASTER_URL": server.url}).stdout
        assert all(f"[worker-{i}] marker from " in everything for i in range(3))
        assert settle(lambda: not named_actors("trainmaster"))
    finally:
        server.stop()
