"""The autoscaler: grows the cluster for jobs that wait for room, gives back provider nodes left idle.

It runs after every decision (`Controller.after_cycle`) and is the same for
every engine: it reads the plan and the controller's books and talks to a
`NodeProvider`. Rules:

- Demand: each pending job whose wait is for room (`waits.CAPACITY`, or
  transient nodes that are not there, or the room jobs ahead of it in the order
  hold or are promised: `priority`, `reservation`; a job a preemptive order put
  back waits so) needs its minimum gang; so does one the
  policy finds too big for today's cluster but that offered nodes would hold
  (the controller then keeps it pending instead of rejecting it). Its tasks are
  packed first onto free room on eligible nodes and onto nodes still
  booting, then onto new nodes; a job asks for nothing while its nodes boot.
- Which node: the offers its tasks fit on, in the job's `gpuTypes` order, then
  as placement scores GPU types (`policies.scoring`), from the job's speed per
  type (its fitted per-type speeds, else the generic prior: `scoring.Throughput`'s
  table): a job with a `budget` the lowest price per unit of throughput
  (`PerDollar`), any other the fastest type and, among offers of it, the
  cheapest (transient first when prices say so); a job that never uses
  transient nodes gets on-demand ones; parameter servers get on-demand ones
  unless the job prefers transient (placement keeps them off transient nodes).
- Limits: at most `limit` nodes per offer (made and booting), the sum of their
  prices within `max_cost_per_hour`, and nothing new once the cluster has spent
  `budget` dollars.
- Scale-down: a node this provider made that no job held for `idle_timeout`
  seconds is released. Nodes the provider did not make (on-premises) are never removed.
- Consolidation (`consolidate`): while no job waits for room, a provider node
  whose jobs held at most half its GPUs for `idle_timeout` seconds, and whose
  jobs each run wholly on it and fit in the free room of the other nodes (the
  on-premises ones and provider nodes not themselves underused), is emptied
  (its jobs checkpoint and are placed again: `Controller.move_off`) and given
  back. One node per decision; nodes left fragmented by finished jobs would
  otherwise be paid for whole until their last job ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from trainmaster.controller.loop import Controller
from trainmaster.core.job import JobSpec, Role, TransientUse
from trainmaster.core.market import AutoscaleSpec, Market, Offer
from trainmaster.core.node import Node
from trainmaster.core.resources import Resources
from trainmaster.engines.provider import EngineProvider, NodeProvider, Provisionable
from trainmaster.policies.scoring import Throughput
from trainmaster.policies.snapshot import Plan, Snapshot
from trainmaster.policies.waits import CAPACITY, WaitKind
from trainmaster.policies.workspace import ClusterMemo, eligible, never_fits

_DEMAND = CAPACITY | {WaitKind.TRANSIENT_UNAVAILABLE, WaitKind.PRIORITY, WaitKind.RESERVATION}
ASK_LIMIT = 3  # requests for one job in a row; a job still waiting after that is not provided for again


@dataclass
class _Made:
    offer: Offer
    node: Node
    idle_since: float | None = None
    joined: bool = False
    underused_since: float | None = None  # since when its jobs hold at most half its GPUs (None: more, or none)


@dataclass
class Autoscaler:
    """Adds and removes provider nodes around one controller (see the module doc for the rules)."""

    spec: AutoscaleSpec
    provider: NodeProvider
    made: dict[str, _Made] = field(default_factory=dict)  # provider nodes, booting or joined
    added: int = 0
    removed: int = 0
    refused: int = 0  # requests a limit, the budget or the market turned down
    moved: int = 0  # nodes emptied and given back by consolidation
    # job id -> times nodes were requested for it since it last ran (a revoked job may need nodes again and again)
    asked: dict[str, int] = field(default_factory=dict)
    _speeds: Throughput = field(default_factory=Throughput)  # a job's speed per GPU type, as placement reads it

    def attach(self, controller: Controller) -> Autoscaler:
        self._controller = controller
        controller.after_cycle.append(self.on_cycle)
        controller.wakers.append(self.next_wake)
        controller.may_fit_later.append(self.could_fit)
        return self

    def could_fit(self, spec: JobSpec) -> bool:
        """Whether nodes this autoscaler may make would hold every task of the job (it is then not rejected)."""
        return all(any(rs.resources.fits_in(o.node_type.capacity)
                       and _eligible(o.node_type.make("?", o.transient), role, spec) for o in self.spec.offers)
                   for role, rs in spec.roles.items() if rs.min)

    # -- the hook ---------------------------------------------------------------
    def on_cycle(self, snap: Snapshot, plan: Plan) -> None:
        c = self._controller
        now = c.clock.now()
        booting = self._forget_lost(c)
        self._scale_down(c, now)
        for jid in [j for j, r in ((j, c.live.get(j)) for j in self.asked) if r is None or r.allocation]:
            del self.asked[jid]  # it started on what came (or left): a later loss may ask again
        free = dict(c.free)
        for name in booting:
            free[name] = self.made[name].node.capacity
        demand = False  # some job wants room: consolidation would only take it from it
        pending = snap.pending_ids if snap.pending_ids is not None else tuple(snap.jobs)
        # and the jobs this very decision put back (preempted: waiting, not yet pending in the snapshot)
        for jid in (*pending, *(j for j in plan.waits if snap.jobs.get(j) is not None and snap.jobs[j].active)):
            wait = plan.waits.get(jid)
            record = c.live.get(jid)
            wants_room = jid in plan.rejected or (wait is not None and wait.kind in _DEMAND)
            if not wants_room or record is None or record.allocation:
                continue
            if self.asked.get(jid, 0) >= ASK_LIMIT:  # nodes came for it and it still did not start:
                continue  # placement wants something offers do not give; never churn nodes for it forever
            demand = True
            speeds = self._speeds.table(snap, snap.jobs[jid]) if jid in snap.jobs else self._speeds.prior
            if self._provide(record.spec, free, c, now, speeds):
                self.asked[jid] = self.asked.get(jid, 0) + 1
        if self.spec.consolidate:
            self._consolidate(c, now, demand)

    def next_wake(self) -> float | None:
        idle = [m.idle_since for m in self.made.values() if m.idle_since is not None]
        if self.spec.consolidate:  # the next node to come due (one already due waits for the next decision)
            now = self._controller.clock.now()
            idle += [m.underused_since for m in self.made.values()
                     if m.underused_since is not None and m.underused_since + self.spec.idle_timeout > now]
        return min(idle) + self.spec.idle_timeout if idle else None

    # -- parts --------------------------------------------------------------------
    def _forget_lost(self, c: Controller) -> set[str]:
        """Drop provider nodes that left (revoked); return the names still booting."""
        booting: set[str] = set()
        for name, m in list(self.made.items()):
            if name in c.cluster:
                m.joined = True
            elif m.joined:
                del self.made[name]
            else:
                booting.add(name)
        return booting

    def _scale_down(self, c: Controller, now: float) -> None:
        for name, m in list(self.made.items()):
            if name not in c.cluster:
                continue
            if c.free.get(name) != c.cluster.node(name).capacity:  # the node as it joined (a provider may differ)
                m.idle_since = None
            elif m.idle_since is None:
                m.idle_since = now
            elif now - m.idle_since >= self.spec.idle_timeout:
                self.provider.release(name)
                del self.made[name]
                self.removed += 1

    def _consolidate(self, c: Controller, now: float, demand: bool) -> None:
        """Empty one underused provider node whose jobs the others' free room holds (module doc)."""
        held: dict[str, list[str]] = {}  # node -> ids of the active jobs with a task there
        for jid, record in c.live.items():
            if record.state.active:
                for name in record.allocation.nodes:
                    held.setdefault(name, []).append(jid)
        for name, m in self.made.items():
            if name not in c.cluster or name in c.draining:
                continue
            cap = c.cluster.node(name).capacity.gpu
            used = cap - c.free[name].gpu
            if 0 < used <= cap / 2:
                m.underused_since = now if m.underused_since is None else m.underused_since
            else:
                m.underused_since = None
        if demand:
            return
        due = sorted((m.underused_since, name) for name, m in self.made.items()
                     if m.underused_since is not None and now - m.underused_since >= self.spec.idle_timeout)
        targets = {name: room for name, room in c.free.items()
                   if name not in c.draining and (name not in self.made or self.made[name].underused_since is None)}
        for _, name in due:
            jobs = [c.live[jid] for jid in held.get(name, ())]
            if not jobs or any(set(r.allocation.nodes) != {name} for r in jobs):
                continue  # a job spread over several nodes would restart whole: not worth one node
            room = dict(targets)
            if all(self._fit(p.role, r.spec.roles[p.role].resources, r.spec, room, c, r.spec.anchored)
                   for r in jobs for p in r.allocation.tasks):  # an anchored gang: all of it on on-demand room
                c.move_off(name, f"consolidation: node {name} under half used; its jobs fit elsewhere")
                self.provider.release(name)
                del self.made[name]
                self.removed += 1
                self.moved += 1
                return

    def _provide(self, spec: JobSpec, free: dict[str, Resources], c: Controller, now: float,
                 speeds: Mapping[str, float]) -> bool:
        """Pack the job's minimum gang onto free and booting room, then onto new nodes; request those only
        when the whole gang is covered (a partial gang would sit idle)."""
        tasks = [(role, rs.resources) for role, rs in spec.roles.items() for _ in range(rs.min)]
        tasks.sort(key=lambda t: (t[0] is not Role.PS, -t[1].gpu, -t[1].cpu))
        # The gang's anchors (PS tasks, the chief) go on on-demand nodes, as placement will put them
        # (`JobSpec.anchored`, policies.workspace.anchored): provide for them so.
        anchoring = spec.anchored and len(tasks) > 1
        chief = next((i for i, (role, _) in enumerate(tasks) if role is Role.WORKER), None)
        room = dict(free)
        new: list[tuple[Offer, Resources]] = []  # nodes to request, with the room left on each
        for k, (role, need) in enumerate(tasks):
            anchor = anchoring and (role is Role.PS or k == chief)
            if self._fit(role, need, spec, room, c, anchor):
                continue
            i = next((i for i, (o, r) in enumerate(new) if need.fits_in(r)
                      and _eligible(o.node_type.make("?", o.transient), role, spec, anchor)), None)
            if i is not None:
                new[i] = (new[i][0], new[i][1] - need)
                continue
            offer = self._choose(role, need, spec, c, now, [o for o, _ in new], anchor, speeds)
            if offer is None:
                self.refused += 1
                return False  # the gang cannot be covered now: ask for nothing for this job
            new.append((offer, offer.node_type.capacity - need))
        free.update(room)
        for offer, left in new:
            node = self.provider.request(offer.node_type, offer.transient)
            if node is None:
                self.refused += 1
                return bool(new)
            self.made[node.name] = _Made(offer, node)
            self.added += 1
            free[node.name] = left
        return bool(new)

    def _fit(self, role: Role, need: Resources, spec: JobSpec, free: dict[str, Resources], c: Controller,
             anchor: bool = False) -> bool:
        for name, room in free.items():
            node = self.made[name].node if name in self.made else (c.cluster.node(name) if name in c.cluster else None)
            if node is not None and need.fits_in(room) and _eligible(node, role, spec, anchor):
                free[name] = room - need
                return True
        return False

    def _choose(self, role: Role, need: Resources, spec: JobSpec, c: Controller, now: float,
                planned: list[Offer], anchor: bool = False, speeds: Mapping[str, float] | None = None) -> Offer | None:
        if self.spec.budget is not None and c.cost.cluster_dollars(now) >= self.spec.budget:
            return None
        offers = [*(m.offer for m in self.made.values()), *planned]
        spend = sum(o.price for o in offers)
        counts: dict[str, int] = {}
        for o in offers:
            counts[o.key] = counts.get(o.key, 0) + 1
        options = [
            o for o in self.spec.offers
            if need.fits_in(o.node_type.capacity) and counts.get(o.key, 0) < o.limit
            and _eligible(o.node_type.make("?", o.transient), role, spec, anchor)
            and (self.spec.max_cost_per_hour is None or spend + o.price <= self.spec.max_cost_per_hour + 1e-9)
        ]
        prefs = [t.lower() for t in spec.gpu_types]
        table = speeds or {}
        known = [v for v in table.values() if v > 0]
        unknown = sum(known) / len(known) if known else 1.0  # a type the table lacks: the mean, as placement

        thrifty = spec.budget is not None

        def rank(o: Offer) -> tuple[int, float, float, str]:
            t = o.node_type.gpu_type or ""
            order = prefs.index(t) if t in prefs else len(prefs)
            speed = table.get(t, unknown) if need.gpu else 1.0
            per_gpu = o.price / max(1, o.node_type.capacity.gpu)
            if thrifty:
                return order, per_gpu / speed if speed > 0 else math.inf, 0.0, o.key
            return order, -speed, per_gpu, o.key

        return min(options, key=rank, default=None)


def _eligible(node: Node, role: Role, spec: JobSpec, anchor: bool = False) -> bool:
    """Whether a task of `role` may run on `node` as far as provisioning goes: as placement lets it
    (`workspace.eligible`: required GPU types, transient use; `gpuTypes` only ranks offers); an `anchor`
    (the chief or a PS task of an anchored gang) only on on-demand nodes."""
    return eligible(node, spec) and not (node.transient and (
        anchor or (role is Role.PS and spec.transient is not TransientUse.PREFERRED)))


@dataclass(frozen=True)
class MarketSetup:
    market: Market | None = None
    replace_delay: float | None = None
    autoscale: AutoscaleSpec | None = None


def attach(controller: Controller, engine: Provisionable, m: MarketSetup) -> Autoscaler | None:
    """Wire the autoscaler, or keep jobs waiting for replacements of revoked nodes, around one controller."""
    if m.replace_delay is not None:
        memo = ClusterMemo(controller.cluster)  # replacements restore the cluster as it was given
        empty = Snapshot(now=0.0, cluster=controller.cluster, jobs=MappingProxyType({}), free=MappingProxyType({}))

        def fits_given(spec: JobSpec) -> bool:
            return never_fits(spec, empty, memo) is None

        controller.may_fit_later.append(fits_given)
    if m.autoscale is None:
        return None
    return Autoscaler(m.autoscale, EngineProvider(engine)).attach(controller)
