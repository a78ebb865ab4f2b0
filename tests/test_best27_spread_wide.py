"""best27: a grown multi-node job re-placed at most `spread_to` workers a node (`trainmaster.spread_wide`)."""

from __future__ import annotations

from builders import cluster, running, snapshot
from trainmaster.core.allocation import Allocation
from trainmaster.core.job import Role
from trainmaster.policies.queues import try_place
from trainmaster.policies.trainmaster import SPREAD_TO, GainSizing, build, make, spread_wide
from trainmaster.policies.workspace import Workspace


def _per_node(alloc: Allocation) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in alloc.tasks:
        out[t.node] = out.get(t.node, 0) + 1
    return out


def _grown(nodes: int, filler: dict[str, int], grow_to: int) -> tuple[Workspace, Allocation]:
    """Job "a" (4 workers on n0, up to 16) grown to `grow_to` where it fits, beside fillers holding GPUs."""
    cl = cluster(nodes, 4)
    views = [running("a", 4, on="n0", min_gpus=1, max_gpus=16)]
    views += [running(f"f{k}", g, on=name) for k, (name, g) in enumerate(filler.items())]
    snap = snapshot(cl, *views)
    ws = Workspace(snap)
    got = try_place(ws, snap.jobs["a"], {Role.WORKER: grow_to})
    assert isinstance(got, Allocation)
    return ws, got


def test_a_grown_multi_node_job_is_spread_two_a_node_where_room_allows() -> None:
    ws, got = _grown(4, {"n1": 2}, 8)
    assert _per_node(got) == {"n0": 4, "n2": 4}  # the grow itself: its node, then the next whole one
    a = ws.snap.jobs["a"]
    spread_wide(ws, a, got, 2)
    assert _per_node(ws.allocations["a"]) == {"n0": 2, "n1": 2, "n2": 2, "n3": 2}
    assert sum(r.gpu for r in ws.free.values()) == 16 - 2 - 8  # the free capacity follows the move
    assert ws.free["n1"].gpu == 0 and ws.free["n0"].gpu == 2


def test_sizes_one_node_holds_and_gangs_without_room_stay_where_the_grow_put_them() -> None:
    ws, got = _grown(2, {"n1": 2}, 4)  # 4 workers: one node's size, already on n0
    spread_wide(ws, ws.snap.jobs["a"], got, 2)
    assert ws.allocations["a"] == got
    ws, got = _grown(3, {"n2": 4}, 8)  # 8 on n0 + n1; the third node full: 2 a node does not fit
    assert _per_node(got) == {"n0": 4, "n1": 4}
    spread_wide(ws, ws.snap.jobs["a"], got, 2)
    assert ws.allocations["a"] == got and sum(r.gpu for r in ws.free.values()) == 0
    ws, got = _grown(4, {"n2": 4, "n3": 3}, 8)  # room for 2 + 2 + 1 only: more nodes, but not the whole gang
    spread_wide(ws, ws.snap.jobs["a"], got, 2)
    assert ws.allocations["a"] == got and _per_node(got) == {"n0": 4, "n1": 4}
    ws, got = _grown(4, {"n1": 2}, 8)
    spread_wide(ws, ws.snap.jobs["a"], got, 4)  # at most 4 a node: what the grow did already
    assert ws.allocations["a"] == got


def test_the_grow_phase_spreads_with_the_switch_on_only() -> None:
    for spread_to, want in ((2, {"n0": 2, "n1": 2, "n2": 2, "n3": 2}), (0, {"n0": 4, "n2": 4})):
        cl = cluster(4, 4)
        snap = snapshot(cl, running("a", 4, on="n0", min_gpus=1, max_gpus=16), running("f", 2, on="n1"))
        ws = Workspace(snap)
        sizing = GainSizing(spread_to=spread_to)
        sizing.target = {"a": {Role.WORKER: 8}}
        sizing.grow(snap, [], ws)
        assert _per_node(ws.allocations["a"]) == want


def test_only_the_trainmaster_preset_turns_it_on() -> None:
    def sizing(cycle: object) -> GainSizing:
        (grow,) = [h for h in cycle.after if isinstance(getattr(h, "__self__", None), GainSizing)]  # type: ignore[attr-defined]
        return grow.__self__  # type: ignore[no-any-return]

    assert SPREAD_TO == 2 and sizing(make()).spread_to == SPREAD_TO
    assert sizing(build("t", gain=True)).spread_to == 0
