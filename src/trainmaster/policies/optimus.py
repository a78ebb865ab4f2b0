"""`optimus`: size jobs by the marginal gain their learned models predict (Peng et al., EuroSys'18).

Every cycle re-decides from an empty cluster (the controller diffs the plan):

1. every admitted job gets its minimum (1 worker, plus 1 PS for PS jobs) in arrival order,
   skipping those that do not fit;
2. then a heap hands out one more worker, one more PS, or one of each (so a PS job whose
   servers are the bottleneck can still grow) to the job with the largest gain per unit of
   the increment's dominant resource, until no gain is positive or nothing fits;
3. placement on the fewest nodes, roles spread evenly, by `Workspace.place` (its fit index
   keeps a cycle fast at 10^4 nodes).

A job whose model cannot predict yet (no report and no sibling of its type) stays at its
minimum until its first report.

The gain, from the predicted remaining time T before and after the increment:

- `objective="time"` (the paper): `T_before - T_after`, seconds saved. It favours long jobs
  (a long job saves more seconds per GPU), so short jobs sit at their minimum.
- `objective="rate"` (default): `1/T_after - 1/T_before`, completion rate gained. The sum of
  1/T over running jobs is the rate at which they finish; by Little's law (mean JCT = mean
  jobs in the system / arrival rate) finishing jobs faster is what lowers mean JCT. It
  favours short jobs, like SRPT, while keeping every job at its minimum or more. On the
  Pollux workloads it cuts mean JCT by 46% against "time" (bench/results/optimus.md).

Predictions come from `snapshot.models[job_id]` (a `JobModel` fitted online from reports).
A running job's remaining time on any size but its current one carries a restart penalty,
so a resize happens only when it gains more than the restart costs.

`goodput=True` (the `trainmaster` preset's sizing; the `optimus` preset keeps it off): a
job that adapts its batch is predicted at its goodput on each size (`JobModel.goodput`: the
best batch there), may also grow to the next whole node in one increment (`_jumps`), to any
whole-node size with the GPUs no step wanted, and grows to at most `EXPLORE` times the most
workers it has run on.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import compress, count, islice, repeat
from operator import attrgetter, is_, is_not, itemgetter, not_
from typing import NamedTuple

from trainmaster.core.errors import SpecError
from trainmaster.core.job import JobSpec, Role
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.models.book import JobModel
from trainmaster.models.speed import Config
from trainmaster.policies.cycle import Cycle, Sizes, by_submit_time
from trainmaster.policies.pending import PendingLine
from trainmaster.policies.snapshot import JobView, PendingIds, Plan, Snapshot, Tail
from trainmaster.policies.waits import Wait, WaitKind
from trainmaster.policies.workspace import Segment, Workspace, minimum

RESTART_PENALTY_S = 60.0  # predicted seconds a resize costs a running job (restart delay and lost work)
INTERVAL_S = 60.0
# Goodput sizing (`goodput=True`): a job grows to at most this times the most workers it has reported from,
# as Pollux's simulator paces each job (`max_replicas = 2 * max_profiled_replicas`): its goodput law is a fit,
# and far beyond the sizes it was measured at its optimism draws GPUs the job cannot use.
EXPLORE = 2
# Busy-cluster restart charge (`restart_share`, the `trainmaster` preset's `GainSizing` sets `RESTART_SHARE`): while
# the last decision left under a node's GPUs unwanted and at least `BUSY_ARRIVALS` jobs arrived within the last
# `BUSY_WINDOW_S`, a running job's resize is also charged this share of its predicted remaining time where it is.
RESTART_SHARE = 0.02
BUSY_ARRIVALS = 30
BUSY_WINDOW_S = 7200.0

OBJECTIVES = ("rate", "time")
_ID = attrgetter("id")
_SPEC = attrgetter("spec")  # (of a view, a `_Shape`, or `_UNSEEN`)
_TOTAL = attrgetter("total")
_KEY = attrgetter("key")
_KEY_ID = itemgetter(1)  # of a (submit time, id) key
_MIN = attrgetter("min_resources")
_GPUS = itemgetter(2)
_BUDGET, _DEADLINE = attrgetter("spec.budget"), attrgetter("spec.deadline")  # (of a view: C-level reads)
_STEPS = ((1, 0), (0, 1), (1, 1))  # increments: (+workers, +ps)


def _fits(need: Resources, free: list[int]) -> bool:
    return need.cpu <= free[0] and need.memory <= free[1] and need.gpu <= free[2]


def _take(need: Resources, free: list[int]) -> None:
    free[0] -= need.cpu
    free[1] -= need.memory
    free[2] -= need.gpu


def _least(state: Mapping[str, _Job]) -> Resources:
    """The smallest increment (per resource) any job may take: when even that does not fit, none does."""
    needs = [step.need for st in state.values() for step in st.steps]
    if not needs:
        return Resources()
    return Resources(min(n.cpu for n in needs), min(n.memory for n in needs), min(n.gpu for n in needs))


@dataclass(frozen=True, slots=True)
class _Step:
    """One kind of increment of a job: what it adds, what it costs, and its dominant share."""

    dw: int
    dp: int
    need: Resources
    share: float


def _jumps(st: _Job, free: list[int], *, far: bool = False) -> list[_Step]:
    """Worker increments to whole-node sizes that fit: the next one, or (`far`) each one beyond it.

    Goodput is not concave in the worker count: a job that fills one node
    slows down on its first worker beyond it (the all-reduce crosses nodes,
    at a batch sized for one) and gains only with a node's worth there, so
    a one-at-a-time greedy stops at the node boundary (Pollux searches
    allocations whole instead): the next whole node is always a candidate.
    A deeper dip can hide every gain from both: the first intra-node
    all-reduce costs more than a second worker adds at a small batch, while
    a few nodes at a large batch pay, so a job left at one worker with most
    of the cluster idle could not climb out (cifar10 at load 0.5: 1 GPU for
    540 s, 24 GPUs free; bench/results/trainmaster.md, seventh look). The
    sizes beyond the next node (`far`) are offered only in a second pass
    (`Optimus.size`, 2b) over the GPUs no step of any job wanted: offered in
    the first, on a full cluster (load 2) what a jump took was paid for by
    other jobs' steps, and the completion-rate objective handed it to short
    jobs while the long ones starved (eighth look). Each is scored by its
    gain per share, as a single step is.
    """
    unit = next((s for s in st.steps if s.dw == 1 and s.dp == 0), None)
    if unit is None:
        return []
    out = []
    target = -(-(st.workers + 1) // st.per_node) * st.per_node
    if far:
        target += st.per_node
    while target <= st.max_w:
        k = target - st.workers
        if k > 1:
            step = _Step(k, 0, unit.need * k, unit.share * k)
            if not _fits(step.need, free):
                break  # larger sizes need more still
            out.append(step)
        if not far:
            break
        target += st.per_node
    return out


_MinKey = tuple[int, int, int]  # a minimum's (cpu, memory, gpu)


class _Misfits(dict[_MinKey, Wait]):
    """One shared wait per minimum (its integers) that did not fit, made on first ask and rendered once."""

    def __init__(self, free: Resources) -> None:
        super().__init__()
        self.free = free  # the free total before the minimums pass, which every wait names
        self.texts: dict[_MinKey, str] = {}
        self.render: Callable[[Wait], str] | None = None  # what `texts` were rendered with

    def __missing__(self, key: _MinKey) -> Wait:
        wait = self[key] = Wait(WaitKind.GANG, f"optimus: minimum {Resources(*key)} does not fit ({self.free} free)")
        return wait

    def text(self, key: _MinKey, render: Callable[[Wait], str]) -> str:
        """The wait of `key` rendered by `render` (once: the plan's rendering, `Workspace.plan`'s)."""
        if render is not self.render:
            self.texts, self.render = {}, render
        got = self.texts.get(key)
        if got is None:
            got = self.texts[key] = render(self[key])
        return got


class _Block(NamedTuple):
    """A decision's misfit tail kept as one block: the pending jobs after `key` that can fit some day."""

    stamp: tuple[object, int]  # (origin, version) of its snapshot
    at: tuple[object, int]  # of the last snapshot it stands for (a quiet one after it answered with its plan)
    key: tuple[float, str]
    misfits: _Misfits  # its waits, one per minimum
    never: Mapping[str, str | None]  # the never-fits verdicts it was read with


class _Keep(NamedTuple):
    """What a decision of the preset's own cycle lends its misfit tail to be kept as one block (`kept_tail`)."""

    snap: Snapshot
    ws: Workspace
    line: PendingLine  # the cycle's line, synced to `snap` (the admitted jobs are it and the running ones)
    sized: bool  # the snapshot before `snap` was sized by this cycle: its admitted jobs' shapes worked out
    before: _Block | None  # the last decision's block


class _Unseen:
    """Stands for the kept shape of a job without one: its spec (None) is no job's."""

    spec = None


_UNSEEN = _Unseen()


class _Shape(NamedTuple):
    """What `Optimus.size` needs of a job at every decision, worked out once (specs never change)."""

    spec: JobSpec  # the spec and cluster total it was worked out for (a new one: worked out again)
    total: Resources
    least: Resources  # its minimum
    steps: tuple[_Step, ...]  # its kinds of increment
    key: tuple[int, int, int]  # the minimum's (cpu, memory, gpu): compared and hashed in C
    minimum: dict[Role, int]  # its size at the minimum, per role


@dataclass
class _Job:
    """Greedy state of one job: its size, its model, and a memo of predicted remaining times."""

    view: JobView
    model: JobModel | None
    workers: int
    ps: int
    per_node: int  # workers that fit on one node: predicts how many nodes a size spans
    current: tuple[int, int] | None  # size it runs at now (None: not running)
    penalty: float
    max_w: int
    max_p: int
    steps: list[_Step] = field(default_factory=list)  # increments it may still take
    goodput: bool = False  # predict with the goodput model (best batch per size) where the job has one
    version: int = 0
    memo: dict[tuple[int, int], float] = field(default_factory=dict)

    def remaining(self, w: int, p: int) -> float:
        """Predicted seconds to finish at (w, p), plus the restart penalty when that is a resize."""
        key = (w, p)
        got = self.memo.get(key)
        if got is None:
            model = self.model
            assert model is not None and model.speed is not None and model.remaining is not None
            speed = model.goodput if self.goodput and model.goodput is not None else model.speed
            f = speed.steps_per_s(Config(w, p, -(-w // self.per_node), model.batch))
            got = model.remaining / f if f > 0 else math.inf
            if self.current is not None and key != self.current:
                got += self.penalty
            self.memo[key] = got
        return got


class Optimus:
    """The Optimus preset: a `Cycle` whose size phase is the marginal-gain greedy."""

    name = "optimus"
    uses_models = True  # the controller attaches online model fitting (controller/learning.py)
    reads_few_jobs = False  # the greedy reads every job (Policy protocol)
    # False: every job after the GPUs ran out visited one by one, in `size` and in `place` (the slow reference).
    misfit_tail = True
    # False: the misfit tail checks each job's kept shape for its spec and the total (three passes more a decision).
    spec_index = True
    # False: the misfit tail's shapes read off the spec index into lists (ids, specs, shapes, keys) and their
    # GPUs' minimum checked (`_tail_shapes`); True: the keys in one pass and the waits in another where every
    # spec is in the index (the reference's answer then, `_misfit_tail`).
    fused_tail = True
    # False: every decision runs the phases (the reference). True: a decision whose snapshot follows the last one
    # decided with nothing a decision reads moved is answered with that plan (`_unmoved`).
    skip_unmoved = True
    # False: the misfit tail's waits written per job every decision (`_fused_tail`'s update, the reference).
    # True: in the preset's own decisions, the tail kept as one block of the line (`_kept_tail`): no entry per
    # job; the plan's waits and reasons are `Lined` maps over it, listing what changed since the last plan.
    kept_tail = True

    def __init__(self, *, objective: str = "rate", restart_penalty: float = RESTART_PENALTY_S,
                 interval: float | None = INTERVAL_S, goodput: bool = False, restart_share: float = 0.0) -> None:
        if objective not in OBJECTIVES:
            raise SpecError("optimus.objective", f"unknown objective {objective!r}", f"use one of {OBJECTIVES}")
        self.objective = objective
        self.goodput = goodput
        self._seq = itertools.count()
        self._shapes: dict[str, _Shape] = {}
        self._floor = 1 << 30  # the fewest GPUs any minimum worked out so far asks for (`_misfit_tail`'s cue)
        # id(spec) -> its shape for the total `_spec_total` (the shape holds its spec: no id is reused while kept)
        self._by_spec: dict[int, _Shape] = {}
        self._spec_total: Resources | None = None
        self.restart_penalty = restart_penalty
        # A fixed charge is nothing to a long job (60 s of 30,000 s left), so on a full cluster a 28-GPU job gave a
        # GPU up at each arrival and took it back at the next tick, 30 s of all its GPUs each time (nineteenth
        # look). Charged as a share of what it has left, but only while the cluster is busy: full at the last
        # decision *and* jobs arriving fast (`_busy`); either gate alone cost at load 0.5 (twentieth look).
        self.restart_share = restart_share
        self._full = False  # the last decision left under a node's GPUs that no step wanted
        # (submit time, job id) of the jobs seen that arrived within the window, oldest first, and their ids: the
        # count `_busy` reads is the deque's length, not a pass over every kept submit time
        self._window: deque[tuple[float, str]] = deque()
        self._arrived: set[str] = set()
        self.held_in_bulk = True  # False: unchanged running jobs assigned one by one (the slow reference)
        self.interval = interval
        self._last: tuple[Snapshot, Plan] | None = None  # the last snapshot decided and its plan (`skip_unmoved`)
        self._misfits: _Misfits | None = None  # the misfit waits, kept across decisions (`kept_tail`)
        self._sized_at: tuple[object, int] | None = None  # the snapshot the cycle's own `size` last ran on
        self._block: _Block | None = None  # the last decision's kept tail (None: it kept none)
        self.cycle = Cycle(name=self.name, order=by_submit_time, size=self.size, place=self.place,
                           preemptive=True, interval=interval)

    def decide(self, snapshot: Snapshot) -> Plan:
        last = self._last
        if last is not None and self.skip_unmoved and self._unmoved(snapshot, last[0]):
            self._last = (snapshot, last[1])
            self._followed(snapshot)
            return last[1]
        plan = self.cycle.decide(snapshot)
        self._last = (snapshot, plan) if self.skip_unmoved else None
        return plan

    def _unmoved(self, snap: Snapshot, before: Snapshot) -> bool:
        """Whether `snap` decides as `before` did: the controller's next snapshot with no job joined, left or
        changed (the journal, then the very views, in order), the same cluster, free total and queues, the very
        model objects (a model's fields never change; what a lazy one computes is kept once read, and `renew`
        keeps it only while that holds) and no budget or deadline (they read the clock). The phases read nothing
        else of a snapshot (not `now`: the busy gate's window is off with `restart_share` 0), and what they keep
        across decisions (shapes, the line, the cluster memo) answers as worked out anew. Between two
        decisions on a quiet cluster (the 60 s interval, nothing arrived or ended) most of Philly's decisions."""
        pending, was = snap.pending_ids, before.pending_ids
        if not (isinstance(pending, PendingIds) and isinstance(was, PendingIds) and pending.origin is was.origin
                and pending.version == was.version + 1 and pending.changed is not None and not pending.changed
                and not pending.joined and not pending.left and not self.restart_share):
            return False
        if snap.cluster is not before.cluster or snap.free_total != before.free_total or snap.queues != before.queues:
            return False
        jobs, had = snap.jobs, before.jobs
        if len(jobs) != len(had) or not all(map(is_, jobs.values(), had.values())) or list(jobs) != list(had):
            return False
        if any(map(is_not, map(_BUDGET, jobs.values()), repeat(None))) \
                or any(map(is_not, map(_DEADLINE, jobs.values()), repeat(None))):
            return False
        models, known = snap.models, before.models
        return len(models) == len(known) and list(models) == list(known) \
            and all(map(is_, models.values(), known.values()))

    # -- phase 3: size -------------------------------------------------------
    def size(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> Sizes:
        total = snap.cluster.total
        free = [ws.total_free.cpu, ws.total_free.memory, ws.total_free.gpu]
        node_gpus = max((n.capacity.gpu for n in snap.cluster.nodes), default=0)
        state: dict[str, _Job] = {}
        sizes: Sizes = {}
        waits, models = ws.waits, snap.models
        misfits = self._kept_misfits(ws.total_free)
        keep = self._keep(snap, jobs, ws)
        shapes = self._shapes
        tail = self.misfit_tail
        for i, job in enumerate(jobs):  # 1. minimums in arrival order
            if tail and free[2] < self._floor:  # (once a decision: every later job may wait at once)
                tail = False
                if self._misfit_tail(jobs, i, total, free[2], misfits, waits, keep):
                    break
            jid = job.id
            shape = shapes.get(jid)
            if shape is None or shape.spec is not job.spec or (shape.total is not total and shape.total != total):
                shape = self._shape(job, total)
            cpu, memory, gpus = key = shape.key
            if cpu > free[0] or memory > free[1] or gpus > free[2]:
                waits[jid] = misfits[key]  # (`Workspace.block` with a shared `Wait`)
                continue
            free[0] -= cpu
            free[1] -= memory
            free[2] -= gpus
            model = models.get(jid)
            # (`remaining` first: a lazy model computes its speed only when read, and without a target it is moot)
            if model is None or model.remaining is None or model.speed is None:  # it cannot predict: minimum
                sizes[jid] = dict(shape.minimum)
                continue
            worker = job.spec.roles[Role.WORKER]
            ps_spec = job.spec.roles.get(Role.PS)
            steps = shape.steps
            per_node = max(1, node_gpus // worker.resources.gpu) if worker.resources.gpu else 1 << 30
            current = (job.count(Role.WORKER), job.count(Role.PS)) if job.active and job.allocation else None
            max_w = worker.max
            adapts = self.goodput and model.goodput is not None
            if adapts:  # Pollux's exploration pace: at most twice the most workers measured
                max_w = min(max_w, max(EXPLORE * model.max_workers, current[0] if current else 0, worker.min))
            st = _Job(job, model, worker.min, ps_spec.min if ps_spec else 0, per_node, current,
                      self.restart_penalty, max_w, ps_spec.max if ps_spec else 0, list(steps), goodput=adapts)
            state[job.id] = st
            sizes[job.id] = {}  # (its place in arrival order; its size once the greedy is done)
        if self.restart_share and self._busy(jobs, snap.now):
            for st in state.values():
                if st.current is not None:
                    here = st.remaining(*st.current)  # (no penalty at its current size)
                    st.penalty += self.restart_share * here if math.isfinite(here) else 0.0
        self._grow(state, free, far=False)  # 2. one increment at a time to the largest gain per dominant share
        if self.goodput:  # 2b. with what no step wanted, jobs in a goodput dip may jump past it (`_jumps`)
            self._grow(state, free, far=True)
        if self.restart_share:
            self._full = free[2] <= node_gpus
        for jid, st in state.items():
            sizes[jid] = {Role.WORKER: st.workers}
            if Role.PS in st.view.spec.roles:
                sizes[jid][Role.PS] = st.ps
            model = st.model
            assert model is not None
            left = st.remaining(st.workers, st.ps)
            ws.note(jid, f"optimus: {st.workers} worker(s)" + (f", {st.ps} ps" if st.ps else "")
                    + f", predicted {left:,.0f}s left ({model.basis})")
        return sizes

    def _busy(self, jobs: list[JobView], now: float) -> bool:
        """Whether the last decision filled the cluster and `BUSY_ARRIVALS` jobs arrived within `BUSY_WINDOW_S`.

        The jobs seen are counted in `_window` (sorted by submit time; a job joins it when first seen inside
        the window and leaves as the window passes it): decisions' times never go back, so a job that left it
        would not count again."""
        since = now - BUSY_WINDOW_S
        window, seen = self._window, self._arrived
        for job in jobs:
            at = job.submit_time
            if at >= since and job.id not in seen:
                seen.add(job.id)
                entry = (at, job.id)
                if window and entry < window[-1]:  # (seen late: jobs mostly come in submit order)
                    bisect.insort(window, entry)
                else:
                    window.append(entry)
        while window and window[0][0] < since:
            seen.discard(window.popleft()[1])
        return self._full and len(window) >= BUSY_ARRIVALS

    def _shape(self, job: JobView, total: Resources) -> _Shape:
        """Work out and keep a job's `_Shape` (`size` reads the kept one while its spec and the total hold)."""
        worker = job.spec.roles[Role.WORKER]
        ps_spec = job.spec.roles.get(Role.PS)
        steps = []
        for dw, dp in _STEPS if ps_spec else _STEPS[:1]:
            need = worker.resources * dw + (ps_spec.resources * dp if ps_spec else Resources())
            steps.append(_Step(dw, dp, need, need.dominant_share(total) or 1.0))
        if len(self._shapes) > 4 * 10**5:
            self._shapes.clear()
            self._by_spec.clear()
        if total is not self._spec_total and total != self._spec_total:  # (the index holds one total's shapes)
            self._by_spec.clear()
            self._spec_total = total
        least = job.spec.min_resources
        self._floor = min(self._floor, least.gpu)
        at_min = {Role.WORKER: worker.min, Role.PS: ps_spec.min} if ps_spec else {Role.WORKER: worker.min}
        shape = self._shapes[job.id] = self._by_spec[id(job.spec)] = _Shape(
            job.spec, total, least, tuple(steps), (least.cpu, least.memory, least.gpu), at_min)
        return shape

    def _misfit_tail(self, jobs: list[JobView], start: int, total: Resources, gpus: int, misfits: _Misfits,
                     waits: dict[str, Wait], keep: _Keep | None = None) -> bool:
        """The minimums pass from `jobs[start]` on when none of those minimums fits `gpus` free GPUs: each job
        waits with its minimum's misfit wait, in C-level passes (on a busy cluster most of the line, every
        decision). Checked, not assumed: False when some minimum might fit (only shapes worked out then)."""
        if self.fused_tail and gpus < self._floor and self.spec_index \
                and (total is self._spec_total or total == self._spec_total):
            return self._fused_tail(jobs, start, total, gpus, misfits, waits, keep)
        rest = jobs[start:]
        ids = list(map(_ID, rest))
        got = self._tail_shapes(rest, ids, total)
        if got is None:
            return False
        keys = list(map(_KEY, got))
        if min(map(_GPUS, keys), default=gpus + 1) <= gpus:
            return False
        waits.update(zip(ids, map(misfits.__getitem__, keys), strict=True))
        return True

    def _fused_tail(self, jobs: list[JobView], start: int, total: Resources, gpus: int, misfits: _Misfits,
                    waits: dict[str, Wait], keep: _Keep | None = None) -> bool:
        """`_misfit_tail` off the spec index (of `total`) with `gpus` under `_floor`, in two C-level passes where
        every spec is in it: no shape worked out, so `_floor` stays and every key's GPUs (a kept shape's) are at
        least it, above `gpus`; each job waits. Else the specs new to the index are worked out first (as the
        reference's pass by job id would: shapes follow from spec and total alone) and some minimum might fit
        where `_floor` fell to `gpus` (only new shapes lower it: the reference's minimum check). With `keep`,
        the tail kept as one block where it can be (`_kept_tail`)."""
        if keep is not None:
            kept = self._kept_tail(jobs, start, total, gpus, misfits, keep)
            if kept is not None:
                return kept
        by_spec = self._by_spec
        try:
            keys = list(map(_KEY, map(by_spec.__getitem__, map(id, map(_SPEC, islice(jobs, start, None))))))
        except KeyError:
            rest = jobs[start:]
            for job in list(compress(rest, map(not_, map(by_spec.__contains__, map(id, map(_SPEC, rest)))))):
                self._shape(job, total)  # (each job of a new spec, as by job id)
            if self._floor <= gpus:
                return False
            try:
                keys = list(map(_KEY, map(by_spec.__getitem__, map(id, map(_SPEC, rest)))))
            except KeyError:  # (the kept shapes were cleared meanwhile: one by one instead)
                return False
        waits.update(zip(map(_ID, islice(jobs, start, None)), map(misfits.__getitem__, keys), strict=True))
        return True

    def _kept_misfits(self, free: Resources) -> _Misfits:
        """This decision's misfit waits: kept across decisions while `free` holds (`kept_tail`: a kept block's
        waits are the same objects as the decision's other misfit waits), else new ones (the reference)."""
        kept = self._misfits
        if not self.kept_tail:
            return _Misfits(free)
        if kept is None or kept.free != free:
            kept = self._misfits = _Misfits(free)
        return kept

    def _followed(self, snap: Snapshot) -> None:
        """`snap` moved nothing since the snapshot before (`_unmoved`: no job joined, left or changed), and was
        answered with the last plan: what `_kept_tail` knows of that one holds for it (`_Keep.sized`, the block)."""
        pending = snap.pending_ids
        assert isinstance(pending, PendingIds)
        prior, stamp = (pending.origin, pending.version - 1), (pending.origin, pending.version)
        if self._sized_at == prior:
            self._sized_at = stamp
        if self._block is not None and self._block.at == prior:
            self._block = self._block._replace(at=stamp)

    def _keep(self, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> _Keep | None:
        """What this decision lends a kept tail (`_Keep`), where it is the preset's own cycle's (`jobs` its admitted
        jobs in submit order, from its line synced to `snap`'s journal); None elsewhere (`GainSizing` sizes
        trainmaster's order with a workspace of its own). Moves the records on: the snapshot sized, no block yet."""
        pending, line, cycle = snap.pending_ids, self.cycle.line, self.cycle
        if ws.ranked is not jobs:
            return None
        journaled = isinstance(pending, PendingIds) and pending.changed is not None
        stamp = (pending.origin, pending.version) if isinstance(pending, PendingIds) else None
        sized, self._sized_at = self._sized_at, stamp
        before, self._block = self._block, None
        if not self.kept_tail or not journaled or stamp is None or line is None or cycle.order is not by_submit_time \
                or line.seen != stamp:
            return None
        return _Keep(snap, ws, line, sized == (stamp[0], stamp[1] - 1), before)

    def _kept_tail(self, jobs: list[JobView], start: int, total: Resources, gpus: int, misfits: _Misfits,
                   keep: _Keep) -> bool | None:
        """`_fused_tail` with the tail kept as one block: the pending jobs after `jobs[start - 1]` that can fit
        some day (`Tail`), when they are the tail (the counts agree: no running job in it). Each one's minimum was
        worked out when it joined the line (the snapshot before was sized here), so only the jobs the journal
        names are looked at: a spec new to the index worked out (in line order, as `_fused_tail`) and then
        `_floor` checked (False: some minimum might fit). No wait written: the plan's waits and reasons are the
        block's (`Workspace.segment`), its reasons listing the jobs whose text may differ from the last plan's
        where that was this block's predecessor (`_changed`). None: not kept (`_fused_tail` then)."""
        snap, ws, line, sized, before = keep
        pending = snap.pending_ids
        if not sized or start == 0 or not isinstance(pending, PendingIds) or pending.changed is None:
            return None
        head = jobs[start - 1]
        key = (head.submit_time, head.id)
        tail = line.behind(snap, head.id, key, ws.memo)
        if tail is None or tail.size != len(jobs) - start:
            return None
        key_of, never, views = line.key_of, tail.never, snap.jobs
        moved = sorted(k for k in map(key_of.get, pending.joined | pending.changed) if k is not None and k > key)
        moved_ids = [jid for jid in map(_KEY_ID, moved) if not never.get(jid)]
        by_spec = self._by_spec
        for job in [job for job in map(views.__getitem__, moved_ids) if id(job.spec) not in by_spec]:
            self._shape(job, total)  # (a job new to the line: as `_fused_tail` would)
        if self._floor <= gpus:
            return False
        stamp = (pending.origin, pending.version)
        base: tuple[object, int] | None = None
        changed: list[str] | None = None
        if before is not None and before.at == (stamp[0], stamp[1] - 1) and before.misfits is misfits \
                and before.never is never:
            base = before.stamp
            if key < before.key:  # (the tail grew at its front: those jobs had other reasons)
                keys = line.keys
                ahead = islice(line.ids, bisect.bisect_right(keys, key), bisect.bisect_right(keys, before.key))
                moved_ids.extend(jid for jid in ahead if not never.get(jid))
            changed = moved_ids
        self._block = _Block(stamp, stamp, key, misfits, never)
        ws.segment = self._segment(tail, misfits, views, len(ws.waits), stamp, base, changed)
        return True

    def _segment(self, tail: Tail, misfits: _Misfits, views: Mapping[str, JobView], ahead: int,
                 stamp: tuple[object, int], base: tuple[object, int] | None, changed: list[str] | None) -> Segment:
        """The plan's waits and reasons over a kept block (`Workspace.segment`): the own ones (the first `ahead`
        waits before the block, the rest after it, as the reference wrote them), each member its minimum's wait
        and text (rendered as the plan renders); the reasons' `changed`: the members listed (`changed`) and every
        own reason (few)."""
        def wait(jid: str) -> Wait:
            return misfits[self._min_keys([jid], views)[0]]

        def waits_of(ids: list[str]) -> list[Wait]:
            return list(map(misfits.__getitem__, self._min_keys(ids, views)))

        def segment(waits: dict[str, Wait], reasons: dict[str, str], render: Callable[[Wait], str]
                    ) -> tuple[Mapping[str, Wait], Mapping[str, str]]:
            def text(jid: str) -> str:
                return misfits.text(self._min_keys([jid], views)[0], render)

            def texts_of(ids: list[str]) -> list[str]:
                return [misfits.text(key, render) for key in self._min_keys(ids, views)]

            after = len(waits) - ahead
            moved = None if changed is None else {**reasons, **dict(zip(changed, texts_of(changed), strict=True))}
            return (tail.lined(waits, after, wait, waits_of, stamp),
                    tail.lined(reasons, after, text, texts_of, stamp, base, moved))

        return segment

    def _min_keys(self, ids: list[str], views: Mapping[str, JobView]) -> list[_MinKey]:
        """The minimum's key of each job of `ids` (its spec's, `_Shape.key`): off the spec index in C-level passes
        where every spec is in it (an indexed spec's shape, whatever its total: the minimum reads the spec alone;
        the views hold their specs, so no id is reused), else from each spec."""
        specs = list(map(_SPEC, map(views.__getitem__, ids)))
        try:
            return list(map(_KEY, map(self._by_spec.__getitem__, map(id, specs))))
        except KeyError:
            return [(least.cpu, least.memory, least.gpu) for least in map(_MIN, specs)]

    def _tail_shapes(self, rest: list[JobView], ids: list[str], total: Resources) -> list[_Shape] | None:
        """The kept shape of each job of `rest` (new or changed specs, or a new total, worked out first, as the
        reference would): read off the spec index in C-level passes while every spec is in it, else by job id
        with each one's spec and total checked. None: the kept shapes were cleared meanwhile."""
        if self.spec_index and (total is self._spec_total or total == self._spec_total):
            try:
                return list(map(self._by_spec.__getitem__, map(id, map(_SPEC, rest))))
            except KeyError:  # (a job new to the tail, or a new spec: checked one by one below)
                pass
        shapes = self._shapes
        for job in compress(rest, map(is_not, map(_SPEC, rest), map(_SPEC, map(shapes.get, ids, repeat(_UNSEEN))))):
            self._shape(job, total)  # new, or a new spec
        try:
            got = list(map(shapes.__getitem__, ids))
        except KeyError:  # (the kept shapes were cleared meanwhile: one by one instead)
            return None
        for at in compress(count(), map(is_not, map(_TOTAL, got), repeat(total))):
            if got[at].total != total:  # (a cluster of the same total keeps its shapes)
                got[at] = self._shape(rest[at], total)
        return got

    def _grow(self, state: dict[str, _Job], free: list[int], *, far: bool) -> None:
        """The greedy: pop the best increment, take it if it fits, push the job's next (`far`: see `_jumps`)."""
        heap: list[tuple[float, int, str, int, _Step]] = []
        for jid, st in state.items():
            st.version += 1
            self._push(heap, st, jid, free, far)
        least = _least(state)
        while heap:
            if not _fits(least, free):  # no increment fits any more (free only shrinks): the rest would fail
                break
            _, _, jid, version, step = heapq.heappop(heap)
            st = state[jid]
            if version != st.version:
                continue
            if _fits(step.need, free):
                _take(step.need, free)
                st.workers += step.dw
                st.ps += step.dp
            elif step in st.steps:  # that kind of increment no longer fits anywhere
                st.steps.remove(step)
            st.version += 1
            self._push(heap, st, jid, free, far)

    def _push(self, heap: list[tuple[float, int, str, int, _Step]], st: _Job, jid: str, free: list[int],
              far: bool = False) -> None:
        """Push the job's best increment, if any gains (jobs without a model have no increments)."""
        if not st.steps:
            return
        now = st.remaining(st.workers, st.ps)
        near = _jumps(st, free) if st.goodput else []
        best = self._best(st, now, st.steps + near + (_jumps(st, free, far=True) if far and st.goodput else []))
        if best is not None:  # ties: the earlier job in arrival order (insertion counter)
            heapq.heappush(heap, (-best[0], next(self._seq), jid, st.version, best[1]))

    def _best(self, st: _Job, now: float, steps: list[_Step]) -> tuple[float, _Step] | None:
        """The increment with the largest positive gain per share among `steps`, if any."""
        best: tuple[float, _Step] | None = None
        for step in steps:
            w, p = st.workers + step.dw, st.ps + step.dp
            if w > st.max_w or p > st.max_p:
                continue
            after = st.remaining(w, p)
            if self.objective == "time":  # the paper's: seconds of remaining time saved
                gain = now - after if math.isfinite(now) else (math.inf if math.isfinite(after) else 0.0)
            else:  # completion rate gained: 1/T after minus 1/T now
                gain = 1.0 / max(after, 1e-9) - (1.0 / max(now, 1e-9) if math.isfinite(now) else 0.0)
            score = gain / step.share
            if score > 0 and (best is None or score > best[0]):
                best = (score, step)
        return best

    # -- phase 4: place ------------------------------------------------------
    def place(self, snap: Snapshot, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]],
              ws: Workspace) -> list[JobView]:
        """Unchanged running jobs first (they keep their nodes), then the rest in arrival order.

        A job that does not fit at its size (fragmentation) tries its minimum before waiting.
        """
        blocked: list[JobView] = []
        keep: list[JobView] = []
        rest: list[JobView] = []
        running, starting = JobState.RUNNING, JobState.STARTING
        for j in self._sized(jobs, sizes, ws):
            want = sizes.get(j.id)
            if want is not None:
                alloc, state = j.allocation, j.state  # (`JobView.active` and `Allocation.__bool__`, inlined)
                fixed = alloc.tasks and (state is running or state is starting) and (
                    alloc.role_counts == want or all(alloc.count(r) == n for r, n in want.items()))
                (keep if fixed else rest).append(j)
        if not (self.held_in_bulk and ws.assign_held(keep)):  # (all at once: a cost per job left out)
            for job in keep:
                if ws.fits(job, job.allocation):  # `Workspace.place`'s first choice, without asking twice
                    ws.assign(job, job.allocation)
                else:
                    self._place(job, sizes[job.id], ws, blocked)
        for job in rest:
            self._place(job, sizes[job.id], ws, blocked)
        return blocked

    def _sized(self, jobs: list[JobView], sizes: Mapping[str, Mapping[Role, int]], ws: Workspace) -> list[JobView]:
        """The jobs with a size, in `jobs`' order: read off `sizes`, whose keys `size` adds in that order
        (checked against `ws.rank`, C-level), not a pass over every job (most of them wait without one)."""
        rank = ws.rank
        if self.misfit_tail and sizes.keys() <= rank.keys():
            at = list(map(rank.__getitem__, sizes))
            if at == sorted(at) and max(at, default=-1) < len(jobs):
                sized = list(map(jobs.__getitem__, at))
                if list(map(_ID, sized)) == list(sizes):  # (the rank is of these jobs)
                    return sized
        return jobs

    @staticmethod
    def _place(job: JobView, want: Mapping[Role, int], ws: Workspace, blocked: list[JobView]) -> None:
        """Place at its size, else at its minimum (fragmentation), else it waits (added to `blocked`)."""
        if ws.place(job, want) is not None:
            return
        least = minimum(job.spec)
        if least != dict(want) and ws.place(job, least) is not None:
            asked = ", ".join(f"{n} {r.value}" for r, n in want.items())
            ws.note(job.id, f"optimus: placed at its minimum; {asked} is too fragmented")
            return
        ws.block_for_room(job, least)
        blocked.append(job)


def make() -> Optimus:
    return Optimus()
