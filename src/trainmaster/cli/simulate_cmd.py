"""`trainmaster simulate`'s options; the replay (`cli.simulate`: controller, engine, policies) loads when it runs.

Every CLI call builds every command's parser, so this module stays light: a
`trainmaster status` never imports the simulator.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from trainmaster.cli import market
from trainmaster.policies.registry import available

LEARNING_REPORT_INTERVAL = 300.0  # seconds; default report period of a preset that learns online


@dataclass(frozen=True)
class Fidelity:
    """What a `--fidelity` mode sets unless an option overrides it: delays, rounds, the Pollux job model."""

    start_delay: float  # seconds a job's very first start costs
    restart_delay: float  # seconds every later start (resume, resize, migration) costs
    round: float | None  # seconds between scheduling rounds; None: decide on every event
    doc: str


FIDELITY: dict[str, Fidelity] = {
    "default": Fidelity(0.0, 30.0, None, "event-driven, free first start, Pollux jobs as long as their last "
                                         "validation row"),
    # Pollux's simulator (petuum/adaptdl simulator/simulator.py): `Job.reallocate` sets `rescale_time = 30`
    # on every allocation, the first included; `Cluster.step` runs in `--interval` rounds, default 60 s;
    # Pollux jobs follow its progress/gain model (workloads/pollux_peer.py).
    "pollux": Fidelity(30.0, 30.0, 60.0, "as Pollux's simulator: 30 s on every start, 60 s rounds, "
                                         "progress/gain job model"),
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="replay a workload under policies and compare them",
                       description="Replay a workload in the simulator under each policy and compare them.")
    p.add_argument("--workload", default="synthetic:200",
                   help="a trace (Pollux/Philly/Tiresias CSV, Gavel .trace), synthetic:N[:JOBS_PER_HOUR], "
                        "or ps:N[:JOBS_PER_HOUR] (parameter-server jobs that train to a loss target)")
    p.add_argument("--cluster", default="16x4", help="shorthand like 16x4 or 311x8+2x1, or a YAML/CSV cluster file")
    p.add_argument("--policy", default="fifo,drf,tiresias",
                   help=f"comma-separated presets, or all ({', '.join(available())})")
    p.add_argument("--seed", type=int, default=0, help="seed of synthetic: and ps: workloads and of the engine")
    p.add_argument("--out", type=Path, default=None,
                   help="directory for report.json, index.html (the dashboard as one static page) and the PNG plots")
    p.add_argument("--fidelity", choices=sorted(FIDELITY), default="default",
                   help="what the replay models: " + "; ".join(f"{k}: {v.doc}" for k, v in FIDELITY.items())
                        + ". The delay and round options override the mode's values")
    p.add_argument("--start-delay", type=float, default=None, metavar="SECONDS",
                   help="seconds a job's first start takes (default: 0; pollux fidelity: 30)")
    p.add_argument("--restart-delay", type=float, default=None, metavar="SECONDS",
                   help="seconds a job loses when its allocation changes (checkpoint-restart; default 30)")
    p.add_argument("--round", type=float, default=None, metavar="SECONDS",
                   help="seconds between scheduling rounds: what happens inside one is seen at its end "
                        "(default: every event, 0 says so; pollux fidelity: 60)")
    p.add_argument("--max-factor", type=float, default=1.0,
                   help="elastic replay: jobs may grow to this multiple of their requested GPUs (1 = fixed); "
                        "presets that do not resize (fifo, tiresias, srtf) run elastic jobs at their minimum")
    p.add_argument("--report-interval", type=float, default=None, metavar="SECONDS",
                   help="simulated seconds between each running job's progress reports. The model-driven "
                        f"presets (optimus, trainmaster) learn speed and convergence from them: default "
                        f"{LEARNING_REPORT_INTERVAL:g} s for those presets, one report per start for the others "
                        "(each preset's figures never depend on which others are compared)")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    p.add_argument("--profiles", type=Path, default=None, help="Pollux profiles folder (default: beside the trace)")
    p.add_argument("--no-plots", action="store_true", help="write report.json only")
    market.add_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from trainmaster.cli.simulate import run as replay  # the controller, engine and policies: only to run

    code: int = replay(args)
    return code
