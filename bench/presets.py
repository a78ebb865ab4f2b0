"""Every preset side by side: Pollux workloads at loads 0.5-2.0 and Philly-derived ones, fixed and elastic.

Workload sets: Pollux's `workloads*/workload-N.csv` (`workloads` is load 1.0,
`workloads-0.5`, `-1.5`, `-2.0` the other loads; ../shared/README.md) and
Philly-derived workloads of the same format sampled afresh with seed N
(`workloads/philly_pollux.py`), all on 16 nodes x 4 GPUs. Settings: `fixed`
(each job at the size it asked for), `elastic` (1 to 2x that size; presets
that never resize run elastic jobs at 1 GPU) and `elastic-free` (1 to as many
replicas as Pollux's simulator lets Pollux give a job: 64, ncf 1,
`workloads.pollux.peer_max_replicas`; the freedom behind Pollux's published
figures, so the fair comparison with them). In the `pollux` fidelity elastic jobs also
opt into batch-size adaptation as Pollux's jobs do (`spec.adaptiveBatch`: the
smallest to the largest validated batch, learning rate tuned at the submitted
one): a preset that picks batches (trainmaster) trains them at its choice, the
others at the submitted batch, as before. Each preset runs with its own
settings (`cli.simulate.config_for`: optimus and trainmaster learn from reports
every 300 s), in the chosen fidelity mode (default `pollux`: what Pollux's
simulator models, so the published anchors compare).

Per preset, set and setting: mean JCT (the mean of the workloads' average JCTs,
Pollux's figure), p50 and p99 of every job's JCT in the set (numpy), makespan
and GPU utilization (mean over workloads), restarts (checkpoint-restarts per
workload: preemptions + resizes + failures), and Jain's fairness index across
two queues: the same workload with jobs alternating between two equal-weight
queues, x_q = the queue's mean slowdown (JCT over the job's runtime alone at its
requested size), index (sum x)^2 / (2 sum x^2), 1 = both queues fare the same.

    .venv/bin/python -m bench.presets [--presets all] [--loads 0.5,1,1.5,2] [--workloads 1-8] [--philly]
        [--settings fixed,elastic] [--fidelity pollux] [--no-fairness] [--jobs 1] [--out bench/results/presets.md]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import date
from functools import lru_cache
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from trainmaster.cli.simulate import config_for, sim_config, simulate_one
from trainmaster.cli.simulate_cmd import FIDELITY
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.policies.registry import ORACLE, available, make_policy
from trainmaster.workloads.base import Workload
from trainmaster.workloads.philly_pollux import philly_pollux
from trainmaster.workloads.pollux import load_pollux

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux"
OUT = Path(__file__).resolve().parent / "results" / "presets.md"
CLUSTER = "16x4"
# max_factor per setting; elastic-free: 1 to as many replicas as Pollux's simulator allows (64, ncf 1)
SETTINGS = {"fixed": 1.0, "elastic": 2.0, "elastic-free": math.inf}
PHILLY = "philly"
QUEUES = {name: QueueSpec(name) for name in ("q0", "q1")}
# Published means of the 8 workloads' average JCTs in Pollux's simulator (OSDI'21), seconds, by load.
PUBLISHED = {  # (name, setting): {load: seconds}; Tiresias ran jobs at their submitted size
    ("Pollux", "elastic-free"): {0.5: 1534.0, 1.0: 2751.0, 2.0: 5289.0},
    ("Tiresias", "fixed"): {0.5: 2092.0, 1.0: 4038.0, 2.0: 10040.0},
    ("Optimus+Oracle", "elastic-free"): {0.5: 2395.0, 1.0: 5682.0, 2.0: 9721.0},
}


def set_name(load: float | None) -> str:
    return PHILLY if load is None else f"load {load:g}"


@dataclass(frozen=True)
class Task:
    preset: str
    load: float | None  # None: the Philly-derived set
    setting: str
    index: int  # workload number (Pollux) or seed (Philly-derived)
    fidelity: str
    queues: bool  # the two-queue variant


@dataclass(frozen=True)
class Outcome:
    task: Task
    jcts: tuple[float, ...]
    finished: int
    jobs: int
    makespan: float
    utilization: float
    restarts: int
    jain: float | None  # two-queue variant only
    cpu: float


@lru_cache(maxsize=8)
def workload(load: float | None, index: int, max_factor: float, oracle: bool, fidelity: str) -> Workload:
    if load is None:
        return philly_pollux(DATA / "philly.csv", DATA / "profiles", seed=index, max_factor=max_factor,
                             oracle=oracle, fidelity=fidelity)
    folder = "workloads" if load == 1.0 else f"workloads-{load:g}"
    if not (DATA / folder).is_dir():
        folder = f"workloads-{load}"
    return load_pollux(DATA / folder / f"workload-{index}.csv", DATA / "profiles", max_factor=max_factor,
                       oracle=oracle, fidelity=fidelity)


def two_queues(wl: Workload) -> Workload:
    """The same jobs, alternating between queues q0 and q1 in submit order."""
    jobs = tuple(replace(j, spec=replace(j.spec, queue=f"q{i % 2}")) for i, j in enumerate(wl.jobs))
    return Workload(name=f"{wl.name}-2q", jobs=jobs)


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one value holds everything."""
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def run(task: Task) -> Outcome:
    started = time.process_time()
    wl = workload(task.load, task.index, SETTINGS[task.setting], task.preset in ORACLE, task.fidelity)
    config = config_for(task.preset, sim_config(task.fidelity))
    queues = None
    if task.queues:
        wl, queues = two_queues(wl), QUEUES
    result = simulate_one(wl, parse_shorthand(CLUSTER), task.preset, config, queues=queues)
    jcts = tuple(o.jct for o in result.outcomes if o.jct is not None and o.state.value == "succeeded")
    fairness = None
    if task.queues:
        alone = {j.job_id: j.spec.estimate for j in workload(task.load, task.index, 1.0, True, task.fidelity).jobs}
        queue_of = {j.job_id: j.spec.queue for j in wl.jobs}
        slow: dict[str, list[float]] = {}
        for o in result.outcomes:
            runtime = alone.get(o.id)
            if o.jct is not None and runtime:
                slow.setdefault(queue_of[o.id], []).append(o.jct / runtime)
        fairness = jain([statistics.mean(v) for v in slow.values()]) if len(slow) == 2 else math.nan
    s = result.summary
    return Outcome(task, jcts, s.finished, s.jobs, s.makespan, s.gpu_utilization,
                   s.restarts + s.resizes + s.preemptions, fairness, time.process_time() - started)


def parse_range(text: str) -> list[int]:
    """`--workloads`' form, `1,3-5` -> [1, 3, 4, 5]; anything else ends the run with one line naming the flag."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        sys.exit(f"--workloads takes numbers and ranges, e.g. 1,2 or 1-8 (got {text!r})")
    return out


def _fmt(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds:,.0f}"


@dataclass
class Cell:
    outcomes: list[Outcome]
    fairness: list[float]

    def mean(self) -> float:
        return statistics.mean(statistics.mean(o.jcts) if o.jcts else math.nan for o in self.outcomes)

    def pooled(self, q: float) -> float:
        jcts = [j for o in self.outcomes for j in o.jcts]
        return float(np.percentile(jcts, q)) if jcts else math.nan

    def row(self) -> list[str]:
        n = len(self.outcomes)
        unfinished = sum(o.jobs - o.finished for o in self.outcomes)
        fair = f"{statistics.mean(self.fairness):.3f}" if self.fairness else "-"
        return [
            _fmt(self.mean()) + ("" if not unfinished else f" ({unfinished} unfinished)"),
            _fmt(self.pooled(50)), _fmt(self.pooled(99)),
            _fmt(statistics.mean(o.makespan for o in self.outcomes)),
            f"{statistics.mean(o.restarts for o in self.outcomes):,.0f}",
            f"{100 * statistics.mean(o.utilization for o in self.outcomes):.1f}%",
            fair, str(n),
        ]


def tasks(args: argparse.Namespace) -> Iterator[Task]:
    loads: list[float | None] = [float(x) for x in args.loads.split(",") if x.strip()]
    if args.philly:
        loads.append(None)
    for load in loads:
        for setting in args.settings:
            for preset in args.presets:
                for index in args.workloads:
                    yield Task(preset, load, setting, index, args.fidelity, False)
                    if args.fairness:
                        yield Task(preset, load, setting, index, args.fidelity, True)


def render(args: argparse.Namespace, outcomes: list[Outcome], wall: float, command: str) -> str:
    cells: dict[tuple[str, str, str], Cell] = {}
    for o in outcomes:
        t = o.task
        cell = cells.setdefault((set_name(t.load), t.preset, t.setting), Cell([], []))
        if t.queues:
            if o.jain is not None and not math.isnan(o.jain):
                cell.fairness.append(o.jain)
        else:
            cell.outcomes.append(o)
    sets = list(dict.fromkeys(set_name(o.task.load) for o in outcomes))
    lines = [
        "# Presets side by side",
        "",
        f"Command: `{command}` ({date.today().isoformat()}; {len(outcomes)} replays, {wall:,.0f} s wall, "
        f"{sum(o.cpu for o in outcomes):,.0f} s CPU). Fidelity `{args.fidelity}` "
        f"({FIDELITY[args.fidelity].doc}); cluster {CLUSTER}; workloads {args.workloads} "
        "(Pollux workload numbers; seeds of the Philly-derived set). Method: bench/presets.py's docstring.",
        "",
        "## Mean JCT (s): mean of the workloads' average JCTs",
        "",
        "| preset | setting | " + " | ".join(sets) + " |",
        "| --- | --- |" + " ---: |" * len(sets),
    ]
    for preset in args.presets:
        for setting in args.settings:
            got = [cells.get((s, preset, setting)) for s in sets]
            row = ["-" if c is None or not c.outcomes else _fmt(c.mean()) + (
                "" if len(c.outcomes) == len(args.workloads) else f" ({len(c.outcomes)} of {len(args.workloads)})")
                for c in got]
            lines.append(f"| {preset} | {setting} | " + " | ".join(row) + " |")
    for (name, setting), by_load in PUBLISHED.items():
        row = []
        for s in sets:
            load = None if s == PHILLY else float(s.split()[1])
            row.append(_fmt(by_load[load]) if load in by_load else "-")
        lines.append(f"| *{name} (published, Pollux's simulator)* | {setting} | " + " | ".join(row) + " |")
    for s in sets:
        lines += ["", f"## {s}" + (" (Philly-derived, Pollux format)" if s == PHILLY else " (Pollux workloads)"), "",
                  "| preset | setting | mean JCT s | p50 s | p99 s | makespan s | restarts/wl | GPU util "
                  "| Jain 2 queues | workloads |",
                  "| --- | --- |" + " ---: |" * 8]
        for preset in args.presets:
            for setting in args.settings:
                cell = cells.get((s, preset, setting))
                if cell is not None and cell.outcomes:
                    lines.append(f"| {preset} | {setting} | " + " | ".join(cell.row()) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--presets", default="all", help=f"comma-separated, or all ({', '.join(available())})")
    parser.add_argument("--loads", default="0.5,1,1.5,2", help="Pollux loads to run (empty: none)")
    parser.add_argument("--workloads", default="1-8",
                        help="workload numbers (and Philly-derived seeds), e.g. 1,2 or 1-8")
    parser.add_argument("--philly", action=argparse.BooleanOptionalAction, default=True,
                        help="also the Philly-derived set (default: yes)")
    parser.add_argument("--settings", default="fixed,elastic", help="comma-separated: fixed, elastic, elastic-free")
    parser.add_argument("--fidelity", choices=sorted(FIDELITY), default="pollux")
    parser.add_argument("--fairness", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the two-queue variant for Jain's index (default: yes)")
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes (default 1: the machine is shared)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if not DATA.is_dir():
        sys.exit(f"needs ../shared/data/pollux (not found at {DATA})")
    args.presets = available() if args.presets == "all" else [p.strip() for p in args.presets.split(",") if p.strip()]
    for name in args.presets:
        make_policy(name)
    args.settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if not set(args.settings) <= set(SETTINGS) or args.jobs < 1:
        sys.exit(f"--settings takes {', '.join(SETTINGS)}; --jobs at least 1")
    args.workloads = parse_range(args.workloads)
    todo = list(tasks(args))
    command = ("python -m bench.presets " + " ".join(sys.argv[1:] if argv is None else argv)).strip()
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    pool = Pool(args.jobs) if args.jobs > 1 else None
    try:
        results = pool.imap_unordered(run, todo) if pool else map(run, todo)
        for n, outcome in enumerate(results, start=1):
            outcomes.append(outcome)
            t = outcome.task
            print(f"[{n}/{len(todo)}] {t.preset} {set_name(t.load)} {t.setting} #{t.index}"
                  f"{' 2q' if t.queues else ''}: mean JCT "
                  f"{statistics.mean(outcome.jcts) if outcome.jcts else math.nan:,.0f} s ({outcome.cpu:.1f} s CPU)",
                  file=sys.stderr, flush=True)
            if n < len(todo):  # what has run so far, should the run be stopped (a cell shows how many workloads)
                partial = f"{command} -- partial: {n} of {len(todo)} replays"
                args.out.write_text(render(args, outcomes, time.perf_counter() - started, partial))
    finally:
        if pool:
            pool.close()
    text = render(args, outcomes, time.perf_counter() - started, command)
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out} (pid {os.getpid()})", file=sys.stderr)


if __name__ == "__main__":
    main()
