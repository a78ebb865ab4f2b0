"""The trainmaster preset's fast paths plan exactly as their reference paths.

Each is switched off in turn and the same contended workload replayed: every plan, the order of its
allocations and its waits must be equal, and the fast path must have been taken. The workload mixes fixed-size
jobs (some decisions admit no elastic job) with elastic parameter-server jobs whose models learn online.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from types import SimpleNamespace

import pytest
from tests.replay_helpers import on_and_off, preset_plans

from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.core.job import JobKind, JobSpec, Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig
from trainmaster.models.book import JobModel
from trainmaster.models.priors import TypePriors
from trainmaster.policies import cycle as cycle_module
from trainmaster.policies import las, preemption
from trainmaster.policies import trainmaster as preset_module
from trainmaster.policies.backfill import Reservation
from trainmaster.policies.las import RemainingOrder, SameClassLowerRank
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.preemption import QueueRules
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.trainmaster import GainSizing, OnlyWithServices
from trainmaster.policies.workspace import Workspace
from trainmaster.workloads.base import Workload
from trainmaster.workloads.ps_truth import ps_workload


def mixed() -> Workload:
    """40 PS jobs: the first 12 and every third one after fixed at their minimum, the rest elastic."""
    base = ps_workload(40, rate_per_hour=40, seed=3)
    jobs = tuple(replace(j, spec=replace(j.spec, roles={r: replace(s, max=s.min) for r, s in j.spec.roles.items()}))
                 if i < 12 or i % 3 == 0 else j for i, j in enumerate(base.jobs))
    return Workload(name="mixed", jobs=jobs)


def ps_elastic() -> Workload:
    """`mixed()` with every elastic job's workers fixed: elastic in its second role (PS) alone."""
    base = mixed()
    worker = Role.WORKER
    jobs = tuple(replace(j, spec=replace(j.spec, roles={r: replace(s, max=s.min) if r is worker else s
                                                        for r, s in j.spec.roles.items()}))
                 for j in base.jobs)
    return Workload(name="ps-elastic", jobs=jobs)


def two_priorities() -> Workload:
    """`mixed()` with every fifth job at priority 1: decisions with two classes (and with one)."""
    base = mixed()
    return Workload(name="two-priorities", jobs=tuple(replace(j, spec=replace(j.spec, priority=1)) if i % 5 == 4
                                                      else j for i, j in enumerate(base.jobs)))


def plans(workload: Workload | None = None) -> list[Plan]:
    """Every plan of the trainmaster preset on `workload` (`mixed()`) on 3x4; every job must finish."""
    return preset_plans("trainmaster", workload or mixed(), "3x4", SimConfig(report_interval=LEARNING_REPORT_INTERVAL),
                        all_finish=True)


def ids(order: list[JobView], *_: object) -> list[str]:
    """What a spy on `RemainingOrder.__call__` keeps: the order, by job id."""
    return [j.id for j in order]


def test_greedy_skipped_without_elastic_jobs_plans_as_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`GainSizing.skip_fixed`: no greedy while no admitted job is elastic; the same plans as running it."""
    fast, slow = on_and_off(monkeypatch, plans, (GainSizing, "skip_fixed"), spies={"greedy": (Optimus, "size")})
    assert len(slow.calls["greedy"]) == len(slow.plans)  # (the reference sizes at every decision)
    assert 0 < len(fast.calls["greedy"]) < len(slow.calls["greedy"])  # skipped at some decisions, run at others


@pytest.mark.parametrize("switch", ["count_shapes", "keep_features"])
def test_type_priors_kept_counts_and_features_plan_as_the_rows(switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`TypePriors.count_shapes`, `.keep_features`: the same plans as counting each type's configurations and
    computing its rows' features from its rows at each refit."""
    on_and_off(monkeypatch, plans, (TypePriors, switch))


def test_kept_predictions_plan_as_asking_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Reservation.keep_predictions`: running jobs' model predictions kept while their model and allocation
    are the same; the same plans (reservations, backfills and their notes) as asking every model each time."""
    fast, slow = on_and_off(monkeypatch, plans, (Reservation, "keep_predictions"),
                            spies={"asked": (JobModel, "remaining_time")})
    assert any("reserved" in r for plan in fast.plans for r in plan.reasons.values())  # reservations were made
    assert len(slow.calls["asked"]) - len(fast.calls["asked"]) > 200  # kept answers served (asked elsewhere too)


@pytest.mark.parametrize("workload", [mixed, ps_elastic])
def test_elastic_worked_out_once_per_spec_plans_as_walking_the_roles(
        workload: Callable[[], Workload], monkeypatch: pytest.MonkeyPatch) -> None:
    """`JobSpec.elastic` is worked out once per spec (a cached property: every live job's is asked at each
    decision); the same plans (wake-ups at and off the resize tick included) as walking the roles at every
    ask, no spec worked out twice, and a spec made by `dataclasses.replace` answers for its own roles. With
    `ps_elastic` the elastic role is the second one: an answer read off the first role would miss it."""
    grown = simple_job("a", min_gpus=1, max_gpus=4)
    fixed = replace(grown, roles={r: replace(s, max=s.min) for r, s in grown.roles.items()})
    assert grown.elastic and not fixed.elastic
    second = [j.spec for j in workload().jobs if j.spec.roles[Role.PS].elastic] if workload is ps_elastic else []
    assert all(not s.roles[Role.WORKER].elastic and s.roles[Role.PS].elastic and s.elastic for s in second)
    assert workload is mixed or (second and all(next(iter(s.roles)) is Role.WORKER for s in second))

    worked_out = JobSpec.__dict__["elastic"].func
    worked: list[JobSpec] = []
    asks: list[tuple[int, int]] = []  # per replay: asks worked out, specs they were for

    def counted(self: JobSpec) -> bool:
        worked.append(self)
        return bool(worked_out(self))

    def walked(self: JobSpec) -> bool:  # the reference: the roles walked at every ask
        worked.append(self)
        return any(r.elastic for r in self.roles.values())

    def counted_plans() -> list[Plan]:
        worked.clear()
        out = plans(workload())  # (fresh specs: nothing cached from another replay)
        asks.append((len(worked), len({id(s) for s in worked})))
        return out

    cached = cached_property(counted)
    cached.__set_name__(JobSpec, "elastic")
    fast, _ = on_and_off(monkeypatch, counted_plans, (JobSpec, "elastic", cached, property(walked)))
    (fast_asks, fast_specs), (slow_asks, _) = asks
    assert any(p.wake_after == 60.0 for p in fast.plans) and any(p.wake_after != 60.0 for p in fast.plans)
    assert fast_asks == fast_specs <= 40 < slow_asks  # once per spec; the reference walks at every ask


def test_kept_order_keys_plan_as_working_them_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.keep_keys`: each job's sort key kept while its view and model are the same objects;
    the same orders and plans as working out every live job's predicted remaining time at each decision."""
    fast, slow = on_and_off(monkeypatch, plans, (RemainingOrder, "keep_keys"),
                            spies={"asked": (las, "predicted_remaining"), "orders": (RemainingOrder, "__call__", ids)})
    assert fast.calls["orders"] == slow.calls["orders"]
    assert 0 < len(fast.calls["asked"]) < len(slow.calls["asked"]) * 0.7  # kept keys served; changed jobs asked


@pytest.mark.parametrize("workload", [mixed, two_priorities])
def test_kept_keys_read_in_c_order_as_the_loop(workload: Callable[[], Workload],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.read_in_c`: the kept keys read and checked in C-level passes; the same orders, plans and
    keys worked out again (`predicted_remaining` asks) as the Python loop over every job. (The reference sort's
    switch: `kept_order` off, as where the journal does not serve.)"""
    monkeypatch.setattr(RemainingOrder, "kept_order", False)
    fast, slow = on_and_off(monkeypatch, lambda: plans(workload()), (RemainingOrder, "read_in_c"),
                            spies={"asked": (las, "predicted_remaining"), "orders": (RemainingOrder, "__call__", ids),
                                   "read": (las, "_KEY")})  # (`_KEY` is read by the C-level passes alone)
    assert fast.calls["orders"] == slow.calls["orders"]
    assert len(fast.calls["asked"]) == len(slow.calls["asked"]) > 0  # the same keys worked out again
    assert len(fast.calls["read"]) >= sum(map(len, fast.calls["orders"])) > 0 == len(slow.calls["read"])


def test_quick_idle_plans_as_indexing_the_holders(monkeypatch: pytest.MonkeyPatch) -> None:
    """`QueueRules.quick_idle`: the queue rules found idle from the kinds and priorities alone (no holder
    index built); with two priorities idle at some decisions (verdict True) and not at others (the index
    then built and asked: the queue rules evict), the same plans as the index at every decision."""
    fast, slow = on_and_off(monkeypatch, lambda: plans(two_priorities()), (QueueRules, "quick_idle"),
                            spies={"verdicts": (QueueRules, "_nobody_lower"),
                                   "built": (preemption._Holders, "__init__")})
    verdicts, built = fast.calls["verdicts"], len(fast.calls["built"])
    assert not slow.calls["verdicts"] and len(slow.calls["built"]) >= len(slow.plans)  # (indexed every decision)
    assert sum(verdicts) > 0 and not all(verdicts)  # found idle at some decisions, not at all
    assert 0 < built < len(slow.calls["built"])  # the index built only where the quick test could not say
    assert any("preempted" in r and "priority" in r for p in fast.plans for r in p.reasons.values())  # evicted


def test_quick_idle_never_for_a_service_or_a_higher_priority() -> None:
    """`QueueRules._nobody_lower`: no for a service claimant (it may evict any job) or for a claimant above
    the lowest priority held; yes where every claimant is a training job at or below every holder's."""
    def view(name: str, priority: int, kind: JobKind = JobKind.TRAINING) -> JobView:
        return JobView(id=name, spec=replace(simple_job(name, 1), priority=priority, kind=kind),
                       state=JobState.PENDING, submit_time=0.0)

    held = {"h1": view("h1", 1), "h2": view("h2", 2)}
    rule = SimpleNamespace(ws=SimpleNamespace(snap=SimpleNamespace(jobs=held), allocations=dict.fromkeys(held)))

    def idle(*claimants: JobView) -> bool:
        service = any(c.spec.kind is JobKind.SERVICE for c in claimants)
        return QueueRules._nobody_lower(rule, service, max((c.spec.priority for c in claimants), default=None))  # type: ignore[arg-type]

    assert idle(view("a", 1), view("b", 0)) and idle()
    assert not idle(view("a", 2)) and not idle(view("a", 0), view("b", 2))
    assert not idle(view("s", 0, JobKind.SERVICE))


def test_kept_sizes_plan_as_current_or_min(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OnlyWithServices.keep_sizes` (no service live here): sizes worked out only for jobs whose view changed;
    the same plans as `current_or_min` over every admitted job at each decision."""
    def sized(_: object, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> int:
        return len(jobs)

    fast, slow = on_and_off(monkeypatch, plans, (OnlyWithServices, "keep_sizes"),
                            spies={"kept": (cycle_module, "current_or_min", sized),  # (`KeptSizes` reads it here)
                                   "all": (preset_module, "current_or_min", sized)})
    fast_sized, slow_sized = (sum(run.calls["kept"]) + sum(run.calls["all"]) for run in (fast, slow))
    assert 0 < fast_sized < slow_sized * 0.7


def test_kept_order_keys_follow_a_new_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job whose model changed while its view did not (a type prior refit re-publishes waiting jobs'
    models) is ordered by its new model: two jobs' models swapped between two decisions on the same views."""
    snaps: list[Snapshot] = []
    order = RemainingOrder.__call__

    def kept(self: RemainingOrder, snap: Snapshot) -> list[JobView]:
        snaps.append(snap)
        return order(self, snap)

    monkeypatch.setattr(RemainingOrder, "__call__", kept)
    plans()
    monkeypatch.undo()
    for snap in snaps:
        left = {jid: las.predicted_remaining(snap, snap.jobs[jid]) for jid in snap.models if jid in snap.jobs}
        known = sorted((v, jid) for jid, v in left.items() if v is not None)
        if len(known) >= 2 and known[0][0] < known[-1][0]:
            a, b = known[0][1], known[-1][1]
            break
    else:
        pytest.fail("no decision with two predicted jobs")
    swapped = replace(snap, models={**snap.models, a: snap.models[b], b: snap.models[a]})
    fast, slow = RemainingOrder(), RemainingOrder()
    slow.keep_keys = False  # type: ignore[misc]
    runs = [[j.id for j in hook(s)] for hook in (fast, slow) for s in (snap, swapped)]
    assert runs[0] == runs[2] and runs[1] == runs[3]
    assert runs[1] != runs[0]  # the swap moved them


def rule(_: object, self: SameClassLowerRank, *args: object) -> SameClassLowerRank:
    """What a spy on `SameClassLowerRank.__init__` keeps: the rule it set up."""
    return self


def test_class_sums_field_by_field_plan_as_adding_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.field_sums`: the suffix sums added up per field in C-level steps; the same sums at
    every depth asked (and the same plans) as adding one holder's `Resources` at a time. Claimants come in
    rank order, so a class is mostly summed once; summed again in two steps, each depth is still the sum."""
    fast, slow = on_and_off(monkeypatch, plans, (SameClassLowerRank, "field_sums"),
                            spies={"rules": (SameClassLowerRank, "__init__", rule)})
    sums = [[r.summed for r in run.calls["rules"]] for run in (fast, slow)]
    assert sums[0] == sums[1] and any(len(s) > 2 for summed in sums[0] for s in summed.values())
    deep = [(r, key) for run in (fast, slow) for r in run.calls["rules"] for key, held in r.held.items()
            if len(held) > 2]
    assert deep
    for r, key in deep:
        held = r.held[key]
        r.summed[key] = [(0, 0, 0)]
        assert r._suffix(key, len(held) - 1) == held[-1][0].resources(held[-1][1])  # the last one first
        for i in range(len(held)):
            assert r._suffix(key, i) == sum((a.resources(spec) for a, spec in held[i:]), Resources())


def test_lazy_class_sums_plan_as_summing_every_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.lazy_sums`: a class's suffix sums added up only as far down as a claimant's room
    asks; the same plans as summing every holder at set-up, and some holders never summed."""
    runs = on_and_off(monkeypatch, plans, (SameClassLowerRank, "lazy_sums"),
                      (SameClassLowerRank, "skip_ahead", False, False),  # (it leaves out what lazy sums spare)
                      spies={"rules": (SameClassLowerRank, "__init__", rule)})
    (fast_held, fast_summed), (slow_held, slow_summed) = (
        (sum(len(h) for r in run.calls["rules"] for h in r.held.values()),
         sum(len(s) - 1 for r in run.calls["rules"] for s in r.summed.values())) for run in runs)
    assert fast_held == slow_held == slow_summed > fast_summed


def test_gain_sizing_shrinks_by_replacing_never_the_kept_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`GainSizing.size` shrinks running jobs to their target while the sizes under it are `KeptSizes`' dicts,
    shared across decisions: it must replace a job's size, never edit the kept dict. At every decision the base
    sizes equal a fresh `current_or_min` (no earlier phase edited a kept dict) and are unchanged after the
    greedy (this one did not), and running jobs were shrunk."""
    shrunk = [0]
    size = GainSizing.size

    def watched(self: GainSizing, base: cycle_module.SizeHook) -> cycle_module.SizeHook:
        seen: dict[str, tuple[dict[Role, int], dict[Role, int]]] = {}

        def recording(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> cycle_module.Sizes:
            out = base(snap, jobs, ws)
            assert out == cycle_module.current_or_min(snap, jobs, ws)
            seen.clear()
            seen.update({jid: (want, dict(want)) for jid, want in out.items()})
            return out

        hook = size(self, recording)

        def checked(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> cycle_module.Sizes:
            out = hook(snap, jobs, ws)
            for jid, (want, copy) in seen.items():
                assert want == copy  # the kept dict as the base gave it
                if out[jid] != copy and snap.jobs[jid].active:
                    shrunk[0] += 1
            return out

        return checked

    monkeypatch.setattr(GainSizing, "size", watched)
    assert OnlyWithServices.keep_sizes
    plans()
    assert shrunk[0] > 0  # running jobs were shrunk to their targets


def test_holders_ranked_ahead_left_out_plan_as_indexing_every_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.skip_ahead`: holders ranked at or before the first blocked job are left out at set-up
    (nobody's victim); the same plans as indexing every holder, and some holders left out."""
    def held(_: object, self: SameClassLowerRank, *args: object) -> int:
        return sum(len(h) for h in self.held.values())

    fast, slow = on_and_off(monkeypatch, plans, (SameClassLowerRank, "skip_ahead"),
                            spies={"held": (SameClassLowerRank, "__init__", held)})
    fast_held, slow_held = fast.calls["held"], slow.calls["held"]
    assert len(fast_held) == len(slow_held) and all(map(int.__le__, fast_held, slow_held))
    assert sum(fast_held) < sum(slow_held)  # left out at some decisions


@pytest.mark.parametrize("workload", [mixed, two_priorities])
def test_one_class_sorted_by_remaining_alone_orders_as_the_keys(
        workload: Callable[[], Workload], monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.one_class`: while every job is of one class the order sorts the remaining times alone;
    the same orders and plans as sorting the (class, remaining) keys, taken at every decision of `mixed()` and
    at some (not all) of `two_priorities()`. (The reference sort's switch: `kept_order` off.)"""
    monkeypatch.setattr(RemainingOrder, "kept_order", False)
    fast, slow = on_and_off(monkeypatch, lambda: plans(workload()), (RemainingOrder, "one_class"),
                            spies={"orders": (RemainingOrder, "__call__", ids), "taken": (las, "_one_class")})
    assert fast.calls["orders"] == slow.calls["orders"]
    taken = fast.calls["taken"]
    assert not slow.calls["taken"] and len(taken) > 50
    assert all(taken) if workload is mixed else any(taken) and not all(taken)
