"""Philly, Tiresias and Gavel trace loaders, and `load_workload`'s format detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.core.job import Role
from trainmaster.workloads.base import LinearTruth
from trainmaster.workloads.gavel import GavelTruth, load_gavel_trace
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.philly import load_philly
from trainmaster.workloads.tiresias import load_tiresias_jobs


def _alloc(**per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, node) for node, n in per_node.items() for _ in range(n))


def test_philly_all_jobs_relative_and_sorted(shared_data: Path) -> None:
    wl = load_philly(shared_data / "pollux" / "philly.csv")
    assert len(wl) == 82_247  # 82,248 lines with commas, one of them the header
    times = [j.submit_time for j in wl.jobs]
    assert times[0] == 0.0 and times == sorted(times)
    # The earliest row: 2017-09-04 10:30:41,2240194.0,8,17921552.0,7f04ca
    first = wl.jobs[0]
    assert first.spec.min_gpus == 8 and first.truth.total_steps == 2240194.0
    assert isinstance(first.truth, LinearTruth) and first.spec.estimate is None
    # 2017-09-07 03:58:57 is 2 d 17 h 28 min 16 s after the first job.
    second = wl.jobs[1]
    assert second.submit_time == 2 * 86400 + 17 * 3600 + 28 * 60 + 16 and second.truth.total_steps == 3256045.0
    assert sum(j.spec.min_gpus for j in wl.jobs if j.spec.min_gpus >= 64) == 6 * 64 + 3 * 128


def test_philly_filter_limit_and_oracle(shared_data: Path) -> None:
    path = shared_data / "pollux" / "philly.csv"
    vc = load_philly(path, cluster_id="6214e9")
    assert len(vc) == 41_226
    few = load_philly(path, cluster_id="6214e9", limit=10, oracle=True)
    assert [j.job_id for j in few.jobs] == [j.job_id for j in vc.jobs[:10]]
    assert all(j.spec.estimate == j.truth.total_steps for j in few.jobs)
    with pytest.raises(SpecError, match="no jobs for cluster 'nope'"):
        load_philly(path, cluster_id="nope")


def test_linear_truth_speed_scales_with_held_gpus(shared_data: Path) -> None:
    job = load_philly(shared_data / "pollux" / "philly.csv", limit=1).jobs[0]  # 8 GPUs
    assert job.truth.steps_per_second(_alloc(n0=8), job.spec) == 1.0
    assert job.truth.steps_per_second(_alloc(n0=4), job.spec) == 0.5


def test_tiresias_jobs(shared_data: Path) -> None:
    wl = load_tiresias_jobs(shared_data / "tiresias" / "60_job.csv", oracle=True)
    assert len(wl) == 60
    job = next(j for j in wl.jobs if j.job_id == "tiresias-1")  # 1,8,30,133,vgg11,147,23
    assert (job.submit_time, job.spec.min_gpus, job.truth.total_steps, job.spec.job_type) == (30, 8, 147, "vgg11")
    assert job.spec.estimate == 147


def test_gavel_trace_and_gpu_type_speeds(shared_data: Path) -> None:
    gavel = shared_data / "gavel"
    wl = load_gavel_trace(
        gavel / "traces" / "physical_cluster" / "small_test.trace", gavel / "simulation_throughputs.json"
    )
    assert len(wl) == 20
    job = wl.jobs[0]  # Transformer (batch size 128) ... 346 steps, scale 2, arrival 0
    assert isinstance(job.truth, GavelTruth)
    assert (job.spec.job_type, job.truth.total_steps, job.spec.min_gpus) == ("Transformer (batch size 128)", 346, 2)
    table = json.loads((gavel / "simulation_throughputs.json").read_text())
    key = "('Transformer (batch size 128)', 2)"
    cluster = parse_shorthand("2x4:k80+2x4:v100")
    k80 = job.truth.steps_per_second(_alloc(**{"n0-0": 2}), job.spec, cluster)
    v100 = job.truth.steps_per_second(_alloc(**{"n1-0": 2}), job.spec, cluster)
    assert k80 == table["k80"][key]["null"] and v100 == table["v100"][key]["null"] and v100 > k80
    # Spread over a K80 node and a V100 node: the slowest type, unconsolidated.
    mixed = job.truth.steps_per_second(_alloc(**{"n0-0": 1, "n1-0": 1}), job.spec, cluster)
    assert mixed == min(table["k80_unconsolidated"][key]["null"], table["v100_unconsolidated"][key]["null"])


def test_gavel_philly_vc_format(shared_data: Path) -> None:
    gavel = shared_data / "gavel"
    trace = sorted((gavel / "traces" / "philly-vc-seed0").glob("*.trace"))[0]
    wl = load_workload(str(trace))
    assert len(wl) > 100 and all(j.truth.total_steps > 0 for j in wl.jobs)


def test_load_workload_detects_each_format(shared_data: Path) -> None:
    pollux = load_workload(str(shared_data / "pollux" / "workloads" / "workload-2.csv"), max_factor=2.0)
    assert pollux.name == "pollux-workloads-workload-2" and any(j.spec.elastic for j in pollux.jobs)
    assert len(load_workload(str(shared_data / "pollux" / "philly.csv"), limit=50)) == 50
    assert load_workload(str(shared_data / "tiresias" / "60_job.csv")).name == "tiresias-60_job"
    gavel = load_workload(str(shared_data / "gavel" / "traces" / "physical_cluster" / "small_test.trace"), limit=5)
    assert len(gavel) == 5 and gavel.jobs[0].spec.job_type == "Transformer (batch size 128)"
    with pytest.raises(SpecError, match="unknown trace format"):
        load_workload(str(shared_data / "tiresias" / "n1g4.csv"))


def test_synthetic_specs() -> None:
    wl = load_workload("synthetic:30:60", seed=3)
    slow = load_workload("synthetic:30:6", seed=3)
    assert len(wl) == 30 and [j.spec.min_gpus for j in wl.jobs] == [j.spec.min_gpus for j in slow.jobs]
    # Ten times the arrival rate: arrivals ten times as dense.
    assert wl.jobs[-1].submit_time == pytest.approx(slow.jobs[-1].submit_time / 10, rel=1e-6)
    assert load_workload("synthetic:30", seed=3).jobs != load_workload("synthetic:30", seed=4).jobs
    elastic = load_workload("synthetic:5", max_factor=2.0)
    assert all(j.spec.elastic for j in elastic.jobs)


@pytest.mark.parametrize(
    "text, match",
    [
        ("synthetic:abc", "synthetic:N"),
        ("synthetic:10:0", "synthetic:N"),
        ("no/such/trace.csv", "file not found"),
    ],
)
def test_bad_workloads_give_one_line(text: str, match: str) -> None:
    with pytest.raises(SpecError, match=match) as err:
        load_workload(text)
    assert "\n" not in str(err.value)


def test_unknown_header(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match="unknown trace format"):
        load_workload(str(path))
    with pytest.raises(SpecError, match="--limit"):
        load_workload("synthetic:3", limit=0)


@pytest.mark.parametrize(
    "duration, gpus, field",
    [("nan", "1", "duration nan"), ("inf", "1", "duration inf"), ("-5", "1", "duration -5.0"),
     ("60", "0", "num_gpus 0")],
)
def test_philly_rows_out_of_range_are_refused_at_their_line(tmp_path: Path, duration: str, gpus: str,
                                                            field: str) -> None:
    """A NaN duration once replayed forever (the job never finished); each out-of-range field is named."""
    path = tmp_path / "philly.csv"
    path.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 06:13:03,60.0,1,60.0,a\n"
                    f"2017-10-09 07:01:55,{duration},{gpus},66.0,a\n")
    with pytest.raises(SpecError, match=f"philly.csv:3: {field} is out of range") as err:
        load_workload(str(path))
    assert "\n" not in str(err.value)
    path.write_text(path.read_text().replace(f"{duration},{gpus},", "0,1,"))  # zero seconds is a valid row
    assert [j.truth.duration for j in load_workload(str(path)).jobs] == [60.0, 0.0]


@pytest.mark.parametrize("row, field", [("7,1,10,100,resnet,nan", "duration nan"),
                                        ("7,0,10,100,resnet,60", "num_gpu 0"),
                                        ("7,1,inf,100,resnet,60", "submit_time inf")])
def test_tiresias_rows_out_of_range_are_refused_at_their_line(tmp_path: Path, row: str, field: str) -> None:
    path = tmp_path / "60_job.csv"
    path.write_text(f"job_id,num_gpu,submit_time,iterations,model_name,duration\n{row}\n")
    with pytest.raises(SpecError, match=f"60_job.csv:2: {field} is out of range"):
        load_workload(str(path))
