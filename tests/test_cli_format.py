"""What the CLI shows and parses, without a server: times, arrays, history columns and accounting,
`--help` of every command, what building the parser imports, piped tables, the ETA of a job behind a
reservation, logfmt lines, phase timings."""

from __future__ import annotations

import argparse
import io
import logging
import re
import subprocess
import sys
import time
from datetime import datetime

import pytest
from rich.console import Console
from rich.table import Table

from queue_builders import J, simulate
from server_harness import REPO, cli
from trainmaster.cli.console import LONG, make_console
from trainmaster.cli.history import DEFAULT, columns
from trainmaster.cli.main import build_parser, main
from trainmaster.cli.sbatch import parse_array
from trainmaster.controller.why import explain_pending
from trainmaster.core.errors import SpecError
from trainmaster.core.timefmt import duration, humanize, parse_when, relative
from trainmaster.policies.trainmaster import build
from trainmaster.server.history import exit_code, gpu_seconds
from trainmaster.server.logs import LogfmtFormatter


def test_durations_and_relative_times_read_like_people_write_them() -> None:
    assert [duration(s) for s in (4.25, 42, 187, 7500, 270000)] == ["4.2s", "42s", "3m07s", "2h05m", "3d03h"]
    assert (relative(1000, 813), relative(813, 1000), relative(1000.2, 1000)) == ("in 3m07s", "3m07s ago", "now")


def test_epoch_instants_in_reasons_become_clock_times_and_simulated_ones_stay() -> None:
    now = 1_763_900_000.0
    text = humanize("reserved n-0 from t=1763900187", now)
    assert "t=" not in text and text.endswith("(in 3m07s)")
    assert re.search(r"from \d\d:\d\d:\d\d|from \d{4}-\d\d-\d\d", text)
    assert humanize("reserved n-0 from t=1000", now) == "reserved n-0 from t=1000"


def test_since_and_until_accept_spans_iso_dates_and_epochs() -> None:
    now = 1_763_900_000.0
    assert parse_when("2h", now, "--since") == now - 7200
    assert parse_when("1d", now, "--since") == now - 86400
    assert parse_when("2026-11-23", now, "--since") == datetime(2026, 11, 23).timestamp()
    assert parse_when("1763000000", now, "--until") == 1763000000
    with pytest.raises(SpecError, match="--since: 'soon' is not a time"):
        parse_when("soon", now, "--since")


def test_array_indices() -> None:
    assert parse_array("0-3") == [0, 1, 2, 3]
    assert parse_array("0-9:4") == [0, 4, 8]
    assert parse_array("1,3,5") == [1, 3, 5]
    assert parse_array("1-3,2,7") == [1, 2, 3, 7]
    for bad, message in (("a-b", "not an index range"), ("5-1", "empty range"), ("0-5000", "more than 1000")):
        with pytest.raises(SpecError, match=message):
            parse_array(bad)


def test_history_format_picks_and_orders_columns() -> None:
    assert columns(None) == list(DEFAULT)
    assert columns("id,state,exit,gpuhours") == ["id", "state", "exit_code", "gpu_hours"]
    with pytest.raises(SpecError, match="--format: unknown column 'nope'"):
        columns("id,nope")


def test_gpu_hours_integrate_the_allocation_changes() -> None:
    # start on 4 GPUs at 100, resized to 8 at 400, preempted (0) at 1000, restarted on 2 at 1500, ended at 2100
    changes = [(0.0, "accepted", 0), (100.0, "start", 4), (400.0, "resize", 8), (1000.0, "preempted", 0),
               (1500.0, "start", 2), (2100.0, "succeeded", 0)]
    assert gpu_seconds(changes, end=2100.0) == 4 * 300 + 8 * 600 + 2 * 600
    assert gpu_seconds(changes[:5], end=1800.0) == 4 * 300 + 8 * 600 + 2 * 300  # still running at 1800
    assert (exit_code("succeeded", ""), exit_code("failed", "worker-0 exited with code 3")) == (0, 3)
    assert exit_code("cancelled", "cancelled by the user") is None


def test_every_command_has_a_one_line_description_and_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert {"submit", "queue", "history", "hold", "release", "update", "why", "server", "simulate"} <= set(sub.choices)
    for name in sub.choices:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        description = text.split("\n\n")[1]
        assert description.strip() and "\n" not in description.strip().replace("\n ", " ").rstrip(), name
        assert re.search(rf"^examples?:\n  trainmaster {name}\b", text, re.M), f"{name} --help has no example"


def test_long_cells_end_in_an_ellipsis_on_a_terminal_and_are_whole_when_piped(
        capsys: pytest.CaptureFixture[str]) -> None:
    reason = "dependency: waits for " + ", ".join(f"job-number-{i}" for i in range(8)) + " to succeed"

    def render(console: Console) -> str:
        table = Table(box=None)
        table.add_column("JOB")
        table.add_column("REASON", **LONG)
        table.add_row("j", reason)
        with console.capture() as out:
            console.print(table)
        return out.get()

    terminal = render(Console(width=60, force_terminal=True, color_system=None))
    assert "…" in terminal and len(terminal.splitlines()) == 2 and reason not in terminal
    piped = make_console()  # pytest captures stdout: not a terminal
    assert not piped.is_terminal
    assert reason in render(piped) and "…" not in render(piped)


def test_version_through_the_real_cli() -> None:
    done = cli("--version")
    assert done.returncode == 0 and re.fullmatch(r"trainmaster \S+\n", done.stdout)


def test_building_the_parser_imports_neither_the_controller_nor_numpy_nor_httpx() -> None:
    """Every CLI call builds every command's parser: the simulator's modules (controller, policies, numpy),
    the client's httpx and the specs' pydantic load only inside the command that runs them (they were ~0.6 s
    of a ~0.8 s call)."""
    code = ("import sys, trainmaster.cli.main as m; m.build_parser(); "
            "print(*sorted(n for n in sys.modules if n.split('.')[0] in ('numpy', 'httpx', 'pydantic') "
            "or n.startswith('trainmaster.controller')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.split() == [], done.stdout + done.stderr


def test_piped_simulate_table_is_never_folded(capsys: pytest.CaptureFixture[str]) -> None:
    policies = "fifo,drf,tiresias,srtf,optimus,edl,trainmaster"
    assert main(["simulate", "--workload", "synthetic:12:30", "--cluster", "2x4", "--policy", policies,
                 "--no-plots"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "fifo" in line)
    assert all(name in header for name in policies.split(","))  # one row, however wide
    assert len(header) > 80
    assert any("mean JCT" in line and "s" in line.split("mean JCT")[1] for line in lines)


def test_a_job_behind_a_reservation_is_not_predicted_to_start_now() -> None:
    # `a` holds half the cluster with no estimate; `b` (the whole cluster) is the blocked head; `c` would fit
    # in the free half but is held back for `b`: nothing predicts when room appears, so no predicted start
    # (it used to say "in 0s").
    run = simulate("2x4", build("t", elastic=False), J("a", 4, 0, 1000), J("b", 8, 10, 500),
                   J("c", 2, 20, 100, fields={"estimate": 100}), until=40)
    answers = {w.job_id: w for w in explain_pending(run.controller)}
    assert answers["c"].category == "reservation"
    assert answers["c"].eta is None and "no predicted start" in answers["c"].line()
    # With an estimate for `a`, `c` is predicted after `b`'s reservation, never now.
    run = simulate("2x4", build("t", elastic=False), J("a", 4, 0, 1000, fields={"estimate": 1000}),
                   J("b", 8, 10, 500, fields={"estimate": 500}), J("c", 2, 20, 2000, fields={"estimate": 2000}),
                   until=40)
    answers = {w.job_id: w for w in explain_pending(run.controller)}
    assert answers["b"].eta == 1000
    assert answers["c"].eta is not None and answers["c"].eta >= 1500
    assert "(in 24m20s)" in answers["c"].line()
    run.controller.run()
    assert run.starts()["c"] >= answers["c"].eta


def test_cycle_plans_carry_phase_timings() -> None:
    run = simulate("1x4", build("t"), J("a", 2), until=1)
    timings = run.controller.last_plan.timings
    assert {"admit", "size", "place", "after"} <= set(timings) and all(s >= 0 for s in timings.values())


def test_logfmt_lines() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LogfmtFormatter())
    logger = logging.getLogger("trainmaster.test-logfmt")
    logger.addHandler(handler)
    logger.propagate = False
    logger.warning("request", extra={"fields": {"method": "GET", "path": "/v1/jobs", "status": 200, "ms": 1.25}})
    logger.warning('free text with "quotes"')
    first, second = stream.getvalue().splitlines()
    assert re.fullmatch(r"ts=\S+Z level=warning logger=trainmaster\.test-logfmt event=request method=GET "
                        r"path=/v1/jobs status=200 ms=1\.25", first)
    assert second.endswith(r'event=log msg="free text with \"quotes\""')
    assert time.strftime("%Y") in first
