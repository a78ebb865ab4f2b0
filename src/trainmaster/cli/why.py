"""`trainmaster why --workload W --cluster C --policy P --at T [JOB]`: why jobs wait in a simulated run.

Replays the workload up to simulated time T and prints, for JOB or for every
pending job, the reason it waits (quota, gang, reservation, priority, never)
and its predicted start, computed by `controller.why` exactly as the daemon
does for live jobs. Without `--workload`, `why JOB` asks the live server (the
REST command registered by `trainmaster.cli.jobs`), so one `why` serves both.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from trainmaster.cli.console import LONG, make_console
from trainmaster.core.errors import SpecError
from trainmaster.core.timefmt import relative

if TYPE_CHECKING:
    from trainmaster.controller.loop import Controller
    from trainmaster.controller.why import Why


def _options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulated run (give --workload)")
    g.add_argument("--workload", default=None, help="a trace path or synthetic:N: answer for a simulated run")
    g.add_argument("--cluster", default="4x4", help="shorthand like 16x4, or a cluster file")
    g.add_argument("--policy", default="trainmaster", help="a preset")
    g.add_argument("--queues", type=Path, default=None, help="queues YAML")
    g.add_argument("--at", type=float, default=None, help="simulated second to stop at and explain")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--limit", type=int, default=None, help="only the first N jobs of the trace")
    g.add_argument("--oracle", action="store_true", help="jobs' estimates are their true durations")
    g.add_argument("--restart-delay", type=float, default=30.0, help="checkpoint-restart seconds")
    if not any(a.dest == "json" for a in p._actions):
        p.add_argument("--json", action="store_true", help="print JSON for scripts")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    existing = sub.choices.get("why")
    if existing is None:
        p = sub.add_parser("why", help="why jobs wait and when they should start")
        p.add_argument("job", nargs="?", default=None)
        _options(p)
        p.set_defaults(func=run)
        return
    live = existing.get_default("func")
    for action in existing._actions:  # the live command needs JOB; a simulated run may list all pending jobs
        if action.dest == "job":
            action.nargs, action.default = "?", None
    _options(existing)

    def either(args: argparse.Namespace) -> int:
        if args.workload is not None:
            return run(args)
        if args.job is None:
            raise SpecError("why", "no job given", "name a job, or pass --workload ... --at T for a simulated run")
        code: int = live(args)
        return code

    existing.set_defaults(func=either)


def replay(args: argparse.Namespace) -> Controller:
    # Imported here: every CLI call registers `why`; only a simulated run needs the controller and simulator.
    from trainmaster.controller.loop import Controller
    from trainmaster.controller.why import advance_to
    from trainmaster.core.queue import load_queues
    from trainmaster.engines.sim.engine import SimConfig, SimEngine
    from trainmaster.policies.registry import make_policy
    from trainmaster.workloads.clusters import load_cluster
    from trainmaster.workloads.loaders import load_workload

    if args.at is None:
        raise SpecError("--at", "is required with --workload", "give the simulated second to explain, e.g. --at 3600")
    workload = load_workload(args.workload, seed=args.seed, oracle=args.oracle, limit=args.limit)
    queues = load_queues(args.queues) if args.queues else None
    engine = SimEngine(load_cluster(args.cluster), workload, SimConfig(restart_delay=args.restart_delay,
                                                                        seed=args.seed))
    controller = Controller(engine, make_policy(args.policy), queues=queues)
    advance_to(controller, args.at)
    return controller


def run(args: argparse.Namespace) -> int:
    from trainmaster.controller.why import explain, explain_pending

    controller = replay(args)
    answers: list[Why] = [explain(controller, args.job)] if args.job else explain_pending(controller)
    if args.json:
        out: Any = [a.as_dict() for a in answers]
        print(json.dumps(out[0] if args.job else out, indent=2))
        return 0
    console = make_console()
    now = controller.clock.now()
    if args.job:
        answer = answers[0]
        console.print(answer.line())
        for t, text in answer.history:
            console.print(f"  t={t:>10.0f}  {text}")
        return 0
    table = Table(title=f"{len(answers)} pending job(s) at t={now:.0f} under {args.policy}")
    for column in ("job", "waits for", "predicted start", "reason"):
        table.add_column(column, **(LONG if column == "reason" else {}))
    for a in sorted(answers, key=lambda a: (a.eta is None, a.eta or 0.0, a.job_id)):
        table.add_row(a.job_id, a.category, "-" if a.eta is None else f"t={a.eta:.0f} ({relative(a.eta, now)})",
                      escape(a.reason))
    console.print(table)
    return 0
