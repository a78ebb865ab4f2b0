"""Every preset keeps the invariants on mixed clusters (GPU types, transient nodes, zones, prices) with jobs
that use every new field: no node overfilled, gangs whole (`Controller(check=True)`), every job ends once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import linear_workload, node
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import TransientUse
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import ORACLE, available, make_policy
from trainmaster.workloads.base import Workload, WorkloadJob

nodes_strategy = st.lists(
    st.tuples(st.sampled_from(["k80", "p100", "v100"]), st.sampled_from([2, 4]), st.booleans(),
              st.sampled_from(["a", "b"]), st.sampled_from([0.0, 1.0, 4.0])),
    min_size=2, max_size=5,
)
jobs_strategy = st.lists(
    st.tuples(
        st.integers(0, 2000),  # submit second
        st.sampled_from([1, 1, 2, 3, 4]),  # GPUs
        st.integers(30, 3000),  # duration at the requested size
        st.booleans(),  # elastic: min is 1
        st.booleans(),  # a parameter-server job
        st.sampled_from(list(TransientUse)),
        st.sampled_from([(), ("k80",), ("v100", "p100")]),  # gpuTypes preference
        st.booleans(),  # anchorsOnDemand
        st.sampled_from([None, 1.0, 100.0]),  # budget
        st.sampled_from([None, 600.0, 20_000.0]),  # deadline
    ),
    min_size=1, max_size=8,
)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=nodes_strategy, rows=jobs_strategy)
def test_every_preset_keeps_the_invariants_on_mixed_clusters(shape: list[tuple[str, int, bool, str, float]],
                                                             rows: list[tuple]) -> None:  # type: ignore[type-arg]
    cluster = Cluster(tuple(replace(node(f"n{i}", gpus, cpu=16, transient=spot, zone=zone, price_per_hour=price),
                                    gpu_type=kind)
                            for i, (kind, gpus, spot, zone, price) in enumerate(shape)))
    table = [(f"j{i}", float(r[0]), r[1], float(r[2])) for i, r in enumerate(rows)]
    elastic = {f"j{i}": 1 for i, r in enumerate(rows) if r[3] and r[1] > 1}
    ps = [f"j{i}" for i, r in enumerate(rows) if r[4]]
    for policy in available():
        base = linear_workload(table, oracle=policy in ORACLE, min_gpus=elastic, ps=ps)
        jobs = tuple(WorkloadJob(wj.job_id, wj.submit_time, replace(
            wj.spec, transient=r[5], gpu_types=r[6], anchors_on_demand=r[7], budget=r[8], deadline=r[9],
            checkpoint_auto=True), wj.truth) for wj, r in zip(base.jobs, rows, strict=True))
        workload = Workload(name="mixed", jobs=jobs)
        engine = SimEngine(cluster, workload, SimConfig(restart_delay=30.0, seed=3, report_interval=300.0))
        controller = Controller(engine, make_policy(policy), check=True)
        ends: Counter[str] = Counter()
        controller.listeners.append(lambda what, rec, ends=ends: ends.update([rec.id]) if rec.state.terminal else None)
        controller.run()
        for wj in workload.jobs:
            record = controller.jobs[wj.job_id]
            assert ends[wj.job_id] == 1, f"{policy}: {wj.job_id} ended {ends[wj.job_id]} times"
            assert record.state in (JobState.SUCCEEDED, JobState.REJECTED), (policy, record.id, record.state)
            if record.state is JobState.REJECTED:  # only what can never fit: transient never, or too big
                eligible = [n for n in cluster.nodes if not (n.transient and wj.spec.transient is TransientUse.NEVER)]
                assert wj.spec.min_gpus > sum(n.capacity.gpu for n in eligible) or not all(
                    any(r.resources.fits_in(n.capacity) for n in eligible) for r in wj.spec.roles.values()), (
                    policy, record.id, record.message)
        assert controller.used_gpus == 0 and not controller.live
