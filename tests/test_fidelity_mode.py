"""`--fidelity pollux`: the first start is charged, decisions fall on rounds, jobs are as long as the peer says.

The job-length figures are recomputed here from the raw profile rows with the
formulas of Pollux's simulator (workloads/pollux_peer.py names them), so each
test checks the model's arithmetic against the data, not against itself.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from trainmaster.cli.main import main
from trainmaster.cli.simulate import config_for, sim_config, simulate_one
from trainmaster.cli.simulate_cmd import FIDELITY
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.core.events import Event, JobRunning
from trainmaster.core.job import Role, simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob
from trainmaster.workloads.pollux import load_pollux, load_profile
from trainmaster.workloads.pollux_peer import PeerTruth, peer_model

POLLUX_TIRESIAS_MEAN_JCT = 4038.0  # Pollux (OSDI'21): Tiresias in its simulator, workloads 1-8 on 16x4


class Recorder(SimEngine):
    """The real engine, keeping every event it hands over."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.seen: list[Event] = []

    def wait(self, timeout: float | None) -> list[Event]:
        events = super().wait(timeout)
        self.seen.extend(events)
        return events


class Decisions(Controller):
    """The real controller, noting when it decides."""

    decided: list[float]

    def cycle(self) -> Plan:
        self.__dict__.setdefault("decided", []).append(self.clock.now())
        return super().cycle()


def _jobs(*rows: tuple[str, float, int, float]) -> Workload:
    """(id, submit second, GPUs, seconds of work at that size) per job."""
    return Workload("t", tuple(WorkloadJob(jid, at, simple_job(jid, gpus), LinearTruth(work, gpus))
                               for jid, at, gpus, work in rows))


def _run(workload: Workload, config: SimConfig, policy: str = "fifo") -> tuple[Decisions, Recorder]:
    engine = Recorder(parse_shorthand("1x4"), workload, config)
    controller = Decisions(engine, make_policy(policy), check=True)
    controller.run()
    return controller, engine


def _running_at(engine: Recorder) -> dict[str, float]:
    return {e.job_id: e.time for e in engine.seen if isinstance(e, JobRunning)}


# -- the first start --------------------------------------------------------------------------------

def test_first_start_is_charged_in_pollux_mode_and_free_by_default() -> None:
    work = _jobs(("a", 10.0, 4, 100.0))
    charged, engine = _run(work, sim_config("pollux", round=0))
    assert _running_at(engine) == {"a": 40.0}  # submitted at 10, started at once, tasks up 30 s later
    assert charged.outcomes()[0].jct == 130.0
    free, engine = _run(work, sim_config("default"))
    assert _running_at(engine) == {"a": 10.0} and free.outcomes()[0].jct == 100.0
    asked, engine = _run(work, sim_config("default", start_delay=12.5))
    assert _running_at(engine) == {"a": 22.5} and asked.outcomes()[0].jct == 112.5


# -- rounds ---------------------------------------------------------------------------------------------

def test_rounds_hold_decisions_to_round_ends_and_keep_true_times() -> None:
    """Pollux's simulator sees an arrival or a job's end at the next 60 s round; JCTs keep the true times."""
    work = _jobs(("a", 7.0, 4, 100.0), ("b", 100.0, 4, 50.0))
    controller, engine = _run(work, sim_config("pollux"))
    assert controller.decided and all(t % 60 == 0 for t in controller.decided), controller.decided
    # a: seen at 60, up at 90, done at 190 (not 240); b: seen at 120, waits for a's GPUs, which free at the
    # round after a's end (240), up at 270, done at 320.
    assert _running_at(engine) == {"a": 90.0, "b": 270.0}
    jct = {o.id: o.jct for o in controller.outcomes()}
    assert jct == {"a": 190.0 - 7.0, "b": 320.0 - 100.0}
    assert {o.id: o.first_start for o in controller.outcomes()} == {"a": 60.0, "b": 240.0}
    # Event-driven, the same jobs start the moment they arrive or the GPUs free up.
    plain, engine = _run(work, sim_config("default"))
    assert _running_at(engine) == {"a": 7.0, "b": 107.0}
    assert {o.id: o.jct for o in plain.outcomes()} == {"a": 100.0, "b": 57.0}


def test_policy_wake_ups_are_rounded_to_rounds_too() -> None:
    """tiresias asks to be woken for a demotion; in rounds it is woken at a round's end, never between."""
    work = _jobs(*((f"j{i}", 5.0 + 13 * i, 2 + i % 3, 9000.0 + 700 * i) for i in range(8)))
    controller, _ = _run(work, sim_config("pollux"), policy="tiresias")
    assert len(controller.decided) > 8 and all(t % 60 == 0 for t in controller.decided)
    assert all(o.finish is not None for o in controller.outcomes())


def test_mode_defaults_and_overrides() -> None:
    assert FIDELITY["pollux"].start_delay == FIDELITY["pollux"].restart_delay == 30.0
    pollux = sim_config("pollux")
    assert (pollux.start_delay, pollux.restart_delay, pollux.round) == (30.0, 30.0, 60.0)
    assert sim_config("pollux", round=0).round is None  # 0 = event-driven
    default = sim_config("default")
    assert (default.start_delay, default.restart_delay, default.round) == (0.0, 30.0, None)


# -- job length and speed (Pollux's simulator's model) --------------------------------------------------

def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _point(profiles: Path, app: str, placement: str, local: float) -> tuple[float, float]:
    """(step, sync) at `local`, linear between the two measured local batches around it (mean of repeats)."""
    rows = [r for r in _rows(profiles / app / "placements.csv") if r["placement"] == placement]
    by: dict[float, list[tuple[float, float]]] = {}
    for r in rows:
        by.setdefault(float(r["local_bsz"]), []).append((float(r["step_time"]), float(r["sync_time"])))
    xs = sorted(by)
    mean = {x: (statistics.mean(s for s, _ in by[x]), statistics.mean(y for _, y in by[x])) for x in xs}
    if local in mean:
        return mean[local]
    lo = max(x for x in xs if x < local)
    hi = min(x for x in xs if x > local)
    w = (local - lo) / (hi - lo)
    return tuple(a + (b - a) * w for a, b in zip(mean[lo], mean[hi], strict=True))  # type: ignore[return-value]


def _peer_steps(profiles: Path, app: str, batch: int) -> float:
    """Sum over epochs of (epoch's progress, the smallest over every validation file) / gain at `batch`."""
    files = {int(p.stem.split("-")[1]): _rows(p) for p in (profiles / app).glob("validation-*.csv")}
    epochs = min(len(rows) for rows in files.values())
    ends = [0.0] + [min(float(rows[e]["progress"]) for rows in files.values()) for e in range(epochs)]
    scale = batch / min(files)
    total = 0.0
    for e in range(epochs):
        sqr, var = float(files[batch][e]["grad_sqr"]), float(files[batch][e]["grad_var"])
        total += (ends[e + 1] - ends[e]) / ((var + sqr) / (var / scale + sqr))
    return total


def _alloc(*per_node: int) -> Allocation:
    return Allocation.of(Placement(Role.WORKER, f"n{i}") for i, n in enumerate(per_node) for _ in range(n))


def _truth(profiles: Path, app: str, batch: int) -> PeerTruth:
    return PeerTruth.of(load_profile(profiles / app), batch)


@pytest.fixture
def profiles(shared_data: Path) -> Path:
    return shared_data / "pollux" / "profiles"


def test_ncf_on_one_gpu_accumulates_two_micro_batches(profiles: Path) -> None:
    """ncf 1 GPU at 32768: 1-GPU jobs over the smallest validated batch (256) accumulate, 2 x 16384."""
    truth = _truth(profiles, "ncf", 32768)
    b = truth.model.batching(1, 32768)
    assert (b.micro, b.count, b.batch) == (16384, 2, 32768)
    step, sync = _point(profiles, "ncf", "1", 16384)  # between the rows at local 11606 and 16413
    assert truth.steps_per_second(_alloc(1), simple_job("x")) == pytest.approx(1 / (step + (step - sync)))
    steps = _peer_steps(profiles, "ncf", 32768)
    assert truth.total_steps == pytest.approx(steps)
    runtime = steps * (2 * step - sync)
    assert truth.runtime(1) == pytest.approx(runtime)
    last = float(_rows(profiles / "ncf" / "validation-32768.csv")[-1]["iteration"])  # 1548
    default = last * _point(profiles, "ncf", "1", 32768)[0]
    assert runtime / default == pytest.approx(1.40, abs=0.01)  # the default mode's ncf is 29% shorter


def test_yolov3_local_batch_is_capped_at_8(profiles: Path) -> None:
    """yolov3 64 on 4 GPUs: local 16 over the cap of 8 (profiled up to 16), so two micro-batches of 8."""
    truth = _truth(profiles, "yolov3", 64)
    b = truth.model.batching(4, 64)
    assert (b.micro, b.count, b.batch) == (8, 2, 64)
    step, sync = _point(profiles, "yolov3", "4", 8)
    assert truth.steps_per_second(_alloc(4), simple_job("x", 4)) == pytest.approx(1 / (2 * step - sync))
    steps = _peer_steps(profiles, "yolov3", 64)
    assert truth.total_steps == pytest.approx(steps)
    last = float(_rows(profiles / "yolov3" / "validation-64.csv")[-1]["iteration"])  # 14577
    assert steps / last == pytest.approx(1.096, abs=0.001)  # 64 learns less per sample than 8: 9.6% more steps


def test_cifar10_length_follows_the_gain_and_bert_trains_the_batch_it_can(profiles: Path) -> None:
    cifar = _truth(profiles, "cifar10", 2048)
    last = float(_rows(profiles / "cifar10" / "validation-2048.csv")[-1]["iteration"])  # 3178
    assert cifar.total_steps == pytest.approx(_peer_steps(profiles, "cifar10", 2048))
    assert cifar.total_steps / last == pytest.approx(1.052, abs=0.001)
    bert = peer_model(load_profile(profiles / "bert"))
    b = bert.batching(6, 384)  # local 64 over 12: 6 micro-batches of ceil(64/6) = 11, capped at 384 / 36 -> 10
    assert (b.micro, b.count, b.batch) == (10, 6, 360)
    # 360 is not validated: its gain is interpolated between 192 and 384, so it needs more steps than 384.
    assert bert.cumulative_steps(360.0)[-1] > bert.cumulative_steps(384.0)[-1]


def test_pollux_mode_workload_lengths_and_a_clear_error(shared_data: Path, tmp_path: Path) -> None:
    pollux = shared_data / "pollux"
    wl = load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles", fidelity="pollux")
    job = next(j for j in wl.jobs if j.job_id == "cifar10-0")  # cifar10-0,107,cifar10,6,2048
    assert job.spec.target.steps == round(_peer_steps(pollux / "profiles", "cifar10", 2048)) == 3343
    with pytest.raises(SpecError, match="fidelity: unknown mode 'exact'"):
        load_pollux(pollux / "workloads" / "workload-1.csv", pollux / "profiles", fidelity="exact")
    bare = tmp_path / "profiles" / "ncf"
    bare.mkdir(parents=True)
    for name in ("placements.csv", "scalability.csv"):
        (bare / name).write_text((pollux / "profiles" / "ncf" / name).read_text())
    (bare / "validation-32768.csv").write_text("iteration,metric\n100,0.5\n200,0.6\n")
    csv_path = tmp_path / "w.csv"
    csv_path.write_text("name,time,application,num_replicas,batch_size\nncf-0,0,ncf,1,32768\n")
    with pytest.raises(SpecError, match="lack progress, grad_sqr or grad_var"):
        load_pollux(csv_path, tmp_path / "profiles", fidelity="pollux")
    assert load_pollux(csv_path, tmp_path / "profiles").jobs[0].truth.total_steps == 200  # default mode: fine


@pytest.mark.slow
def test_tiresias_within_5_percent_of_pollux_in_pollux_mode(shared_data: Path) -> None:
    pollux = shared_data / "pollux"
    means = []
    for n in range(1, 9):
        wl = load_pollux(pollux / "workloads" / f"workload-{n}.csv", pollux / "profiles", fidelity="pollux")
        result = simulate_one(wl, parse_shorthand("16x4"), "tiresias", sim_config("pollux"))
        assert result.summary.finished == 160
        means.append(result.summary.mean_jct)
    mean = statistics.mean(means)
    assert abs(mean / POLLUX_TIRESIAS_MEAN_JCT - 1) <= 0.05, f"mean {mean:.0f} s; per workload {means}"


# -- several policies in one call -------------------------------------------------------------------------

def test_a_policys_figures_do_not_depend_on_the_others_compared(tmp_path: Path) -> None:
    """tiresias alone and beside optimus (which learns from reports every 300 s) gives the same figures."""
    run = ["simulate", "--workload", "synthetic:60:30", "--seed", "3", "--cluster", "2x4", "--no-plots"]
    assert main([*run, "--policy", "tiresias", "--out", str(tmp_path / "alone")]) == 0
    assert main([*run, "--policy", "optimus,tiresias", "--out", str(tmp_path / "beside")]) == 0
    alone, beside = (json.loads((tmp_path / d / "report.json").read_text())["policies"] for d in ("alone", "beside"))
    for report in (alone, beside):
        report["tiresias"].pop("wall_seconds")
    assert alone["tiresias"] == beside["tiresias"]
    assert beside["optimus"]["report_interval"] == 300.0 and beside["tiresias"]["report_interval"] is None
    # What the old shared default did to tiresias: reports every 300 s shift its wake-ups, a different run.
    base = sim_config()
    wl = _synthetic()
    shared = simulate_one(wl, parse_shorthand("2x4"), "tiresias", config_for("optimus", base))
    own = simulate_one(wl, parse_shorthand("2x4"), "tiresias", config_for("tiresias", base))
    assert own.summary.mean_jct == pytest.approx(alone["tiresias"]["summary"]["mean_jct"])
    assert not math.isclose(shared.summary.mean_jct, own.summary.mean_jct)


def _synthetic() -> Workload:
    from trainmaster.workloads.loaders import load_workload

    return load_workload("synthetic:60:30", seed=3)


def test_cli_pollux_mode_end_to_end(shared_data: Path, tmp_path: Path) -> None:
    trace = shared_data / "pollux" / "workloads" / "workload-2.csv"
    out = tmp_path / "out"
    assert main(["simulate", "--workload", str(trace), "--limit", "30", "--cluster", "16x4", "--policy", "fifo",
                 "--fidelity", "pollux", "--no-plots", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (report["fidelity"], report["start_delay"], report["restart_delay"], report["round"]) == (
        "pollux", 30.0, 30.0, 60.0)
    jobs = report["policies"]["fifo"]["jobs"]
    assert len(jobs) == 30 and all(j["state"] == "succeeded" for j in jobs)
    assert all(j["first_start"] % 60 == 0 for j in jobs)  # started by a decision, and decisions fall on rounds
    assert any(j["finish"] % 60 for j in jobs)  # ends keep their true times


@pytest.mark.parametrize(("args", "needle"), [
    (["--start-delay", "-1"], "--start-delay: -1.0 is not a duration"),
    (["--round", "inf"], "--round: inf is not a duration"),
    (["--restart-delay", "nan"], "--restart-delay: nan is not a duration"),
])
def test_bad_delay_or_round_is_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--workload", "synthetic:5", "--cluster", "2x4", *args]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
