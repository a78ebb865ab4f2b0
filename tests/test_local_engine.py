"""The local engine with real training processes: train, resize, crash, revoke, PS, orphans.

Every test runs real `torch` processes from `examples/` on this machine; the
models are tiny, and `--step-time` stretches a run just enough to act on it
while it trains.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainmaster.controller.loop import Controller
from trainmaster.core.actions import Action, ActionKind
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Event, JobFinished, JobRunning, JobStopped, Report, TaskFailed
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.spec import job_from_mapping, load_job
from trainmaster.core.states import JobState
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.engines.local.machine import local_cluster
from trainmaster.engines.local.tasks import alive
from trainmaster.policies.cycle import Cycle, Sizes, place_in_order
from trainmaster.policies.fifo import make as fifo
from trainmaster.policies.snapshot import JobView, Snapshot
from trainmaster.policies.workspace import Workspace
from trainmaster.train.checkpoint import load

pytestmark = pytest.mark.slow  # real processes

ROOT = Path(__file__).resolve().parents[1]


def job(name: str, command: list[str], *, steps: int = 300, lo: int = 1, hi: int = 1, cpu: str = "1",
        every: str = "1s", extra: dict[str, Any] | None = None) -> JobSpec:
    spec: dict[str, Any] = {"command": command, "roles": {"worker": {"min": lo, "max": hi, "resources": {"cpu": cpu}}},
                            "target": {"steps": steps}, "checkpoint": {"every": every}, "maxRestarts": 3}
    spec.update(extra or {})
    return job_from_mapping({"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": name},
                             "spec": spec})


def digits(name: str, steps: int, step_time: float = 0.0, **kw: Any) -> JobSpec:
    return job(name, ["python", "examples/digits/train.py", "--step-time", str(step_time)], steps=steps, **kw)


def workers(*nodes: str, ps: tuple[str, ...] = ()) -> Allocation:
    return Allocation.of([Placement(Role.WORKER, n) for n in nodes] + [Placement(Role.PS, n) for n in ps])


def pump(engine: LocalEngine, on: Callable[[Event], bool], timeout: float = 90.0) -> list[Event]:
    """Feed engine events to `on` until it returns True; all events seen."""
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in engine.wait(0.5):
            seen.append(event)
            if on(event):
                return seen
    raise AssertionError(f"timed out; last events: {seen[-5:]}")


def drive(ctl: Controller, until: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"timed out: {[(r.id, r.state, r.step) for r in ctl.jobs.values()]}"
        ctl.step()


@pytest.fixture
def engine_factory(tmp_path: Path) -> Any:
    made: list[LocalEngine] = []

    def make(nodes: int = 1, cpus: float = 2, prestart: int = 0) -> LocalEngine:
        eng = LocalEngine(local_cluster(nodes, cpus_per_node=cpus), run_dir=tmp_path / "run", base_dir=ROOT,
                          grace=15, prestart=prestart)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close(grace=0)


def test_example_jobs_load_and_describe_real_commands() -> None:
    for name, arch in (("digits", "allreduce"), ("cnn", "allreduce"), ("ps", "parameter-server")):
        spec = load_job(ROOT / "examples" / name / "job.yaml")
        assert spec.architecture.value == arch
        assert spec.workdir == str(ROOT / "examples" / name) and (ROOT / "examples" / name / spec.command[1]).is_file()
    assert load_job(ROOT / "examples/cnn/job.yaml").roles[Role.WORKER].max == 4
    ps = load_job(ROOT / "examples/ps/job.yaml")
    assert (ps.roles[Role.WORKER].min, ps.roles[Role.PS].min, ps.roles[Role.PS].max) == (2, 1, 2)


@pytest.mark.parametrize("prestart", [0, 2])
def test_task_environment_pinning_and_logs(engine_factory: Any, prestart: int) -> None:
    eng = engine_factory(nodes=2, cpus=1, prestart=prestart)
    probe = ("import os, json; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(('TM_', 'RANK',"
             " 'WORLD', 'MASTER', 'LOCAL_RANK', 'OMP', 'CUDA'))} | {'cores': sorted(os.sched_getaffinity(0))}))")
    spec = job("probe", ["python", "-c", probe], lo=2, hi=2)
    eng.apply([Action(ActionKind.START, "probe", spec, workers("local-0", "local-1"))])
    events = pump(eng, lambda e: isinstance(e, JobFinished))
    assert isinstance(events[-1], JobFinished) and events[-1].succeeded
    seen = []
    for rank in range(2):
        log = (eng.job_dir("probe") / f"worker-{rank}.log").read_text().splitlines()
        env = json.loads(log[-1])
        seen.append(env)
        assert (env["RANK"], env["WORLD_SIZE"], env["TM_JOB_ID"], env["TM_ROLE"]) == (str(rank), "2", "probe", "worker")
        assert env["OMP_NUM_THREADS"] == env["TM_CPUS"] == "1" and len(env["cores"]) == 1
        assert env["TM_CHECKPOINT_DIR"] == str(eng.job_dir("probe") / "checkpoint")
        assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TM_TARGET_STEPS"] == "300"
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"]
    assert "TM_REPORT_FILE" in seen[0] and "TM_REPORT_FILE" not in seen[1]  # rank 0 reports for the job
    assert seen[0]["cores"] != seen[1]["cores"]  # each virtual node has its own core
    assert ("(pre-started)" in (eng.job_dir("probe") / "worker-0.log").read_text()) == bool(prestart)
    assert not list((eng.job_dir("probe") / "pids").iterdir())  # pid files go with the processes


def test_bad_command_or_workdir_fails_the_job_with_a_reason(engine_factory: Any) -> None:
    eng = engine_factory()
    nodir = job("nodir", ["true"], extra={"workdir": "no/such"})
    eng.apply([Action(ActionKind.START, "nocmd", job("nocmd", []), workers("local")),
               Action(ActionKind.START, "nodir", nodir, workers("local"))])
    events = eng.wait(1.0)
    msgs = {e.job_id: e.message for e in events if isinstance(e, JobFinished) and not e.succeeded}
    assert "command is empty" in msgs["nocmd"] and "no/such" in msgs["nodir"]


def test_a_job_that_keeps_crashing_fails_after_max_restarts(engine_factory: Any) -> None:
    eng = engine_factory()
    ctl = Controller(eng, fifo(), check=True)
    jid = ctl.submit(job("broken", ["python", "-c", "print('boom'); raise SystemExit(3)"], extra={"maxRestarts": 1}))
    ctl.run()
    record = ctl.jobs[jid]
    assert record.state is JobState.FAILED and record.restarts == 1
    assert "worker-0 exited with code 3" in record.message
    log = (eng.job_dir(jid) / "worker-0.log").read_text()
    assert log.count("boom") == 2 and "attempt 2" in log  # launched twice, output kept across attempts


# Each rank of a 2-worker all-reduce job, ordered through marker files (no sleeps): worker-1 aborts at "exit",
# as torch 2.13's gloo workers can after a complete run; worker-0 ends with the code given.
CRASH_AT_EXIT = """
import os, sys, time
from pathlib import Path
marks, order, chief_code = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rank = int(os.environ["TM_INDEX"])
def wait_for(name):
    while not (marks / name).exists():
        time.sleep(0.02)
if rank == 1:
    if order == "chief-first":
        wait_for("chief-done")
    (marks / "peer-crashing").touch()
    os.abort()
if order == "peer-first":
    wait_for("peer-crashing")
elif order == "chief-hangs":
    time.sleep(300)
(marks / "chief-done").touch()
sys.exit(chief_code)
"""


@pytest.mark.parametrize(("order", "chief_code", "finished"), [
    ("peer-first", 0, True), ("chief-first", 0, True), ("peer-first", 3, False), ("chief-hangs", 0, False)])
def test_a_peer_crash_after_a_complete_all_reduce_run_is_a_finish_not_a_failure(
        engine_factory: Any, tmp_path: Path, order: str, chief_code: int, finished: bool) -> None:
    # Both orders of "worker-1 aborts, worker-0 exits 0" end as finished (worker-0 could not have exited 0 without
    # worker-1 in every collective), with the crash named; worker-0 failing, or never ending within the engine's
    # grace, stays a task failure.
    eng = engine_factory(nodes=2, cpus=1)
    eng.grace = 2.0
    marks = tmp_path / f"marks-{order}-{chief_code}"
    marks.mkdir()
    spec = job("atexit", ["python", "-c", CRASH_AT_EXIT, str(marks), order, str(chief_code)], lo=2, hi=2)
    eng.apply([Action(ActionKind.START, "atexit", spec, workers("local-0", "local-1"))])
    last = pump(eng, lambda e: isinstance(e, (JobFinished, TaskFailed)))[-1]
    if finished:
        assert isinstance(last, JobFinished) and last.succeeded, last
        assert "worker-1 exited with code" in last.message and "after worker-0 finished" in last.message
    else:
        assert isinstance(last, TaskFailed), last
        assert ("worker-0 exited with code 3" if chief_code else "worker-1 exited with code") in last.message


def test_a_new_engine_continues_the_attempt_numbering(engine_factory: Any) -> None:
    first = engine_factory()
    spec = job("again", ["python", "-c", "pass"])
    first.apply([Action(ActionKind.START, "again", spec, workers("local"))])
    pump(first, lambda e: isinstance(e, JobFinished))
    second = engine_factory()  # e.g. the daemon restarted on the same run_dir
    second.apply([Action(ActionKind.START, "again", spec, workers("local"))])
    assert [t.attempt for t in second.tasks("again")] == [2]


def test_job_trains_and_its_loss_falls_under_the_controller(engine_factory: Any) -> None:
    ctl = Controller(engine_factory(), fifo(), check=True)
    losses: list[float] = []
    ctl.report_sinks.append(lambda report, record: losses.append(report.loss) if report.loss is not None else None)
    jid = ctl.submit(digits("digits", steps=300))
    ctl.run()
    record = ctl.jobs[jid]
    assert record.state is JobState.SUCCEEDED and record.step == 300
    assert losses[0] > 2.0 and losses[-1] < 0.5 * losses[0]  # cross-entropy of 10 classes starts near ln 10
    assert load(ROOT / ctl.engine.job_dir(jid) / "checkpoint")["step"] == 300  # type: ignore[attr-defined]


def test_cnn_resized_1_2_1_continues_from_the_checkpoint(engine_factory: Any) -> None:
    eng = engine_factory()
    spec = job("elastic", ["python", "examples/cnn/train.py", "--step-time", "0.01"], steps=450, lo=1, hi=4,
               cpu="500m")
    eng.apply([Action(ActionKind.START, "elastic", spec, workers("local"))])
    plan = [(100, workers("local", "local")), (None, workers("local"))]  # (at step, resize to)
    runs: list[list[Report]] = []  # reports per launch
    decided: list[int] = []

    def on(event: Event) -> bool:
        if isinstance(event, JobRunning):
            runs.append([])
        if isinstance(event, Report):
            runs[-1].append(event)
            at = plan[0][0] if plan else None
            if plan and len(decided) < len(runs) and event.step >= (at if at is not None else decided[-1] + 100):
                decided.append(event.step)
                eng.apply([Action(ActionKind.RESIZE, "elastic", spec, plan.pop(0)[1])])
        return isinstance(event, JobFinished)

    events = pump(eng, on)
    assert isinstance(events[-1], JobFinished) and events[-1].succeeded
    assert len(runs) == 3 and len(decided) == 2
    log = (eng.job_dir("elastic") / "worker-0.log").read_text()
    stopped = [int(line.split()[4]) for line in log.splitlines() if line.startswith("trainmaster: stopped at step")]
    assert len(stopped) == 2
    for after, at, saved in zip(runs[1:], decided, stopped, strict=True):
        resumed = after[0].step
        assert at <= saved and resumed == saved + 1  # the next launch steps on from the checkpoint, not from zero
        first_loss = runs[0][0].loss
        assert after[0].loss is not None and first_loss is not None and after[0].loss < 0.5 * first_loss
    assert runs[-1][-1].step == 450
    worlds = [json.loads(x)["world"] for n in (1, 2, 3)
              for x in (eng.job_dir("elastic") / "reports" / f"attempt-{n}.jsonl").read_text().splitlines()[:1]]
    assert worlds == [1, 2, 1]
    assert "saved at world size 1, now 2" in log and "saved at world size 2, now 1" in log


def test_a_sigkilled_worker_restarts_the_job_from_its_last_checkpoint(engine_factory: Any) -> None:
    eng = engine_factory(prestart=1)  # the restart runs in an interpreter that has torch imported already
    ctl = Controller(eng, fifo(), check=True)
    steps: list[tuple[int, int]] = []  # (restarts, step) of each report
    ctl.report_sinks.append(lambda report, record: steps.append((record.restarts, report.step)))
    jid = ctl.submit(digits("crashy", steps=400, step_time=0.01, every="0.5s"))
    ctl.cycle()
    drive(ctl, lambda: ctl.jobs[jid].step >= 150 and load(eng.job_dir(jid) / "checkpoint") is not None)
    saved = load(eng.job_dir(jid) / "checkpoint")
    assert saved is not None
    os.kill(eng.pids(jid)["worker-0"], signal.SIGKILL)
    killed_at = ctl.jobs[jid].step
    drive(ctl, lambda: ctl.jobs[jid].state.terminal)
    record = ctl.jobs[jid]
    assert record.state is JobState.SUCCEEDED and record.restarts == 1
    assert any("before restart 1/3 from the checkpoint: worker-0 exited with code -9" in text
               for _, text in record.decisions)
    first_after = next(step for restarts, step in steps if restarts == 1)
    assert saved["step"] <= first_after <= killed_at + 60  # resumed from a checkpoint near the kill, not zero
    log = (eng.job_dir(jid) / "worker-0.log").read_text()
    restart = next(line for line in log.splitlines() if line.startswith("=== trainmaster: attempt 2 "))
    assert "resumed from step" in log and "(pre-started)" in restart


def _fill(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
    """Elastic fill for one-role jobs: as many workers as the cluster's nodes can hold, within [min, max]."""
    out: Sizes = {}
    for view in jobs:
        role = view.spec.roles[Role.WORKER]
        slots = sum(role.resources.max_count_in(n.capacity) for n in snap.cluster.nodes)
        out[view.id] = {Role.WORKER: max(role.min, min(role.max, slots))}
    return out


def test_revoking_a_node_moves_the_job_to_the_remaining_node(engine_factory: Any) -> None:
    eng = engine_factory(nodes=2, cpus=1)
    ctl = Controller(eng, Cycle(name="fill", size=_fill, place=place_in_order(strict=True)), check=True)
    steps: list[tuple[tuple[str, ...], int]] = []
    ctl.report_sinks.append(lambda report, record: steps.append((record.allocation.nodes, report.step)))
    jid = ctl.submit(digits("spot", steps=400, step_time=0.01, lo=1, hi=2, every="0.5s"))
    ctl.cycle()
    assert ctl.jobs[jid].allocation.nodes == ("local-0", "local-1")
    drive(ctl, lambda: ctl.jobs[jid].state is JobState.RUNNING and ctl.jobs[jid].step >= 100
          and load(eng.job_dir(jid) / "checkpoint") is not None)
    before = {t.node: t for t in eng.tasks(jid)}
    saved = load(eng.job_dir(jid) / "checkpoint")
    assert saved is not None
    eng.revoke("local-1")
    assert before["local-1"].proc.wait(timeout=10) == -signal.SIGKILL  # no SIGTERM, no checkpoint
    drive(ctl, lambda: ctl.jobs[jid].state.terminal)
    record = ctl.jobs[jid]
    assert record.state is JobState.SUCCEEDED and record.step == 400
    assert "local-1" not in ctl.cluster
    after = [step for nodes, step in steps if nodes == ("local-0",)]
    assert after and saved["step"] <= after[0]  # resumed on the remaining node from the checkpoint
    assert any("node local-1 lost" in text for _, text in record.decisions)


def test_parameter_server_job_resizes_its_servers_and_finishes(engine_factory: Any) -> None:
    eng = engine_factory()
    spec = load_job(ROOT / "examples/ps/job.yaml")
    two_ps, one_ps = workers("local", "local", ps=("local", "local")), workers("local", "local", ps=("local",))
    eng.apply([Action(ActionKind.START, "ps", spec, two_ps)])
    reports: list[Report] = []

    def on(event: Event) -> bool:
        if isinstance(event, Report):
            if not reports or reports[-1].step < 150 <= event.step:
                eng.apply([Action(ActionKind.RESIZE, "ps", spec, one_ps)]) if event.step >= 150 else None
            reports.append(event)
        return isinstance(event, JobFinished | TaskFailed)

    events = pump(eng, on)
    assert isinstance(events[-1], JobFinished) and events[-1].succeeded, events[-1]
    losses = [r.loss for r in reports if r.loss is not None]
    assert reports[-1].step == 600 and losses[-1] < 0.5 * losses[0]
    log = (eng.job_dir("ps") / "ps-0.log").read_text()
    assert "parameter server 0 exits with 75" in log and "parameter server 0 exits with 0" in log
    assert "resumed from step" in (eng.job_dir("ps") / "worker-1.log").read_text()


def test_a_command_that_never_reports_is_running_once_it_stays_up(tmp_path: Path) -> None:
    eng = LocalEngine(local_cluster(1, cpus_per_node=2), run_dir=tmp_path / "run", base_dir=ROOT,
                      silent_running_after=0.5)
    spec = job("quiet", ["python", "-c", "import time; time.sleep(2)"])
    eng.apply([Action(ActionKind.START, "quiet", spec, workers("local"))])
    events = pump(eng, lambda e: isinstance(e, JobFinished))
    assert [type(e) for e in events] == [JobRunning, JobFinished]
    eng.close(grace=0)


def test_cleanup_orphans_kills_what_a_dead_daemon_left(tmp_path: Path) -> None:
    old = LocalEngine(local_cluster(1, cpus_per_node=2), run_dir=tmp_path / "run", base_dir=ROOT)
    spec = job("sleepy", ["python", "-c", "import time; time.sleep(60)"], lo=2, hi=2)
    old.apply([Action(ActionKind.START, "sleepy", spec, workers("local", "local"))])
    pids = old.pids("sleepy")
    assert len(pids) == 2 and all(alive(pid, None) for pid in pids.values())
    # the daemon is kill -9'd: its engine object is gone without close(); a new one starts on the same run_dir
    new = LocalEngine(local_cluster(1, cpus_per_node=2), run_dir=tmp_path / "run", base_dir=ROOT)
    assert sorted(new.cleanup_orphans()) == ["sleepy/worker-0", "sleepy/worker-1"]
    assert not any(alive(pid, None) for pid in pids.values())
    assert new.cleanup_orphans() == []  # nothing is killed twice
    old.close(grace=0)


def test_stop_for_preemption_reports_the_checkpoint_step(engine_factory: Any) -> None:
    eng = engine_factory()
    spec = digits("victim", steps=5000, step_time=0.01)
    eng.apply([Action(ActionKind.START, "victim", spec, workers("local"))])
    last = 0

    def on(event: Event) -> bool:
        nonlocal last
        if isinstance(event, Report) and event.step >= 50 and not last:
            last = event.step
            eng.apply([Action(ActionKind.STOP, "victim", spec, reason="preempted")])
        return isinstance(event, JobStopped)

    stopped = pump(eng, on)[-1]
    assert isinstance(stopped, JobStopped) and stopped.step is not None and stopped.step >= last
    saved = load(eng.job_dir("victim") / "checkpoint")
    assert saved is not None and saved["step"] == stopped.step
    assert eng.idle() and eng.pids("victim") == {}
