"""Record every decision of every preset on fixed workloads, to show a refactor changes no plan.

Each preset replays, in the simulator, Pollux's workloads 1-8 (from
../shared/data, skipped when absent) on 16 nodes x 4 GPUs, with jobs elastic
from 1 to 2x their request and at their requested size (`-fixed`), a synthetic
workload, and the same synthetic workload split over three queues with quotas
and priorities (so reclaim, quota waits and priority preemption happen). After
every decision it writes one line per job whose planned allocation or wait kind
changed since the previous decision:

    TIME <tab> JOB <tab> ALLOCATION <tab> WAIT-KIND <tab> REASON-TEXT

The first four columns are the decision; the text is what people read (a
rewording changes only the last column). `plans_digest` hashes the first four.

    .venv/bin/python -m bench.record_plans --out bench/results/plans [--data ../shared/data] [--only synthetic]
    .venv/bin/python -m bench.record_plans --compare OLD_DIR NEW_DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.queue import QueueSpec
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import ORACLE, make_policy
from trainmaster.policies.snapshot import Plan
from trainmaster.workloads.base import Workload
from trainmaster.workloads.loaders import load_workload

PRESETS = ("fifo", "drf", "tiresias", "srtf", "optimus", "edl", "trainmaster")
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REPORT_INTERVAL = 300.0
SYNTHETIC = "synthetic:120:30"
QUEUES = {
    "prod": QueueSpec("prod", weight=2.0, quota=Resources(gpu=16), priority=1),
    "research": QueueSpec("research", weight=1.0, quota=Resources(gpu=12)),
    "batch": QueueSpec("batch", weight=1.0, quota=Resources(gpu=8), borrowing=False),
}


def wait_kind(plan: Plan, job_id: str) -> str:
    """The kind of wait of a job the plan does not run ("" for a running one)."""
    if job_id in plan.rejected:
        return "never-fits"
    if job_id in plan.allocations:
        return ""
    wait = plan.waits.get(job_id)
    return wait.kind.value if wait is not None else "none"


def queued(workload: Workload) -> Workload:
    """The workload with its jobs dealt round-robin to `QUEUES`, every fifth one at a higher priority."""
    names = list(QUEUES)
    jobs = tuple(dataclasses.replace(j, spec=dataclasses.replace(j.spec, queue=names[i % len(names)],
                                                                  priority=5 if i % 5 == 0 else 0))
                 for i, j in enumerate(workload.jobs))
    return dataclasses.replace(workload, name=workload.name + "-queues", jobs=jobs)


def workloads(data: Path | None, only: str | None, synthetic: str = SYNTHETIC, cluster: str = "8x4"
              ) -> Iterator[tuple[str, Cluster, bool, dict[str, QueueSpec]]]:
    """(workload text, cluster, elastic, queues) for every recorded run.

    `synthetic` and `cluster`: the synthetic runs' workload and cluster."""
    if data is not None and (data / "pollux" / "workloads").is_dir():
        for elastic in (True, False):
            if only in (None, "pollux" if elastic else "pollux-fixed"):
                for i in range(1, 9):
                    yield str(data / "pollux" / "workloads" / f"workload-{i}.csv"), parse_shorthand("16x4"), elastic, {}
    if only in (None, "synthetic"):
        yield synthetic, parse_shorthand(cluster), True, {}
        yield synthetic, parse_shorthand(cluster), True, QUEUES


def record(text: str, cluster: Cluster, elastic: bool, queues: dict[str, QueueSpec], preset: str) -> list[str]:
    """Replay one workload under one preset; the decision lines (module doc)."""
    workload = load_workload(text, oracle=preset in ORACLE, max_factor=2.0 if elastic else 1.0)
    if queues:
        workload = queued(workload)
    engine = SimEngine(cluster, workload, SimConfig(report_interval=REPORT_INTERVAL))
    controller = Controller(engine, make_policy(preset), queues=queues)
    lines: list[str] = []
    last: dict[str, tuple[str, str]] = {}

    def note(plan: Plan) -> None:
        jobs = dict.fromkeys([*last, *plan.allocations, *plan.reasons, *plan.rejected])
        for jid in jobs:
            alloc = plan.allocations.get(jid)
            now = (alloc.describe() if alloc else "-", wait_kind(plan, jid))
            if last.get(jid) != now:
                last[jid] = now
                text = plan.rejected.get(jid) or plan.reasons.get(jid, "")
                lines.append(f"{controller.last_cycle_at:.3f}\t{jid}\t{now[0]}\t{now[1]}\t{text}")

    note(controller.cycle())
    while controller.live or controller.parked or not controller.engine.idle():
        cycles = controller.cycles
        if not controller.step():
            break
        if controller.cycles != cycles:
            note(controller.last_plan)
    return lines


def plans_digest(lines: list[str]) -> str:
    """sha256 of the decision columns (time, job, allocation, wait kind), not the text."""
    h = hashlib.sha256()
    for line in lines:
        h.update(("\t".join(line.split("\t")[:4]) + "\n").encode())
    return h.hexdigest()[:16]


def run_name(text: str, queues: dict[str, QueueSpec]) -> str:
    return Path(text).stem.replace(":", "-") + ("-queues" if queues else "")


def compare(old: Path, new: Path) -> int:
    """Print, per file, how many decisions differ; 1 when any allocation differs."""
    moved = 0
    for path in sorted(old.glob("*.tsv")):
        a = path.read_text().splitlines()
        other = new / path.name
        if not other.is_file():
            print(f"{path.name}: missing in {new}")
            moved += 1
            continue
        b = other.read_text().splitlines()
        cols_a = [tuple(x.split("\t")[:3]) for x in a]
        cols_b = [tuple(x.split("\t")[:3]) for x in b]
        kinds: Counter[tuple[str, str]] = Counter()
        texts = 0
        for x, y in zip(a, b, strict=False):
            xa, ya = x.split("\t"), y.split("\t")
            if xa[3] != ya[3]:
                kinds[(xa[3], ya[3])] += 1
            if xa[4:] != ya[4:]:
                texts += 1
        same = cols_a == cols_b
        moved += not same
        first = next((i for i, (x, y) in enumerate(zip(cols_a, cols_b, strict=False)) if x != y), None)
        kind_text = ", ".join(f"{k[0] or 'run'}->{k[1] or 'run'} x{n}" for k, n in kinds.most_common())
        print(f"{path.name}: {len(a)} vs {len(b)} lines; allocations {'identical' if same else 'DIFFER'}"
              + (f" (first at line {first + 1})" if first is not None else "")
              + f"; wait kinds changed: {kind_text or 'none'}; texts changed: {texts}")
    return 1 if moved else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--only", choices=("pollux", "pollux-fixed", "synthetic"))
    parser.add_argument("--policy", default=",".join(PRESETS))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--synthetic", default=SYNTHETIC, help="the synthetic workload (e.g. synthetic:5000:20)")
    parser.add_argument("--cluster", default="8x4", help="the synthetic workloads' cluster (e.g. 16x4)")
    args = parser.parse_args()
    if args.compare:
        sys.exit(compare(*args.compare))
    if args.out is None:
        parser.error("--out is required unless --compare")
    args.out.mkdir(parents=True, exist_ok=True)
    for text, cluster, elastic, queues in workloads(args.data if args.data.is_dir() else None, args.only,
                                                      args.synthetic, args.cluster):
        for preset in args.policy.split(","):
            lines = record(text, cluster, elastic, queues, preset)
            name = f"{run_name(text, queues)}{'' if elastic else '-fixed'}.{preset}.tsv"
            (args.out / name).write_text("".join(line + "\n" for line in lines))
            print(f"{name}: {len(lines)} decisions, digest {plans_digest(lines)}", flush=True)


if __name__ == "__main__":
    main()
