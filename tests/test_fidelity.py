"""Fidelity against a peer simulator: Pollux workloads 1..8 on 16x4 under `tiresias`.

Pollux's simulator (same profiles) reports a mean of the eight average JCTs of
4,038 s for Tiresias; ours must land within 25%. Reads ../shared/data.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from trainmaster.cli.simulate import simulate_one
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.workloads.pollux import load_pollux

POLLUX_TIRESIAS_MEAN_JCT = 4038.0


@pytest.mark.shared
def test_tiresias_mean_jct_within_25_percent_of_pollux(shared_data: Path) -> None:
    pollux = shared_data / "pollux"
    cluster = parse_shorthand("16x4")
    means = []
    for n in range(1, 9):
        workload = load_pollux(pollux / "workloads" / f"workload-{n}.csv", pollux / "profiles")
        result = simulate_one(workload, cluster, "tiresias", SimConfig(restart_delay=30.0))
        assert result.summary.finished == len(workload) == 160
        means.append(result.summary.mean_jct)
    mean = statistics.mean(means)
    assert abs(mean / POLLUX_TIRESIAS_MEAN_JCT - 1) <= 0.25, f"mean of average JCTs {mean:.0f} s; per workload {means}"
