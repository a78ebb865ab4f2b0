"""The preset comparison bench (bench/presets.py) and the Philly-derived Pollux-format workloads it replays."""

from __future__ import annotations

import csv
import sys
from collections import Counter
from pathlib import Path

import pytest

from trainmaster.core.errors import SpecError
from trainmaster.core.job import Role
from trainmaster.workloads.philly_pollux import CONFIGS, philly_pollux, philly_rows
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerTruth

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the bench lives in bench/

from bench import pollux_bound, presets

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def _philly(tmp_path: Path, rows: list[tuple[str, float, int, float]]) -> Path:
    path = tmp_path / "philly.csv"
    path.write_text(HEADER + "".join(f"{t},{d},{g},{gt},vc1\n" for t, d, g, gt in rows))
    return path


def test_rows_follow_the_recipe(tmp_path: Path) -> None:
    hour = 3600.0
    path = _philly(tmp_path, [
        ("2017-10-03 02:00:05", 100, 1, 0.5 * hour),  # small -> cifar10 or ncf
        ("2017-10-04 03:30:00", 900, 4, 5 * hour),  # 1-10 GPU-h -> deepspeech2 or bert
        ("2017-10-05 09:59:59", 5000, 8, 50 * hour),  # 10-100 -> yolov3
        ("2017-10-06 04:00:00", 90000, 64, 500 * hour),  # 100-1000 -> imagenet
        ("2017-10-06 05:00:00", 30, 1, 10.0),  # under 60 s: dropped
        ("2017-10-06 06:00:00", 99999, 64, 2000 * hour),  # 1,000 GPU-hours or more: dropped
        ("2017-10-06 10:00:00", 600, 1, 600.0),  # 10 o'clock: outside the 2-10 window
    ])
    rows = philly_rows(path, jobs=4, seed=3)
    assert [int(r["time"]) for r in rows] == [5, 3600 + 1800, 2 * 3600, 8 * 3600 - 1]
    apps = [r["application"] for r in rows]
    assert apps[0] in ("cifar10", "ncf") and apps[1] in ("deepspeech2", "bert")
    assert apps[2:] == ["imagenet", "yolov3"]
    for i, r in enumerate(rows):
        assert r["name"] == f"{r['application']}-{i}"
        assert (int(r["num_replicas"]), int(r["batch_size"])) in CONFIGS[r["application"]]
    assert philly_rows(path, jobs=4, seed=3) == rows  # seeded
    with pytest.raises(SpecError, match="has 4 jobs in the window, fewer than 5"):
        philly_rows(path, jobs=5)
    with pytest.raises(SpecError, match="file not found"):
        philly_rows(tmp_path / "nope.csv")
    bad = _philly(tmp_path, [("yesterday", 100, 1, 10.0)])
    with pytest.raises(SpecError, match=r"philly.csv:2: malformed row 'yesterday"):
        philly_rows(bad)


def test_pollux_workload_from_the_real_trace(shared_data: Path) -> None:
    pollux = shared_data / "pollux"
    wl = philly_pollux(pollux / "philly.csv", pollux / "profiles", seed=1, max_factor=2.0, fidelity="pollux")
    assert len(wl) == 160 and wl.name == "philly-pollux-160-seed1"
    assert [j.submit_time for j in wl.jobs] == sorted(j.submit_time for j in wl.jobs)
    assert max(j.submit_time for j in wl.jobs) < 8 * 3600
    mix = Counter(j.spec.job_type for j in wl.jobs)
    assert set(mix) <= set(CONFIGS) and mix["cifar10"] + mix["ncf"] > 80  # most Philly jobs are small
    assert all(j.spec.min_gpus == 1 for j in wl.jobs)  # elastic from 1 GPU
    with (pollux / "workloads" / "workload-1.csv").open() as f:
        published = Counter(r["application"] for r in csv.DictReader(f))
    assert published["ncf"] + published["cifar10"] > 80  # the same shape as Pollux's own


def test_bench_writes_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str], shared_data: Path) -> None:
    out = tmp_path / "presets.md"
    presets.main(["--presets", "fifo,tiresias", "--loads", "1", "--workloads", "1", "--no-philly",
                  "--settings", "fixed", "--out", str(out)])
    text = out.read_text()
    assert "python -m bench.presets --presets fifo,tiresias" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| fifo | fixed |") or line.startswith("| tiresias | fixed |")}
    assert set(rows) == {"fifo", "tiresias"}
    detail = [line for line in text.splitlines() if line.startswith("| tiresias | fixed |")][-1]
    cells = [c.strip() for c in detail.split("|")[3:-1]]
    mean, p50, p99 = (float(c.replace(",", "")) for c in cells[:3])
    assert p50 < mean < p99  # a heavy tail: a few imagenet jobs
    assert cells[5].endswith("%") and 0 < float(cells[6]) <= 1  # utilization, Jain's index
    assert "| *Tiresias (published, Pollux's simulator)* | fixed | 4,038 |" in text


def test_jain_index() -> None:
    assert presets.jain([2.0, 2.0]) == 1.0
    assert presets.jain([1.0, 0.0]) == 0.5
    assert presets.jain([1.0, 3.0]) == pytest.approx(16 / 20)


def test_elastic_free_setting_gives_pollux_freedom(shared_data: Path) -> None:
    """`elastic-free`: 1 to 64 replicas (ncf 1) and batch adaptation, as Pollux's own jobs had."""
    wl = presets.workload(0.5, 1, presets.SETTINGS["elastic-free"], False, "pollux")
    workers = {(j.spec.job_type, j.spec.roles[Role.WORKER].max) for j in wl.jobs}
    assert {hi for app, hi in workers if app == "ncf"} == {1}
    assert {hi for app, hi in workers if app != "ncf"} == {64}
    assert all(j.spec.min_gpus == 1 and j.spec.adaptive_batch is not None for j in wl.jobs)
    fixed = presets.workload(0.5, 1, presets.SETTINGS["fixed"], False, "pollux")
    assert all(j.spec.adaptive_batch is None and j.spec.min_gpus == j.spec.roles[Role.WORKER].max for j in fixed.jobs)


def test_the_bound_is_below_every_requested_size(shared_data: Path) -> None:
    """bench/pollux_bound.py: the best replicas x batch per epoch never runs slower than a request (bert)."""
    seconds, replicas, batch = pollux_bound.best_alone("bert")
    profile = load_profile(shared_data / "pollux" / "profiles" / "bert")
    for size in (1, 4, 6, 8, 16):
        for bsz in profile.validation:
            assert seconds <= PeerTruth.of(profile, bsz).runtime(size) + 1e-6
    assert 1 <= replicas <= 64 and min(profile.validation) <= batch <= max(profile.validation)


def test_a_replica_cap_bounds_the_best_size(shared_data: Path) -> None:
    """bench/pollux_bound.py with a cap (elastic 1..2x): never above the cap, never faster than uncapped."""
    free, _, _ = pollux_bound.best_alone("bert")
    capped, replicas, _ = pollux_bound.best_alone("bert", 12)
    assert replicas <= 12 and capped > free  # bert's best uses 48 replicas, so the cap costs time


def test_the_bound_per_epoch_sums_to_the_bound() -> None:
    """bench/pollux_bound.py: per-epoch bests add up to the bound; yolov3's noise scale grows from ~0 in epoch 0."""
    epochs = pollux_bound.best_per_epoch("yolov3")
    seconds, replicas, batch = pollux_bound.best_alone("yolov3")
    assert abs(sum(e[1] for e in epochs) - seconds) < 1e-6 and (replicas, batch) == epochs[-1][2:]
    assert epochs[0][0] < 1.0 < 100.0 < epochs[-1][0]  # the truth: small batches pay only early
    assert epochs[0][2] * epochs[0][3] < epochs[-1][2] * epochs[-1][3]


def test_workload_ranges_parse_and_a_bad_one_names_the_flag() -> None:
    assert presets.parse_range("1,3-5") == [1, 3, 4, 5]
    with pytest.raises(SystemExit, match=r"--workloads takes numbers and ranges.*'1-x'"):
        presets.parse_range("1-x")
