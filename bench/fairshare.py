"""Fair share across queues (weights 2:1 under contention) and borrowing/reclaim of idle quota.

1. Two queues weighted 2:1, no quotas, on 64 GPUs (16 nodes x 4); each keeps
   a backlog of 400 jobs (1, 2 or 4 GPUs, 0.5-2 h), under reservation+backfill.
   GPU-time per queue over the window where both have jobs waiting, against
   the 2:1 target.
2. Two queues with quota 8 GPUs each on 16: `a` alone for 4 h (it borrows
   b's idle quota), then `b` submits a backlog: b's GPUs over time, how soon
   it reaches its quota, and how many of a's jobs were reclaimed.

    .venv/bin/python -m bench.fairshare
"""

from __future__ import annotations

import itertools
import random

from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import simple_job
from trainmaster.core.queue import QueueSpec, parse_quota
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.trainmaster import build
from trainmaster.workloads.base import LinearTruth, Workload, WorkloadJob


class QueueMeter:
    """Integrates GPUs held per queue over time from the controller's change notices."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.last = 0.0
        self.held: dict[str, int] = {}
        self.gpu_s: dict[str, float] = {}
        self.samples: list[tuple[float, dict[str, int]]] = []
        ctl.listeners.append(self.on)

    def on(self, what: str, record: JobRecord) -> None:
        if what == "report":
            return
        now = self.ctl.clock.now()
        for q, n in self.held.items():
            self.gpu_s[q] = self.gpu_s.get(q, 0.0) + n * (now - self.last)
        self.last = now
        held: dict[str, int] = {}
        for r in self.ctl.live.values():
            if r.state.active:
                held[r.spec.queue] = held.get(r.spec.queue, 0) + r.allocation.gpus(r.spec)
        self.held = held
        if not self.samples or self.samples[-1][1] != held:
            self.samples.append((now, held))


def jobs(queue: str, n: int, start: float, rng: random.Random) -> list[WorkloadJob]:
    out = []
    for i in range(n):
        g = rng.choice((1, 1, 2, 4))
        d = rng.uniform(0.5, 2) * 3600
        spec = simple_job(f"{queue}-{i}", g, queue=queue, estimate=d)
        out.append(WorkloadJob(spec.name, start + i * 1.0, spec, LinearTruth(d, g)))
    return out


def weighted(seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    qs = {"a": QueueSpec("a", weight=2.0), "b": QueueSpec("b", weight=1.0)}
    wl = Workload("two-queues", tuple(sorted(jobs("a", 400, 0, rng) + jobs("b", 400, 0, rng),
                                             key=lambda j: j.submit_time)))
    ctl = Controller(SimEngine(parse_shorthand("16x4"), wl, SimConfig(restart_delay=30.0)),
                     build("fair", backfill="reserve", elastic=False, preemption=False, interval=None), queues=qs)
    ctl.run()
    start, end = contention(list(ctl.jobs.values()))
    gs = {q: sum(r.spec.min_gpus * max(0.0, min(r.finish_time, end) - max(r.first_start, start))
                 for r in ctl.jobs.values()
                 if r.spec.queue == q and r.first_start is not None and r.finish_time is not None) for q in "ab"}
    return gs["a"] / gs["b"], (end - start) / 3600


def contention(records: list[JobRecord]) -> tuple[float, float]:
    """The first stretch of time during which both queues have jobs waiting (jobs never preempted here)."""
    times = sorted({t for r in records for t in (r.submit_time, r.first_start) if t is not None})
    start = None
    for t0, t1 in itertools.pairwise(times):
        mid = (t0 + t1) / 2
        waiting = {r.spec.queue for r in records
                   if r.submit_time < mid and (r.first_start is None or r.first_start > mid)}
        if start is None and len(waiting) == 2:
            start = t0
        elif start is not None and len(waiting) < 2:
            return start, t0
    raise AssertionError("the queues never both waited")


def borrow_reclaim() -> dict[str, float]:
    rng = random.Random(7)
    quota = parse_quota({"gpu": 8}, "quota")
    qs = {"a": QueueSpec("a", quota=quota), "b": QueueSpec("b", quota=quota)}
    wl = Workload("borrow", tuple(jobs("a", 60, 0, rng) + jobs("b", 30, 4 * 3600, rng)))
    policy = build("reclaim", backfill="greedy", elastic=False, preemption=True, min_runtime=600.0, interval=60.0)
    ctl = Controller(SimEngine(parse_shorthand("4x4"), wl, SimConfig(restart_delay=30.0)), policy, queues=qs,
                     check=True)
    meter = QueueMeter(ctl)
    preempted: list[str] = []
    ctl.listeners.append(lambda what, r: preempted.append(r.spec.queue) if what == "preempted" else None)
    ctl.run()
    arrive = 4 * 3600
    before = max((h.get("a", 0) for t, h in meter.samples if t < arrive), default=0)
    reached = next((t for t, h in meter.samples if t >= arrive and h.get("b", 0) >= 8), None)
    window = [(t, h) for t, h in meter.samples if arrive <= t < arrive + 2 * 3600]
    mean = {q: sum(h.get(q, 0) * (t1 - t0) for (t0, h), (t1, _) in zip(window, [*window[1:], (arrive + 7200, {})],
                                                                         strict=True)) / 7200 for q in "ab"}
    return {"a_gpus_alone": before, "b_reaches_quota_after_s": (reached or 0.0) - arrive,
            "a_reclaimed": preempted.count("a"), "b_reclaimed": preempted.count("b"),
            "a_mean": mean["a"], "b_mean": mean["b"]}


def main() -> None:
    print("| seed | GPU-time a:b while both wait | off 2:1 by | contention lasted h |")
    print("|---|---|---|---|")
    for seed in (0, 1, 2):
        ratio, hours = weighted(seed)
        print(f"| {seed} | {ratio:.3f} | {ratio / 2 - 1:+.1%} | {hours:.1f} |", flush=True)
    m = borrow_reclaim()
    print(f"\nborrow/reclaim: a alone held {m['a_gpus_alone']:.0f} of 16 GPUs (quota 8); b reached its quota "
          f"{m['b_reaches_quota_after_s']:.0f} s after submitting (its jobs arrive over 30 s); jobs reclaimed: "
          f"{m['a_reclaimed']:.0f} of a's, {m['b_reclaimed']:.0f} of b's; mean GPUs in the 2 h after: "
          f"a {m['a_mean']:.1f}, b {m['b_mean']:.1f}")


if __name__ == "__main__":
    main()
