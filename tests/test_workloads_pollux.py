"""Pollux workloads and profiles: job length, placement-dependent step time, fallbacks, loss curve.

Expected figures are read from the shared profile files themselves (rows quoted
in comments), so each test checks the loader's arithmetic against the data.
"""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.errors import SpecError
from trainmaster.core.job import Role, simple_job
from trainmaster.workloads.pollux import (
    PEER_MAX_REPLICAS,
    PolluxTruth,
    canonical_placement,
    load_pollux,
    load_profile,
    node_order,
    peer_max_replicas,
)


def _alloc(**per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, node) for node, n in per_node.items() for _ in range(n))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _step(profiles: Path, app: str, placement: str, local: int) -> tuple[float, float]:
    rows = [
        r
        for r in _rows(profiles / app / "placements.csv")
        if r["placement"] == placement and int(r["local_bsz"]) == local
    ]
    assert rows, (app, placement, local)
    return (sum(float(r["step_time"]) for r in rows) / len(rows), sum(float(r["sync_time"]) for r in rows) / len(rows))


@pytest.fixture
def pollux(shared_data: Path) -> Path:
    return shared_data / "pollux"


def test_workload_jobs_and_lengths(pollux: Path) -> None:
    wl = load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles")
    assert len(wl) == 160
    assert [j.submit_time for j in wl.jobs] == sorted(j.submit_time for j in wl.jobs)
    job = next(j for j in wl.jobs if j.job_id == "cifar10-0")  # cifar10-0,107,cifar10,6,2048
    assert job.submit_time == 107 and job.spec.job_type == "cifar10"
    assert job.spec.min_gpus == 6 and job.spec.roles[Role.WORKER].max == 6
    last = _rows(pollux / "profiles" / "cifar10" / "validation-2048.csv")[-1]
    assert job.truth.total_steps == float(last["iteration"]) == 3178
    assert job.spec.target.steps == 3178 and job.spec.target.epochs == 100
    assert job.spec.estimate is None


def test_elastic_range_and_oracle_estimate(pollux: Path) -> None:
    wl = load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles", max_factor=1.5, oracle=True)
    job = next(j for j in wl.jobs if j.job_id == "cifar10-0")
    worker = job.spec.roles[Role.WORKER]
    assert (worker.min, worker.max) == (1, 9)
    # The oracle runs the requested 6 replicas packed on 4-GPU nodes: 4 on one node, 2 on another.
    speed = job.truth.steps_per_second(_alloc(n0=4, n1=2), job.spec)
    assert job.spec.estimate == pytest.approx(job.truth.total_steps / speed)
    with pytest.raises(SpecError, match="max_factor"):
        load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles", max_factor=0.5)


def test_free_elastic_range_is_what_pollux_allows(pollux: Path) -> None:
    """max_factor=inf: 1 to the peer simulator's cap (64 replicas, max batch // min local batch; ncf 1)."""
    assert peer_max_replicas(load_profile(pollux / "profiles" / "ncf")) == 1
    bert = load_profile(pollux / "profiles" / "bert")  # 384 // 4 = 96, capped at 64
    assert peer_max_replicas(bert) == PEER_MAX_REPLICAS == 64
    wl = load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles", max_factor=math.inf)
    ranges = {(j.spec.job_type, j.spec.roles[Role.WORKER].min, j.spec.roles[Role.WORKER].max) for j in wl.jobs}
    assert ("ncf", 1, 1) in ranges and ("cifar10", 1, 64) in ranges
    assert all(lo == 1 for _, lo, _ in ranges) and {hi for _, _, hi in ranges} == {1, 64}


def test_exact_placement_step_time(pollux: Path) -> None:
    profile = load_profile(pollux / "profiles" / "cifar10")
    truth = PolluxTruth(profile, 256, None)  # type: ignore[arg-type]
    spec = simple_job("j", 4)
    step, _ = _step(pollux / "profiles", "cifar10", "4", 64)  # 4,64,0.0684...: 256 / 4 replicas = 64 each
    assert truth.steps_per_second(_alloc(n0=4), spec) == pytest.approx(1 / step)
    assert truth.steps_per_second(Allocation(), spec) == 0.0


def test_interpolates_local_batch_and_rotates_placement(pollux: Path) -> None:
    profile = load_profile(pollux / "profiles" / "cifar10")
    # 2 GPUs on n0 and 1 on n1 is placement "12"; 512 / 3 replicas -> local batch 171, between 129 and 182.
    lo, _ = _step(pollux / "profiles", "cifar10", "12", 129)
    hi, _ = _step(pollux / "profiles", "cifar10", "12", 182)
    expected = lo + (hi - lo) * (171 - 129) / (182 - 129)
    assert profile.step_time([2, 1], 512) == pytest.approx(expected)
    assert profile.step_time([1, 2], 512) == pytest.approx(expected)
    assert canonical_placement([2, 1, 3]) == "132" and canonical_placement([3, 0, 1]) == "13"
    assert canonical_placement([11]) != canonical_placement([1, 1])  # no digit for 11: never "11"
    assert sorted(["n10", "n2", "n1"], key=node_order) == ["n1", "n2", "n10"]
    truth = PolluxTruth(profile, 512, None)  # type: ignore[arg-type]
    # n2 holds 2, n3 and n10 one each: ordered n2, n3, n10 -> (2, 1, 1) -> "112".
    speed = truth.steps_per_second(_alloc(n10=1, n2=2, n3=1), simple_job("j", 4))
    assert speed == pytest.approx(1 / profile.placements["112"].time(128))


def test_gradient_accumulation_beyond_largest_local_batch(pollux: Path) -> None:
    profile = load_profile(pollux / "profiles" / "yolov3")
    step, sync = _step(pollux / "profiles", "yolov3", "1", 16)  # yolov3's largest local batch on "1" is 16
    # Batch 64 on one GPU: 4 micro-steps of 16; only the last one synchronizes.
    assert profile.step_time([1], 64) == pytest.approx(4 * step - 3 * sync)
    small, _ = _step(pollux / "profiles", "yolov3", "1", 4)
    assert profile.step_time([4], 8) == pytest.approx(profile.placements["4"].time(4))
    assert profile.step_time([1], 2) == pytest.approx(small)  # below the smallest measured: clamped


def test_fallbacks_for_unmeasured_placements(pollux: Path) -> None:
    profile = load_profile(pollux / "profiles" / "cifar10")
    # One 8-GPU node: synced like the profiled full 4-GPU node, at the real local batch 512/8 = 64.
    step, _ = _step(pollux / "profiles", "cifar10", "4", 64)
    assert profile.step_time([8], 512) == pytest.approx(step)
    # Six nodes of one replica: scalability.csv's (6 nodes, 6 replicas) rows at local batch 32.
    rows = [
        r
        for r in _rows(pollux / "profiles" / "cifar10" / "scalability.csv")
        if (r["num_nodes"], r["num_replicas"], r["local_bsz"]) == ("6", "6", "32")
    ]
    assert profile.step_time([1] * 6, 192) == pytest.approx(sum(float(r["step_time"]) for r in rows) / len(rows))
    # Five nodes lie halfway between the 4-node placement "1112" and the 6-node scalability figure.
    five = profile.step_time([1] * 5, 160)
    four = profile.placements["1112"].time(32)
    six = profile.step_time([1] * 6, 192)
    assert five == pytest.approx((four + six) / 2)


def test_loss_curves_decrease_in_both_metric_directions(pollux: Path) -> None:
    wl = load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles")
    seen = set()
    for job in wl.jobs:
        app = job.spec.job_type
        if app in seen:
            continue
        seen.add(app)
        total = job.truth.total_steps
        losses = [job.truth.loss(total * k / 50) for k in range(51)]
        assert all(x is not None for x in losses)
        values = [x for x in losses if x is not None]
        assert all(b <= a for a, b in itertools.pairwise(values)), app
        assert values[0] > values[-1] >= 0, app
    assert {"cifar10", "yolov3", "deepspeech2"} <= seen  # accuracy (up) and loss/WER (down) metrics


def test_missing_profile_or_file_names_it(pollux: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such application profile"):
        load_pollux(pollux / "workloads" / "workload-1.csv", tmp_path)
    with pytest.raises(SpecError, match="file not found"):
        load_pollux(tmp_path / "nope.csv", pollux / "profiles")
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\nx,0,cifar10,1,999\n")
    with pytest.raises(SpecError, match="validation-999"):
        load_pollux(bad, pollux / "profiles")


def test_all_workloads_load_and_every_job_has_a_speed(pollux: Path) -> None:
    for folder in sorted(pollux.glob("workloads*")):
        for csv_path in sorted(folder.glob("workload-*.csv")):
            wl = load_pollux(csv_path, pollux / "profiles")
            for job in wl.jobs:
                n = job.spec.min_gpus
                alloc = _alloc(**{f"n{i}": min(4, n - 4 * i) for i in range(math.ceil(n / 4))})
                speed = job.truth.steps_per_second(alloc, job.spec)
                assert speed > 0 and math.isfinite(speed), (csv_path, job.job_id)
