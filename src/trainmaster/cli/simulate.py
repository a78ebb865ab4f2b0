"""`trainmaster simulate`: replay a workload under several policies and compare them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainmaster.controller.loop import Controller
from trainmaster.controller.metrics import Summary
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.errors import SpecError
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.base import Workload
from trainmaster.workloads.synthetic import synthetic


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="replay a workload under policies and compare them")
    p.add_argument("--workload", default="synthetic:200", help="a trace path, or synthetic:N")
    p.add_argument("--cluster", default="4x4", help="shorthand like 16x4, or a cluster file")
    p.add_argument("--policy", default="fifo", help="comma-separated presets")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--restart-delay", type=float, default=30.0, help="checkpoint-restart seconds")
    p.add_argument("--out", type=Path, default=None, help="directory for report.json")
    p.set_defaults(func=run)


def load_workload(text: str, seed: int) -> Workload:
    if text.startswith("synthetic:"):
        count = text.split(":", 1)[1]
        if not count.isdigit() or int(count) <= 0:
            raise SpecError("--workload", f"{text!r} has no job count", "write synthetic:200")
        return synthetic(int(count), seed=seed)
    raise SpecError("--workload", f"{text!r} is not a known workload", "write synthetic:N or a trace path")


def simulate_one(workload: Workload, cluster_spec: str, policy: str, seed: int, restart_delay: float) -> Summary:
    engine = SimEngine(parse_shorthand(cluster_spec), workload, SimConfig(restart_delay=restart_delay, seed=seed))
    controller = Controller(engine, make_policy(policy))
    controller.run()
    return controller.summary()


def run(args: argparse.Namespace) -> int:
    policies = [p.strip() for p in args.policy.split(",") if p.strip()]
    for name in policies:
        make_policy(name)  # fail fast on an unknown name
    workload = load_workload(args.workload, args.seed)
    results = {name: simulate_one(workload, args.cluster, name, args.seed, args.restart_delay) for name in policies}
    table = Table(title=f"{workload.name} on {args.cluster}")
    table.add_column("metric")
    for name in policies:
        table.add_column(name, justify="right")
    for field in Summary.__dataclass_fields__:
        table.add_row(field, *(f"{getattr(results[n], field):,.2f}" if isinstance(getattr(results[n], field), float)
                               else str(getattr(results[n], field)) for n in policies))
    Console().print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {name: s.as_dict() for name, s in results.items()}
        (args.out / "report.json").write_text(json.dumps(report, indent=2))
    return 0
