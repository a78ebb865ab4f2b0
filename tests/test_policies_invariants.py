"""Invariants of every preset on random small workloads, through the real controller and sim engine.

`Controller(check=True)` verifies after every decision that no node is
overfilled and that every active job holds a whole gang within [min, max];
here we also check that every job ends exactly once and that a run is
reproducible to the bit.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import linear_workload
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import ORACLE, available, make_policy
from trainmaster.workloads.base import Workload

# Presets other helpers add later (optimus, edl, trainmaster) are checked here as well.
POLICIES = available()

jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 2000),  # submit second
        st.sampled_from([1, 1, 2, 3, 4, 8, 12]),  # GPUs (12 may be larger than the cluster)
        st.integers(30, 3000),  # duration at the requested size
        st.booleans(),  # elastic: min is 1
        st.booleans(),  # a parameter-server job: one CPU-only ps task besides the workers
    ),
    min_size=1, max_size=10,
)


def run(workload: Workload, shape: str, policy: str, restart_delay: float) -> tuple[Controller, Counter[str]]:
    engine = SimEngine(parse_shorthand(shape), workload, SimConfig(restart_delay=restart_delay, seed=3))
    controller = Controller(engine, make_policy(policy), check=True)
    ends: Counter[str] = Counter()
    controller.listeners.append(lambda what, rec: ends.update([rec.id]) if rec.state.terminal else None)
    controller.run()
    return controller, ends


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=jobs_strategy, shape=st.sampled_from(["1x4", "2x4", "3x2", "2x8"]),
       restart_delay=st.sampled_from([0.0, 30.0]))
def test_every_preset_keeps_the_invariants(rows: list[tuple[int, int, int, bool, bool]], shape: str,
                                           restart_delay: float) -> None:
    capacity = parse_shorthand(shape).total.gpu
    table = [(f"j{i}", float(t), g, float(d)) for i, (t, g, d, _, _) in enumerate(rows)]
    elastic = {f"j{i}": 1 for i, (_, g, _, e, _) in enumerate(rows) if e and g > 1}
    ps = [f"j{i}" for i, row in enumerate(rows) if row[4]]
    for policy in POLICIES:
        workload = linear_workload(table, oracle=policy in ORACLE, min_gpus=elastic, ps=ps)
        controller, ends = run(workload, shape, policy, restart_delay)
        for wj in workload.jobs:
            record = controller.jobs[wj.job_id]
            assert ends[wj.job_id] == 1, f"{policy}: {wj.job_id} ended {ends[wj.job_id]} times"
            too_big = wj.spec.min_gpus > capacity
            assert record.state is (JobState.REJECTED if too_big else JobState.SUCCEEDED), (policy, record.id)
            if not too_big:
                # It ran at least its duration (longer when it ran below its requested size or restarted).
                assert record.finish_time is not None and record.first_start is not None
                assert record.finish_time - record.first_start >= wj.truth.total_steps - 1e-6
        assert controller.used_gpus == 0 and not controller.live


@settings(max_examples=10, deadline=None)
@given(rows=jobs_strategy)
def test_same_seed_same_run(rows: list[tuple[int, int, int, bool, bool]]) -> None:
    table = [(f"j{i}", float(t), g, float(d)) for i, (t, g, d, _, _) in enumerate(rows)]
    for policy in POLICIES:
        workload = linear_workload(table, oracle=policy in ORACLE)
        first, _ = run(workload, "2x4", policy, 30.0)
        second, _ = run(workload, "2x4", policy, 30.0)
        assert first.outcomes() == second.outcomes()
        assert first.usage.points == second.usage.points
