"""`trainmaster simulate` with parameter-server workloads (`ps:N[:RATE]`) and `--report-interval`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmaster.cli.main import main
from trainmaster.core.errors import SpecError
from trainmaster.core.job import Architecture, Role
from trainmaster.workloads.loaders import load_workload

PS_RUN = ["simulate", "--workload", "ps:30", "--cluster", "4x4", "--policy", "fifo,optimus", "--no-plots"]


def _report(out: Path) -> dict[str, dict[str, dict[str, float]]]:
    policies: dict[str, dict[str, dict[str, float]]] = json.loads((out / "report.json").read_text())["policies"]
    return policies


def test_ps_workload_with_reports_runs_both_policies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "reported"
    assert main([*PS_RUN, "--report-interval", "300", "--out", str(out)]) == 0
    assert "ps-30-seed0" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["jobs"] == 30 and report["report_interval"] == 300.0
    policies = report["policies"]
    assert list(policies) == ["fifo", "optimus"]
    for name, result in policies.items():
        assert result["summary"]["finished"] == 30, name
        assert all(job["state"] == "succeeded" for job in result["jobs"]), name
    fifo, optimus = policies["fifo"]["summary"], policies["optimus"]["summary"]
    # Optimus fits each job's speed and loss curve from the reports, so it resizes jobs and beats fifo.
    assert fifo["resizes"] == 0 and optimus["resizes"] > 0
    assert fifo["restarts"] == optimus["restarts"] == 0  # nothing failed: resizes are not restarts
    assert optimus["mean_jct"] < fifo["mean_jct"]


def test_report_interval_defaults_to_300_s_only_for_a_preset_that_learns(tmp_path: Path) -> None:
    """Optimus needs periodic reports to learn; without the flag it gets 300 s, the same run as asking for it.

    The default is per preset: fifo beside optimus still reports once per start.
    """
    learned, explicit, plain = tmp_path / "learned", tmp_path / "explicit", tmp_path / "plain"
    assert main([*PS_RUN, "--out", str(learned)]) == 0
    assert main([*PS_RUN, "--report-interval", "300", "--out", str(explicit)]) == 0
    policies = json.loads((learned / "report.json").read_text())["policies"]
    assert policies["optimus"]["report_interval"] == 300.0 and policies["fifo"]["report_interval"] is None
    default, asked = _report(learned)["optimus"]["summary"], _report(explicit)["optimus"]["summary"]
    assert default == asked and default["resizes"] > 0
    fifo_only = [arg if arg != "fifo,optimus" else "fifo" for arg in PS_RUN]
    assert main([*fifo_only, "--out", str(plain)]) == 0  # no learner: one report per start, fast replays
    assert json.loads((plain / "report.json").read_text())["policies"]["fifo"]["report_interval"] is None
    assert _report(plain)["fifo"]["summary"] == _report(learned)["fifo"]["summary"]  # optimus beside it: no change


BAD = [
    (["--workload", "ps:"], "--workload: 'ps:' is not a parameter-server workload (write ps:N"),
    (["--workload", "ps:x"], "--workload: 'ps:x' is not a parameter-server workload"),
    (["--workload", "ps:0"], "--workload: 'ps:0' is not a parameter-server workload"),
    (["--workload", "ps:5:0"], "ps:N:JOBS_PER_HOUR"),
    (["--workload", "ps:5:1:2"], "is not a parameter-server workload"),
    (["--report-interval", "0"], "--report-interval: 0.0 is not a positive duration"),
    (["--report-interval", "-5"], "--report-interval"),
    (["--report-interval", "nan"], "--report-interval"),
    (["--report-interval", "inf"], "--report-interval"),
]


@pytest.mark.parametrize(("args", "needle"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_forms_exit_2_with_one_line(
    args: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--workload", "ps:3", "--cluster", "2x4", "--policy", "fifo", "--no-plots", *args]
    assert main([*argv, "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainmaster: error: "), err
    assert needle in err[0]
    assert "Traceback" not in captured.err and not (tmp_path / "report.json").exists()


def test_loader_builds_seeded_parameter_server_jobs() -> None:
    wl = load_workload("ps:20", seed=4)
    assert len(wl) == 20
    for job in wl.jobs:
        assert job.spec.architecture is Architecture.PARAMETER_SERVER
        assert set(job.spec.roles) == {Role.WORKER, Role.PS}
        assert job.spec.target.loss is not None and job.truth.total_steps > 0
    assert load_workload("ps:20", seed=4).jobs == wl.jobs
    assert load_workload("ps:20", seed=5).jobs != wl.jobs
    # RATE is jobs per hour: ten times the rate, arrivals ten times as dense, same jobs otherwise.
    dense = load_workload("ps:20:200", seed=4)
    assert dense.jobs[-1].submit_time == pytest.approx(wl.jobs[-1].submit_time / 10, rel=1e-3)
    assert [j.spec for j in dense.jobs] == [j.spec for j in wl.jobs]
    assert len(load_workload("ps:20", seed=4, limit=7)) == 7


@pytest.mark.parametrize("text", ["ps:", "ps:x", "ps:0", "ps:-3", "ps:4:abc"])
def test_loader_rejects_bad_ps_forms(text: str) -> None:
    with pytest.raises(SpecError, match=r"write ps:N or ps:N:JOBS_PER_HOUR") as err:
        load_workload(text)
    assert err.value.field == "--workload" and "\n" not in str(err.value)
