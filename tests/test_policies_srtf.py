"""Scenario table for `srtf`: shortest oracle remaining time first, preemptive."""

from __future__ import annotations

import pytest

from builders import cluster, pending, preempted, running, snapshot, started
from trainmaster.policies.srtf import make

CASES = [
    ("a shorter job preempts a longer running one", (1, 4),
     [running("long", 4, estimate=1000.0, runtime=100.0), pending("short", 4, estimate=200.0, submit=5)],
     {"short"}, {"long"}),
    ("a job longer than what the runner has left waits", (1, 4),
     [running("long", 4, estimate=1000.0, runtime=100.0), pending("mid", 4, estimate=950.0, submit=5)],
     set(), set()),
    ("shortest first among pending; jobs without an estimate go last", (1, 4),
     [pending("none", 2, submit=0), pending("s300", 2, estimate=300.0, submit=1),
      pending("s100", 2, estimate=100.0, submit=2)], {"s100", "s300"}, set()),
    ("work-conserving around a big blocked job", (1, 4),
     [running("r", 2, estimate=50.0, runtime=10.0), pending("big", 4, estimate=60.0, submit=1),
      pending("small", 2, estimate=5000.0, submit=2)], {"small"}, set()),
]


@pytest.mark.parametrize(("name", "shape", "jobs", "want_started", "want_preempted"), CASES,
                         ids=[c[0] for c in CASES])
def test_srtf_scenarios(name: str, shape: tuple[int, int], jobs: list, want_started: set[str],
                        want_preempted: set[str]) -> None:
    snap = snapshot(cluster(*shape), *jobs, now=1000.0)
    plan = make().decide(snap)
    assert started(plan, snap) == want_started
    assert preempted(plan, snap) == want_preempted
