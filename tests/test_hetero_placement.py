"""Heterogeneous GPUs and transient nodes at placement: each spec field changes a placement; scorers are
no-ops on a plain cluster."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import job, node, pending, running, snapshot, with_ps
from queue_builders import J, simulate
from trainmaster.core.cluster import Cluster, parse_shorthand
from trainmaster.core.job import Role, TransientUse
from trainmaster.core.node import Node
from trainmaster.core.queue import queues_from_mapping
from trainmaster.policies.cycle import Cycle
from trainmaster.policies.scoring import DEFAULT, TIGHTEST, ClusterTraits, ZoneSpread, bind
from trainmaster.policies.trainmaster import build
from trainmaster.policies.workspace import Workspace


def _typed(name: str, gpu_type: str, gpus: int = 4, **fields: object) -> Node:
    return replace(node(name, gpus, **fields), gpu_type=gpu_type)


def _where(cl: Cluster, *jobs: object) -> dict[str, tuple[str, ...]]:
    snap = snapshot(cl, *jobs)  # type: ignore[arg-type]
    plan = Cycle(name="t").decide(snap)
    return {jid: a.nodes for jid, a in plan.allocations.items()}


HETERO = Cluster((_typed("k0", "k80"), _typed("p0", "p100"), _typed("v0", "v100")))


def test_a_plain_cluster_binds_to_tightest_fit_itself() -> None:
    snap = snapshot(parse_shorthand("4x4"))
    assert bind(DEFAULT, snap, ClusterTraits.of(snap.cluster)) is TIGHTEST
    assert Workspace(snap, scoring=DEFAULT).scoring is TIGHTEST
    assert bind(DEFAULT, snapshot(HETERO), ClusterTraits.of(HETERO)) is not TIGHTEST


def test_throughput_sends_a_job_to_the_fastest_type_and_gpu_types_reorders_it() -> None:
    assert _where(HETERO, pending("j", 2)) == {"j": ("v0",)}  # generic prior: v100 fastest
    assert _where(HETERO, pending("j", 2, gpu_types=("k80", "v100"))) == {"j": ("k0",)}  # the user's order wins
    # a preference is not a filter: with k80 full the job still runs, on the next best type
    full = running("busy", 4, on="k0")
    assert _where(HETERO, full, pending("j", 2, gpu_types=("k80",)))["j"] == ("v0",)


def test_require_gpu_types_filters_and_gpu_types_does_not() -> None:
    snap = snapshot(HETERO, pending("a", 1, require_gpu_types=("a100",)), pending("b", 1, gpu_types=("a100",)))
    plan = Cycle(name="t").decide(snap)
    assert "requireGpuTypes" in plan.rejected["a"] and "b" in plan.allocations
    assert _where(HETERO, pending("c", 1, require_gpu_types=("p100",))) == {"c": ("p0",)}


MIXED = Cluster((node("od", 4), node("spot", 4, transient=True)))


def test_transient_never_allowed_preferred_each_place_differently() -> None:
    spot_first = Cluster((node("spot", 4, transient=True), node("od", 4)))
    assert _where(MIXED, pending("j", 1)) == {"j": ("od",)}  # allowed: neutral, first in cluster order
    assert _where(MIXED, pending("j", 1, transient=TransientUse.PREFERRED)) == {"j": ("spot",)}
    assert _where(spot_first, pending("j", 1)) == {"j": ("spot",)}
    assert _where(spot_first, pending("j", 1, transient=TransientUse.NEVER)) == {"j": ("od",)}


def test_ps_and_chief_stay_on_demand_unless_the_job_lets_them_go() -> None:
    spec = with_ps(job("ps", 3, transient=TransientUse.PREFERRED))
    placed = _where(MIXED, pending("ps", spec=spec))["ps"]
    alloc = Cycle(name="t").decide(snapshot(MIXED, pending("ps", spec=spec))).allocations["ps"]
    assert {t.node for t in alloc.tasks if t.role is Role.PS} == {"od"}
    assert sum(1 for t in alloc.tasks if t.role is Role.WORKER and t.node == "od") == 1  # the chief
    assert sum(1 for t in alloc.tasks if t.role is Role.WORKER and t.node == "spot") == 2
    assert placed == ("od", "spot")
    free = replace(spec, anchors_on_demand=False)
    assert _where(MIXED, pending("ps", spec=free)) == {"ps": ("spot",)}  # all of it where it is preferred


def test_a_fixed_size_all_reduce_gang_is_not_anchored_an_elastic_one_is() -> None:
    """Any loss stops a fixed all-reduce gang: an on-demand chief buys it nothing. An elastic one goes on around it."""
    fixed = job("f", 3, transient=TransientUse.PREFERRED)
    assert _where(MIXED, pending("f", spec=fixed)) == {"f": ("spot",)}
    elastic = job("e", 3, min_gpus=2, max_gpus=3, transient=TransientUse.PREFERRED)
    assert fixed.anchors_on_demand and not fixed.anchored and elastic.anchored
    alloc = Cycle(name="t").decide(snapshot(MIXED, pending("e", spec=elastic))).allocations["e"]
    assert sorted(t.node for t in alloc.tasks) == ["od", "spot"]  # at its minimum: the chief on od


def test_a_one_task_job_is_not_anchored() -> None:
    """The chief alone is the whole job: anchoring it would only mean `transient: never`."""
    assert _where(MIXED, pending("j", 1, transient=TransientUse.PREFERRED)) == {"j": ("spot",)}


def test_budget_jobs_pick_speed_per_dollar() -> None:
    # v100 is 4.1x a k80 (generic prior) but costs 8x: per dollar the k80 wins for a job with a budget.
    cl = Cluster((_typed("v0", "v100", price_per_hour=8.0), _typed("k0", "k80", price_per_hour=1.0)))
    assert _where(cl, pending("fast", 1)) == {"fast": ("v0",)}
    assert _where(cl, pending("thrifty", 1, budget=100.0)) == {"thrifty": ("k0",)}


def test_zone_spread_scores_a_zone_already_holding_the_jobs_transient_tasks_lower() -> None:
    cl = Cluster((node("a0", 4, transient=True, zone="a"), node("b0", 4, transient=True, zone="b"),
                  node("od", 4)))
    view = running("j", 2, on="a0", min_gpus=1, max_gpus=4)
    snap = snapshot(cl, view)
    scorer = ZoneSpread().bind(snap, ClusterTraits.of(cl))
    assert scorer is not None
    need = view.spec.roles[Role.WORKER].resources
    assert scorer(cl.node("a0"), snap.free["a0"], need, view) == -1.0
    assert scorer(cl.node("b0"), snap.free["b0"], need, view) == 0.0
    ws = Workspace(snap, scoring=DEFAULT)
    grown = ws.find(replace(view, allocation=view.allocation), {Role.WORKER: 3}, prefer=())
    assert grown is not None


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.tuples(st.sampled_from(["k80", "p100", "v100"]), st.integers(1, 8), st.booleans(),
                                st.sampled_from([0.0, 1.0, 3.0]), st.sampled_from(["a", "b"])),
                      min_size=2, max_size=12),
       asks=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(list(TransientUse)), st.booleans()),
                     min_size=1, max_size=15))
def test_scoring_by_class_places_like_scoring_every_node(
        kinds: list[tuple[str, int, bool, float, str]], asks: list[tuple[int, TransientUse, bool]]) -> None:
    """The class-level fast path (one fit-index lookup per node class) picks what a scan of every node picks."""
    cl = Cluster(tuple(_typed(f"n{i}", kind, gpus, transient=spot, price_per_hour=price, zone=zone)
                       for i, (kind, gpus, spot, price, zone) in enumerate(kinds)))
    snap = snapshot(cl)
    fast, slow = Workspace(snap, scoring=DEFAULT), Workspace(snap, scoring=DEFAULT)
    slow._by_class = False
    assert fast._by_class or fast.scoring is TIGHTEST  # a plain cluster draws tightest fit alone
    for k, (workers, use, thrifty) in enumerate(asks):
        view = pending(f"j{k}", workers, transient=use, **({"budget": 5.0} if thrifty else {}))
        a, b = fast.find(view, {Role.WORKER: workers}), slow.find(view, {Role.WORKER: workers})
        assert a == b
        if a is not None:
            fast.assign(view, a)
            slow.assign(view, a)


def test_a_spread_gang_of_transient_workers_takes_the_zones_in_turn() -> None:
    cl = Cluster(tuple(node(name, 2, transient=True, zone=name[0]) for name in ("a0", "a1", "b0", "b1")))
    spec = job("j", 4, transient=TransientUse.PREFERRED)
    assert _where(cl, pending("j", spec=spec)) == {"j": ("a0", "b0")}  # not a0, a1: one zone's wave takes half
    one_zone = Cluster(tuple(replace(n, zone="a") for n in cl.nodes))
    assert _where(one_zone, pending("j", spec=spec)) == {"j": ("a0", "a1")}


def test_a_gpu_type_quota_sends_a_job_that_prefers_that_type_to_another() -> None:
    """`gpuTypes` is a preference: a queue's quota on the preferred type moves the job, it does not block it."""
    cl = parse_shorthand("1x4:v100+1x4:k80")
    qs = queues_from_mapping([{"name": "a", "gpuTypes": {"v100": 2}, "borrowing": False}])
    jobs = [J(f"v{i}", 1, duration=100, fields={"queue": "a", "gpu_types": ("v100",)}) for i in range(3)]
    run = simulate(cl, build("t"), *jobs, qs=qs, until=50)
    where = {r.id: r.allocation.nodes for r in run.controller.live.values() if r.state.active}
    v100, k80 = (n.name for n in cl.nodes)
    assert where == {"v0": (v100,), "v1": (v100,), "v2": (k80,)}
    strict = [J(f"v{i}", 1, duration=100, fields={"queue": "a", "require_gpu_types": ("v100",)}) for i in range(3)]
    run = simulate(cl, build("t"), *strict, qs=qs, until=50)
    assert not run.controller.live["v2"].state.active  # required: it waits for its quota
