"""`trainmaster simulate` through the real CLI entry point: results, files, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainmaster.cli.main import main
from trainmaster.workloads.loaders import load_workload

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_compares_policies_and_writes_report_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code = main(["simulate", "--workload", "synthetic:24:30", "--cluster", "3x4", "--policy", "fifo,drf,tiresias,srtf",
                 "--seed", "5", "--out", str(out)])
    assert code == 0
    table = capsys.readouterr().out
    for label in ("fifo", "drf", "tiresias", "srtf", "mean JCT", "p99 JCT", "makespan", "GPU utilization",
                  "restarts (failures)", "resizes", "preemptions", "mean queueing delay"):
        assert label in table
    report = json.loads((out / "report.json").read_text())
    assert report["gpus"] == 12 and report["jobs"] == 24
    assert list(report["policies"]) == ["fifo", "drf", "tiresias", "srtf"]
    for name, result in report["policies"].items():
        summary = result["summary"]
        assert summary["finished"] == 24, name
        assert summary["p99_jct"] >= summary["p95_jct"] >= summary["median_jct"] > 0
        assert 0 < summary["gpu_utilization"] <= 1
        assert len(result["jobs"]) == 24
    fifo = report["policies"]["fifo"]["summary"]
    assert fifo["restarts"] == fifo["resizes"] == fifo["preemptions"] == 0  # fifo never preempts
    tiresias = report["policies"]["tiresias"]["summary"]
    assert tiresias["preemptions"] > 0 and tiresias["restarts"] == 0  # preempted, never failed
    for png in ("jct-cdf.png", "utilization.png", "timeline-fifo.png", "timeline-srtf.png"):
        data = (out / png).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 10_000, png


def test_same_seed_same_report(tmp_path: Path) -> None:
    args = ["simulate", "--workload", "synthetic:30:40", "--cluster", "2x4", "--policy", "tiresias,drf",
            "--seed", "7", "--no-plots"]
    assert main([*args, "--out", str(tmp_path / "a")]) == 0
    assert main([*args, "--out", str(tmp_path / "b")]) == 0
    a, b = (json.loads((tmp_path / d / "report.json").read_text())["policies"] for d in ("a", "b"))
    for name in a:
        a[name].pop("wall_seconds"), b[name].pop("wall_seconds")
    assert a == b


def _cluster_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return str(path)


BAD = [
    ("malformed YAML cluster", lambda p: ["--cluster", _cluster_file(p, "nodes: [ {name: a, gpu: 4\n")], "YAML"),
    ("unknown cluster field", lambda p: ["--cluster", _cluster_file(p, "nodes:\n  - {name: a, gpu: 4, gpus: 2}\n")],
     "nodes[0].gpus: unknown field"),
    ("negative GPUs", lambda p: ["--cluster", _cluster_file(p, "nodes:\n  - {name: a, gpu: -4}\n")], "gpu"),
    ("unknown policy", lambda p: ["--policy", "fifo,lottery"], "unknown policy 'lottery'"),
    ("missing trace file", lambda p: ["--workload", str(p / "nope.csv")], "file not found"),
    ("bad shorthand", lambda p: ["--cluster", "16by4"], "is not a cluster spec"),
    ("negative restart delay", lambda p: ["--restart-delay", "-5"], "--restart-delay"),
    ("max factor below 1", lambda p: ["--max-factor", "0.5"], "--max-factor"),
    ("output folder is a file", lambda p: ["--out", _cluster_file(p, "")], "--out: cannot write"),
]


@pytest.mark.parametrize(("name", "args", "needle"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(name: str, args: object, needle: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--workload", "synthetic:5", "--cluster", "2x4", *args(tmp_path)]  # type: ignore[operator]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainmaster: error: "), err
    assert needle in err[0]


def test_job_larger_than_the_cluster_is_reported_as_rejected(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    workload = "synthetic:40:30"
    too_big = [j.job_id for j in load_workload(workload, seed=1).jobs if j.spec.min_gpus > 4]
    assert too_big, "the seed must produce an 8-GPU job"
    code = main(["simulate", "--workload", workload, "--seed", "1", "--cluster", "1x4", "--policy", "fifo,tiresias",
                 "--out", str(tmp_path), "--no-plots"])
    assert code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"trainmaster: error: rejected {len(too_big)} job(s) that can never run on this cluster")
    report = json.loads((tmp_path / "report.json").read_text())
    for result in report["policies"].values():
        assert sorted(result["rejected"]) == sorted(too_big)
        assert result["summary"]["finished"] == 40 - len(too_big)


def test_real_process_prints_no_traceback(tmp_path: Path) -> None:
    bad = _cluster_file(tmp_path, "nodes:\n  - {name: a, gpu: 4, color: red}\n")
    proc = subprocess.run([sys.executable, "-m", "trainmaster.cli.main", "simulate", "--cluster", bad],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"trainmaster: error: {bad}.nodes[0].color: unknown field (use one of count, cpu, gpu, gpuType, labels, "
        "memory, name, pricePerHour, transient, zone)"]
