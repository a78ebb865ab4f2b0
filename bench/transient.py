"""Transient servers in the simulator: the ICAC'19 shape, a hybrid autoscaled cluster, decision time under churn.

    .venv/bin/python -m bench.transient [--data ../shared/data] [--seeds 25] [--presets fifo,tiresias]
        [--workload PATH|synthetic:N:RATE] [--limit 160] [--offer-limit 64] [--consolidate] [--churn-jobs 1000]
        [--churn-hours 1] [--parts icac,hybrid,churn] [--out bench/results/transient.md]

1. ICAC'19 ("Speeding up Deep Learning with Transient Servers", Li et al.): ResNet-32 on CIFAR-10, 64,000
   steps, parameter server on the master VM with the workers, one K80 per VM. Speed is calibrated from the
   on-demand runs in `transient-gce/training/k80_on_demand/{k80,2,4,8}-demand/train_data.csv`: per run,
   last step / (last wall time - first); the median over runs at 1, 2, 4 and 8 workers, linear in between.
   Revocations come from the hazard fitted to `transient-gce/lifetime/lifetime.csv` (per GPU type and zone,
   24 h cap, 30 s notice), in each of the four measured K80 zones x `--seeds`; a revoked VM is replaced
   after 90 s (a managed instance group). The job is elastic (1 to N workers), as the paper's asynchronous
   TensorFlow PS job was: at a revocation notice it checkpoints and goes on with the workers left, and grows
   back when the replacement joins (`icac_policy`: EDL's elastic fill with the load line at 1.0); a row
   shows the same as a fixed-size gang that waits for each replacement. Checkpoints every 600 s
   (TensorFlow's default). Prices: `core.market` (GCE list, February 2019). Paper: 62.9% cheaper with 4
   transient K80 workers, 7.7x faster with 8 transient workers than one on-demand server.
2. Hybrid autoscaled cluster: a fixed on-premises part (2 x 4 V100) plus nodes the autoscaler adds (k80 /
   p100 / v100, 4 GPUs each, on-demand and transient, in three zones). Workload: by default the first 160
   jobs of Gavel's trace of Philly virtual cluster 0e4a51 (Philly-derived arrivals, sizes and durations; job
   types with Gavel's measured k80/p100/v100 throughputs as the simulator's truth). Cost: the cloud bill
   of the autoscaled nodes; the fixed part apart (owned hardware, the same whatever the strategy; shown
   at the GCE on-demand list price over the makespan, and in a total). Strategies per preset: all on-demand
   offers; spot offers, cost-blind (jobs `transient: allowed`); "always recover on spot, fall back to
   on-demand near the deadline" (a job switches to `transient: never` once one more revocation could make
   it miss: remaining estimate + a checkpoint interval + a boot + a restart). Deadline per job: submit +
   1.02 x its runtime (on V100s) + 10 min (tight: a boot, a restart and little more).
3. Decision time with 5% of 1,000 nodes (8 GPUs each) revoked per minute (exponential lifetimes, mean 20
   min, replaced after 60 s) vs the same run on a static cluster: mean seconds per `decide`.
"""

from __future__ import annotations

import argparse
import csv
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from trainmaster.cli.market import figures
from trainmaster.controller.autoscale import MarketSetup, attach
from trainmaster.controller.loop import Controller
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import Architecture, JobSpec, Role, RoleSpec, TransientUse
from trainmaster.core.market import AutoscaleSpec, Availability, Offer, Revocation, gce_node_type
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Policy, Snapshot
from trainmaster.policies.trainmaster import build
from trainmaster.workloads.base import Workload, WorkloadJob
from trainmaster.workloads.loaders import load_workload
from trainmaster.workloads.market import Lifetime, LifetimeMarket, read_lifetimes

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
STEPS = 64_000
PAPER_SAVING, PAPER_SPEEDUP = 0.629, 7.7
K80_ZONES = ("us-east1-c", "us-central1-c", "us-west1-b", "europe-west1-b")
CHECKPOINT = 600.0  # TensorFlow's default save_checkpoint_secs
REPLACE = 90.0


# -- 1. ICAC'19 ------------------------------------------------------------------------------
def calibrate(data: Path) -> dict[int, float]:
    """Steps/s of the ResNet-32 PS job at 1, 2, 4 and 8 K80 workers, from the on-demand runs."""
    out: dict[int, float] = {}
    root = data / "transient-gce" / "training" / "k80_on_demand"
    for workers, folder in ((1, "k80-demand"), (2, "2-demand"), (4, "4-demand"), (8, "8-demand")):
        runs: dict[tuple[str, str], list[tuple[float, int]]] = {}
        for path in sorted((root / folder).glob("*train_data.csv")):
            for row in csv.DictReader(path.open()):
                runs.setdefault((row["Zone"], row["Run"]), []).append((float(row["Wall Time"]), int(row["Step"])))
        speeds = [max(s for _, s in r) / (max(t for t, _ in r) - min(t for t, _ in r)) for r in runs.values()]
        out[workers] = statistics.median(speeds)
    return out


def measured(data: Path, folder: str) -> tuple[float, float]:
    """Mean (duration s, cost $) per run of one training folder (train_data_processed.csv + cost.csv)."""
    root = data / "transient-gce" / "training" / folder
    durations = [float(r["Duration"]) for r in csv.DictReader((root / "train_data_processed.csv").open())]
    costs = [float(r["Cost"]) for r in csv.DictReader((root / "cost.csv").open())]
    return statistics.fmean(durations), statistics.fmean(costs)


@dataclass(frozen=True)
class MeasuredPS:
    """A PS job whose speed is the calibrated table, linear between measured worker counts (and past 8)."""

    speeds: dict[int, float]
    total: float = STEPS

    @property
    def total_steps(self) -> float:
        return self.total

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        w, p = alloc.count(Role.WORKER), alloc.count(Role.PS)
        if not w or not p:
            return 0.0
        xs = sorted(self.speeds)
        lo = max((x for x in xs if x <= w), default=xs[0])
        hi = min((x for x in xs if x > w), default=xs[-1])
        if hi == lo:
            lo, hi = xs[-2], xs[-1]
        a, b = self.speeds[lo], self.speeds[hi]
        return max(0.0, a + (b - a) * (w - lo) / (hi - lo))

    def loss(self, step: float) -> float | None:
        return None


def icac_job(workers: int, elastic: bool = True) -> JobSpec:
    """The PS server shares the master VM with a worker (the paper's setup): 1 CPU for it, 3 for a worker.

    Elastic (1 to `workers` workers), as the paper's TensorFlow PS job was: its workers are independent
    (asynchronous updates), so when one is revoked the rest keep training, and the replacement joins when
    its VM is up (`elastic=False`: a fixed-size gang that waits for the replacement)."""
    return JobSpec(name="resnet32", architecture=Architecture.PARAMETER_SERVER, transient=TransientUse.PREFERRED,
                   checkpoint_every=CHECKPOINT, roles={
                       Role.PS: RoleSpec(1, 1, Resources(cpu=1000, memory=2 * 2**30)),
                       Role.WORKER: RoleSpec(1 if elastic else workers, workers,
                                             Resources(cpu=3000, memory=8 * 2**30, gpu=1))})


def icac_policy() -> Policy:
    """EDL's elastic scheduling with no headroom kept for services (load line 1.0: the VMs are the job's own):
    the job starts on every worker VM up, shrinks to the VMs left when one is revoked (at its notice) and
    grows back when the replacement joins."""
    return build("edl", backfill="greedy", elastic=True, preemption=True, load_line=1.0)


def icac_run(speeds: dict[int, float], workers: int, transient: bool, zone: str, market: LifetimeMarket | None,
             policy: str | Policy | None = None, elastic: bool = True) -> tuple[float, float, int]:
    """(seconds to 64k steps, cluster dollars, revocations) of one run on `workers` one-K80 VMs."""
    vm = gce_node_type("k80", zone)
    cluster = Cluster(tuple(vm.make(f"vm{i}", transient) for i in range(workers)))
    work = Workload("icac", (WorkloadJob("resnet32", 0.0, icac_job(workers, elastic), MeasuredPS(speeds)),))
    m = MarketSetup(market, REPLACE if market is not None else None)
    engine = SimEngine(cluster, work, SimConfig(restart_delay=30.0), market=m.market, replace_delay=m.replace_delay)
    c = Controller(engine, icac_policy() if policy is None else make_policy(policy) if isinstance(policy, str)
                   else policy)
    attach(c, engine, m)
    c.run()
    job = c.jobs["resnet32"]
    assert job.finish_time is not None, job.message
    f = figures(c, engine, None)
    return job.finish_time, f.cost, f.revocations


def icac(data: Path, seeds: int) -> list[str]:
    speeds = calibrate(data)
    lifetimes = read_lifetimes(data / "transient-gce" / "lifetime" / "lifetime.csv")
    lines = ["## 1. The ICAC'19 shape (ResNet-32 / CIFAR-10, PS, K80)", "",
             "Calibrated speed (steps/s, median of the on-demand runs): "
             + ", ".join(f"{w} worker{'s' * (w > 1)} {s:.2f}" for w, s in sorted(speeds.items())), ""]
    od = {w: icac_run(speeds, w, False, "us-east1-c", None, icac_policy()) for w in (1, 4, 8)}
    rows: dict[int, list[tuple[float, float, int]]] = {}
    per_zone: dict[str, list[tuple[float, float, int]]] = {}
    fixed: list[tuple[float, float, int]] = []  # 8 workers as a fixed-size gang (waits for each replacement)
    for w in (4, 8):
        for zone in K80_ZONES:
            for seed in range(seeds):
                r = icac_run(speeds, w, True, zone, LifetimeMarket(lifetimes, seed=seed), icac_policy())
                rows.setdefault(w, []).append(r)
                if w == 4:
                    per_zone.setdefault(zone, []).append(r)
                else:
                    fixed.append(icac_run(speeds, w, True, zone, LifetimeMarket(lifetimes, seed=seed), "fifo",
                                          elastic=False))

    def mean(rs: Sequence[tuple[float, float, int]], i: int) -> float:
        return statistics.fmean(r[i] for r in rs)

    lines += ["| run | time (s) | cost ($) | revocations / run |", "| --- | ---: | ---: | ---: |"]
    for w in (1, 4, 8):
        lines.append(f"| {w} on-demand | {od[w][0]:,.0f} | {od[w][1]:.3f} | 0 |")
    for w in (4, 8):
        lines.append(f"| {w} transient (4 zones x {seeds} seeds) | {mean(rows[w], 0):,.0f} | {mean(rows[w], 1):.3f} "
                     f"| {mean(rows[w], 2):.2f} |")
    lines.append(f"| 8 transient, fixed-size gang (waits for each replacement) | {mean(fixed, 0):,.0f} "
                 f"| {mean(fixed, 1):.3f} | {mean(fixed, 2):.2f} |")
    for zone, rs in per_zone.items():
        lines.append(f"| 4 transient, {zone} | {mean(rs, 0):,.0f} | {mean(rs, 1):.3f} | {mean(rs, 2):.2f} |")
    saving = 1 - mean(rows[4], 1) / od[4][1]
    slowdown = mean(rows[4], 0) / od[4][0] - 1
    speedup = od[1][0] / mean(rows[8], 0)
    budget_ok = mean(rows[8], 1) <= od[4][1]
    d4, s4 = measured(data, "k80_on_demand/4-demand"), measured(data, "k80_spot/4-spot")
    d1, s8 = measured(data, "k80_on_demand/k80-demand"), measured(data, "k80_spot/8-spot")
    lines += ["", "| figure | simulated | measured (shared data runs) | ICAC'19 |", "| --- | ---: | ---: | ---: |",
              f"| 4 transient vs 4 on-demand: cost saving | {100 * saving:.1f}% | {100 * (1 - s4[1] / d4[1]):.1f}% "
              f"| {100 * PAPER_SAVING:.1f}% |",
              f"| 4 transient vs 4 on-demand: slowdown | {100 * slowdown:.1f}% | {100 * (s4[0] / d4[0] - 1):.1f}% "
              "| - |",
              f"| 8 transient vs 1 on-demand: speed-up | {speedup:.2f}x | {d1[0] / s8[0]:.2f}x | {PAPER_SPEEDUP}x |",
              f"| same, fixed-size gang | {od[1][0] / mean(fixed, 0):.2f}x | - | - |",
              "", f"8 transient workers cost ${mean(rows[8], 1):.2f} per run, "
              f"{'within' if budget_ok else 'over'} the 4 on-demand run's ${od[4][1]:.2f} (the budget saved). "
              "The paper's 62.9% is its cost.csv ratio (4-spot $1.12 vs 4-demand $3.03 per run), which "
              "includes its VM shapes and disks; ours uses list prices for n1-standard-4 + one K80.", ""]
    return lines


# -- 2. hybrid autoscaled cluster --------------------------------------------------------------
ZONES = {"k80": "us-central1-c", "p100": "us-west1-b", "v100": "us-central1-a"}
# Philly-derived with speeds per GPU type: Gavel's trace of one Philly virtual cluster (Philly's arrivals, sizes
# and durations, Gavel's job types and k80/p100/v100 throughputs); its first 160 jobs arrive over 11 days.
PHILLY_VC = "gavel/traces/philly-vc-seed0/0e4a51.trace"


def hybrid_offers(spot: bool, limit: int = 64, consolidate: bool = False) -> AutoscaleSpec:
    offers = []
    for gpu, zone in ZONES.items():
        t = gce_node_type(gpu, zone, gpus=4)
        t = replace(t, capacity=Resources(cpu=16000, memory=60 * 2**30, gpu=4))
        offers.append(Offer(t, False, limit))
        if spot:
            offers.append(Offer(t, True, limit))
    return AutoscaleSpec(tuple(offers), idle_timeout=600.0, consolidate=consolidate)


SLACK = (1.02, 600.0)  # deadline = submit + 1.02 x runtime + 10 min: a boot, a restart and little more


def deadlines(workload: Workload, slack: tuple[float, float] = SLACK) -> dict[str, float]:
    out = {}
    for j in workload.jobs:
        runtime = j.spec.estimate or j.truth.total_steps
        out[j.job_id] = j.submit_time + slack[0] * runtime + slack[1]
    return out


class Fallback:
    """'Always recover on spot, fall back to on-demand near the deadline': after each decision, a job that could
    no longer absorb one more revocation (its remaining estimate + a checkpoint interval of lost work + a boot +
    a restart) before its deadline is switched to `transient: never`. The remaining estimate is the user's
    runtime estimate times the share of steps left (the user knows the job's length in steps)."""

    def __init__(self, c: Controller, due: dict[str, float], restart: float, steps: dict[str, float]) -> None:
        self.c, self.due, self.restart, self.steps = c, due, restart, steps
        self.switched = 0
        c.after_cycle.append(self.on_cycle)

    def on_cycle(self, snap: Snapshot, plan: Plan) -> None:
        for jid, record in list(self.c.live.items()):
            spec = record.spec
            if spec.transient is TransientUse.NEVER or spec.estimate is None:
                continue
            left = spec.estimate * max(0.0, 1.0 - record.step / self.steps[jid])
            if snap.now + left + spec.checkpoint_every + REPLACE + self.restart >= self.due[jid]:
                self.c.update(jid, replace(spec, transient=TransientUse.NEVER))
                self.switched += 1


def hybrid_run(workload: Workload, preset: str, strategy: str, lifetimes: list[Lifetime],
               seed: int, limit: int = 64, consolidate: bool = False) -> dict[str, float]:
    fixed = gce_node_type("v100", "us-central1-a", gpus=4)
    fixed = replace(fixed, capacity=Resources(cpu=16000, memory=60 * 2**30, gpu=4))
    cluster = Cluster(tuple(fixed.make(f"onprem{i}", False) for i in range(2)))
    due = deadlines(workload)
    jobs = workload
    if strategy == "fallback":
        jobs = Workload(workload.name, tuple(replace(j, spec=replace(j.spec, transient=TransientUse.PREFERRED))
                                             for j in workload.jobs))
    m = MarketSetup(LifetimeMarket(lifetimes, seed=seed), None, hybrid_offers(spot=strategy != "on-demand",
                                                                                limit=limit, consolidate=consolidate))
    config = SimConfig(restart_delay=30.0, report_interval=300.0, seed=seed)
    engine = SimEngine(cluster, jobs, config, market=m.market)
    c = Controller(engine, make_policy(preset))
    scaler = attach(c, engine, m)
    if strategy == "fallback":
        Fallback(c, due, config.restart_delay, {j.job_id: j.truth.total_steps for j in workload.jobs})
    c.run()
    f = figures(c, engine, scaler)
    end = c.clock.now()
    done = [r for r in c.jobs.values() if r.finish_time is not None and r.state.value == "succeeded"]
    fixed_dollars = sum(n.price_per_hour for n in cluster.nodes) * end / 3600  # on-prem, at GCE list price
    paid_gpu_h = sum(h * 4 for h in c.cost.node_hours(end).values())  # every node has 4 GPUs
    return {"cost": f.cost - fixed_dollars, "fixed": fixed_dollars, "total": f.cost, "makespan": end,
            "idle": 1 - (f.hours(True) + f.hours(False)) / paid_gpu_h,
            "mean_jct": statistics.fmean(r.finish_time - r.submit_time for r in done),  # type: ignore[operator]
            "finished": len(done), "jobs": len(c.jobs),
            "misses": sum(1 for r in c.jobs.values() if r.finish_time is None or r.finish_time > due[r.id]),
            "transient_h": f.hours(True), "on_demand_h": f.hours(False), "revocations": f.revocations,
            "lost": f.work_lost, "added": f.nodes_added}


def hybrid(data: Path, text: str, presets: Sequence[str], seed: int, limit: int | None = None,
           offer_limit: int = 64, consolidate: bool = False) -> list[str]:
    lifetimes = read_lifetimes(data / "transient-gce" / "lifetime" / "lifetime.csv")
    workload = load_workload(text, seed=seed, oracle=True, limit=limit)
    lines = [f"## 2. Hybrid autoscaled cluster: {workload.name}", "",
             f"Workload `{Path(text).name if Path(text).is_file() else text}`"
             f"{f' (first {limit} jobs)' if limit else ''}. Fixed part 2 x 4 V100 on-demand "
             f"(on-premises); autoscaled 4-GPU nodes, k80 / p100 / v100, up to {offer_limit} of each offer, idle "
             f"timeout 600 s{', consolidation on' if consolidate else ''}; revocations from the fitted GCE "
             "hazard.", "",
             "Cost: the cloud bill of the autoscaled nodes (what the strategy decides); the fixed part is owned "
             "hardware, the same whatever the strategy, shown apart at the GCE on-demand list price over the "
             "makespan and in the total.", "",
             "| preset | strategy | cloud cost ($) | vs all on-demand | mean JCT (s) | vs all on-demand "
             "| deadline misses | GPU-h transient / on-demand | idle GPU share | revocations | work lost (GPU-h) "
             "| nodes added | makespan (h) | fixed part ($) | total ($) | total vs all on-demand |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: |"]
    for preset in presets:
        base: dict[str, float] | None = None
        for strategy in ("on-demand", "spot", "fallback"):
            r = hybrid_run(workload, preset, strategy, lifetimes, seed, offer_limit, consolidate)
            base = base or r
            lines.append(
                f"| {preset} | {strategy} | {r['cost']:,.0f} | {100 * (r['cost'] / base['cost'] - 1):+.1f}% "
                f"| {r['mean_jct']:,.0f} | {100 * (r['mean_jct'] / base['mean_jct'] - 1):+.1f}% "
                f"| {r['misses']:.0f}/{r['jobs']:.0f} | {r['transient_h']:,.0f} / {r['on_demand_h']:,.0f} "
                f"| {100 * r['idle']:.1f}% | {r['revocations']:.0f} | {r['lost']:,.1f} | {r['added']:.0f} "
                f"| {r['makespan'] / 3600:,.0f} | {r['fixed']:,.0f} | {r['total']:,.0f} "
                f"| {100 * (r['total'] / base['total'] - 1):+.1f}% |")
    return [*lines, ""]


# -- 3. decision time under churn -------------------------------------------------------------
class Churn:
    """Every transient node lives an exponential time (mean `mean_life`): 1/mean_life of them go per second."""

    notice = 30.0

    def __init__(self, mean_life: float, seed: int) -> None:
        self.mean_life, self.seed = mean_life, seed

    def revocation(self, node: Node, joined_at: float) -> Revocation | None:
        life = random.Random(f"{self.seed}/{node.name}/{joined_at!r}").expovariate(1 / self.mean_life)
        lost = joined_at + max(life, self.notice)
        return Revocation(node.name, lost - self.notice, lost, "revoked")

    def availability(self) -> Sequence[Availability]:
        return ()


class Timed:
    """A policy whose `decide` calls are timed."""

    def __init__(self, inner: Policy) -> None:
        self.inner, self.times = inner, list[float]()
        self.name, self.interval, self.uses_models = inner.name, inner.interval, inner.uses_models
        self.reads_few_jobs = inner.reads_few_jobs

    def decide(self, snap: Snapshot) -> Plan:
        t = time.perf_counter()
        plan = self.inner.decide(snap)
        self.times.append(time.perf_counter() - t)
        return plan


def churn_run(preset: str, jobs: int, churning: bool, seed: int, horizon: float) -> tuple[list[float], int]:
    """Mean seconds per decision over the first `horizon` simulated seconds (the mix's longest jobs run for
    days; 5%/min churn over all of them would be millions of revocations)."""
    base = parse_shorthand("1000x8")
    cluster = Cluster(tuple(replace(n, transient=True) for n in base.nodes)) if churning else base
    workload = load_workload(f"synthetic:{jobs}:{jobs * 3600 / horizon:g}", seed=seed)
    engine = SimEngine(cluster, workload, SimConfig(seed=seed),
                       market=Churn(20 * 60.0, seed) if churning else None, replace_delay=60.0 if churning else None)
    policy = Timed(make_policy(preset))
    c = Controller(engine, policy)  # type: ignore[arg-type]
    attach(c, engine, MarketSetup(replace_delay=60.0 if churning else None))
    c.cycle()
    while c.clock.now() < horizon and c.step():
        pass
    return policy.times, c.revocations


def churn(presets: Sequence[str], jobs: int, seed: int, horizon: float) -> list[str]:
    lines = ["## 3. Decision time: 1,000 nodes x 8 GPUs, 5% revoked per minute vs static", "",
             f"Gavel's synthetic mix, {jobs} jobs arriving over the first {horizon / 3600:g} h, measured over "
             f"those {horizon / 3600:g} simulated hours; lifetimes exponential with mean 20 min (5%/min), "
             "replaced after 60 s.", "",
             "Mean and p95 ms per decision (churning / static, and their ratio), and the decision seconds "
             "spent per simulated hour: churn adds many cheap decisions (one per loss and join).", "",
             "| preset | decisions static / churning | mean ms static / churning (ratio) "
             "| p95 ms static / churning (ratio) | decision s per sim hour static / churning | revocations |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for preset in presets:
        s, _ = churn_run(preset, jobs, False, seed, horizon)
        ch, revs = churn_run(preset, jobs, True, seed, horizon)
        ms = [1e3 * statistics.fmean(s), 1e3 * statistics.fmean(ch)]
        p95 = [1e3 * statistics.quantiles(x, n=20)[-1] for x in (s, ch)]
        per_h = [sum(x) / (horizon / 3600) for x in (s, ch)]
        lines.append(f"| {preset} | {len(s):,} / {len(ch):,} | {ms[0]:.2f} / {ms[1]:.2f} ({ms[1] / ms[0]:.2f}) "
                     f"| {p95[0]:.2f} / {p95[1]:.2f} ({p95[1] / p95[0]:.2f}) | {per_h[0]:.2f} / {per_h[1]:.2f} "
                     f"| {revs:,} |")
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--seeds", type=int, default=25, help="seeds per zone for the ICAC runs")
    ap.add_argument("--presets", default="fifo,tiresias", help="presets for the hybrid and churn parts")
    ap.add_argument("--workload", default=None, help="workload of the hybrid part (default: Gavel's Philly VC "
                    f"trace {PHILLY_VC} under --data)")
    ap.add_argument("--limit", type=int, default=160, help="first N jobs of the hybrid workload (0: all)")
    ap.add_argument("--offer-limit", type=int, default=64, help="nodes per autoscaler offer")
    ap.add_argument("--consolidate", action="store_true", help="the autoscaler empties underused nodes")
    ap.add_argument("--churn-jobs", type=int, default=1000)
    ap.add_argument("--churn-hours", type=float, default=1.0)
    ap.add_argument("--parts", default="icac,hybrid,churn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here too")
    args = ap.parse_args(argv)
    if not (args.data / "transient-gce").is_dir():
        print(f"{args.data}/transient-gce not found: pass --data ../shared/data")
        return 2
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    parts = set(args.parts.split(","))
    workload = args.workload or str(args.data / PHILLY_VC)
    lines = ["# Transient servers (bench/transient.py)", "",
             f"`python -m bench.transient --seeds {args.seeds} --presets {args.presets} "
             f"--workload {args.workload or '../shared/data/' + PHILLY_VC} "
             f"--limit {args.limit} --offer-limit {args.offer_limit}{' --consolidate' * args.consolidate} "
             f"--churn-jobs {args.churn_jobs} --churn-hours {args.churn_hours:g} --parts {args.parts}`", ""]
    started = time.perf_counter()
    if "icac" in parts:
        lines += icac(args.data, args.seeds)
    if "hybrid" in parts:
        lines += hybrid(args.data, workload, presets, args.seed, args.limit or None, args.offer_limit,
                        args.consolidate)
    if "churn" in parts:
        lines += churn(presets, args.churn_jobs, args.seed, args.churn_hours * 3600)
    lines.append(f"Wall time {time.perf_counter() - started:,.0f} s.")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
