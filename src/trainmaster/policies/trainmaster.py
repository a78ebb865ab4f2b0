"""`trainmaster`: queues and fair share, priorities and preemption, LAS time sharing, goodput sizing.

`build` assembles any combination of the queue-aware rules into a `Cycle`
(the tests of queues, fair share, preemption and backfill pin its defaults;
`edl` is one such combination). The `trainmaster` preset (`make`) turns on:

- order: services, then priority, then the shortest remaining time its
  learned models predict (`las.RemainingOrder`: remaining steps over fitted
  speed; a job not yet measured goes first, in Tiresias' attained-service
  order), fair share across queues while placing;
- preemption: the queue rules (services, priority within a queue, reclaim of
  borrowed quota, `min_runtime`), then LAS within one queue and priority
  (`las.las_preempt`): time sharing when jobs cannot be resized;
- sizing: Optimus' marginal-gain greedy over every admitted job
  (`GainSizing`), running jobs shrunk to their target at once and grown to it
  where it fits; models fitted online from reports (`uses_models`); jobs that
  adapt their batch sized on goodput, a whole node at a time where needed and
  at most twice the size they have run at, or to any whole-node size with
  the GPUs no step wanted (`Optimus(goodput=True)`), their goodput law's
  cross-node sync flat until three multi-node sizes are measured and
  fragmented splits down-weighted (`speed.fit(cross_slope=False)`); while
  the cluster is busy (the last decision full and 30+ arrivals in 2 h) a
  resize also charged 2% of the job's remaining time (`RESTART_SHARE`); the
  base hook's shrinking for pending jobs and services' headroom only while a
  service is live (`only_with_services`: the targets already leave room);
  a grown job whose size needs more than one node re-placed at most two
  workers a node where the free nodes allow (`SPREAD_TO`, `spread_wide`);
- reservation and backfill for the blocked head job;
- batch size: adaptive jobs run at the batch with the most goodput
  (`policies/goodput.py`), switched in place (`Plan.rebatch`) when a better
  one promises any gain, back to the batch a job last left only at
  `REBATCH_GAIN` more; their model's speed is goodput, so GPUs follow it.
- decisions on events, at the next LAS demotion, and every 60 s while elastic
  jobs are live (their models learn between events).

Why the previous preset was the worst one (Pollux workloads 1-8, 16x4, seed 1,
bench/results/trainmaster.md): it was FIFO within a priority with a reservation
for the blocked head job, and preempted only across priorities. At fixed size
nothing time-shares, so a long job that got its GPUs kept them while short
jobs queued behind it (head-of-line blocking: Tiresias halves mean JCT on the
same traces by preempting on attained service), and the reservation held GPUs
idle for big head jobs. Elastic, it grew jobs only into idle capacity under
the 0.97 load line and shrank the *most fulfilled* job for newcomers, never the
one that gains least, so GPUs stayed where they first landed instead of moving
to the jobs whose completion rate gains most (Optimus' rule). The 300 s
interval and the 600 s `min_runtime` mattered little (under 3% each).

Why LAS + gain sizing was still behind (issue 11, second pass): at fixed size
Tiresias' LAS only guesses that a job with little service is short, while a
job's target steps over its measured speed says how long it has left, so
ordering by that (SRTF on learned models, no oracle) cut mean JCT at load 1 by
a fifth. Elastic, the simulator did not model the batch, so goodput's choice
did nothing; modelled (`workloads/pollux_peer.PeerTruth.at_batch`), a batch
fixed at each start was worth little, because the noise scale grows ~100x as a
job trains: the gain comes from switching in place as it grows, as Pollux's
jobs do. The model only learns that if its noise average follows (log-space
averages) and its batch choice stays where its speed law was measured.

Why it still trailed Pollux at load 0.5 (issue 11, fourth pass): there JCT is
nearly each job's run time, and the simulator's truth allows far less than
Pollux's 1,534 s (best replicas x batch per epoch, alone, no queueing: 659 to
835 s per workload, workloads 1-4), so the loss was the policy's. Per job,
against Pollux's own per-job JCTs (petuum/adaptdl `simulator/results-jobload`),
the short jobs were on par and the long ones (yolov3, deepspeech2, imagenet)
ran 1.5-2x slower: sized on their speed at the submitted batch, which stops
growing at one node, they kept 4 GPUs on an idle cluster. Goodput sizing
(above) fixes that; free sizing (`elastic-free`) lost to 1..2x before it
because the fixed-batch law drew a job to 60+ GPUs once and back (two
restarts) and its batch choice then followed the tiny local batches measured there.

Why a resize is charged a share of the remaining time on a busy cluster (issue 11, twentieth look): under
contention a long job (30,000 s left, 28 GPUs) gave a GPU up at each arrival and took it back at the next
tick, and the fixed 60 s charge is 0.2% of what it has left, so each move stalled all its GPUs for 30 s
for little. Charged 2% of its remaining time on every cluster, it won at load 1 and lost at 0.5, where a
job charged more grows later into an emptying cluster; gated on both a full cluster and a high arrival
rate (`Optimus._busy`) it is better at every Pollux load (1,758 / 2,619 / 3,434 / 4,959 at 0.5-2 vs
1,763 / 2,633 / 3,460 / 4,996) and on the Philly-derived set (2,527 vs 2,529).

Why the goodput law grows the noise scale with the batch (issue 11, session 21; `models/goodput.NOISE_GROWTH`
says why): one noise scale read at a small batch made small batches look cheap, so short jobs claimed GPUs at
batches that earn little; grown, it is better at every Pollux load again (1,730 / 2,586 / 3,403 / 4,950) and on
the Philly-derived set (2,498).

Why a grown multi-node job is spread two workers a node (issue 11, best27): on a full cluster half the
GPU-seconds already ran on more nodes than their size needs, and the truth (the Pollux profiles' measured
placements) charged that nothing net: one-node sizes spread lose rate, but a multi-node job syncs faster spread
thin than on two full nodes (yolov3 24% faster where it ran spread). Spreading the grown multi-node jobs on
purpose is better at every Pollux load (bench/results/trainmaster.md, session 23). It reads the placements
of one testbed: a cluster whose packed placements sync faster would want `spread_to` = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Literal

from trainmaster.core.allocation import Allocation, on_nodes
from trainmaster.core.job import JobKind, Role
from trainmaster.core.states import JobState
from trainmaster.policies.backfill import backfill as backfill_hook
from trainmaster.policies.cycle import AfterHook, Cycle, KeptSizes, OrderHook, SizeHook, Sizes, current_or_min
from trainmaster.policies.elastic import LOAD_LINE, grow_into_idle, shrink_for_pending
from trainmaster.policies.fairshare import fair_place
from trainmaster.policies.goodput import any_adaptive, choose_batches, switch_gain
from trainmaster.policies.las import LasOrder, LasPreempt, RemainingOrder
from trainmaster.policies.optimus import RESTART_SHARE, Optimus
from trainmaster.policies.preemption import MIN_RUNTIME, preempt
from trainmaster.policies.queues import by_priority, try_place
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.tiresias import INTERVAL
from trainmaster.policies.workspace import Workspace, copies

Backfill = Literal["none", "greedy", "reserve"]
TICK = INTERVAL  # seconds: the soonest a LAS demotion wakes the cycle (Tiresias' tick)
RESIZE_TICK = 60.0  # seconds between decisions while elastic jobs are live (Optimus' interval)
REBATCH_GAIN = 1.05  # a running job switches back to the batch it last left when that promises this much more
# goodput; to any other batch at any gain (`AdaptiveCycle._switches`)
_ANY_GAIN = 1.0 + 1e-9  # "any gain": strictly more goodput (a tie never switches: it restarts a real job)
SPREAD_TO = 2  # the trainmaster preset's `GainSizing.spread_to`: workers a node for a grown multi-node job
_KIND, _ELASTIC = attrgetter("spec.kind"), attrgetter("spec.elastic")  # of a view (C-level reads)


class GainSizing:
    """Elastic sizing by Optimus' marginal-gain greedy, kept within the queue rules.

    Phase 3 (`size`): the greedy runs over every admitted job from an empty
    cluster in this cycle's order (`Optimus.size`: minimums first, then one
    replica at a time to the largest completion-rate gain per dominant share,
    a resize of a running job charged its restart penalty), giving each elastic
    job a target. Running jobs above their target shrink to it now; pending jobs
    ask for their minimum, so preemption and reservations never act for more.
    Phase 5 (`grow`): jobs below their target grow to it, in order, where it fits.
    With `spread_to` (0: off), a grown job whose size needs more than one node is
    then re-placed at most `spread_to` workers a node where the free nodes allow
    (`spread_wide`: the grow restarts it anyway).

    Only elastic training jobs get a target, so while none is admitted the greedy (a step per admitted job)
    is skipped: its sizes would all be dropped, and it leaves nothing behind that a later decision reads.
    (Whether any live job is one: `Workspace.live_kinds`, read once per decision.)
    """

    skip_fixed = True  # False: run the greedy even when no admitted job can get a target (the reference)

    def __init__(self, optimus: Optimus | None = None, spread_to: int = 0) -> None:
        self.optimus = optimus or Optimus(goodput=True, restart_share=RESTART_SHARE)
        self.target: Sizes = {}
        self.spread_to = spread_to

    def size(self, base: SizeHook) -> SizeHook:
        def size(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
            sizes = base(snap, jobs, ws)
            # (no live elastic training job: no admitted one, without a pass over them)
            if self.skip_fixed and not (ws.live_kinds.elastic_training and _any_elastic_training(jobs)):
                self.target = {}
                return sizes
            empty = Workspace(snap, empty=True, memo=ws.memo, scoring=ws.scoring)
            self.target = {jid: want for jid, want in self.optimus.size(snap, jobs, empty).items()
                           if snap.jobs[jid].spec.elastic and snap.jobs[jid].spec.kind is JobKind.TRAINING}
            for jid, want in self.target.items():
                held = sizes.get(jid)
                if held is not None and snap.jobs[jid].active:
                    sizes[jid] = {r: min(n, want.get(r, n)) for r, n in held.items()}
            return sizes

        return size

    def grow(self, snap: Snapshot, blocked: list[JobView], ws: Workspace) -> list[JobView]:
        for job in sorted((snap.jobs[jid] for jid in self.target), key=lambda j: ws.rank.get(j.id, len(ws.rank))):
            held = ws.allocations.get(job.id)
            want = self.target[job.id]
            if held and any(held.count(r) < n for r, n in want.items()):
                got = try_place(ws, job, {r: max(n, held.count(r)) for r, n in want.items()})
                if self.spread_to and isinstance(got, Allocation):
                    spread_wide(ws, job, got, self.spread_to)
        return blocked


def spread_wide(ws: Workspace, job: JobView, got: Allocation, most: int) -> None:
    """Re-place `job`'s worker gang, just placed at `got` over more than one node, at most `most` workers a
    node (most free GPUs first, node name on ties) where that takes more nodes than `got`; else `got` stays.

    Why (issue 11, best27): in the Pollux profiles' measured placements a multi-node job syncs slower on
    two full nodes than spread thinner (yolov3's 8 GPUs on 4+4 1.2-1.7 s a step, on 2+2+2+2 0.9-1.1 s; bert
    and deepspeech2 alike), and on a full cluster a grown job lands on two or three nodes' leftovers. Only
    one-role gangs on a one-GPU-type cluster (no type quota to re-check); a size one node holds stays packed
    (spread, those lose 30-70% of their rate).
    """
    spec = job.spec
    task = spec.roles[Role.WORKER].resources if set(spec.roles) == {Role.WORKER} else None
    n = got.count(Role.WORKER)
    if task is None or not task.gpu or len(ws.memo.traits.gpu_types) > 1 or len(got.nodes) * most >= n:
        return
    pool = ws.memo.pool(spec)
    if n * task.gpu <= max((node.capacity.gpu for node in pool.nodes), default=0):
        return  # (a size one node holds)
    ws.assign(job, None)
    free = ws.free
    per: dict[str, int] = {}
    todo = n
    for name in sorted((x for x in pool.names if x in free), key=lambda x: (-free[x].gpu, x)):
        k = min(copies(task, free[name]), most, todo)  # (a GPU task: never -1, unbounded)
        if k > 0:
            per[name] = k
            todo -= k
            if not todo:
                break
    ws.assign(job, got if todo or len(per) <= len(got.nodes) else on_nodes(Role.WORKER, per))


def _any_elastic_training(jobs: list[JobView]) -> bool:
    """Whether some job is an elastic training job: C-level passes (a Python step per live job was ~4% of a
    busy trainmaster decision, where no job is elastic). The elastic flags first, over every job: where none
    is elastic (most decisions) that one pass answers; the kinds are read only where some job is."""
    if not any(map(_ELASTIC, jobs)):
        return False
    training = map(is_, map(_KIND, jobs), repeat(JobKind.TRAINING))
    return any(map(_ELASTIC, compress(jobs, training)))


class OnlyWithServices:
    """Size hook: `shrink` while a service is live; otherwise every job keeps its size (`current_or_min`).

    Under `GainSizing` the targets already leave room for every pending job's
    minimum, and the load line's headroom is for services; with none of them,
    `shrink_for_pending` only shrinks jobs the greedy means to keep (a second
    set of victims: extra restarts). Pollux workloads 1-8, elastic: mean JCT
    -2.5% / -1.0% / -0.7% at loads 0.5 / 1 / 2 (BENCHMARKS.md, third pass).

    `keep_sizes`: without services the sizes come from `cycle.KeptSizes` (`current_or_min` for the jobs
    whose view changed), whose dicts are shared across decisions: the trainmaster phases after sizing
    replace a job's size (`GainSizing.size`, `apply_objectives`) but never edit one in place
    (`shrink_for_pending` does, on dicts of its own). False: `current_or_min` every decision (the reference).
    They are kept as one mapping moved on by the snapshot's journal (`KeptSizes(journal=True)`, switch
    `KeptSizes.followed`): its keys in another order than the jobs', and every later phase reads sizes by id.
    """

    keep_sizes = True

    def __init__(self, shrink: SizeHook) -> None:
        self.shrink = shrink
        self.kept = KeptSizes(journal=True)  # declared state: the views and sizes last seen (read by id alone)

    def __call__(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
        if ws.live_kinds.service:  # (read once per decision: `Workspace.live_kinds`)
            return self.shrink(snap, jobs, ws)
        return (self.kept if self.keep_sizes else current_or_min)(snap, jobs, ws)


def only_with_services(shrink: SizeHook) -> SizeHook:
    """`OnlyWithServices(shrink)`: the trainmaster preset's base size hook."""
    return OnlyWithServices(shrink)


@dataclass
class AdaptiveCycle(Cycle):
    """A cycle whose plans also carry each adaptive job's batch size (phase 7, `policies/goodput.py`).

    With the LAS order it also asks to be woken at the next demotion or
    starvation promotion, as `tiresias.Tiresias` does (never sooner than `tick`).
    """

    tick: float = TICK
    resize_tick: float | None = None  # seconds between decisions while elastic jobs are live (None: events only)
    issued: dict[str, int] = field(default_factory=dict, repr=False)  # cross-decision: job -> the batch last sent
    left: dict[str, int] = field(default_factory=dict, repr=False)  # cross-decision: job -> the batch it switched from
    # (a class switch, not a field) no batch chosen while no planned job adapts its batch (`any_adaptive`);
    # False: `choose_batches` asks every allocation (the reference)
    scan_batches = True

    def decide(self, snap: Snapshot) -> Plan:
        plan, ws = self.decide_in(snap)  # (the decision's workspace: its per-decision memos, `live_kinds`)
        skip = self.scan_batches and not any_adaptive(snap, plan.allocations)
        batches = {} if skip else choose_batches(snap, plan)
        if batches:
            plan = replace(plan, batch=batches, rebatch=self._switches(snap, plan, batches))
        wake = math.inf
        if isinstance(self.order, LasOrder):
            wait = self.order.ranks.next_change(snap, plan)
            wake = math.inf if wait is None else max(self.tick, wait)
        if (self.resize_tick is not None and wake > self.resize_tick
                and ws.live_kinds.elastic):
            wake = self.resize_tick  # models learn between events: revisit elastic sizes
        return replace(plan, wake_after=None if math.isinf(wake) else wake)

    def _switches(self, snap: Snapshot, plan: Plan, batches: dict[str, int]) -> dict[str, int]:
        """Running jobs the plan leaves where they are whose best batch beats theirs: by any gain, or by
        `REBATCH_GAIN` for a switch back to the batch the job last left.

        Why the hysteresis only backwards (issue 11, best29): a switch in place costs nothing, and the truth gives
        most of the gains under 5% the law promises (Pollux workloads 1-2 at load 0.5: +2-4% on average), so a
        threshold on every switch held jobs at worse batches (any gain everywhere: load 1 -1.5%); but without
        one, jobs flapped between two close batches as each new report moved the law (yolov3 192 / 128 / 192 ...:
        16 reversals in workload 4 at load 0.5, none at 1.05), and that cost more (load 0.5 +1.4%).
        """
        issued, left = self.issued, self.left
        if len(issued) > 2 * len(snap.jobs) + 64:  # forget finished jobs now and then
            for jid in issued.keys() - snap.jobs.keys():
                del issued[jid]
                left.pop(jid, None)
        out: dict[str, int] = {}
        for jid, batch in batches.items():
            job = snap.jobs[jid]
            alloc = plan.allocations[jid]
            old = issued.get(jid)
            if job.state is JobState.RUNNING and alloc == job.allocation and old is not None:
                need = REBATCH_GAIN if left.get(jid) == batch else _ANY_GAIN
                if batch != old and switch_gain(snap, jid, alloc, old, batch) >= need:
                    out[jid] = issued[jid] = batch
                    left[jid] = old
            elif alloc != job.allocation or old is None:
                issued[jid] = batch
        return out


def build(name: str, *, backfill: Backfill = "reserve", elastic: bool = True, preemption: bool = True,
          min_runtime: float = MIN_RUNTIME, load_line: float = LOAD_LINE, interval: float | None = 300.0,
          use_models: bool = False, reserve_after: float = 0.0, victim_index: bool = True,
          las: bool = False, gain: bool = False, fill: bool = True, adaptive: bool = False,
          srtf: bool = False, spread_to: int = 0) -> Cycle:
    """A queue-aware cycle.

    `backfill`: "none" (strict order: a blocked head job blocks everyone after
    it), "greedy" (skip it: start anything that fits), "reserve" (reservation
    for the head job plus backfill that cannot delay it; with `reserve_after`
    seconds, only once the head has waited that long, greedy until then).
    `las`: Tiresias' attained-service order and preemption within a queue and
    priority (`policies/las.py`); `gain`: elastic targets by Optimus' marginal
    gain (`GainSizing`); `fill`: EDL's growth into idle capacity last;
    `adaptive`: an `AdaptiveCycle` (batch sizes, wake-ups at LAS demotions); `spread_to`: `GainSizing`'s.
    """
    strict = backfill != "greedy"
    after: list[AfterHook] = []
    if preemption:
        after.append(preempt(min_runtime, victim_index))
    if las:
        after.append(LasPreempt())
    if backfill == "reserve":
        after.append(backfill_hook(reserve_after))
    size: SizeHook = shrink_for_pending(strict, load_line) if elastic else current_or_min
    if elastic and gain:
        size = only_with_services(size)
        sizing = GainSizing(spread_to=spread_to)
        size = sizing.size(size)
        after.append(sizing.grow)
    if elastic and fill:
        after.append(grow_into_idle(load_line, use_models=use_models))
    order: OrderHook = (RemainingOrder() if srtf else LasOrder()) if las else by_priority
    cycle = (AdaptiveCycle if adaptive else Cycle)(
        name=name,
        order=order,
        size=size,
        place=fair_place(strict),
        after=tuple(after),
        interval=interval,
        uses_models=use_models,
    )
    return cycle


def make() -> Cycle:
    cycle = build("trainmaster", use_models=True, las=True, gain=True, fill=False, interval=None, adaptive=True,
                  srtf=True, spread_to=SPREAD_TO)
    assert isinstance(cycle, AdaptiveCycle)
    cycle.resize_tick = RESIZE_TICK
    return cycle
