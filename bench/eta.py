"""How good is `why`'s predicted start? ETA error, predicted vs actual start, in simulated runs.

Each pending job gets a prediction the first time `controller.why` sees it
(right after the cycle that followed its arrival) and, for a second reading,
once it has waited half of its true wait. Error = predicted - actual start.
Jobs that started at once are left out (their error is trivially 0).
Estimates are the true durations (`oracle`) or those times a factor in
[0.5, 2] (`noisy`), the running jobs' remaining times come from them too.

    .venv/bin/python -m bench.eta
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from trainmaster.controller.loop import Controller
from trainmaster.controller.metrics import percentile
from trainmaster.controller.why import explain_pending
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.snapshot import Policy
from trainmaster.policies.trainmaster import build
from trainmaster.workloads.base import Workload
from trainmaster.workloads.philly import load_philly
from trainmaster.workloads.synthetic import synthetic

PHILLY = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux" / "philly.csv"


def noisy(workload: Workload, seed: int = 0) -> Workload:
    rng = random.Random(seed)
    return Workload(workload.name + "-noisy", tuple(
        replace(j, spec=replace(j.spec, estimate=(j.spec.estimate or 0.0) * 2 ** rng.uniform(-1, 1)))
        for j in workload.jobs))


def measure(workload: Workload, cluster: str, policy: Policy) -> dict[str, float]:
    ctl = Controller(SimEngine(parse_shorthand(cluster), workload, SimConfig(restart_delay=30.0)), policy)
    first: dict[str, tuple[float, float | None]] = {}  # job -> (time asked, predicted start)
    answered = 0

    def sample() -> None:
        nonlocal answered
        if any(jid not in first for jid, r in ctl.live.items() if r.state.value == "pending"):
            for why in explain_pending(ctl):
                answered += 1
                first.setdefault(why.job_id, (why.now, why.eta))

    ctl.cycle()
    sample()
    while ctl.live or not ctl.engine.idle():
        if not ctl.step():
            break
        sample()
    errors, rel, unknown, waited = [], [], 0, 0
    for jid, (asked, eta) in first.items():
        rec = ctl.jobs[jid]
        if rec.first_start is None or rec.first_start - rec.submit_time < 1.0:
            continue
        waited += 1
        if eta is None:
            unknown += 1
            continue
        errors.append(eta - rec.first_start)
        rel.append(abs(eta - rec.first_start) / max(rec.first_start - asked, 1.0))
    absolute = [abs(e) for e in errors]
    return {"waited": waited, "unknown": unknown, "median_abs_h": percentile(absolute, 50) / 3600,
            "p90_abs_h": percentile(absolute, 90) / 3600, "mean_signed_h": sum(errors) / max(len(errors), 1) / 3600,
            "median_rel": percentile(rel, 50), "within_25pct": sum(1 for r in rel if r <= 0.25) / max(len(rel), 1),
            "answers": answered}


def main() -> None:
    runs: list[tuple[str, str, Workload, Policy]] = []
    syn = synthetic(300, rate_per_hour=0.4, seed=0)
    runs.append(("synthetic:300 (0.4/h, load ~0.8)", "4x4", syn, build("trainmaster")))
    runs.append(("synthetic:300 (0.4/h, load ~0.8)", "4x4", noisy(syn), build("trainmaster")))
    if PHILLY.is_file():
        philly = load_philly(PHILLY, cluster_id="2869ce", oracle=True)
        runs.append(("philly 2869ce", "7x8", philly, build("reserve", elastic=False, preemption=False, interval=None)))
        runs.append(("philly 2869ce", "7x8", noisy(philly),
                     build("reserve", elastic=False, preemption=False, interval=None)))
    print("| workload | cluster | estimates | policy | jobs that waited | no ETA | median abs error h | p90 abs h "
          "| mean signed h | median error / wait | within 25% of wait | why answers |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, cluster, wl, policy in runs:
        m = measure(wl, cluster, policy)
        est = "noisy x0.5-2" if wl.name.endswith("-noisy") else "true"
        print(f"| {label} | {cluster} | {est} | {policy.name} | {m['waited']:.0f} | {m['unknown']:.0f} "
              f"| {m['median_abs_h']:.2f} | {m['p90_abs_h']:.2f} | {m['mean_signed_h']:+.2f} | {m['median_rel']:.2f} "
              f"| {m['within_25pct']:.0%} | {m['answers']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
