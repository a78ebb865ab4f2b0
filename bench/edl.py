"""EDL reproduced: training jobs sharing a cluster with a diurnal online service, elastic vs fixed size.

PaddlePaddle EDL reported cluster utilization up from 62% to 83% and pending
time down 85% when training jobs became elastic next to online services.
Here: a cluster of 8 nodes x 8 GPUs; an online service whose replicas follow
a day curve (8 GPUs at night, 40 at the midday peak), one `service` job per
hour (fixed size, highest priority, must start at once); training jobs
arriving as a Poisson stream, each asking for r in {2, 4, 8, 16} GPUs and
running 1-8 h at that size, speed (held/r)^0.9 (sublinear). Fixed: every job
runs at r (services evict training jobs when they must). Elastic: the same
jobs with min r/2 and max 2r under the `edl` preset (start at min, fill idle
capacity up to the 0.97 load line, shrink for pending jobs and services).
Utilization counts every GPU held (services included) over the arrival window.
`--scenario standing` is EDL's own setting instead: a standing set of long
training jobs asking for about the whole cluster (sizes 4-16), which outlive
the window; pending time is then the time each job spent without resources.

    .venv/bin/python -m bench.edl [--days 4] [--seeds 0,1,2] [--load 1.0] [--scenario stream|standing]
"""

from __future__ import annotations

import argparse
import math
import random
from dataclasses import dataclass

from trainmaster.controller.loop import Controller
from trainmaster.controller.why import advance_to
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import JobKind, JobSpec, simple_job
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.edl import make as make_edl
from trainmaster.policies.trainmaster import build
from trainmaster.workloads.base import Workload, WorkloadJob

CLUSTER = "8x8"
NIGHT, PEAK = 8, 40  # service GPUs


@dataclass(frozen=True)
class SublinearTruth:
    """`duration` seconds at `gpus` GPUs; on g GPUs a step rate of (g/gpus)^alpha."""

    duration: float
    gpus: int
    alpha: float = 0.9

    @property
    def total_steps(self) -> float:
        return self.duration

    def steps_per_second(self, alloc: Allocation, spec: JobSpec, cluster: Cluster | None = None) -> float:
        held = alloc.gpus(spec)
        return 0.0 if held <= 0 else (held / self.gpus) ** self.alpha

    def loss(self, step: float) -> float | None:
        return None


def service_gpus(hour: int) -> int:
    """Day curve: lowest at 04:00, highest at 16:00."""
    level = (1 - math.cos(2 * math.pi * ((hour % 24) - 4) / 24)) / 2
    return round(NIGHT + (PEAK - NIGHT) * level)


def service(days: int) -> list[WorkloadJob]:
    jobs = []
    for h in range(days * 24):
        g = service_gpus(h)
        spec = simple_job(f"web-{h}", g, kind=JobKind.SERVICE, priority=100)
        jobs.append(WorkloadJob(spec.name, h * 3600.0, spec, SublinearTruth(3600.0, g, alpha=1.0)))
    return jobs


def standing(days: int, seed: int, elastic: bool) -> Workload:
    """EDL's setting: a standing set of long training jobs (they outlive the window) beside the service."""
    rng = random.Random(seed)
    jobs = service(days)
    total, i = 0, 0
    while total < 64:  # ask for about the whole cluster: fixed jobs leave holes and lose the night
        r = rng.choice((4, 8, 12, 16))
        lo, hi = (max(1, r // 2), 2 * r) if elastic else (r, r)
        spec = simple_job(f"train-{i}", r, min_gpus=lo, max_gpus=hi, estimate=30 * 86400.0)
        jobs.append(WorkloadJob(spec.name, float(i), spec, SublinearTruth(30 * 86400.0, r)))
        total, i = total + r, i + 1
    jobs.sort(key=lambda j: j.submit_time)
    return Workload(f"edl-standing-{'elastic' if elastic else 'fixed'}-{seed}", tuple(jobs))


def workload(days: int, seed: int, elastic: bool, load: float) -> Workload:
    rng = random.Random(seed)
    jobs = service(days)
    mean_service = sum(service_gpus(h) for h in range(24)) / 24
    sizes = (2, 4, 8, 16)
    mean_gpu_hours = sum(sizes) / len(sizes) * 4.5  # mean duration 4.5 h
    rate = load * (64 - mean_service) / mean_gpu_hours  # jobs per hour
    t, i = 0.0, 0
    while True:
        t += rng.expovariate(rate) * 3600
        if t >= days * 86400:
            break
        r = rng.choice(sizes)
        duration = rng.uniform(1, 8) * 3600
        lo, hi = (max(1, r // 2), 2 * r) if elastic else (r, r)
        spec = simple_job(f"train-{i}", r, min_gpus=lo, max_gpus=hi, estimate=duration)
        jobs.append(WorkloadJob(spec.name, round(t, 3), spec, SublinearTruth(duration, r)))
        i += 1
    jobs.sort(key=lambda j: j.submit_time)
    return Workload(f"edl-{'elastic' if elastic else 'fixed'}-{seed}", tuple(jobs))


def run(days: int, seed: int, elastic: bool, load: float, scenario: str = "stream") -> dict[str, float]:
    wl = workload(days, seed, elastic, load) if scenario == "stream" else standing(days, seed, elastic)
    policy = make_edl() if elastic else build("fixed", backfill="greedy", elastic=False, preemption=True)
    engine = SimEngine(parse_shorthand(CLUSTER), wl, SimConfig(restart_delay=30.0, seed=seed))
    ctl = Controller(engine, policy, check=False)
    window = days * 86400.0
    if scenario == "stream":
        ctl.run()
    else:
        advance_to(ctl, window)
    train = [r for r in ctl.jobs.values() if r.spec.kind is JobKind.TRAINING]
    if scenario == "stream":
        waits = [r.first_start - r.submit_time for r in train if r.first_start is not None]
    else:  # time each job spent without resources in the window (waiting to start, or evicted)
        waits = [window - r.runtime(window) - r.submit_time for r in train]
    services = [r for r in ctl.jobs.values() if r.spec.kind is JobKind.SERVICE]
    late = sum(1 for r in services if r.first_start is None or r.first_start > r.submit_time)
    jct = [r.finish_time - r.submit_time for r in train if r.finish_time is not None] or [math.nan]
    return {"util": ctl.usage.utilization(0.0, window), "pending_h": sum(waits) / len(waits) / 3600,
            "jct_h": sum(jct) / len(jct) / 3600, "jobs": len(train), "late_services": late,
            "restarts": sum(r.restarts for r in train)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--load", type=float, default=1.0, help="training demand / capacity the service leaves")
    ap.add_argument("--scenario", choices=("stream", "standing"), default="stream",
                    help="stream: jobs arrive and finish; standing: long jobs that outlive the window (EDL's)")
    args = ap.parse_args()
    print("| seed | training jobs | mode | GPU utilization | mean pending h | mean JCT h | restarts | services late |")
    print("|---|---|---|---|---|---|---|---|")
    totals: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for seed in (int(s) for s in args.seeds.split(",")):
        for elastic in (False, True):
            m = run(args.days, seed, elastic, args.load, args.scenario)
            totals[elastic].append(m)
            print(f"| {seed} | {m['jobs']:.0f} | {'elastic' if elastic else 'fixed'} | {m['util']:.1%} "
                  f"| {m['pending_h']:.2f} | {m['jct_h']:.2f} | {m['restarts']:.0f} | {m['late_services']:.0f} |",
                  flush=True)
    fixed, elastic_ = totals[False], totals[True]
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    print(f"\nmean over seeds: utilization {mean(fixed, 'util'):.1%} -> {mean(elastic_, 'util'):.1%}; "
          f"pending {mean(fixed, 'pending_h'):.2f} h -> {mean(elastic_, 'pending_h'):.2f} h "
          f"({mean(elastic_, 'pending_h') / mean(fixed, 'pending_h') - 1:+.0%}); "
          f"JCT {mean(fixed, 'jct_h'):.2f} h -> {mean(elastic_, 'jct_h'):.2f} h")


if __name__ == "__main__":
    main()
