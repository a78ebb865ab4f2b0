"""Node scorers for placement: GPU type preference and throughput, cost, transient use, zone spread.

A node's score is the weighted sum of its scorers' values (Volcano's NodeOrderFn;
`Workspace.find` takes the highest, first in cluster order on ties). Scorers that
need the decision's snapshot (fitted models) or the cluster's make-up are
`ContextScorer`s, bound once per decision by `bind`; one that cannot change a
placement on this cluster binds to nothing. On a plain cluster (one GPU type, no
transient node, one price) every scorer but tightest fit drops out and `bind`
returns `TIGHTEST` itself, so placement keeps its bisect index and every plan is
what it was before these scorers existed.

Weights (`DEFAULT`), per unit of each scorer's value:

| scorer | value | weight |
| --- | --- | --- |
| tightest fit | minus GPUs left on the node (CPUs break ties) | 0.5 |
| GPU preference | `n - i` for the i-th (from 0) of n types in `gpuTypes`, 0 unlisted | 40 |
| throughput | log2(job's speed on the type / on the cluster's best type), >= -4; jobs without a budget | 4 |
| per dollar | log2(speed per dollar / the best), >= -4, jobs with a `budget` | 4 |
| transient | +1 on a transient node for `transient: preferred` (0 for `allowed`) | 2 |
| zone spread | minus the share of the job's tasks already on transient nodes of that zone | 1 |

A gang no single node holds is spread over the best scored nodes first; among equally scored
transient nodes it takes the zones in turn (`zone_turns`), then the most free.

A user's explicit order beats everything else (one rank, 40, outweighs the
other scorers' largest spread, 0.5*8 + 16 + 16 + 2 + 1); speed (a 4x faster
type is worth 16 GPUs of packing) beats packing; transient preference only
breaks near-ties.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trainmaster.core.cluster import Cluster
from trainmaster.core.job import TransientUse
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.models.speed import GENERIC_TYPE_SPEED
from trainmaster.policies.snapshot import JobView, Snapshot

Scorer = Callable[[Node, Resources, Resources, JobView], float]  # (node, its free room, the gang's demand, job)
Scoring = tuple[tuple[Scorer, float], ...]  # scorers and their weights: a node's score is the weighted sum

_CPU_RANK = 1e-12  # CPUs left break ties between equal GPUs left (exact for any realistic count)
FLOOR = -4.0  # the lowest a log2 ratio scores: 16x slower (or dearer) is as bad as it gets


def tightest_fit(node: Node, free: Resources, need: Resources, job: JobView) -> float:
    """Fewer GPUs, then fewer CPUs, left on the node after placing: higher. Packs jobs, keeps whole nodes free."""
    return -((free.gpu - need.gpu) + (free.cpu - need.cpu) * _CPU_RANK)


TIGHTEST: Scoring = ((tightest_fit, 1.0),)


@dataclass(frozen=True)
class ClusterTraits:
    """What scorers need to know about a cluster's make-up, computed once per cluster."""

    gpu_types: frozenset[str]
    transient: bool  # some node is transient
    on_demand: bool  # some node is not
    prices: frozenset[float]
    transient_zones: frozenset[str]

    @classmethod
    def of(cls, cluster: Cluster) -> ClusterTraits:
        nodes = cluster.nodes
        return cls(gpu_types=cluster.gpu_types, transient=any(n.transient for n in nodes),
                   on_demand=any(not n.transient for n in nodes),
                   prices=frozenset(n.price_per_hour for n in nodes),
                   transient_zones=frozenset(n.zone for n in nodes if n.transient))

    @property
    def plain(self) -> bool:
        """One GPU type, no transient node, one price: only packing can tell nodes apart."""
        return len(self.gpu_types) <= 1 and not self.transient and len(self.prices) <= 1

    @property
    def mixed(self) -> bool:
        """Transient and on-demand nodes both: where a job's anchors go matters."""
        return self.transient and self.on_demand


def node_class(node: Node) -> tuple[object, ...]:
    """What a class-level scorer may read of a node: nodes alike in these score alike."""
    return (node.gpu_type, node.transient, node.zone, node.price_per_hour, node.capacity)


@dataclass(frozen=True)
class ClassLevel:
    """A bound scorer that reads a node only through `node_class` (never its free room or name).

    Placement then scores one node per class, the tightest fit of each (an index
    lookup), instead of every node: heterogeneous clusters place as fast as plain ones.
    """

    score: Scorer

    def __call__(self, node: Node, free: Resources, need: Resources, job: JobView) -> float:
        return self.score(node, free, need, job)


def by_class(scoring: Scoring) -> bool:
    """Whether tightest fit is the only scorer that tells apart nodes of one class."""
    return all(s is tightest_fit or isinstance(s, ClassLevel) for s, _ in scoring)


class ContextScorer(ABC):
    """A scorer bound to one decision's snapshot; unbound it is neutral.

    Every scorer here is class-level (`ClassLevel`): `bind` wraps what `bind_one` returns.
    """

    @abstractmethod
    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        """The scorer for this decision (reading a node only through `node_class`), or None when it
        cannot change a placement here."""

    def bind(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        bound = self.bind_one(snap, traits)
        return None if bound is None else ClassLevel(bound)

    def __call__(self, node: Node, free: Resources, need: Resources, job: JobView) -> float:
        return 0.0


def bind(scoring: Scoring, snap: Snapshot, traits: ClusterTraits) -> Scoring:
    """`scoring` for one decision: context scorers bound, no-ops dropped; `TIGHTEST` itself on a plain cluster."""
    if scoring is TIGHTEST:
        return TIGHTEST
    out: list[tuple[Scorer, float]] = []
    for scorer, weight in scoring:
        bound = scorer.bind(snap, traits) if isinstance(scorer, ContextScorer) else scorer
        if bound is not None and weight:
            out.append((bound, weight))
    if len(out) == len(scoring) and all(not isinstance(s, ContextScorer) for s, _ in scoring):
        return scoring  # nothing to bind
    if all(s is tightest_fit for s, _ in out):
        return TIGHTEST  # tightest fit alone, whatever its weight, orders nodes as TIGHTEST does (and has an index)
    return tuple(out)


def _log_ratio(value: float, best: float) -> float:
    if value <= 0 or best <= 0:
        return FLOOR
    return max(FLOOR, min(0.0, math.log2(value / best)))


class GpuPreference(ContextScorer):
    """`gpuTypes` as a preference order: the first of n listed types scores n, the next n - 1, unlisted 0."""

    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        if len(traits.gpu_types) < 2:
            return None

        def score(node: Node, free: Resources, need: Resources, job: JobView) -> float:
            prefs = job.spec.gpu_types
            if not prefs or not need.gpu or node.gpu_type not in prefs:
                return 0.0
            return float(len(prefs) - prefs.index(node.gpu_type))

        return score


class Throughput(ContextScorer):
    """The job's speed on the node's GPU type relative to the cluster's best type for it.

    Relative speeds come from the job's fitted model (`JobModel.type_speed`: its
    own reports on two or more types, or its job type's), else from `prior`.
    A type neither knows scores the mean of the known ones.
    """

    def __init__(self, prior: Mapping[str, float] = GENERIC_TYPE_SPEED) -> None:
        self.prior = dict(prior)

    def table(self, snap: Snapshot, job: JobView) -> Mapping[str, float]:
        model = snap.models.get(job.id)
        return model.type_speed if model is not None and model.type_speed else self.prior

    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        if len(traits.gpu_types) < 2:
            return None
        types = traits.gpu_types
        memo: dict[str, dict[str, float]] = {}  # job id -> score per GPU type

        def per_type(job: JobView) -> dict[str, float]:
            table = self.table(snap, job)
            known = {t: table[t] for t in types if t in table}
            best = max(known.values(), default=0.0)
            scores = {t: _log_ratio(v, best) for t, v in known.items()}
            mean = sum(scores.values()) / len(scores) if scores else 0.0
            return {t: scores.get(t, mean) for t in types}

        def score(node: Node, free: Resources, need: Resources, job: JobView) -> float:
            if not need.gpu or node.gpu_type is None or job.spec.budget is not None:  # budget: `PerDollar` instead
                return 0.0
            found = memo.get(job.id)
            if found is None:
                found = memo[job.id] = per_type(job)
            return found.get(node.gpu_type, 0.0)

        return score


class PerDollar(ContextScorer):
    """Speed per dollar for jobs with a `budget`: the node's speed for the job over the price of its share.

    The share is the demand's fraction of the node's GPUs (CPUs for a CPU job).
    A free node (price 0, e.g. on-premises) is the best there is.
    """

    def __init__(self, throughput: Throughput | None = None) -> None:
        self.throughput = throughput or Throughput()

    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        if len(traits.prices) < 2 and len(traits.gpu_types) < 2:
            return None
        values: dict[str, list[float]] = {}  # job id -> [best value seen in the cluster]
        nodes = snap.cluster.nodes

        def value(node: Node, need: Resources, job: JobView) -> float:
            share = need.gpu / node.capacity.gpu if need.gpu and node.capacity.gpu else (
                need.cpu / node.capacity.cpu if node.capacity.cpu else 1.0)
            cost = node.price_per_hour * min(share, 1.0)
            speed = 1.0
            if need.gpu and node.gpu_type is not None:
                speed = self.throughput.table(snap, job).get(node.gpu_type, 1.0)
            return math.inf if cost <= 0 else speed / cost

        def score(node: Node, free: Resources, need: Resources, job: JobView) -> float:
            if job.spec.budget is None:
                return 0.0
            best = values.get(job.id)
            if best is None:
                best = values[job.id] = [max(value(n, need, job) for n in nodes)]
            mine = value(node, need, job)
            if mine == math.inf:
                return 0.0
            return FLOOR if best[0] == math.inf else _log_ratio(mine, best[0])

        return score


class TransientPreference(ContextScorer):
    """`transient: preferred` scores transient nodes 1; `allowed` is neutral (`never` is filtered out)."""

    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        return _transient_preference if traits.mixed else None


def _transient_preference(node: Node, free: Resources, need: Resources, job: JobView) -> float:
    return 1.0 if node.transient and job.spec.transient is TransientUse.PREFERRED else 0.0


class ZoneSpread(ContextScorer):
    """Spread a job's transient tasks over zones: one revocation wave then takes fewer of them."""

    def bind_one(self, snap: Snapshot, traits: ClusterTraits) -> Scorer | None:
        if len(traits.transient_zones) < 2:
            return None
        cluster = snap.cluster

        def score(node: Node, free: Resources, need: Resources, job: JobView) -> float:
            held = job.allocation
            if not node.transient or not held:
                return 0.0
            same = sum(1 for t in held.tasks if t.node in cluster and cluster.node(t.node).transient
                       and cluster.node(t.node).zone == node.zone)
            return -same / len(held)

        return score


def zone_turns(nodes: list[Node]) -> dict[str, int]:
    """Each transient node's place among its zone's (in the order given): a gang spread over several
    nodes takes one per zone in turn, so one zone's revocation wave takes fewer of its workers."""
    seen: dict[str, int] = {}
    out: dict[str, int] = {}
    for node in nodes:
        if node.transient:
            out[node.name] = seen.get(node.zone, 0)
            seen[node.zone] = out[node.name] + 1
    return out


DEFAULT: Scoring = (
    (tightest_fit, 0.5),
    (GpuPreference(), 40.0),
    (Throughput(), 4.0),
    (PerDollar(), 4.0),
    (TransientPreference(), 2.0),
    (ZoneSpread(), 1.0),
)
