"""A policy's scratch pad: free capacity per node, tentative allocations, waits, the queue book.

Built from a Snapshot; mutating it never touches live state (snapshot -> plan).
All gang logic lives here: a job is placed whole (every requested task) or not at all.
`trial()` opens a transaction (Volcano's Statement): every assign and release
after it is recorded, and `discard()` undoes them in reverse.

Placement is scored (Volcano's NodeOrderFn): among the eligible nodes that hold
the whole gang, the one with the highest weighted sum of scorer values wins,
the first in cluster order on ties; nodes the job runs on now come first
(no migration). `TIGHTEST` (fewest free GPUs, then CPUs, left after placing)
is the default and has an index, so placing stays a bisect at 10^4 nodes.
A gang no single node holds is spread: most-free nodes first, roles evenly.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import attrgetter, is_not, not_
from types import MappingProxyType
from typing import Literal, TypeVar, cast

from trainmaster.core.allocation import Allocation, Placement, Runs, on_node, on_nodes
from trainmaster.core.cluster import Cluster
from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources, resources_of
from trainmaster.policies.live import LiveKinds
from trainmaster.policies.queuebook import HeldUsage, QueueBook, queue_name
from trainmaster.policies.scoring import (
    TIGHTEST,
    ClusterTraits,
    Scoring,
    bind,
    by_class,
    node_class,
    tightest_fit,
    zone_turns,
)
from trainmaster.policies.snapshot import Behind, JobView, Plan, Snapshot, Tail
from trainmaster.policies.waits import Wait, WaitKind, render

_V = TypeVar("_V")
# The own waits and reasons, and how the plan renders a wait -> the plan's waits and reasons (`Workspace.segment`).
Segment = Callable[[dict[str, Wait], dict[str, str], Callable[[Wait], str]],
                   tuple[Mapping[str, Wait], Mapping[str, str]]]
_ZERO = Resources()
_TASKS, _GPU = attrgetter("tasks"), attrgetter("gpu")
_NOTHING: Mapping[str, Resources] = MappingProxyType({})  # what a job holding nothing holds per node
_SET_MEMO = object.__setattr__  # an allocation's memo attribute (`Allocation.remember`: frozen, set directly)


def eligible(node: Node, spec: JobSpec) -> bool:
    """Whether `spec` may run tasks on `node` (required GPU types, transient use); `gpuTypes` only scores."""
    if node.transient and spec.transient is TransientUse.NEVER:
        return False
    if spec.require_gpu_types and node.gpu_type is not None and spec.min_gpus > 0:
        return node.gpu_type in spec.require_gpu_types
    return True


def copy_mapping(mapping: Mapping[str, _V]) -> dict[str, _V]:
    """A dict copy, at C speed for the snapshot's read-only dict proxies (`dict(proxy)` looks up every key
    through the proxy: ~25x the cost at 12,000 jobs)."""
    if isinstance(mapping, (dict, MappingProxyType)):
        return cast(dict[str, _V], mapping.copy())
    return dict(mapping)


class EligibleNodes:
    """The nodes of a cluster one kind of job may use, in cluster order, with their total capacity."""

    __slots__ = ("_classes", "allowed", "names", "nodes", "total")

    def __init__(self, nodes: list[Node]) -> None:
        self.nodes = nodes
        self.names = tuple(n.name for n in nodes)
        self.allowed = frozenset(self.names)
        self.total = Resources()
        for n in nodes:
            self.total = self.total + n.capacity
        self._classes: list[frozenset[str]] | None = None

    def classes(self) -> list[frozenset[str]]:
        """The nodes grouped by `scoring.node_class` (first seen first): class-level scorers score them alike."""
        if self._classes is None:
            groups: dict[tuple[object, ...], list[str]] = {}
            for n in self.nodes:
                groups.setdefault(node_class(n), []).append(n.name)
            self._classes = [frozenset(names) for names in groups.values()]
        return self._classes


@dataclass
class ClusterMemo:
    """What a policy remembers about one cluster across decisions: eligible node sets, never-fits verdicts.

    A declared piece of policy state (`Cycle.memo`), replaced when the cluster changes.
    """

    cluster: Cluster
    pools: dict[tuple[bool, tuple[str, ...]], EligibleNodes] = field(default_factory=dict)
    never: dict[str, str | None] = field(default_factory=dict)  # job id -> why it can never fit (None: it can)
    usage: HeldUsage = field(default_factory=HeldUsage, repr=False)  # what each queue holds, kept (`book`)
    runs: Runs = field(default_factory=dict, repr=False, compare=False)  # one-node tasks tuples (`on_node`)
    _traits: ClusterTraits | None = field(default=None, repr=False)

    @property
    def traits(self) -> ClusterTraits:
        """The cluster's make-up as the scorers see it (computed on first use)."""
        if self._traits is None:
            self._traits = ClusterTraits.of(self.cluster)
        return self._traits

    def pool(self, spec: JobSpec) -> EligibleNodes:
        """`eligible` over the whole cluster, per the spec fields it reads (hot path)."""
        types = spec.require_gpu_types  # (`min_gpus` sums the roles: read only when some type is required)
        key = (spec.transient is TransientUse.NEVER, types if types and spec.min_gpus > 0 else ())
        found = self.pools.get(key)
        if found is None:
            found = self.pools[key] = _eligible_nodes(self.cluster, spec)
        return found

    def fresh(self, cluster: Cluster) -> ClusterMemo:
        """This memo if it is about `cluster`, else an empty one for it."""
        return self if self.cluster is cluster or self.cluster == cluster else ClusterMemo(cluster)


def never_fits(spec: JobSpec, snap: Snapshot, memo: ClusterMemo | None = None) -> str | None:
    """Why `spec` can never run on this cluster even when empty, or None."""
    pool = (memo or ClusterMemo(snap.cluster)).pool(spec)
    nodes = pool.nodes
    if not nodes:
        return "no node is eligible (check requireGpuTypes and transient)"
    for role, role_spec in spec.roles.items():
        if role_spec.min and not any(role_spec.resources.fits_in(n.capacity) for n in nodes):
            return f"one {role.value} needs {role_spec.resources}, more than any eligible node has"
    total = pool.total
    if not spec.min_resources.fits_in(total):
        return f"needs {spec.min_resources} at minimum, the eligible cluster has {total}"
    return None


def minimum(spec: JobSpec) -> dict[Role, int]:
    """A fresh `{role: min}` of a job."""
    return {role: s.min for role, s in spec.roles.items()}


def demand(spec: JobSpec, counts: Mapping[Role, int]) -> Resources:
    """What `counts` replicas of the job's roles take in all."""
    if len(counts) == 1:  # one role (most gangs): one product, no running sum
        (role,) = counts  # (its one key, then its count: no items view, iterator and pair built)
        n = counts[role]
        task = spec.roles[role].resources
        return task if n == 1 else task * n  # (one task: its own resources, immutable; no product)
    out = Resources()
    for role, n in counts.items():
        out = out + spec.roles[role].resources * n
    return out


def room_wait(spec: JobSpec, counts: Mapping[Role, int], total_free: Resources) -> Wait:
    """Why a gang of `counts` does not fit with `total_free` left: gang, or fragmentation when enough is free."""
    need = demand(spec, counts)
    kind = WaitKind.FRAGMENTATION if need.fits_in(total_free) else WaitKind.GANG
    tasks = sum(counts.values())
    if need.gpu:
        return Wait(kind, f"needs {need.gpu} GPU(s) for {tasks} task(s) at once; {total_free.gpu} free")
    return Wait(kind, f"needs {need} for {tasks} task(s) at once; {total_free} free")


# -- node scoring: the scorers live in policies.scoring ------------------------------------------
def anchored(spec: JobSpec, memo: ClusterMemo, counts: Mapping[Role, int]) -> bool:
    """Whether the gang's anchors (PS tasks and the chief) must go on on-demand nodes (`JobSpec.anchored`).

    Only for a gang of two or more tasks that may use transient nodes, on a cluster
    with both kinds: a one-task job has no rest that could go on without its
    anchor, so for it the rule would only mean `transient: never`.
    """
    return memo.traits.mixed and spec.anchored and sum(counts.values()) > 1  # (cheapest test first)


# A `_FitIndex` key: (free GPUs, free CPU, cluster position) packed into one int, ordered as that tuple is, so
# bisects and moves compare ints (a tuple comparison steps into the CPU and the position on the many nodes whose
# free GPUs tie, ~2x the cost per move). Exact for positions below 2**32 and |free CPU| below 2**63 millicores:
# the low part, CPU * 2**32 + position, then stays within +-2**95, under one GPU's step.
_POSITION_BITS, _GPU_BITS = 32, 96
_POSITION_MASK = (1 << _POSITION_BITS) - 1
_CPU_FLOOR = -(1 << 63)  # below any free CPU: the first key of a GPU count is at least `_fit_key(gpus, _CPU_FLOOR, 0)`


def _fit_key(gpu: int, cpu: int, position: int) -> int:
    """The int that sorts as (gpu, cpu, position) (see `_POSITION_BITS`); `key & _POSITION_MASK` is the position."""
    return (gpu << _GPU_BITS) + (cpu << _POSITION_BITS) + position


class _FitIndex:
    """Nodes sorted by (free GPUs, free CPU, cluster position) (`_fit_key`): the tightest one-node fit is a bisect
    away.

    It only orders candidates; `tightest` checks each against the live free
    capacity, so a stale entry can cost tightness, never correctness.
    """

    __slots__ = ("free", "keys", "names", "order")

    def __init__(self, free: dict[str, Resources], names: Iterable[str],
                 positions: Mapping[str, int] | None = None) -> None:
        """Index `names` (in cluster order, or at their `positions` in it when they are a part of it)."""
        self.free = free  # the dict indexed; the workspace rebuilds the index if it swaps the dict
        self.keys: dict[str, int] = {}
        self.names: dict[int, str] = {}  # position -> node name
        for i, name in enumerate(names):
            r = free.get(name)
            if r is not None:
                at = i if positions is None else positions[name]
                self.keys[name] = _fit_key(r.gpu, r.cpu, at)
                self.names[at] = name
        self.order = sorted(self.keys.values())

    def position(self, name: str) -> int:
        """`name`'s position in cluster order."""
        return self.keys[name] & _POSITION_MASK

    def update(self, name: str) -> None:
        old = self.keys.get(name)
        r = self.free.get(name)
        if old is None or r is None:
            return
        # (`_fit_key(r.gpu, r.cpu, position)` written out: a frame per move spared, one move per start.)
        new = (r.gpu << _GPU_BITS) + (r.cpu << _POSITION_BITS) + (old & _POSITION_MASK)
        if new == old:
            return
        order = self.order
        del order[bisect.bisect_left(order, old)]
        self.keys[name] = new
        bisect.insort(order, new)

    def tightest(self, demand: Resources, allowed: frozenset[str]) -> str | None:
        """The node with the fewest free GPUs, then CPUs, that holds `demand` (first in cluster order on ties)."""
        dg, dc, dm = demand.gpu, demand.cpu, demand.memory
        order, free, names = self.order, self.free, self.names
        # By position, not `islice(order, start, None)`: islice steps over the `start` entries before it one by
        # one, and on a busy cluster most nodes sort there (no free GPU): ~900 steps per search at 1,000 nodes.
        # (`_fit_key(dg, dc, 0)` written out: a frame per search spared.)
        for k in range(bisect.bisect_left(order, (dg << _GPU_BITS) + (dc << _POSITION_BITS)), len(order)):
            name = names[order[k] & _POSITION_MASK]
            r = free[name]
            if r.gpu >= dg and r.cpu >= dc and r.memory >= dm and name in allowed:
                return name
        return None


def copies(task: Resources, room: Resources) -> int:
    """How many `task`s fit in `room` one after another (`fits_in`, then less the task, as the greedy fill does);
    -1 when no bound (a task of nothing, in a room with no negative field)."""
    out = -1
    for need, have in ((task.gpu, room.gpu), (task.cpu, room.cpu), (task.memory, room.memory)):
        if have < need:  # (not even one; a negative field refuses even a task needing none of it)
            return 0
        if need > 0 and (out < 0 or have // need < out):
            out = have // need
    return out


def _spread_one(spec: JobSpec, counts: Mapping[Role, int], free: Mapping[str, Resources]) -> Allocation | None:
    """`Workspace._spread` of a one-role gang, no preferred nodes, tightest-fit scoring (`Workspace.lean_spread`).

    The greedy fill takes the nodes most free first (GPUs, then CPU, then memory; cluster order on ties), each as
    many tasks as fit there, until none is left: those are the chosen nodes. The even spread then hands the tasks
    out in turn over the chosen nodes, each to the next one with room; it cannot fail where the fill did not
    (equal tasks), but its fallback, the fill, is kept as `_spread` has it."""
    ((role, n),) = counts.items()
    task = spec.roles[role].resources
    order = sorted(free, key=lambda name: (-free[name].gpu, -free[name].cpu, -free[name].memory))
    chosen: list[str] = []
    caps: list[int] = []  # how many tasks each chosen node holds (`copies`), bounded by the gang
    fill: list[int] = []  # the greedy fill's count per chosen node
    todo = n
    for name in order:
        if not todo:
            break
        cap = copies(task, free[name])
        if cap:
            cap = n if cap < 0 else min(cap, n)
            chosen.append(name)
            caps.append(cap)
            fill.append(min(cap, todo))
            todo -= fill[-1]
    if todo:
        return None
    used = [0] * len(chosen)
    start, m = 0, len(chosen)
    for _ in range(n):
        for k in range(m):
            i = (start + k) % m
            if used[i] < caps[i]:
                used[i] += 1
                start = (i + 1) % m
                break
        else:  # (not for equal tasks: see above)
            used = fill
            break
    per_task = {node: k for node, k in zip(chosen, used, strict=True) if k}
    alloc = on_nodes(role, per_task)
    per_node = {node: task * per_task[node] for node in sorted(per_task)}  # (`per_node`'s order: the tasks')
    total = task * n
    return alloc.remember(spec, per_node, total)


# Rare paths of `find`, `_find` and `ClusterMemo.pool` as functions of their own: a comprehension in a hot method
# makes the variables it reads cells, each built at every call (thousands of searches per busy decision).
def _eligible_nodes(cluster: Cluster, spec: JobSpec) -> EligibleNodes:
    return EligibleNodes([n for n in cluster.nodes if eligible(n, spec)])


def _preferred(prefer: Iterable[str], pool: EligibleNodes, free: Mapping[str, Resources]) -> list[str]:
    """`prefer`'s nodes in the pool and the workspace, each once, in order."""
    return [p for p in dict.fromkeys(prefer) if p in pool.allowed and p in free]


def _first_fitting(preferred: list[str], need: Resources, own: Mapping[str, Resources],
                   held_per_node: Mapping[str, Resources]) -> str | None:
    """The first of `preferred` that holds `need` (what the job holds there counted as free), or None."""
    return next((p for p in preferred if need.fits_in(own[p] + held_per_node.get(p, _ZERO))), None)


def _on_one_node(counts: Mapping[Role, int], node: str) -> Allocation:
    """A gang of several roles on `node`."""
    return Allocation.of(Placement(role, node) for role, n in counts.items() for _ in range(n))


def _with_held(own: Mapping[str, Resources], held_per_node: Mapping[str, Resources],
               names: Iterable[str]) -> dict[str, Resources]:
    """Free capacity of `names` in the workspace, what the job holds on each counted as free."""
    return {name: own[name] + held_per_node.get(name, _ZERO) for name in names if name in own}


class Trial:
    """A transaction on a workspace: the assigns and releases since it opened, undone in reverse by `discard`."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.undo: list[tuple[JobView, Allocation | None]] = []  # (job, what it held before) per operation

    def commit(self) -> None:
        """Keep the operations (an enclosing trial can still undo them)."""
        self.ws._close(self)
        if self.ws._trials:
            self.ws._trials[-1].undo.extend(self.undo)

    def discard(self) -> None:
        """Undo every operation since `trial()`, newest first. The undoing is recorded in no enclosing trial:
        its net effect there is nothing, and recorded it would be redone when that trial is discarded."""
        self.ws._close(self)
        trials, self.ws._trials = self.ws._trials, []
        try:
            for job, old in reversed(self.undo):
                self.ws._set(job, old)
        finally:
            self.ws._trials = trials


class Workspace:
    """Mutable free capacity, tentative allocations and waits for one decision."""

    # `_take` by `_take_lean`: integer sums, one new `Resources` per node and one for the total (False: the
    # per-node `Resources` arithmetic, the reference). Exact: the same free capacity and total, each a new
    # object where the reference makes one (`total_free`'s identity tells "nothing moved since").
    lean_take = True
    # `_spread` of a one-role gang without preferred nodes under tightest fit by `_spread_one`: its tasks are
    # equal, so the greedy fill and the even spread are counts per node (integers), no placement built to be
    # dropped, and the result's per-node memo filled (False: `_spread`'s placements for every gang, the reference).
    lean_spread = True
    # `start`'s common case by `_start_lean` (one frame: the search, the one-node allocation and the take), not
    # `find` then `_set`, and `release` of a one-node allocation in one frame, not `_set` (False: the references).
    # Exact: the same free capacity, total, index, entries, undo and memos.
    lean_start = True

    def __init__(self, snap: Snapshot, *, empty: bool = False, memo: ClusterMemo | None = None,
                 scoring: Scoring = TIGHTEST) -> None:
        """Start from the snapshot's free capacity, or from an empty cluster (`empty=True`)."""
        self.snap = snap
        # Whether queue definitions exist: without them no quota, share or reclaim applies (one name for it).
        self.queued = bool(snap.queues)
        self.memo = memo.fresh(snap.cluster) if memo is not None else ClusterMemo(snap.cluster)
        self.scoring = bind(scoring, snap, self.memo.traits) if scoring is not TIGHTEST else TIGHTEST
        self._by_class = self.scoring is not TIGHTEST and by_class(self.scoring)  # see `_best_by_class`
        self._class_fit: dict[str, _FitIndex] | None = None  # node -> its class's fit index (`_best_by_class`)
        if empty:
            self.free: dict[str, Resources] = {n.name: n.capacity for n in snap.cluster.nodes}
            self.allocations: dict[str, Allocation] = {}
        else:
            self.free = copy_mapping(snap.free)
            self.allocations = (copy_mapping(snap.held) if snap.held is not None
                                else {j.id: j.allocation for j in snap.jobs.values() if j.active})
        self._start = self.allocations  # every entry non-empty; `assign` records what it changes
        self._assigned: set[str] = set()
        if empty:
            self.total_free = snap.cluster.total
        elif snap.free_total is not None:
            self.total_free = snap.free_total
        else:
            self.total_free = Resources()
            for r in self.free.values():
                self.total_free = self.total_free + r
        self.waits: dict[str, Wait] = {}  # why each blocked job waits (a `block_tail` segment's jobs aside)
        self.notes: dict[str, str] = {}  # what happened to a placed job, for people (never read by a hook)
        self.rejected: dict[str, str] = {}
        self.eta: dict[str, float] = {}
        self.rank: dict[str, int] = {}  # position in the cycle's order: lower is served first
        self.want: dict[str, Mapping[Role, int]] = {}  # replicas per role from the size phase
        # `cycle.gang_key` per job as the place phase found it, with the sizes it was found for (the same
        # object: preemption reuses it only while `want` holds that very mapping for the job).
        self.gangs: dict[str, tuple[Mapping[Role, int], Hashable | None]] = {}
        self.ranked: list[JobView] | None = None  # the jobs `rank` numbers, in that order (`Cycle.run`)
        # The place phase's blocked jobs when it went through `ranked` itself (so in rank order), with each
        # one's `gang_key` as it found it (None: none); preemption's claimants and their keys (`preempt_with`).
        self.blocked_line: tuple[list[JobView], list[Hashable | None]] | None = None
        self._fit: _FitIndex | None = None  # built by the second `find` that scans for a node
        self._scans = 0
        self._book: QueueBook | None = None
        self._trials: list[Trial] = []
        self._behind: tuple[str, Wait] | None = None  # the wait of the jobs behind the current head
        self._tail: Tail | None = None  # the jobs behind the head, as one segment (`block_tail`)
        # The plan's waits and reasons when a line place hook keeps them as pieces of the line (drf: `turns`).
        self.lined: tuple[Mapping[str, Wait], Mapping[str, str]] | None = None
        # The jobs whose waits a size hook keeps as one block (optimus' misfit tail: no entry in `waits`): the
        # plan's waits and reasons from the own ones (after `plan`'s passes over those alone).
        self.segment: Segment | None = None
        # Per-decision memo for `find`: gang shapes that did not fit, with `_grown` as it was then.
        self._misfits: dict[tuple[EligibleNodes, Role, int, int, int, int], int] = {}
        self._grown = 0  # times free capacity grew on some node (a release) in this workspace
        self._live: LiveKinds | None = None  # `live_kinds`, read on first use

    # -- waits ---------------------------------------------------------------
    def block(self, job_id: str, kind: WaitKind, detail: str) -> None:
        """Record why `job_id` waits (replacing an earlier wait)."""
        self.waits[job_id] = Wait(kind, detail)

    def block_for_room(self, job: JobView, counts: Mapping[Role, int]) -> None:
        """The job's gang does not fit now: a gang wait, or fragmentation when enough is free in total."""
        self.waits[job.id] = room_wait(job.spec, counts, self.total_free)

    def block_behind(self, job_id: str, head_id: str) -> None:
        """Strict order: `job_id` waits behind the blocked head of the line (one shared wait per head)."""
        wait = self._behind
        if wait is None or wait[0] != head_id:
            wait = self._behind = (head_id, Wait(WaitKind.PRIORITY, f"waiting behind {head_id}, first in line"))
        self.waits[job_id] = wait[1]

    def block_all_behind(self, job_ids: Iterable[str], head_id: str) -> None:
        """`block_behind` for many jobs at once (a C-level update: the line behind a head can be long)."""
        wait = self._behind
        if wait is None or wait[0] != head_id:
            wait = self._behind = (head_id, Wait(WaitKind.PRIORITY, f"waiting behind {head_id}, first in line"))
        if self.waits:
            self.waits.update(dict.fromkeys(job_ids, wait[1]))
        else:  # (none blocked yet: the new dict is the waits, sparing a second pass to copy it in)
            self.waits = dict.fromkeys(job_ids, wait[1])

    def block_tail(self, tail: Tail) -> None:
        """Every job of `tail` waits behind its head, kept as one segment (no entry per job in `waits`): the
        plan says so as `snapshot.Behind` maps. The strict line's last step before `plan`."""
        self._behind = (tail.head, Wait(WaitKind.PRIORITY, f"waiting behind {tail.head}, first in line"))
        self._tail = tail

    def kind(self, job_id: str) -> WaitKind | None:
        wait = self.waits.get(job_id)
        return None if wait is None else wait.kind

    def meanwhile(self, job_id: str, text: str) -> None:
        """Say what is held for a blocked job meanwhile (its reservation)."""
        self.waits[job_id] = replace(self.waits[job_id], meanwhile=text)

    def note(self, job_id: str, text: str) -> None:
        self.notes[job_id] = text

    # -- bookkeeping -------------------------------------------------------
    @property
    def book(self) -> QueueBook:
        """Usage per queue, built on first use and kept in step with every assign and release."""
        if self._book is None:
            self._book = self.memo.usage.book(self.snap, self.allocations)
        return self._book

    @property
    def live_kinds(self) -> LiveKinds:
        """What kinds of job the snapshot holds live (`live.LiveKinds`), read once per decision."""
        if self._live is None:
            self._live = LiveKinds.of(self.snap)
        return self._live

    def queue_of(self, job: JobView) -> str:
        """`book.queue_of` without building the book: a built book is kept in step with every assign and
        release, a cost for naught where only queue names are read (no queue definitions: no quota, no share)."""
        return queue_name(self.snap.queues, job)

    def trial(self) -> Trial:
        """Open a transaction: `commit()` keeps what follows, `discard()` undoes it."""
        trial = Trial(self)
        self._trials.append(trial)
        return trial

    def _close(self, trial: Trial) -> None:
        if not self._trials or self._trials[-1] is not trial:
            raise RuntimeError("close the innermost trial first")
        self._trials.pop()

    def _take(self, spec: JobSpec, alloc: Allocation, sign: int) -> None:
        """Take `alloc`'s resources from the free capacity (`sign` > 0) or give them back: the reference of
        `_take_lean` (`lean_take` False)."""
        free, fit, class_fit = self.free, self._fit, self._class_fit
        for node, res in alloc.per_node(spec).items():
            if sign > 0:
                free[node] = free[node] - res
                self.total_free = self.total_free - res
            else:
                free[node] = free[node] + res
                self.total_free = self.total_free + res
                self._grown += 1
            if fit is not None:
                fit.update(node)
            if class_fit is not None:
                class_fit[node].update(node)

    def _take_lean(self, spec: JobSpec, alloc: Allocation, sign: int) -> None:
        """`_take` (`sign` > 0: take `alloc`'s resources, < 0: give them back) without intermediate objects: the
        free total moved by integers and built once, each node's free capacity built by `resources_of`, no
        operator frames. A one-node allocation (most: `_find` places on one node when it can) skips the loop."""
        free, fit, class_fit = self.free, self._fit, self._class_fit
        per_node = alloc.per_node(spec)
        if not per_node:  # (nothing taken: the total stays the same object, as in the reference)
            return
        total = self.total_free
        if len(per_node) == 1:
            (node,) = per_node  # (as `demand`: no items view, iterator and pair)
            res = per_node[node]
            room = free[node]
            if sign > 0:
                free[node] = resources_of(room.cpu - res.cpu, room.memory - res.memory, room.gpu - res.gpu)
                self.total_free = resources_of(total.cpu - res.cpu, total.memory - res.memory, total.gpu - res.gpu)
            else:
                free[node] = resources_of(room.cpu + res.cpu, room.memory + res.memory, room.gpu + res.gpu)
                self.total_free = resources_of(total.cpu + res.cpu, total.memory + res.memory, total.gpu + res.gpu)
                self._grown += 1
            if fit is not None:
                fit.update(node)
            if class_fit is not None:
                class_fit[node].update(node)
            return
        cpu, memory, gpu = total.cpu, total.memory, total.gpu
        step = 1 if sign > 0 else -1
        for node, res in per_node.items():
            room = free[node]
            c, m, g = res.cpu * step, res.memory * step, res.gpu * step
            free[node] = resources_of(room.cpu - c, room.memory - m, room.gpu - g)
            cpu, memory, gpu = cpu - c, memory - m, gpu - g
            if fit is not None:
                fit.update(node)
            if class_fit is not None:
                class_fit[node].update(node)
        self.total_free = resources_of(cpu, memory, gpu)
        if sign < 0:
            self._grown += len(per_node)

    def _set(self, job: JobView, alloc: Allocation | None) -> None:
        """The one mutation: `job` now holds `alloc` (None: nothing). Trials and the book see it."""
        old = self.allocations.pop(job.id, None)
        if self._trials:
            self._trials[-1].undo.append((job, old))
        take = self._take_lean if self.lean_take else self._take
        if old is not None and old.tasks:  # (`if old` without `Allocation.__bool__`'s frame)
            take(job.spec, old, -1)
        if alloc is not None:
            take(job.spec, alloc, +1)
            self.allocations[job.id] = alloc
            self._assigned.add(job.id)
        if self._book is not None and (old or alloc):
            self._book.swap(job, old, alloc)

    # `assign(job, alloc)`: record `alloc` for `job`, replacing any tentative allocation it had. `_set` itself, not
    # a method calling it: a frame per start spared (thousands per busy decision).
    assign = _set

    def start(self, job: JobView, counts: Mapping[Role, int], need: Resources | None = None) -> Allocation | None:
        """`find`, then `assign` where it found room; what was assigned (None: no room, nothing changed). The one
        copy of the start without quotas (`queues.try_place` without queue definitions, a preemption claimant
        outside quotas); `need` as `find`'s.

        With `lean_start`, the common start -- a one-role gang of a job holding nothing here, tightest fit, the
        fit index in use, one node holding it all -- is `_start_lean`: one frame for the search and the take."""
        if (self.lean_start and len(counts) == 1 and self._scans and self.scoring is TIGHTEST
                and self._class_fit is None and job.id not in self.allocations):
            found = self._start_lean(job, counts, need)
            if found is not False:
                return found
        alloc = self.find(job, counts, need=need)
        if alloc is not None:
            self._set(job, alloc)
        return alloc

    def _start_lean(self, job: JobView, counts: Mapping[Role, int], need: Resources | None
                    ) -> Allocation | Literal[False] | None:
        """`find` then `_set` (`_take_lean`) of a one-role gang of a job holding nothing here, no node preferred,
        tightest fit, the fit index in use (`start`'s test), written as one frame: the fit test, the misfit memo,
        the fit index' search, the one-node allocation with its memos, the take by integers and the index move.
        False, with nothing changed, where that path is not `find`'s (no task, anchors, no one node holds
        the gang): `start` then asks `find`. The reference: `lean_start` False."""
        spec = job.spec
        (role,) = counts
        n = counts[role]
        task = spec.roles[role].resources
        if need is None:
            need = task if n == 1 else task * n  # (`demand` of one role)
        total = self.total_free
        dg, dc, dm = need.gpu, need.cpu, need.memory
        if not (dg <= total.gpu and dc <= total.cpu and dm <= total.memory):
            return None  # (`find`'s first test)
        if n == 0 or (n > 1 and anchored(spec, self.memo, counts)):
            return False
        pool = self.memo.pool(spec)
        misfit = (pool, role, task.cpu, task.memory, task.gpu, n)  # (`find`'s key)
        if self._misfits.get(misfit) == self._grown:
            return None
        own = self.free
        fit = self._fit
        if fit is None or fit.free is not own:
            fit = self._fit = _FitIndex(own, (node.name for node in self.snap.cluster.nodes))
        single = fit.tightest(need, pool.allowed)
        if single is None:  # (a spread, or no room: `find`'s rest, the search asked again there)
            return False
        alloc = on_node(role, single, n, self.memo.runs)
        _SET_MEMO(alloc, "_memo", [spec, {single: need}, need, dg])  # (`remember`)
        # `_set` of a job holding nothing: the take of one node (`_take_lean`), then the entry.
        if self._trials:
            self._trials[-1].undo.append((job, None))
        room = own[single]
        own[single] = resources_of(room.cpu - dc, room.memory - dm, room.gpu - dg)
        self.total_free = resources_of(total.cpu - dc, total.memory - dm, total.gpu - dg)
        fit.update(single)
        self.allocations[job.id] = alloc
        self._assigned.add(job.id)
        if self._book is not None:
            self._book.swap(job, None, alloc)
        return alloc

    def assign_held(self, jobs: Sequence[JobView]) -> bool:
        """`assign` each of `jobs` (active jobs) its current allocation, in order, all at once; False, with
        nothing changed, where this cannot be shown equal to doing it one by one (then do that).

        For a workspace started empty (`empty=True`) that nothing has changed yet: from `Snapshot.free`
        (capacity minus what every active job holds) given back what the other active jobs hold, so the cost
        follows the jobs left out, not those kept (a preemptive policy keeps most running jobs where they
        are). Exact (integer resources): the same free capacity, total and allocations in the same order,
        when none overfills a node; and then each one fit in turn, as `fits` before each `assign` checks.
        """
        snap, held = self.snap, self.snap.held
        if (held is None or snap.free_total is None or self.allocations or self._trials or self._book is not None
                or self._fit is not None or self._class_fit is not None):
            return False
        kept = {job.id: job.allocation for job in jobs}
        if not kept.keys() <= held.keys():
            return False
        free = dict(self.free)  # (the cluster's nodes in order, at full capacity)
        free.update(snap.free)
        if len(free) != len(self.free):
            return False
        total, views = snap.free_total, snap.jobs
        for jid in held.keys() - kept.keys():  # (integer sums: any order gives the same)
            for node, res in held[jid].per_node(views[jid].spec).items():
                if node not in free:
                    return False
                free[node] = free[node] + res
                total = total + res
        if not all(map(Resources.is_nonnegative, free.values())):
            return False
        self.free, self.total_free = free, total
        self.allocations.update(kept)
        self._assigned.update(kept)
        return True

    def release(self, job: JobView) -> Allocation | None:
        """Take back what `job` holds here; what it held.

        With `lean_start`, an allocation on one node whose per-node memo for the job's spec is at hand (a
        preemption victim: its class' room summed it) is given back here, `_set` then `_take_lean` written as one
        frame (the entry, the undo, the give-back by integers, the index move, the book); else `_set`."""
        old = self.allocations.get(job.id)
        if old is None:
            return None
        memo = old._memo
        per_node = memo[1] if memo is not None and memo[0] is job.spec else None
        if not (self.lean_start and per_node is not None and len(per_node) == 1 and self._class_fit is None):
            self._set(job, None)
            return old
        del self.allocations[job.id]
        if self._trials:
            self._trials[-1].undo.append((job, old))
        (node,) = per_node
        res, free, total = per_node[node], self.free, self.total_free
        room = free[node]
        free[node] = resources_of(room.cpu + res.cpu, room.memory + res.memory, room.gpu + res.gpu)
        self.total_free = resources_of(total.cpu + res.cpu, total.memory + res.memory, total.gpu + res.gpu)
        self._grown += 1
        if self._fit is not None:
            self._fit.update(node)
        if self._book is not None:
            self._book.swap(job, old, None)
        return old

    def fits(self, job: JobView, alloc: Allocation) -> bool:
        """Whether `alloc` fits in the free capacity (counting what `job` itself holds here)."""
        held = self.allocations.get(job.id)
        free = self.free
        if not held:  # (the common case: nothing of its own to count as free)
            for node, res in alloc.per_node(job.spec).items():
                room = free.get(node)
                if room is None or not res.fits_in(room):
                    return False
            return True
        held_per_node = held.per_node(job.spec)
        for node, res in alloc.per_node(job.spec).items():
            if node not in free:
                return False
            if not res.fits_in(free[node] + held_per_node.get(node, _ZERO)):
                return False
        return True

    # -- placement ---------------------------------------------------------
    def find(self, job: JobView, counts: Mapping[Role, int], prefer: Iterable[str] = (), *,
             need: Resources | None = None) -> Allocation | None:
        """Gang placement of `counts` tasks on one node if one holds them (scored), else spread; None if no fit.

        Does not change the workspace; call `assign` to commit. Tasks the job
        already holds in this workspace count as free for it. `need`: `demand(job.spec, counts)` where the
        caller has it already (preemption asks it of every claimant first), else computed here.
        """
        spec = job.spec
        if need is None:
            need = demand(spec, counts)
        held = self.allocations.get(job.id)
        held_per_node: Mapping[str, Resources]
        if held:
            held_per_node = held.per_node(spec)
            available = self.total_free
            for res in held_per_node.values():
                available = available + res
        else:  # (most searches: a job that holds nothing here)
            held_per_node, available = _NOTHING, self.total_free
        if not (need.gpu <= available.gpu and need.cpu <= available.cpu
                and need.memory <= available.memory):  # (`fits_in`, inlined: a frame per search; rep21: ~1%)
            return None
        tasks = sum(counts.values())
        if tasks == 0:
            return Allocation()
        if tasks > 1 and anchored(spec, self.memo, counts):  # (one task: no anchors to keep apart)
            return self._find_anchored(job, counts, prefer)
        pool = self.memo.pool(spec)
        preferred = _preferred(prefer, pool, self.free) if prefer else []
        misfit = None
        if not held_per_node and not preferred and len(counts) == 1:
            # One role, nothing held or preferred: whether it fits depends on free capacity alone, and
            # only grows with it. A gang of this shape that did not fit since capacity last grew still
            # does not (a job that did not fit, whose free capacity did not grow, is not tried again).
            (role,) = counts  # (as `demand`: no items view, iterator and pair)
            n = counts[role]
            task = spec.roles[role].resources
            # (The pool by identity: no tuple hashing; the task by its fields: ints hash in C, where a
            # `Resources` would call its dataclass `__hash__`, a Python frame, per search.)
            misfit = (pool, role, task.cpu, task.memory, task.gpu, n)
            if self._misfits.get(misfit) == self._grown:
                return None
        found = self._find(job, counts, spec, need, pool, preferred, held_per_node)
        if found is None and misfit is not None:
            self._misfits[misfit] = self._grown
        return found

    def _find(self, job: JobView, counts: Mapping[Role, int], spec: JobSpec, need: Resources,
              pool: EligibleNodes, preferred: list[str], held_per_node: Mapping[str, Resources]
              ) -> Allocation | None:
        own = self.free
        # One node if possible: preferred first, then the best scored.
        single = _first_fitting(preferred, need, own, held_per_node) if preferred else None
        if single is None and self.scoring is not TIGHTEST:
            if self._by_class and not held_per_node:
                single = self._best_by_class(job, need, pool)
            else:
                single = self._best_scored(job, need, pool, held_per_node)
        elif single is None and not held_per_node and self._scans:
            # From a decision's second search on, a bisect in the fit index (building it costs
            # more than one scan, and most event-driven decisions place a single job).
            if self._fit is None or self._fit.free is not own:
                self._fit = _FitIndex(own, (n.name for n in self.snap.cluster.nodes))
            single = self._fit.tightest(need, pool.allowed)
        elif single is None:
            self._scans += 1
            dg, dc, dm = need.gpu, need.cpu, need.memory
            best: tuple[int, int] | None = None
            for name in pool.names:  # one pass, no copies: this runs for every job placed
                r = own.get(name)
                if r is None:
                    continue
                if held_per_node and name in held_per_node:
                    r = r + held_per_node[name]
                if r.gpu >= dg and r.cpu >= dc and r.memory >= dm:
                    key = (r.gpu - dg, r.cpu - dc)
                    if best is None or key < best:
                        single, best = name, key
        if single is not None:
            if len(counts) == 1:  # one role: its tasks are equal placements, already in order
                (role,) = counts
                n = counts[role]
                alloc = on_node(role, single, n, self.memo.runs)
            else:
                alloc = _on_one_node(counts, single)
            return alloc.remember(spec, {single: need}, need)  # (`_take` and the presets read these)
        if held_per_node or self.scoring is not TIGHTEST:
            free = _with_held(own, held_per_node, pool.names)
        else:  # only nodes that hold some task: `_spread` never chooses the others (same order for the rest)
            free = self._holding_some(spec, counts, pool)
        return self._spread(spec, counts, free, preferred, job)

    def _holding_some(self, spec: JobSpec, counts: Mapping[Role, int], pool: EligibleNodes) -> dict[str, Resources]:
        """Free capacity of the pool's nodes that hold at least one of the gang's tasks, in cluster order.

        With the fit index built, only its nodes with enough free GPUs are looked at (a busy cluster has few).
        """
        own = self.free
        tasks = [spec.roles[role].resources for role in counts]  # (a list: no `Resources.__hash__` frames)
        fit = self._fit
        if fit is not None and fit.free is own:
            order = fit.order
            start = bisect.bisect_left(order, _fit_key(min(map(_GPU, tasks)), _CPU_FLOOR, 0))
            allowed = pool.allowed
            # (In cluster order: the positions sorted; a slice of the order, no steps to `start`.)
            at = sorted(map(_POSITION_MASK.__and__, order[start:]))
            names = [name for name in map(fit.names.__getitem__, at) if name in allowed]
        else:
            names = [name for name in pool.names if name in own]
        if len(tasks) == 1:  # (one task shape, most gangs: no `any` generator per node)
            (t,) = tasks
            return {name: r for name in names if t.gpu <= (r := own[name]).gpu and t.cpu <= r.cpu
                    and t.memory <= r.memory}
        return {name: r for name in names if any(t.gpu <= (r := own[name]).gpu and t.cpu <= r.cpu
                                                 and t.memory <= r.memory for t in tasks)}

    def _find_anchored(self, job: JobView, counts: Mapping[Role, int], prefer: Iterable[str]) -> Allocation | None:
        """The PS tasks and one worker (the chief) on on-demand nodes, the other workers wherever they score best."""
        prefer = tuple(prefer)
        anchors: dict[Role, int] = {role: n for role, n in counts.items() if role is Role.PS}
        if counts.get(Role.WORKER, 0):
            anchors[Role.WORKER] = 1
        rest = {Role.WORKER: counts.get(Role.WORKER, 0) - anchors.get(Role.WORKER, 0)}
        on_demand = replace(job, spec=replace(job.spec, transient=TransientUse.NEVER))
        first = self.find(on_demand, anchors, prefer)
        if first is None or not rest[Role.WORKER]:
            return first
        trial = self.trial()
        self.assign(replace(job, id=job.id + "\0anchors"), first)  # hold the anchors' room while placing the rest
        second = self.find(replace(job, spec=replace(job.spec, anchors_on_demand=False)), rest, prefer)
        trial.discard()
        return None if second is None else Allocation.of((*first.tasks, *second.tasks))

    def _best_by_class(self, job: JobView, need: Resources, pool: EligibleNodes) -> str | None:
        """`_best_scored` when only tightest fit tells a class's nodes apart: the tightest node of each class
        (a fit-index lookup) scored, the best of those taken (first in cluster order on ties)."""
        cluster = self.snap.cluster
        if self._class_fit is None:
            classes: dict[tuple[object, ...], list[str]] = {}
            for n in cluster.nodes:
                classes.setdefault(node_class(n), []).append(n.name)
            order = {n.name: i for i, n in enumerate(cluster.nodes)}
            self._class_fit = {}
            for members in classes.values():
                index = _FitIndex(self.free, members, order)  # ties in cluster order, as everywhere
                self._class_fit.update(dict.fromkeys(members, index))
        best: tuple[float, int, str] | None = None
        for allowed in pool.classes():
            index = self._class_fit[next(iter(allowed))]
            name = index.tightest(need, allowed)
            if name is None:
                continue
            score = sum(weight * scorer(cluster.node(name), self.free[name], need, job)
                        for scorer, weight in self.scoring)
            position = index.position(name)
            if best is None or score > best[0] or (score == best[0] and position < best[1]):
                best = (score, position, name)
        return None if best is None else best[2]

    def _best_scored(self, job: JobView, need: Resources, pool: EligibleNodes,
                     held_per_node: Mapping[str, Resources]) -> str | None:
        """The eligible node holding `need` with the highest weighted score (first in cluster order on ties)."""
        best: tuple[float, str] | None = None
        zero = Resources()
        for node in pool.nodes:
            r = self.free.get(node.name)
            if r is None:
                continue
            r = r + held_per_node.get(node.name, zero)
            if need.fits_in(r):
                score = sum(weight * scorer(node, r, need, job) for scorer, weight in self.scoring)
                if best is None or score > best[0]:
                    best = (score, node.name)
        return None if best is None else best[1]

    def _spread(self, spec: JobSpec, counts: Mapping[Role, int], free: dict[str, Resources],
                preferred: list[str], job: JobView | None = None) -> Allocation | None:
        """Greedy fill to find a small node set, then spread each role evenly over it."""
        if self.lean_spread and len(counts) == 1 and not preferred and self.scoring is TIGHTEST:
            return _spread_one(spec, counts, free)
        pref = set(preferred)
        scored: dict[str, float] = {}
        if self.scoring is not TIGHTEST and job is not None:  # best scored first (GPU type, price...), then most free
            cluster, task = self.snap.cluster, max(spec.roles.values(), key=lambda r: r.resources.gpu).resources
            scored = {name: sum(w * s(cluster.node(name), free[name], task, job) for s, w in self.scoring
                                if s is not tightest_fit) for name in free}
        turn: dict[str, int] = {}
        if scored and len(self.memo.traits.transient_zones) > 1:  # transient nodes: take zones in turn
            by_free = sorted(free, key=lambda name: (-free[name].gpu, -free[name].cpu, -free[name].memory))
            turn = zone_turns([self.snap.cluster.node(name) for name in by_free])
        order = sorted(free, key=lambda name: (name not in pref, -scored.get(name, 0.0), turn.get(name, 0),
                                               -free[name].gpu, -free[name].cpu, -free[name].memory))
        tasks = [role for role, n in counts.items() for _ in range(n)]
        tasks.sort(key=lambda r: (-spec.roles[r].resources.gpu, -spec.roles[r].resources.cpu))
        remaining = dict(free)
        chosen: list[str] = []
        greedy: list[Placement] = []
        todo = list(tasks)
        for name in order:
            if not todo:
                break
            rest = []
            used = False
            for role in todo:
                need = spec.roles[role].resources
                if need.fits_in(remaining[name]):
                    remaining[name] = remaining[name] - need
                    greedy.append(Placement(role, name))
                    used = True
                else:
                    rest.append(role)
            todo = rest
            if used:
                chosen.append(name)
        if todo:
            return None
        even = self._even(spec, counts, {name: free[name] for name in chosen})
        return even or Allocation.of(greedy)

    @staticmethod
    def _even(spec: JobSpec, counts: Mapping[Role, int], free: dict[str, Resources]) -> Allocation | None:
        """Round-robin each role over the chosen nodes (Optimus' even PS/worker spread)."""
        remaining = dict(free)
        names = list(free)
        out: list[Placement] = []
        for role in sorted(counts, key=lambda r: r.value):
            need = spec.roles[role].resources
            start = 0
            for _ in range(counts[role]):
                for k in range(len(names)):
                    name = names[(start + k) % len(names)]
                    if need.fits_in(remaining[name]):
                        remaining[name] = remaining[name] - need
                        out.append(Placement(role, name))
                        start = (start + k + 1) % len(names)
                        break
                else:
                    return None
        return Allocation.of(out)

    def choose(self, job: JobView, counts: Mapping[Role, int]) -> Allocation | None:
        """Where `place` would put the job: where it runs now if that still fits, else `find` preferring it."""
        current = job.allocation
        if current and all(current.count(r) == n for r, n in counts.items()) and self.fits(job, current):
            return current
        return self.find(job, counts, prefer=current.nodes)

    def place(self, job: JobView, counts: Mapping[Role, int]) -> Allocation | None:
        """Choose and commit; prefers the nodes the job runs on now, to avoid migration."""
        alloc = self.choose(job, counts)
        if alloc is not None:
            self.assign(job, alloc)
        return alloc

    # -- result ------------------------------------------------------------
    def plan(self) -> Plan:
        if self.allocations is self._start:  # only assigned entries can be empty: check just those
            allocations = dict(self.allocations)
            # (C-level passes over the assigned ones still here: no `Allocation.__bool__` frame each, thousands
            # on a busy decision; an empty one is rare.)
            assigned = list(self._assigned & allocations.keys())
            for jid in compress(assigned, map(not_, map(_TASKS, map(allocations.__getitem__, assigned)))):
                del allocations[jid]
        else:
            allocations = {jid: a for jid, a in self.allocations.items() if a}
        if self.lined is not None:
            return Plan(allocations=allocations, reasons=self.lined[1], waits=self.lined[0],
                        rejected=dict(self.rejected), eta=dict(self.eta))
        reasons = {jid: text for jid, text in self.notes.items() if jid in allocations}
        # C-level passes over the waiting jobs: thousands of them may share a few waits (one per head).
        waits = self.waits  # (the plan is the workspace's last step: its waits become the plan's)
        for jid in (waits.keys() & allocations.keys()) | (waits.keys() & self.rejected.keys()):
            del waits[jid]
        shared = waits.values()
        bulk = self._behind[1] if self._behind is not None else None
        if self._tail is not None and bulk is not None:  # the jobs behind the head: one segment
            by_id = {key: render(wait) for key, wait in dict(zip(map(id, shared), shared, strict=True)).items()}
            reasons.update(zip(waits, map(by_id.__getitem__, map(id, shared)), strict=True))
            return Plan(allocations=allocations, reasons=Behind(reasons, self._tail, render(bulk)),
                        waits=Behind(waits, self._tail, bulk), rejected=dict(self.rejected), eta=dict(self.eta))
        if bulk is not None and len(waits) > 64:
            # Most waits are the jobs behind one head: every reason that text, then the others' own.
            texts = dict.fromkeys(waits, render(bulk))
            own = dict(compress(waits.items(), map(is_not, shared, repeat(bulk))))
            rendered = {id(wait): render(wait) for wait in own.values()}
            texts.update(zip(own, map(rendered.__getitem__, map(id, own.values())), strict=True))
            if reasons:
                reasons.update(texts)
            else:
                reasons = texts
        else:
            by_id = {key: render(wait) for key, wait in dict(zip(map(id, shared), shared, strict=True)).items()}
            reasons.update(zip(waits, map(by_id.__getitem__, map(id, shared)), strict=True))
        both: tuple[Mapping[str, Wait], Mapping[str, str]] = (
            (waits, reasons) if self.segment is None else self.segment(waits, reasons, render))  # (with a kept block)
        return Plan(allocations=allocations, reasons=both[1], waits=both[0], rejected=dict(self.rejected),
                    eta=dict(self.eta))
