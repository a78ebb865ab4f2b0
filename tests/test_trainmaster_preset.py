"""The `trainmaster` preset: LAS inside the queue rules, gain sizing, batch choice; invariants, golden run."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from queue_builders import J, queue, queues, simulate
from trainmaster.cli.simulate import simulate_one
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import BatchRange, JobSpec, Target
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.trainmaster import AdaptiveCycle
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob

HOUR = 3600.0


def test_a_short_job_overtakes_a_long_one_that_attained_more_service() -> None:
    """Tiresias inside the preset: the long job drops to Q1 after 16 GPU-hours and the newcomer preempts it."""
    run = simulate("1x4", make_policy("trainmaster"), J("long", 4, 0, 20 * HOUR), J("short", 4, 5 * HOUR, HOUR))
    short, long = run.record("short"), run.record("long")
    assert short.first_start == 5 * HOUR and short.finish_time == 6 * HOUR
    assert long.preemptions == 1 and long.state is JobState.SUCCEEDED


def test_time_sharing_never_crosses_priorities_or_queues() -> None:
    """A lower-priority or other-queue newcomer never preempts by attained service: only the queue rules may."""
    qs = queues(queue("a", gpu=4), queue("b", gpu=4, borrowing=False))
    run = simulate("1x4", make_policy("trainmaster"), J("long", 4, 0, 20 * HOUR, fields={"queue": "a", "priority": 1}),
                   J("low", 4, 5 * HOUR, HOUR, fields={"queue": "a"}), qs=qs)
    assert run.record("long").preemptions == 0 and run.record("low").first_start == 20 * HOUR


def _checked(policy: AdaptiveCycle) -> AdaptiveCycle:
    """Wrap `decide`: every plan's batches belong to planned adaptive jobs and stay within their bounds."""
    decide = policy.decide

    def checked(snap: Snapshot) -> Plan:
        plan = decide(snap)
        for jid, batch in plan.batch.items():
            bounds = snap.jobs[jid].spec.adaptive_batch
            assert jid in plan.allocations and bounds is not None and bounds.min <= batch <= bounds.max
        return plan

    policy.decide = checked  # type: ignore[method-assign]
    return policy


jobs_strategy = st.lists(
    st.tuples(
        st.integers(1, 6),  # min GPUs
        st.integers(0, 4),  # extra GPUs when elastic
        st.sampled_from(["a", "b"]),  # queue
        st.integers(0, 2),  # priority
        st.floats(0, 3000),  # submit
        st.floats(50, 3000),  # duration
        st.booleans(),  # adapts its batch
    ),
    min_size=1, max_size=14,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(jobs=jobs_strategy, quota_a=st.integers(2, 8), borrow_a=st.booleans())
def test_preset_keeps_capacity_gangs_quota_and_runs_every_job_once(
        jobs: list[tuple[int, int, str, int, float, float, bool]], quota_a: int, borrow_a: bool) -> None:
    entries = []
    for i, (lo, extra, q, prio, at, dur, adaptive) in enumerate(jobs):
        spec = J(f"j{i}", lo, at, dur, max_gpus=lo + extra, fields={
            "queue": q, "priority": prio, "target": Target(steps=int(dur)),
            "adaptive_batch": BatchRange(32, 512, 32) if adaptive else None}).spec()
        entries.append(WorkloadJob(f"j{i}", at, spec, LinearTruth(dur, lo)))
    qs = queues(queue("a", gpu=quota_a, borrowing=borrow_a), queue("b", gpu=4))
    engine = SimEngine(parse_shorthand("2x4"), Workload("prop", tuple(entries)),
                       SimConfig(restart_delay=10.0, report_interval=100.0))
    policy = make_policy("trainmaster")
    assert isinstance(policy, AdaptiveCycle)
    ctl = Controller(engine, _checked(policy), check=True, queues=qs)  # check: capacity and whole gangs
    ends: Counter[str] = Counter()

    def listen(what: str, record: object) -> None:
        if what == "succeeded":
            ends[record.id] += 1  # type: ignore[attr-defined]
        used = sum(r.allocation.gpus(r.spec) for r in ctl.live.values() if r.state.active and r.spec.queue == "a")
        assert borrow_a or used <= quota_a, f"queue a holds {used} GPUs above its hard quota {quota_a}"

    ctl.listeners.append(listen)
    ctl.run(max_cycles=20_000)
    for r in ctl.jobs.values():
        assert r.state in (JobState.SUCCEEDED, JobState.REJECTED), f"{r.id} ended {r.state}: {r.why}"
        if r.state is JobState.SUCCEEDED:
            assert ends[r.id] == 1 and r.finish_time is not None  # to the end, once
        else:  # only what can never fit: more than 8 GPUs, or above a's hard quota
            assert r.spec.min_gpus > 8 or (r.spec.queue == "a" and not borrow_a and r.spec.min_gpus > quota_a)


GOLDEN = {"mean_jct": 15079, "makespan": 73273, "resizes": 31, "preemptions": 38}


def golden_workload() -> Workload:
    """30 jobs of 1-4 GPUs, elastic to 2x, 10 min to 8 h, one every ~8 min on average, with step targets."""
    rng = random.Random(7)
    jobs, at = [], 0.0
    for i in range(30):
        gpus, hours = rng.choice((1, 1, 2, 4)), rng.choice((0.2, 0.5, 1.0, 3.0, 8.0))
        at += rng.expovariate(1 / 500)
        spec = J(f"g{i}", gpus, at, hours * HOUR, max_gpus=2 * gpus,
                 fields={"target": Target(steps=int(hours * HOUR)), "job_type": f"type{i % 3}"}).spec()
        jobs.append(WorkloadJob(spec.name, at, spec, SublinearTruth(hours * HOUR, gpus)))
    return Workload("golden", tuple(jobs))


@dataclass(frozen=True)
class SublinearTruth(LinearTruth):
    """Speed grows as the square root of the GPUs: more GPUs pay, less and less (so sizing has a choice)."""

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        return math.sqrt(alloc.gpus(spec) / self.gpus)


def test_golden_run_of_the_preset() -> None:
    """The preset on a small elastic workload on 2x4: its JCT summary is pinned (re-pin on a deliberate change)."""
    result = simulate_one(golden_workload(), parse_shorthand("2x4"), "trainmaster",
                          SimConfig(restart_delay=30.0, report_interval=300.0, seed=3))
    s = result.summary
    assert s.finished == 30
    got = {"mean_jct": round(s.mean_jct), "makespan": round(s.makespan), "resizes": s.resizes,
           "preemptions": s.preemptions}
    assert got == GOLDEN
