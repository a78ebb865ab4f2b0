"""Per-job sizes over time in one replay (issue 11, seventeenth look): what the trainmaster preset gave each job.

Replays one Pollux workload exactly as `bench.oracle_goodput`'s mode `fitted` (the product preset) and records
every start / resize / stop the controller commits: (time, GPUs, nodes, global batch). Prints, per job of the
types asked, its JCT, its time-weighted mean GPUs and nodes while running, its restarts and its size history;
and per type the sums. `--json FILE` keeps the whole trace to diff two trees' runs (run each tree with its own
`PYTHONPATH`). Bench-only: reads the controller, changes nothing.

    PYTHONPATH=src:. python -m bench.size_trace --load 2 --workload 1 --types imagenet [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence

from bench.presets import CLUSTER, SETTINGS, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.loop import Controller
from trainmaster.core.actions import Action, ActionKind, StopCause
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.policies.registry import make_policy

Step = tuple[float, int, int, int]  # (time, GPUs, nodes, global batch): 0 GPUs = stopped


class TracingController(Controller):
    """A `Controller` that keeps each job's committed sizes (`trace`)."""

    trace: dict[str, list[Step]]

    def _commit(self, action: Action, now: float) -> None:
        super()._commit(action, now)
        if action.kind is not ActionKind.STOP:
            alloc = action.allocation
            self._trace(action.job_id).append((now, len(alloc), len(alloc.nodes), int(action.batch or 0)))

    def _release(self, record: object, now: float, cause: StopCause, reason: str) -> None:
        super()._release(record, now, cause, reason)  # type: ignore[arg-type]
        self._trace(record.id).append((now, 0, 0, 0))  # type: ignore[attr-defined]

    def _trace(self, job_id: str) -> list[Step]:
        if "trace" not in self.__dict__:
            self.trace = defaultdict(list)
        return self.trace[job_id]


def weighted(steps: list[Step], end: float) -> tuple[float, float, float]:
    """(time-weighted mean GPUs, mean nodes, seconds running) over the intervals with GPUs held."""
    gpus = nodes = run = 0.0
    for (t, g, n, _), nxt in zip(steps, [*steps[1:], (end, 0, 0, 0)], strict=True):
        if g:
            dt = nxt[0] - t
            gpus, nodes, run = gpus + g * dt, nodes + n * dt, run + dt
    return (gpus / run, nodes / run, run) if run else (0.0, 0.0, 0.0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=2.0)
    parser.add_argument("--workload", type=int, default=1)
    parser.add_argument("--setting", default="elastic")
    parser.add_argument("--types", default="imagenet", help="job types to print per job (comma list; '' none)")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    started = time.process_time()
    wl = workload(args.load, args.workload, SETTINGS[args.setting], False, "pollux")
    engine = SimEngine(parse_shorthand(CLUSTER), wl, config_for("trainmaster", sim_config("pollux")))
    controller = TracingController(engine, make_policy("trainmaster"))
    controller.run()
    trace = controller.__dict__.get("trace", {})
    types = {t for t in args.types.split(",") if t}
    rows = {}
    per_type: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for o in controller.outcomes():
        rec = controller.jobs[o.id]
        jtype = rec.spec.job_type or ""
        end = o.finish if o.finish is not None else controller.clock.now()
        g, n, run = weighted(trace.get(o.id, []), end)
        jct = o.jct or 0.0
        rows[o.id] = {"type": jtype, "submit": o.submit, "jct": jct, "gpus": g, "nodes": n, "run": run,
                          "restarts": o.resizes + o.preemptions, "steps": trace.get(o.id, [])}
        acc = per_type[jtype]
        acc[0] += 1
        acc[1] += jct
        acc[2] += g * run
        acc[3] += n * run
        if jtype in types:
            hist = " ".join(f"{t:.0f}:{gg}/{nn}/{b}" for t, gg, nn, b in trace.get(o.id, []))
            print(f"{o.id:16} submit {o.submit:7.0f} jct {jct:7.0f} gpus {g:5.2f} nodes {n:4.2f} "
                  f"run {run:7.0f} resizes {o.resizes:3} preempt {o.preemptions:3}  {hist}")
    jcts = [r["jct"] for r in rows.values() if r["jct"]]
    print(f"mean JCT {statistics.mean(jcts):,.0f} s over {len(jcts)} jobs")
    for jtype, (count, jsum, gs, ns) in sorted(per_type.items()):
        print(f"  {jtype:12} jobs {count:4.0f} JCT sum {jsum:10,.0f}  GPU-s {gs:11,.0f}  node-s {ns:10,.0f}")
    print(f"{time.process_time() - started:.0f} s CPU")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
