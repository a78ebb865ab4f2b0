"""bench/transient.py's calibration: the simulated PS job takes as long as the measured GCE runs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench.transient import PHILLY_VC, calibrate, hybrid_run, icac_run, measured

from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.market import LifetimeMarket, read_lifetimes


def test_simulated_on_demand_runs_match_the_measured_durations(shared_data: Path) -> None:
    """The speed table comes from the same runs, so the 1, 4 and 8 worker on-demand durations (64k steps) land
    within 3% of the measured means (the table takes the median run, the check the mean)."""
    speeds = calibrate(shared_data)
    assert speeds[1] == pytest.approx(4.55, abs=0.01)
    for workers, folder in ((1, "k80_on_demand/k80-demand"), (4, "k80_on_demand/4-demand"),
                            (8, "k80_on_demand/8-demand")):
        seconds, cost, revocations = icac_run(speeds, workers, False, "us-east1-c", None)
        assert seconds == pytest.approx(measured(shared_data, folder)[0], rel=0.03)
        assert revocations == 0 and cost > 0


def test_transient_runs_are_cheaper_and_revocations_slow_them(shared_data: Path) -> None:
    speeds = calibrate(shared_data)
    lifetimes = read_lifetimes(shared_data / "transient-gce/lifetime/lifetime.csv")
    base, od_cost, _ = icac_run(speeds, 4, False, "us-central1-c", None)
    runs = [icac_run(speeds, 4, True, "us-central1-c", LifetimeMarket(lifetimes, seed=s)) for s in range(10)]
    assert all(cost < od_cost / 2 for _, cost, _ in runs)
    hit = [t for t, _, revs in runs if revs]
    assert hit and all(t > base for t in hit)  # us-central1-c lost 14 of 16 K80s: some runs are hit


def test_the_elastic_ps_job_goes_on_with_the_workers_left_and_is_never_slower_than_the_fixed_gang(
        shared_data: Path) -> None:
    """europe-west1-b revokes K80s often: over 10 seeds the elastic job (shrinks at the notice, grows back when
    the replacement joins) takes no longer than the fixed-size gang that waits for each replacement, and
    less in all over the runs a revocation hit."""
    speeds = calibrate(shared_data)
    lifetimes = read_lifetimes(shared_data / "transient-gce/lifetime/lifetime.csv")
    pairs = [(icac_run(speeds, 8, True, "europe-west1-b", LifetimeMarket(lifetimes, seed=s)),
              icac_run(speeds, 8, True, "europe-west1-b", LifetimeMarket(lifetimes, seed=s), "fifo", elastic=False))
             for s in range(10)]
    assert all(e[0] <= f[0] + 1e-6 for e, f in pairs)
    hit = [(e, f) for e, f in pairs if e[2] and f[2]]
    assert hit and sum(e[0] for e, _ in hit) < sum(f[0] for _, f in hit)


def test_the_hybrid_cluster_on_spot_is_far_cheaper_and_barely_slower(shared_data: Path) -> None:
    """The first 60 jobs of the Philly-derived Gavel trace: the cloud bill on transient offers is >= 60% below
    all on-demand at <= 10% slower mean JCT (revocations do come), and a job that keeps no on-demand anchor runs
    on transient nodes only: nearly all GPU-hours outside the fixed part are transient."""
    lifetimes = read_lifetimes(shared_data / "transient-gce/lifetime/lifetime.csv")
    work = load_workload(str(shared_data / PHILLY_VC), oracle=True, limit=60)
    od = hybrid_run(work, "trainmaster", "on-demand", lifetimes, 0)
    spot = hybrid_run(work, "trainmaster", "spot", lifetimes, 0)
    assert spot["revocations"] > 0 and spot["finished"] == od["finished"] == 60
    assert spot["cost"] <= 0.4 * od["cost"] and spot["mean_jct"] <= 1.1 * od["mean_jct"]
    assert spot["on_demand_h"] <= 8 * spot["makespan"] / 3600  # on-demand GPU-hours: the fixed part's 8 GPUs at most
