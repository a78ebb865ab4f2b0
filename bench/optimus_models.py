"""Quality of the online models in the simulator: speed error after n configurations, remaining-time error.

A. Speed-model error (mean absolute percentage error over every configuration a job may
   run on) after it has observed 1, 3, 5 and 10 distinct configurations, each seen in 3
   reports with 3% noise, in random order. Jobs are taken in arrival order, so type priors
   come from earlier jobs only. Workloads: 100 PS jobs (`ps_workload`, 1-8 workers x 1-8
   servers), and Pollux workload-1..8 all-reduce jobs (1 to 2x requested replicas,
   packed on 4-GPU nodes, measured step times).
B. In a full optimus run (reports every 300 s, 3% noise on reported speed; PS losses carry
   their truth's 2% noise, Pollux losses none): at every report,
   the predicted remaining time on the job's current allocation against the truth
   (true steps left / true speed), by fraction of the job's life; and the remaining-steps
   error of PS jobs, whose target is a loss value (the convergence fit decides it).

Only the bench reads the ground truth; the models see reports.

    .venv/bin/python -m bench.optimus_models
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from pathlib import Path

from trainmaster.controller.learning import Learning
from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.events import Report
from trainmaster.core.job import Role
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel, ModelBook, config_of
from trainmaster.models.speed import Config
from trainmaster.policies.optimus import Optimus
from trainmaster.workloads.base import Workload, WorkloadJob
from trainmaster.workloads.pollux import load_pollux
from trainmaster.workloads.ps_truth import PSTruth, ps_workload

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux"
POINTS = (1, 3, 5, 10)


def packed(workers: int, ps: int = 0) -> Allocation:
    """Workers packed on 4-GPU nodes, servers one per node from the first."""
    return Allocation.of([Placement(Role.WORKER, f"n{i // 4}") for i in range(workers)]
                         + [Placement(Role.PS, f"n{i}") for i in range(ps)])


def grid(job: WorkloadJob) -> list[tuple[int, int]]:
    w_max = job.spec.roles[Role.WORKER].max
    ps = job.spec.roles.get(Role.PS)
    return [(w, p) for w in range(1, w_max + 1) for p in (range(1, ps.max + 1) if ps else (0,))]


def true_speed(job: WorkloadJob, w: int, p: int) -> float:
    return job.truth.steps_per_second(packed(w, p), job.spec)


def speed_error(model: JobModel, job: WorkloadJob, cells: list[tuple[int, int]]) -> float:
    errs = []
    for w, p in cells:
        truth = true_speed(job, w, p)
        c = config_of(packed(w, p), model.batch)
        pred = model.speed.steps_per_s(c) if model.speed else 0.0
        errs.append(abs(pred - truth) / truth)
    return 100 * statistics.mean(errs)


def part_a(workload: Workload, use_priors: bool, seed: int = 0) -> dict[int, list[float]]:
    rng = random.Random(seed)
    book = ModelBook(use_priors=use_priors)
    out: dict[int, list[float]] = {n: [] for n in POINTS}
    for job in workload.jobs:
        cells = grid(job)
        order = rng.sample(cells, min(max(POINTS), len(cells)))
        for n, (w, p) in enumerate(order, 1):
            for _ in range(3):
                f = true_speed(job, w, p) * (1 + rng.gauss(0, 0.03))
                book.observe(job.job_id, job.spec, Report(0.0, job.job_id, 0, steps_per_s=f, allocation=packed(w, p)))
            if n in out:
                out[n].append(speed_error(book.model(job.job_id, job.spec), job, cells))
    return out


def part_b(workload: Workload, cluster: str) -> tuple[dict[int, list[float]], dict[int, list[float]], float]:
    """Remaining-time and remaining-steps errors (%) by life decile, and the run's mean JCT."""
    truths = {j.job_id: j for j in workload.jobs}
    config = SimConfig(report_interval=300.0, speed_noise=0.03, seed=1)
    controller = Controller(SimEngine(parse_shorthand(cluster), workload, config), Optimus())
    time_err: dict[int, list[float]] = {d: [] for d in range(10)}
    step_err: dict[int, list[float]] = {d: [] for d in range(10)}

    def sink(report: Report, record: JobRecord) -> None:
        model = controller.models.get(record.id)
        job = truths[record.id]
        alloc = report.allocation
        if not isinstance(model, JobModel) or not alloc or model.remaining is None:
            return
        total = job.truth.total_steps
        left = total - report.step
        if left <= 0:
            return
        decile = min(int(10 * report.step / total), 9)
        c: Config = config_of(alloc, model.batch)
        pred = model.remaining / model.speed.steps_per_s(c) if model.speed else math.inf
        truth = left / job.truth.steps_per_second(alloc, job.spec)
        time_err[decile].append(100 * abs(pred - truth) / truth)
        if isinstance(job.truth, PSTruth):
            step_err[decile].append(100 * abs(model.remaining - left) / left)

    learning = next(s for s in controller.report_sinks if isinstance(s, Learning))
    learning.once_per_snapshot = False  # (the sink reads each report's model: built at the report)
    controller.report_sinks.append(sink)  # after the learning sink: sees the freshly fitted model
    controller.run()
    return time_err, step_err, controller.summary().mean_jct


def fmt(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {statistics.mean(values):.1f} (n={len(values)})" if values else "-"


def main() -> None:
    ps = ps_workload(100, rate_per_hour=20, seed=5)
    sets: list[tuple[str, Callable[[], Workload]]] = [("PS jobs (ps_workload 100)", lambda: ps)]
    if DATA.is_dir():
        for w in range(1, 9):
            sets.append((f"Pollux workload-{w}", lambda w=w: load_pollux(  # type: ignore[misc]
                DATA / "workloads" / f"workload-{w}.csv", DATA / "profiles", max_factor=2)))
    print("A. speed-model MAPE (%) after n observed configurations: median / mean over jobs (jobs)")
    print("| jobs | priors | " + " | ".join(f"n={n}" for n in POINTS) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in POINTS) + " |")
    pollux: dict[tuple[bool, int], list[float]] = {}
    for label, load in sets:
        wl = load()
        for use_priors in (False, True):
            res = part_a(wl, use_priors)
            if label.startswith("Pollux"):
                for n, v in res.items():
                    pollux.setdefault((use_priors, n), []).extend(v)
            else:
                print(f"| {label} | {'type' if use_priors else 'none'} | "
                      + " | ".join(fmt(res[n]) for n in POINTS) + " |", flush=True)
    for use_priors in (False, True):
        if pollux:
            jobs = len(pollux[(use_priors, 1)])
            print(f"| Pollux workload-1..8 ({jobs} jobs) | {'type' if use_priors else 'none'} | "
                  + " | ".join(fmt(pollux[(use_priors, n)]) for n in POINTS) + " |", flush=True)
    print()
    print("B. in an optimus run: |predicted - true| / true (%) at each report, median / mean, by life decile")
    runs: list[tuple[str, Workload, str]] = [("PS jobs on 8x4", ps, "8x4")]
    if DATA.is_dir():
        runs.append(("Pollux workload-1 on 16x4", sets[1][1](), "16x4"))
    for label, wl, cluster in runs:
        time_err, step_err, jct = part_b(wl, cluster)
        print(f"\n{label} (mean JCT {jct:,.0f} s)")
        print("| life | remaining time | remaining steps (loss target) |")
        print("| --- | ---: | ---: |")
        for d in range(10):
            print(f"| {10 * d}-{10 * d + 10}% | {fmt(time_err[d])} | {fmt(step_err[d])} |", flush=True)


if __name__ == "__main__":
    main()
