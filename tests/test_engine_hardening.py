"""The local engine never wedges on one job's problem, never double-books, never leaks the daemon's secrets.

Real processes throughout; order is driven by marker files the test creates,
never by how fast this machine runs a task.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from trainmaster.controller.loop import Controller
from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Event, JobFinished, TaskFailed
from trainmaster.core.job import Role
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.core.spec import job_from_mapping
from trainmaster.core.states import JobState
from trainmaster.engines.gang import Phase
from trainmaster.engines.ledger import Ledger, LedgerError
from trainmaster.engines.local.engine import LocalEngine
from trainmaster.engines.local.tasks import rotate_log
from trainmaster.policies.fifo import make as fifo

pytestmark = pytest.mark.slow  # real processes

GIB = 2**30


def spec(name: str, command: list[str], *, gpu: int = 0, restarts: int = 2, env: dict[str, str] | None = None) -> Any:
    return job_from_mapping({"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": name},
                             "spec": {"command": command, "maxRestarts": restarts, "env": env or {},
                                      "roles": {"worker": {"min": 1, "resources": {"cpu": 1, "gpu": gpu}}}}})


def gpu_cluster() -> Cluster:
    """One virtual node with one fake GPU id (nothing here uses it but the ledger and CUDA_VISIBLE_DEVICES)."""
    return Cluster((Node(name="g", capacity=Resources(cpu=2000, memory=4 * GIB, gpu=1), gpu_type="fake"),))


def wait_for(engine: LocalEngine, until: Any, timeout: float = 60.0) -> list[Event]:
    """Poll the engine until `until(events so far)` holds; the deadline only guards against a hang."""
    seen: list[Event] = []
    deadline = time.monotonic() + timeout
    while not until(seen):
        assert time.monotonic() < deadline, f"timed out; events: {seen[-5:]}"
        seen.extend(engine.wait(0.2))
    return seen


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    made: list[LocalEngine] = []

    def make(cluster: Cluster | None = None, **kw: Any) -> LocalEngine:
        cluster = cluster or Cluster((Node(name="n", capacity=Resources(cpu=2000, memory=4 * GIB)),))
        eng = LocalEngine(cluster, run_dir=tmp_path / "run", base_dir=tmp_path, **kw)
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.close(grace=0)


def test_a_missing_program_fails_its_job_with_the_reason_and_the_next_job_runs(engine: Any, tmp_path: Path) -> None:
    eng = engine()
    ctl = Controller(eng, fifo(), check=True)
    bad = ctl.submit(spec("bad", ["/no/such/binary"]))
    good = ctl.submit(spec("good", ["sh", "-c", "echo fine"]))
    ctl.run()
    assert ctl.jobs[bad].state is JobState.FAILED
    assert "'/no/such/binary' not found" in ctl.jobs[bad].message
    assert ctl.jobs[good].state is JobState.SUCCEEDED
    assert eng.ledger.in_use["n"] == Resources()  # everything booked was given back


def test_an_environment_too_large_to_exec_fails_the_job_not_the_engine(engine: Any) -> None:
    eng = engine()
    ctl = Controller(eng, fifo(), check=True)
    # The spec's validation refuses such a value (64 KiB at most); a spec built in code can still carry one.
    too_big = dataclasses.replace(spec("huge", ["sh", "-c", "true"]), env=(("BIG", "x" * 200_000),))
    huge = ctl.submit(too_big)
    after = ctl.submit(spec("after", ["sh", "-c", "true"]))
    ctl.run()
    assert ctl.jobs[huge].state is JobState.FAILED
    assert "Argument list too long" in ctl.jobs[huge].message and "spec.env" in ctl.jobs[huge].message
    assert ctl.jobs[after].state is JobState.SUCCEEDED
    assert eng.ledger.in_use["n"] == Resources()


def test_a_stopping_task_keeps_its_gpu_until_it_is_gone(engine: Any, tmp_path: Path) -> None:
    """A preempted task that ignores SIGTERM keeps its GPU; the next job waits for it, then gets that GPU."""
    eng = engine(gpu_cluster(), grace=600)  # no SIGKILL by time: the test decides when the old task dies
    ready = tmp_path / "stubborn-ready"
    stubborn = spec("stubborn", [sys.executable, "-c",
                                 "import signal, time, pathlib; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                 f"pathlib.Path({str(ready)!r}).touch(); time.sleep(600)"], gpu=1)
    probe = spec("probe", ["sh", "-c", 'echo "gpus=[$CUDA_VISIBLE_DEVICES]"'], gpu=1)
    on_g = Allocation.of([Placement(Role.WORKER, "g")])
    eng.apply([Action(ActionKind.START, "stubborn", stubborn, on_g)])
    wait_for(eng, lambda _: ready.exists())
    eng.apply([Action(ActionKind.STOP, "stubborn", stubborn, cause=StopCause.PREEMPT),
               Action(ActionKind.START, "probe", probe, on_g)])
    eng.wait(0.5)
    assert eng.phase("probe") is Phase.WAITING and eng.ledger.gpu_busy["g"] == {0}
    os.killpg(eng.pids("stubborn")["worker-0"], signal.SIGKILL)
    events = wait_for(eng, lambda seen: any(isinstance(e, JobFinished) for e in seen))
    assert next(e for e in events if isinstance(e, JobFinished)).succeeded
    assert "gpus=[0]" in (eng.job_dir("probe") / "worker-0.log").read_text()
    assert eng.ledger.gpu_busy["g"] == set()


def test_the_ledger_never_hands_out_less_than_asked() -> None:
    ledger = Ledger.for_cluster(gpu_cluster())
    ledger.take("g", Resources(cpu=1000, gpu=1), "a")
    with pytest.raises(LedgerError, match="does not fit"):
        ledger.take("g", Resources(cpu=1000, gpu=1), "b")
    with pytest.raises(LedgerError, match="does not fit"):
        ledger.take("g", Resources(cpu=3000), "c")


def test_the_ledger_journal_records_every_booking(tmp_path: Path) -> None:
    journal = tmp_path / "ledger.jsonl"
    ledger = Ledger.for_cluster(gpu_cluster(), journal)
    cores, gpus = ledger.take("g", Resources(cpu=1000, gpu=1), "job/worker-0")
    ledger.give_back("g", Resources(cpu=1000, gpu=1), cores, gpus, "job/worker-0")
    ops = [line.split('"op": "')[1].split('"')[0] for line in journal.read_text().splitlines()]
    assert ops == ["reset", "take", "give"]


def test_jobs_never_see_the_daemons_secrets(engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINMASTER_TOKEN", "s3cret-token")
    monkeypatch.setenv("CLOUD_KEY", "s3cret-key")
    monkeypatch.setenv("HARMLESS", "visible")
    eng = engine(secret_env=["CLOUD_KEY"])
    eng.apply([Action(ActionKind.START, "env", spec("env", ["sh", "-c", "env"]),
                      Allocation.of([Placement(Role.WORKER, "n")]))])
    wait_for(eng, lambda seen: any(isinstance(e, JobFinished) for e in seen))
    log = (eng.job_dir("env") / "worker-0.log").read_text()
    assert "HARMLESS=visible" in log
    assert "s3cret" not in log
    assert oct((eng.job_dir("env") / "worker-0.log").stat().st_mode & 0o777) == "0o600"


def test_a_job_that_exits_1_backs_off_between_restarts(engine: Any) -> None:
    eng = engine()
    ctl = Controller(eng, fifo(), check=True, backoff=(0.2, 0.4))
    jid = ctl.submit(spec("crash", ["sh", "-c", "exit 1"], restarts=3))
    ctl.run()
    record = ctl.jobs[jid]
    assert record.state is JobState.FAILED and record.restarts == 3
    assert (record.resizes, record.preemptions) == (0, 0)
    backoffs = [text for _, text in record.decisions if text.startswith("backing off")]
    assert [b.split()[2] for b in backoffs] == ["0.2s", "0.4s", "0.4s"]  # doubles, then the cap
    starts = [t.time for t in record.history if t.target is JobState.STARTING]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert len(starts) == 4 and all(gap >= 0.2 for gap in gaps)  # never restarted before its backoff ended


def test_a_task_log_is_capped_keeping_its_newest_part(engine: Any, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (f"for i in $(seq 1 2000); do echo line-$i-padding-padding-padding-padding; done; "
              f"while [ ! -e {go} ]; do sleep 0.05; done; echo END")
    eng = engine(log_max_bytes=40_000)
    eng.apply([Action(ActionKind.START, "chatty", spec("chatty", ["sh", "-c", script]),
                      Allocation.of([Placement(Role.WORKER, "n")]))])
    log = eng.job_dir("chatty") / "worker-0.log"
    older = log.with_name("worker-0.log.1")
    wait_for(eng, lambda _: older.exists() and log.stat().st_size <= 20_000)
    go.touch()
    wait_for(eng, lambda seen: any(isinstance(e, JobFinished) for e in seen))
    assert "line-2000-" in older.read_text() and older.stat().st_size <= 2000 * 50
    assert log.read_text().strip().endswith("END") and "line-1-" not in log.read_text()


def test_rotate_log_moves_the_log_aside_past_half_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text("a" * 100)
    assert not rotate_log(log, 400)
    assert rotate_log(log, 150)
    assert log.read_text() == "" and (tmp_path / "t.log.1").read_text() == "a" * 100


def test_a_launch_that_cannot_start_for_now_is_a_task_failure(engine: Any) -> None:
    """The machine's trouble (here: a node revoked after the plan) is reported, never raised."""
    eng = engine()
    eng.revoke("n")
    eng.apply([Action(ActionKind.START, "late", spec("late", ["true"]), Allocation.of([Placement(Role.WORKER, "n")]))])
    events = eng.wait(0.5)
    failed = [e for e in events if isinstance(e, JobFinished | TaskFailed) and e.job_id == "late"]
    assert failed and "revoked node n" in failed[0].message


REPORTER = """
import sys, time
import trainmaster.train as tm

session = tm.init()
for step in range(10**6):
    loss = max(0.5, 1.0 / (step + 1)) if sys.argv[1] == "plateau" else 1.0 / (step + 1)
    session.report(step + 1, loss=loss, epoch=(step + 1) / 10)
    time.sleep(0.01)
"""


@pytest.mark.parametrize(("kind", "target", "expect"), [
    ("steps", {"steps": 30}, "step"),
    ("loss", {"loss": 0.05}, "loss"),
    ("epochs", {"epochs": 3}, "epoch"),
    ("plateau", {"plateau": 0.01, "window": 20}, "plateaued"),
])
def test_the_engine_enforces_each_kind_of_target(engine: Any, tmp_path: Path, kind: str, target: dict[str, Any],
                                                 expect: str) -> None:
    """A job that would run for ever ends, succeeded, once it reports reaching its `spec.target`."""
    script = tmp_path / "reporter.py"
    script.write_text(REPORTER)
    job = job_from_mapping({"apiVersion": "trainmaster/v1", "kind": "TrainingJob", "metadata": {"name": kind},
                            "spec": {"command": [sys.executable, str(script), kind], "target": target,
                                     "roles": {"worker": {"min": 1, "resources": {"cpu": 1}}}}})
    eng = engine(target_grace=0.5)
    ctl = Controller(eng, fifo(), check=True)
    jid = ctl.submit(job)
    ctl.run()
    record = ctl.jobs[jid]
    assert record.state is JobState.SUCCEEDED, record.message
    assert record.message.startswith("reached its target") and expect in record.message
    if kind == "steps":
        assert 30 <= record.step < 10**6
    if kind == "loss":
        assert record.loss is not None and record.loss <= 0.05
