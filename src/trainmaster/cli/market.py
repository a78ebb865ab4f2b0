"""`simulate`'s market side: revocations (`--market`), replacement, the autoscaler (`--autoscale`), cost columns.

Kept beside `cli.simulate` so that module only calls in: options, the engine
and controller set-up, and the figures each report shows (cost, GPU-hours by
type and transient / on-demand, revocations, work lost). `simulate` and
`server` add these options to their parsers, so the controller, the markets
and the YAML reader are imported only in `setup`, when a command runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainmaster.core.errors import SpecError
from trainmaster.core.gce import GCE_NOTICE

if TYPE_CHECKING:
    from trainmaster.controller.autoscale import Autoscaler, MarketSetup
    from trainmaster.controller.loop import Controller
    from trainmaster.core.market import Market
    from trainmaster.engines.sim.engine import SimEngine

REPLACE_DELAY = 90.0  # seconds: a managed instance group boots a replacement VM


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--market", type=Path, default=None, metavar="FILE",
                   help="revoke transient nodes: the ICAC'19 GCE lifetime.csv (a hazard fitted per GPU type and "
                        "zone, 24 h cap, 30 s notice) or an availability trace CSV time,zone,type,available")
    p.add_argument("--replace-delay", type=float, default=None, metavar="SECONDS",
                   help=f"with --market and no --autoscale: a revoked node is replaced after this many seconds "
                        f"(default {REPLACE_DELAY:g}; a negative value: never replaced)")
    p.add_argument("--notice", type=float, default=None, metavar="SECONDS",
                   help=f"with --market: how long before a revoked node goes it gets the notice "
                        f"(default {GCE_NOTICE:g}, GCE's)")
    p.add_argument("--autoscale", type=Path, default=None, metavar="FILE",
                   help="YAML with an `autoscale:` section (nodeTypes with limits and prices, idleTimeout, "
                        "maxCostPerHour, budget): nodes are added for waiting jobs and given back when idle")


def setup(args: argparse.Namespace, seed: int = 0) -> MarketSetup:
    """Read `--market` and `--autoscale`; every problem is one line naming the option.

    `--notice` and `--replace-delay` act on the market's revocations: without `--market` they are an error,
    never silently ignored (their defaults apply when they are left out); so is `--replace-delay` with
    `--autoscale`, which replaces revoked nodes itself."""
    from trainmaster.controller.autoscale import MarketSetup
    from trainmaster.core.market import autoscale_from_mapping
    from trainmaster.core.spec import load_yaml_text
    from trainmaster.workloads.market import LifetimeMarket, TraceMarket

    for option, value in (("--notice", args.notice), ("--replace-delay", args.replace_delay)):
        if value is not None and args.market is None:
            raise SpecError(option, "needs --market", f"pass --market lifetime.csv or a trace, or drop {option}")
    if args.replace_delay is not None and args.autoscale is not None:
        raise SpecError("--replace-delay", "has no effect with --autoscale (the autoscaler replaces revoked nodes)",
                        "drop --replace-delay, or drop --autoscale to replace each revoked node after a delay")
    notice = GCE_NOTICE if args.notice is None else args.notice
    replace_delay = REPLACE_DELAY if args.replace_delay is None else args.replace_delay
    market: Market | None = None
    if args.market is not None:
        path: Path = args.market
        try:
            head = path.read_text().split("\n", 1)[0].strip().lower()
        except OSError as exc:
            raise SpecError("--market", f"cannot read {path}: {exc.strerror}", "pass lifetime.csv or a trace") from None
        if not math.isfinite(notice) or notice < 0:
            raise SpecError("--notice", f"{notice} is not a duration", "use seconds >= 0, e.g. 30")
        if head.replace(" ", "") == "time,zone,type,available":
            market = TraceMarket.from_csv(path, notice=notice)
        else:
            market = LifetimeMarket.from_csv(path, seed=seed, notice=notice)
    autoscale = None
    if args.autoscale is not None:
        try:
            text = args.autoscale.read_text()
        except OSError as exc:
            raise SpecError("--autoscale", f"cannot read {args.autoscale}: {exc.strerror}",
                            "pass a YAML file with an autoscale: section") from None
        autoscale = autoscale_from_mapping(load_yaml_text(text, str(args.autoscale)), str(args.autoscale))
    if not math.isfinite(replace_delay):
        raise SpecError("--replace-delay", f"{replace_delay} is not a duration", "use seconds, e.g. 90")
    replace = replace_delay if market is not None and autoscale is None and replace_delay >= 0 else None
    return MarketSetup(market, replace, autoscale)


@dataclass(frozen=True)
class MarketFigures:
    """What a run cost and what the market did to it."""

    cost: float  # USD the cluster paid
    jobs_cost: float  # USD charged to jobs (their share of the nodes they held)
    gpu_hours: dict[str, float]  # "k80 transient" -> GPU-hours jobs held
    revocations: int
    work_lost: float  # GPU-hours of work lost to kills (since each job's last checkpoint)
    nodes_added: int = 0
    nodes_removed: int = 0
    job_cost: dict[str, float] = field(default_factory=dict)

    def hours(self, transient: bool) -> float:
        return sum(h for k, h in self.gpu_hours.items() if k.endswith(" transient") == transient)

    def as_dict(self) -> dict[str, object]:
        return {"cost": round(self.cost, 6), "jobs_cost": round(self.jobs_cost, 6),
                "gpu_hours": {k: round(v, 6) for k, v in self.gpu_hours.items()},
                "gpu_hours_transient": round(self.hours(True), 6), "gpu_hours_on_demand": round(self.hours(False), 6),
                "revocations": self.revocations, "work_lost_gpu_hours": round(self.work_lost, 6),
                "nodes_added": self.nodes_added, "nodes_removed": self.nodes_removed}


def figures(controller: Controller, engine: SimEngine, scaler: Autoscaler | None) -> MarketFigures:
    end = controller.clock.now()
    meter = controller.cost
    job_cost = {jid: meter.job_cost(jid, end) for jid in controller.jobs}
    return MarketFigures(
        cost=meter.cluster_dollars(end), jobs_cost=sum(job_cost.values()), gpu_hours=meter.gpu_hours(end),
        revocations=controller.revocations, work_lost=sum(engine.work_lost.values()) / 3600,
        nodes_added=scaler.added if scaler else 0, nodes_removed=scaler.removed if scaler else 0,
        job_cost=job_cost)


def rows(all_figures: Sequence[MarketFigures]) -> list[tuple[str, list[str]]]:
    """The table rows beside the JCT ones: cost, GPU-hours by type and transient / on-demand, revocations."""
    out = [
        ("cost (cluster)", [f"${f.cost:,.2f}" for f in all_figures]),
        ("cost (jobs' share)", [f"${f.jobs_cost:,.2f}" for f in all_figures]),
        ("GPU-hours on-demand", [f"{f.hours(False):,.1f}" for f in all_figures]),
        ("GPU-hours transient", [f"{f.hours(True):,.1f}" for f in all_figures]),
    ]
    types = sorted({k.split(" ")[0] for f in all_figures for k in f.gpu_hours})
    if len(types) > 1:
        for t in types:
            out.append((f"GPU-hours {t}", [f"{sum(h for k, h in f.gpu_hours.items() if k.split(' ')[0] == t):,.1f}"
                                           for f in all_figures]))
    out += [("revocations", [f"{f.revocations:,}" for f in all_figures]),
            ("work lost (GPU-h)", [f"{f.work_lost:,.1f}" for f in all_figures])]
    if any(f.nodes_added or f.nodes_removed for f in all_figures):
        out.append(("nodes added / removed", [f"{f.nodes_added:,} / {f.nodes_removed:,}" for f in all_figures]))
    return out
