"""`trainmaster simulate`: replay one workload under several policies and compare them side by side.

Each policy runs the real controller against the sim engine (no simulate flag
anywhere). While it runs, a progress bar shows jobs finished and simulated
time; then one table compares the policies, and `--out` gets `report.json`
and PNG plots (`cli.plots`). Jobs that can never fit the cluster are rejected
by the policies' admit phase; the command then reports them on one line and
exits with code 2 after writing its results.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from trainmaster.cli import market as market_cli
from trainmaster.cli import sim_page
from trainmaster.cli.console import make_console
from trainmaster.cli.simulate_cmd import FIDELITY, LEARNING_REPORT_INTERVAL
from trainmaster.controller.autoscale import MarketSetup, attach
from trainmaster.controller.loop import Controller
from trainmaster.controller.metrics import JobOutcome, Summary
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import Cluster
from trainmaster.core.errors import SpecError
from trainmaster.core.queue import QueueSpec
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import ORACLE, available, make_policy
from trainmaster.policies.snapshot import Policy
from trainmaster.workloads.base import Workload
from trainmaster.workloads.clusters import load_cluster
from trainmaster.workloads.loaders import load_workload

EXIT_REJECTED = 2
TIMELINE_MAX_JOBS = 500  # a per-job timeline is unreadable beyond this

Segments = list[tuple[float, float]]


@dataclass
class Result:
    """What one policy's replay measured: the summary plus what the plots and report need."""

    policy: str
    summary: Summary
    outcomes: list[JobOutcome]
    usage: list[tuple[float, int]]  # (time, GPUs in use) steps
    capacity: int
    running: dict[str, Segments]  # per job: intervals it held resources
    rejected: dict[str, str]  # job id -> reason
    wall_seconds: float
    events: int
    cycles: int
    money: market_cli.MarketFigures | None = None  # cost, GPU-hours, revocations, work lost
    report_interval: float | None = None  # seconds between progress reports in this replay (None: per start)


def learns_online(name: str) -> bool:
    """Whether preset `name` fits models from progress reports (and so needs periodic ones)."""
    return make_policy(name).uses_models


def sim_config(fidelity: str = "default", *, start_delay: float | None = None, restart_delay: float | None = None,
               round: float | None = None, report_interval: float | None = None, seed: int = 0) -> SimConfig:
    """The engine settings of a fidelity mode, each overridden where given (`round=0`: event-driven)."""
    mode = FIDELITY[fidelity]
    rounds = mode.round if round is None else round
    return SimConfig(
        start_delay=mode.start_delay if start_delay is None else start_delay,
        restart_delay=mode.restart_delay if restart_delay is None else restart_delay,
        round=rounds or None,
        report_interval=report_interval,
        seed=seed,
    )


def config_for(policy: str, base: SimConfig, report_interval: float | None = None) -> SimConfig:
    """`base` for preset `policy`: its own report interval unless one is given, so that the presets
    compared beside it never change its figures (a preset that learns online reports every
    `LEARNING_REPORT_INTERVAL` s, the others once per start)."""
    if report_interval is None:
        report_interval = LEARNING_REPORT_INTERVAL if learns_online(policy) else None
    return replace(base, report_interval=report_interval)


def policy_names(text: str) -> list[str]:
    """Parse `--policy`, failing on an unknown or repeated name before anything runs."""
    names = available() if text.strip() == "all" else [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise SpecError("--policy", "names no policy", f"use one or more of {', '.join(available())}")
    seen: set[str] = set()
    for name in names:
        make_policy(name)
        if name in seen:
            raise SpecError("--policy", f"{name!r} is listed twice", "list each policy once")
        seen.add(name)
    return names


def running_segments(record: JobRecord) -> Segments:
    """Intervals in which the job held resources, from its state history."""
    out: Segments = []
    start: float | None = None
    for step in record.history:
        if step.target.active and start is None:
            start = step.time
        elif not step.target.active and start is not None:
            out.append((start, step.time))
            start = None
    if start is not None and record.finish_time is not None:
        out.append((start, record.finish_time))
    return out


Tick = Callable[[float, int], None]  # (simulated now, jobs ended so far)


def simulate_one(workload: Workload, cluster: Cluster, policy: str | Policy, config: SimConfig,
                 tick: Tick | None = None, market: MarketSetup | None = None,
                 queues: Mapping[str, QueueSpec] | None = None) -> Result:
    """Replay `workload` on `cluster` under `policy` (a preset name or a built one); `tick` hears each job's end.

    `market` adds revocations, replacement or the autoscaler (`cli.market`); `queues`: the queues the jobs'
    `spec.queue` name (default: one implicit queue).
    """
    m = market or MarketSetup()
    engine = SimEngine(cluster, workload, config, market=m.market, replace_delay=m.replace_delay)
    controller = Controller(engine, make_policy(policy) if isinstance(policy, str) else policy, queues=queues)
    scaler = attach(controller, engine, m)
    ended = 0

    def listen(what: str, record: JobRecord) -> None:
        nonlocal ended
        if record.state.terminal:
            ended += 1
            if tick is not None:
                tick(engine.clock.now(), ended)

    controller.listeners.append(listen)
    started = time.perf_counter()
    controller.run()
    wall = time.perf_counter() - started
    records = controller.jobs.values()
    return Result(
        policy=controller.policy.name,
        summary=controller.summary(),
        outcomes=controller.outcomes(),
        usage=list(controller.usage.points),
        capacity=cluster.total.gpu,
        running={r.id: running_segments(r) for r in records},
        rejected={r.id: r.message for r in records if r.state is JobState.REJECTED},
        wall_seconds=wall,
        events=engine.events_processed,
        cycles=controller.cycles,
        money=market_cli.figures(controller, engine, scaler),
        report_interval=config.report_interval,
    )


def _check_options(args: argparse.Namespace) -> None:
    for option in ("start_delay", "restart_delay", "round"):
        value = getattr(args, option)
        if value is not None and (not value >= 0 or math.isinf(value)):
            flag = "--" + option.replace("_", "-")
            raise SpecError(flag, f"{value} is not a duration", "use 0 or more seconds")
    if not args.max_factor >= 1.0 or math.isinf(args.max_factor):
        raise SpecError("--max-factor", f"{args.max_factor} is below 1", "use 1 for fixed-size jobs, e.g. 2 to double")
    interval = args.report_interval
    if interval is not None and not 0 < interval < math.inf:
        raise SpecError("--report-interval", f"{interval} is not a positive duration",
                        "use more than 0 simulated seconds, e.g. 300, or leave it out")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as exc:
        raise SpecError("--out", f"cannot write to {path.parent}: {exc.strerror}", "pass a writable folder") from None


def _hms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:,.0f} s"


ROWS: tuple[tuple[str, Callable[[Summary], str]], ...] = (
    ("jobs finished", lambda s: f"{s.finished}/{s.jobs}"),
    ("mean JCT", lambda s: _hms(s.mean_jct)),
    ("median JCT", lambda s: _hms(s.median_jct)),
    ("p95 JCT", lambda s: _hms(s.p95_jct)),
    ("p99 JCT", lambda s: _hms(s.p99_jct)),
    ("makespan", lambda s: _hms(s.makespan)),
    ("mean queueing delay", lambda s: _hms(s.mean_queueing)),
    ("GPU utilization", lambda s: "-" if math.isnan(s.gpu_utilization) else f"{100 * s.gpu_utilization:.1f}%"),
    ("restarts (failures)", lambda s: f"{s.restarts:,}"),
    ("resizes", lambda s: f"{s.resizes:,}"),
    ("preemptions", lambda s: f"{s.preemptions:,}"),
)


def comparison_table(title: str, results: Sequence[Result]) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    for r in results:
        table.add_column(r.policy, justify="right")
    for label, show in ROWS:
        table.add_row(label, *(show(r.summary) for r in results))
    table.add_row("rejected", *(str(len(r.rejected)) for r in results))
    if all(r.money is not None for r in results):
        for label, cells in market_cli.rows([r.money for r in results if r.money is not None]):
            table.add_row(label, *cells)
    return table


def _finite(value: object) -> object:
    """JSON has no NaN: write null instead."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def report(args: argparse.Namespace, workload: Workload, cluster: Cluster,
           results: Sequence[Result], config: SimConfig) -> dict[str, object]:
    return {
        "workload": workload.name,
        "jobs": len(workload),
        "cluster": args.cluster,
        "nodes": len(cluster),
        "gpus": cluster.total.gpu,
        "seed": args.seed,
        "fidelity": args.fidelity,
        "start_delay": config.start_delay,
        "restart_delay": config.restart_delay,
        "round": config.round,
        "max_factor": args.max_factor,
        "report_interval": args.report_interval,
        "market": None if getattr(args, "market", None) is None else str(args.market),
        "autoscale": None if getattr(args, "autoscale", None) is None else str(args.autoscale),
        "policies": {
            r.policy: {
                "report_interval": r.report_interval,
                "summary": {k: _finite(v) for k, v in r.summary.as_dict().items()},
                "rejected": r.rejected,
                "wall_seconds": round(r.wall_seconds, 3),
                "events": r.events,
                "cycles": r.cycles,
                "market": r.money.as_dict() if r.money is not None else None,
                "jobs": [
                    {"id": o.id, "submit": o.submit, "first_start": o.first_start, "finish": o.finish,
                     "state": o.state.value, "restarts": o.restarts, "resizes": o.resizes,
                     "preemptions": o.preemptions, "gpus": o.gpus_requested,
                     "jct": _finite(o.jct),
                     "cost": round(r.money.job_cost.get(o.id, 0.0), 6) if r.money is not None else None}
                    for o in r.outcomes
                ],
            }
            for r in results
        },
    }


def run(args: argparse.Namespace) -> int:
    names = policy_names(args.policy)
    _check_options(args)
    if args.out is not None:  # fail before a long replay, not after it
        _write(args.out / ".trainmaster-write-test", "")
        (args.out / ".trainmaster-write-test").unlink()
    cluster = load_cluster(args.cluster)
    options = {"seed": args.seed, "max_factor": args.max_factor, "limit": args.limit, "profiles": args.profiles,
               "fidelity": args.fidelity}
    workloads = {False: load_workload(args.workload, oracle=False, **options)}
    if any(name in ORACLE for name in names):  # only reference lines see true durations
        workloads[True] = load_workload(args.workload, oracle=True, **options)
    config = sim_config(args.fidelity, start_delay=args.start_delay, restart_delay=args.restart_delay,
                        round=args.round, seed=args.seed)
    market = market_cli.setup(args, args.seed)
    workload = workloads[False]
    results: list[Result] = []
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(), TextColumn("jobs"),
                  TextColumn("sim {task.fields[sim]}"), TimeElapsedColumn(), console=err, transient=False) as bar:
        for name in names:
            task = bar.add_task(name, total=len(workload), sim="0.0 h")

            def tick(now: float, ended: int, task: TaskID = task) -> None:
                bar.update(task, completed=ended, sim=f"{now / 3600:,.1f} h")

            results.append(simulate_one(workloads[name in ORACLE], cluster, name,
                                        config_for(name, config, args.report_interval), tick, market))
    make_console().print(comparison_table(f"{workload.name} on {args.cluster} ({cluster.total.gpu} GPUs)", results))
    if args.out is not None:
        data = report(args, workload, cluster, results, config)
        _write(args.out / "report.json", json.dumps(data, indent=1))
        _write(args.out / "index.html", sim_page.render(data, results))  # the dashboard, static
        written = ["report.json", "index.html"]
        if not args.no_plots:
            from trainmaster.cli.plots import write_plots  # matplotlib only when plotting

            written += write_plots(results, args.out, timeline=len(workload) < TIMELINE_MAX_JOBS)
        err.print(f"wrote {', '.join(written)} to {args.out}")
    rejected = {jid: reason for r in results for jid, reason in r.rejected.items()}
    if rejected:
        first, reason = next(iter(rejected.items()))
        more = f" and {len(rejected) - 1} more" if len(rejected) > 1 else ""
        print(f"trainmaster: error: rejected {len(rejected)} job(s) that can never run on this cluster: "
              f"{first}: {reason}{more} (shrink them or use a larger cluster)", file=sys.stderr)
        return EXIT_REJECTED
    return 0
