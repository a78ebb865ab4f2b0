"""`simulate --market / --autoscale`: cost columns, revocations, autoscaled nodes, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmaster.cli.main import main

CLUSTER = """nodes:
  - {name: od, count: 1, gpu: 4, gpuType: k80, zone: us-east1-c, pricePerHour: 1.99}
  - {name: spot, count: 2, gpu: 4, gpuType: k80, zone: z, transient: true, pricePerHour: 0.73}
"""


def test_cost_and_revocations_in_table_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER)
    (tmp_path / "avail.csv").write_text("time,zone,type,available\n0,z,k80,2\n3000,z,k80,0\n6000,z,k80,2\n")
    args = ["simulate", "--workload", "synthetic:12:30", "--cluster", str(tmp_path / "c.yaml"), "--policy", "fifo",
            "--market", str(tmp_path / "avail.csv"), "--no-plots", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    table = capsys.readouterr().out
    for row in ("cost (cluster)", "GPU-hours transient", "GPU-hours on-demand", "revocations", "work lost (GPU-h)"):
        assert row in table
    fifo = json.loads((tmp_path / "out/report.json").read_text())["policies"]["fifo"]
    market = fifo["market"]
    assert market["revocations"] == 2  # both spot nodes at 3000
    assert market["cost"] >= market["jobs_cost"] > 0
    assert sum(j["cost"] for j in fifo["jobs"]) == pytest.approx(market["jobs_cost"], abs=1e-4)


def test_autoscale_from_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 1-CPU-node on-premises cluster: every GPU job runs on nodes the autoscaler adds, and they all go."""
    (tmp_path / "c.yaml").write_text("nodes:\n  - {name: head, cpu: 4, memory: 8Gi}\n")
    (tmp_path / "a.yaml").write_text(
        "autoscale:\n  idleTimeout: 120\n  nodeTypes:\n"
        "    - {gpuType: v100, zone: z, gpu: 4, cpu: 48, memory: 192Gi, maxTransient: 3, maxOnDemand: 1}\n")
    args = ["simulate", "--workload", "synthetic:10:30", "--cluster", str(tmp_path / "c.yaml"), "--policy", "fifo",
            "--autoscale", str(tmp_path / "a.yaml"), "--no-plots", "--out", str(tmp_path / "out")]
    assert main(args) == 0
    report = json.loads((tmp_path / "out/report.json").read_text())
    fifo = report["policies"]["fifo"]
    assert fifo["summary"]["finished"] == 10 and not fifo["rejected"]
    assert fifo["market"]["nodes_added"] >= 1 and fifo["market"]["gpu_hours_transient"] > 0
    assert "nodes added / removed" in capsys.readouterr().out


def test_replace_delay_with_autoscale_is_one_line_not_ignored(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The autoscaler replaces revoked nodes itself: `--replace-delay` beside `--autoscale` did nothing."""
    (tmp_path / "a.yaml").write_text(
        "autoscale:\n  nodeTypes:\n    - {gpuType: v100, zone: z, gpu: 4, maxTransient: 1, maxOnDemand: 1}\n")
    (tmp_path / "trace.csv").write_text("time,zone,type,available\n0,z,v100,1\n")
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--policy", "fifo", "--no-plots",
                 "--market", str(tmp_path / "trace.csv"), "--autoscale", str(tmp_path / "a.yaml"),
                 "--replace-delay", "60"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("trainmaster: error: --replace-delay: has no effect with --autoscale"), err


@pytest.mark.parametrize(("content", "needle"), [
    ("autoscale:\n  nodeTypes: []\n", "autoscale.nodeTypes: list should have at least 1 item"),
    ("autoscale:\n  nodeTypes:\n    - {gpuType: t4, maxOnDemand: 1}\n", "onDemandPrice: is required"),
    ("nodes: []\n", "autoscale: missing or not a mapping"),
])
def test_bad_autoscale_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                        needle: str) -> None:
    (tmp_path / "a.yaml").write_text(content)
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--autoscale",
                 str(tmp_path / "a.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainmaster: error: ") and needle in err[0], err


def test_bad_market_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.csv").write_text("time,zone,type,available\n0,z,k80,many\n")
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--market", str(tmp_path / "m.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "m.csv:2" in err[0], err
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--market", str(tmp_path / "no")]) == 2
    assert "--market: cannot read" in capsys.readouterr().err


def test_notice_option_sets_the_market_s_warning_and_defaults_to_gce_s(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`--notice` (the transient-node tests shorten the wait with it); unset it stays GCE's 30 s."""
    import argparse

    from trainmaster.cli import market as market_cli
    from trainmaster.core.market import GCE_NOTICE

    (tmp_path / "m.csv").write_text("time,zone,type,available\n0,z,k80,1\n")
    p = argparse.ArgumentParser()
    market_cli.add_options(p)
    default = market_cli.setup(p.parse_args(["--market", str(tmp_path / "m.csv")])).market
    short = market_cli.setup(p.parse_args(["--market", str(tmp_path / "m.csv"), "--notice", "5"])).market
    assert getattr(default, "notice", None) == GCE_NOTICE == 30.0 and getattr(short, "notice", None) == 5.0
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--market", str(tmp_path / "m.csv"),
                 "--notice", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--notice" in err[0], err


@pytest.mark.parametrize(("option", "value"), [("--notice", "5"), ("--replace-delay", "2")])
def test_market_timing_options_without_a_market_are_one_line_not_ignored(
        option: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--notice` and `--replace-delay` time the market's revocations: without `--market` they did nothing."""
    assert main(["simulate", "--workload", "synthetic:2", "--cluster", "1x4", "--policy", "fifo", "--no-plots",
                 option, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"trainmaster: error: {option}: needs --market (pass --market lifetime.csv or a trace, "
                   f"or drop {option})"], err
