"""States, clusters and allocations."""

from __future__ import annotations

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import cluster_from_mapping, parse_shorthand
from trainmaster.core.errors import IllegalTransition, SpecError
from trainmaster.core.job import Role, simple_job
from trainmaster.core.states import TRANSITIONS, JobState, check_transition


def test_transition_table_rejects_illegal_moves() -> None:
    check_transition(JobState.PENDING, JobState.STARTING)
    with pytest.raises(IllegalTransition):
        check_transition(JobState.SUCCEEDED, JobState.RUNNING)
    with pytest.raises(IllegalTransition):
        check_transition(JobState.PENDING, JobState.SUCCEEDED)
    for state in JobState:
        if state.terminal:
            assert not TRANSITIONS[state]


def test_shorthand() -> None:
    c = parse_shorthand("16x4")
    assert len(c) == 16 and c.total.gpu == 64
    mixed = parse_shorthand("311x8:v100+2x1:v100")
    assert len(mixed) == 313 and mixed.total.gpu == 2490 and mixed.gpu_types == {"v100"}
    with pytest.raises(SpecError, match="cluster"):
        parse_shorthand("sixteen")


def test_cluster_yaml() -> None:
    c = cluster_from_mapping({"nodes": [
        {"name": "a", "count": 2, "gpu": 4, "gpuType": "v100", "cpu": 32, "memory": "128Gi", "transient": True,
         "pricePerHour": 0.74, "zone": "us-east1-b"},
        {"name": "cpu", "cpu": 8},
    ]})
    assert [n.name for n in c.nodes] == ["a-0", "a-1", "cpu"]
    assert c.node("a-1").transient and c.node("a-1").capacity.cpu == 32_000 and c.node("cpu").gpu_type is None
    with pytest.raises(SpecError, match=r"cluster.nodes\[0\].gpus: unknown field"):
        cluster_from_mapping({"nodes": [{"gpus": 4}]})


def test_allocation_normalizes_and_counts() -> None:
    a = Allocation.of([Placement(Role.WORKER, "n1"), Placement(Role.PS, "n0"), Placement(Role.WORKER, "n0")])
    b = Allocation.of([Placement(Role.WORKER, "n0"), Placement(Role.WORKER, "n1"), Placement(Role.PS, "n0")])
    assert a == b and a.count(Role.WORKER) == 2 and a.nodes == ("n0", "n1")
    spec = simple_job("j", 2)
    assert Allocation.of([Placement(Role.WORKER, "n0")] * 2).gpus(spec) == 2
