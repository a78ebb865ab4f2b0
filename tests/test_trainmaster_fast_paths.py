"""The trainmaster preset's fast paths plan exactly as their reference paths.

Each is switched off in turn and the same contended workload replayed: every plan, the order of its
allocations and its waits must be equal, and the fast path must have been taken. The workload mixes fixed-size
jobs (some decisions admit no elastic job) with elastic parameter-server jobs whose models learn online.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from types import SimpleNamespace

import pytest
from tests.replay_helpers import Recorder, same_plans

from trainmaster.cli.simulate import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.job import JobKind, JobSpec, Role, simple_job
from trainmaster.core.resources import Resources
from trainmaster.core.states import JobState
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.models.book import JobModel
from trainmaster.models.priors import TypePriors
from trainmaster.policies import cycle as cycle_module
from trainmaster.policies import las, preemption
from trainmaster.policies import trainmaster as preset_module
from trainmaster.policies.backfill import Reservation
from trainmaster.policies.las import RemainingOrder, SameClassLowerRank
from trainmaster.policies.optimus import Optimus
from trainmaster.policies.preemption import QueueRules
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import JobView, Plan, Snapshot
from trainmaster.policies.trainmaster import AdaptiveCycle, GainSizing, OnlyWithServices
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


def replay(monkeypatch: pytest.MonkeyPatch, workload: Workload | None = None) -> tuple[list[Plan], list[int]]:
    """Every plan of the trainmaster preset on `workload` (`mixed()`) on 3x4; how many greedy sizings ran, and
    how many times the models were asked a remaining time."""
    ran = [0, 0]
    greedy, asked = Optimus.size, JobModel.remaining_time

    def counted(self: Optimus, snap: Snapshot, jobs: list[JobView], ws: Workspace) -> dict[str, object]:
        ran[0] += 1
        return greedy(self, snap, jobs, ws)  # type: ignore[return-value]

    def counted_asked(self: JobModel, workers: int, ps: int = 0, nodes: int = 1) -> float | None:
        ran[1] += 1
        return asked(self, workers, ps, nodes)

    monkeypatch.setattr(Optimus, "size", counted)
    monkeypatch.setattr(JobModel, "remaining_time", counted_asked)
    cycle = make_policy("trainmaster")
    assert isinstance(cycle, AdaptiveCycle)
    recorder = Recorder(cycle)
    engine = SimEngine(parse_shorthand("3x4"), workload or mixed(),
                       SimConfig(report_interval=LEARNING_REPORT_INTERVAL))
    controller = Controller(engine, recorder)  # type: ignore[arg-type]
    controller.run()
    assert controller.summary().finished == 40
    return recorder.plans, ran


def test_greedy_skipped_without_elastic_jobs_plans_as_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """`GainSizing.skip_fixed`: no greedy while no admitted job is elastic; the same plans as running it."""
    with monkeypatch.context() as patch:
        fast, fast_ran = replay(patch)
    with monkeypatch.context() as patch:
        patch.setattr(GainSizing, "skip_fixed", False)
        slow, slow_ran = replay(patch)
    same_plans(fast, slow)
    assert slow_ran[0] == len(slow)  # (the reference sizes at every decision)
    assert 0 < fast_ran[0] < slow_ran[0]  # skipped at some decisions, run at others


@pytest.mark.parametrize("switch", ["count_shapes", "keep_features"])
def test_type_priors_kept_counts_and_features_plan_as_the_rows(switch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`TypePriors.count_shapes`, `.keep_features`: the same plans as counting each type's configurations and
    computing its rows' features from its rows at each refit."""
    with monkeypatch.context() as patch:
        fast, _ = replay(patch)
    with monkeypatch.context() as patch:
        patch.setattr(TypePriors, switch, False)
        slow, _ = replay(patch)
    same_plans(fast, slow)


def test_kept_predictions_plan_as_asking_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Reservation.keep_predictions`: running jobs' model predictions kept while their model and allocation
    are the same; the same plans (reservations, backfills and their notes) as asking every model each time."""
    with monkeypatch.context() as patch:
        fast, fast_ran = replay(patch)
    with monkeypatch.context() as patch:
        patch.setattr(Reservation, "keep_predictions", False)
        slow, slow_ran = replay(patch)
    same_plans(fast, slow)
    assert any("reserved" in r for plan in fast for r in plan.reasons.values())  # reservations were made
    assert slow_ran[1] - fast_ran[1] > 200  # kept answers served (the models are asked elsewhere too)


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

    def counted(self: JobSpec) -> bool:
        worked.append(self)
        return bool(worked_out(self))

    def walked(self: JobSpec) -> bool:  # the reference: the roles walked at every ask
        worked.append(self)
        return any(r.elastic for r in self.roles.values())

    cached = cached_property(counted)
    cached.__set_name__(JobSpec, "elastic")
    runs = {}
    for reference in (False, True):
        with monkeypatch.context() as patch:
            patch.setattr(JobSpec, "elastic", property(walked) if reference else cached)
            worked.clear()
            runs[reference] = replay(patch, workload())[0], len(worked), len({id(s) for s in worked})
    (fast, fast_asks, fast_specs), (slow, slow_asks, _) = runs[False], runs[True]
    same_plans(fast, slow)
    assert any(p.wake_after == 60.0 for p in fast) and any(p.wake_after != 60.0 for p in fast)
    assert fast_asks == fast_specs <= 40 < slow_asks  # once per spec; the reference walks at every ask


def test_kept_order_keys_plan_as_working_them_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.keep_keys`: each job's sort key kept while its view and model are the same objects;
    the same orders and plans as working out every live job's predicted remaining time at each decision."""
    asked = [0]
    predicted, order = las.predicted_remaining, RemainingOrder.__call__
    orders: list[list[str]] = []

    def counted(snap: Snapshot, job: JobView) -> float | None:
        asked[0] += 1
        return predicted(snap, job)

    def recorded(self: RemainingOrder, snap: Snapshot) -> list[JobView]:
        out = order(self, snap)
        orders.append([j.id for j in out])
        return out

    runs = {}
    for keep in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(las, "predicted_remaining", counted)
            patch.setattr(RemainingOrder, "__call__", recorded)
            patch.setattr(RemainingOrder, "keep_keys", keep)
            asked[0] = 0
            orders.clear()
            runs[keep] = replay(patch)[0], asked[0], list(orders)
    (fast, fast_asks, fast_orders), (slow, slow_asks, slow_orders) = runs[True], runs[False]
    same_plans(fast, slow)
    assert fast_orders == slow_orders
    assert 0 < fast_asks < slow_asks * 0.7  # kept keys served; jobs that changed or reported asked again


@pytest.mark.parametrize("workload", [mixed, two_priorities])
def test_kept_keys_read_in_c_order_as_the_loop(workload: Callable[[], Workload],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.read_in_c`: the kept keys read and checked in C-level passes; the same orders, plans and
    keys worked out again (`predicted_remaining` asks) as the Python loop over every job."""
    asked, read = [0], [0]
    predicted, order, key_of = las.predicted_remaining, RemainingOrder.__call__, las._KEY
    orders: list[list[str]] = []

    def counted(snap: Snapshot, job: JobView) -> float | None:
        asked[0] += 1
        return predicted(snap, job)

    def recorded(self: RemainingOrder, snap: Snapshot) -> list[JobView]:
        out = order(self, snap)
        orders.append([j.id for j in out])
        return out

    def key_read(entry: tuple[object, object, tuple[int, int, float]]) -> tuple[int, int, float]:
        read[0] += 1
        return key_of(entry)  # type: ignore[no-any-return]

    runs = {}
    for in_c in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(las, "predicted_remaining", counted)
            patch.setattr(las, "_KEY", key_read)  # (read by the C-level passes alone)
            patch.setattr(RemainingOrder, "__call__", recorded)
            patch.setattr(RemainingOrder, "read_in_c", in_c)
            asked[0] = read[0] = 0
            orders.clear()
            runs[in_c] = replay(patch, workload())[0], asked[0], read[0], list(orders)
    (fast, fast_asks, fast_read, fast_orders), (slow, slow_asks, slow_read, slow_orders) = runs[True], runs[False]
    same_plans(fast, slow)
    assert fast_orders == slow_orders
    assert fast_asks == slow_asks > 0  # the same keys worked out again
    assert fast_read >= sum(map(len, fast_orders)) > 0 == slow_read  # every job's key read in C (fast path only)


def test_quick_idle_plans_as_indexing_the_holders(monkeypatch: pytest.MonkeyPatch) -> None:
    """`QueueRules.quick_idle`: the queue rules found idle from the kinds and priorities alone (no holder
    index built); with two priorities idle at some decisions (verdict True) and not at others (the index
    then built and asked: the queue rules evict), the same plans as the index at every decision."""
    verdicts: list[bool] = []
    built = [0]
    quick, index = QueueRules._nobody_lower, preemption._Holders.__init__

    def counted(self: QueueRules, classes: dict[object, JobView]) -> bool:
        verdicts.append(quick(self, classes))  # type: ignore[arg-type]
        return verdicts[-1]

    def counted_index(self: preemption._Holders, snap: Snapshot, ws: Workspace, indexed: bool = True) -> None:
        built[0] += 1
        index(self, snap, ws, indexed)

    runs = {}
    for on in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(QueueRules, "_nobody_lower", counted)
            patch.setattr(preemption._Holders, "__init__", counted_index)
            patch.setattr(QueueRules, "quick_idle", on)
            verdicts.clear()
            built[0] = 0
            runs[on] = replay(patch, two_priorities())[0], list(verdicts), built[0]
    (fast, fast_verdicts, fast_built), (slow, slow_verdicts, slow_built) = runs[True], runs[False]
    same_plans(fast, slow)
    assert not slow_verdicts and slow_built >= len(slow)  # (the reference indexes at every decision)
    assert sum(fast_verdicts) > 0 and not all(fast_verdicts)  # found idle at some decisions, not at all
    assert 0 < fast_built < slow_built  # the index built only where the quick test could not say
    assert any("preempted" in r and "priority" in r for p in fast for r in p.reasons.values())  # rules evicted


def test_quick_idle_never_for_a_service_or_a_higher_priority() -> None:
    """`QueueRules._nobody_lower`: no for a service claimant (it may evict any job) or for a claimant above
    the lowest priority held; yes where every claimant is a training job at or below every holder's."""
    def view(name: str, priority: int, kind: JobKind = JobKind.TRAINING) -> JobView:
        return JobView(id=name, spec=replace(simple_job(name, 1), priority=priority, kind=kind),
                       state=JobState.PENDING, submit_time=0.0)

    held = {"h1": view("h1", 1), "h2": view("h2", 2)}
    rule = SimpleNamespace(ws=SimpleNamespace(snap=SimpleNamespace(jobs=held), allocations=dict.fromkeys(held)))

    def idle(*claimants: JobView) -> bool:
        return QueueRules._nobody_lower(rule, {(c.spec.kind, c.spec.priority): c for c in claimants})  # type: ignore[arg-type]

    assert idle(view("a", 1), view("b", 0)) and idle()
    assert not idle(view("a", 2)) and not idle(view("a", 0), view("b", 2))
    assert not idle(view("s", 0, JobKind.SERVICE))


def test_kept_sizes_plan_as_current_or_min(monkeypatch: pytest.MonkeyPatch) -> None:
    """`OnlyWithServices.keep_sizes` (no service live here): sizes worked out only for jobs whose view changed;
    the same plans as `current_or_min` over every admitted job at each decision."""
    sized = [0]
    fixed = cycle_module.current_or_min

    def counted(snap: Snapshot, jobs: list[JobView], ws: Workspace) -> dict[object, object]:
        sized[0] += len(jobs)
        return fixed(snap, jobs, ws)  # type: ignore[return-value]

    runs = {}
    for keep in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(cycle_module, "current_or_min", counted)  # (`KeptSizes` reads it here)
            patch.setattr(preset_module, "current_or_min", counted)
            patch.setattr(OnlyWithServices, "keep_sizes", keep)
            sized[0] = 0
            runs[keep] = replay(patch)[0], sized[0]
    (fast, fast_sized), (slow, slow_sized) = runs[True], runs[False]
    same_plans(fast, slow)
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
    replay(monkeypatch)
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


def test_class_sums_field_by_field_plan_as_adding_resources(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.field_sums`: the suffix sums added up per field in C-level steps; the same sums at
    every depth asked (and the same plans) as adding one holder's `Resources` at a time. Claimants come in
    rank order, so a class is mostly summed once; summed again in two steps, each depth is still the sum."""
    sums: list[list[dict[tuple[str, int], list[tuple[int, int, int]]]]] = [[], []]
    rules: list[SameClassLowerRank] = []
    init = SameClassLowerRank.__init__

    def kept(self: SameClassLowerRank, ws: Workspace, blocked: Sequence[JobView] = ()) -> None:
        init(self, ws, blocked)
        sums[self.field_sums].append(self.summed)
        rules.append(self)

    runs = {}
    for fields in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(SameClassLowerRank, "__init__", kept)
            patch.setattr(SameClassLowerRank, "field_sums", fields)
            runs[fields] = replay(patch)[0]
    same_plans(runs[True], runs[False])
    assert sums[True] == sums[False] and any(len(s) > 2 for summed in sums[True] for s in summed.values())
    deep = [(rule, key) for rule in rules for key, held in rule.held.items() if len(held) > 2]
    assert deep
    for rule, key in deep:
        held = rule.held[key]
        rule.summed[key] = [(0, 0, 0)]
        assert rule._suffix(key, len(held) - 1) == held[-1][0].resources(held[-1][1])  # the last one first
        for i in range(len(held)):
            assert rule._suffix(key, i) == sum((a.resources(spec) for a, spec in held[i:]), Resources())


def test_lazy_class_sums_plan_as_summing_every_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.lazy_sums`: a class's suffix sums added up only as far down as a claimant's room
    asks; the same plans as summing every holder at set-up, and some holders never summed."""
    rules: list[SameClassLowerRank] = []
    init = SameClassLowerRank.__init__

    def kept(self: SameClassLowerRank, ws: Workspace, blocked: Sequence[JobView] = ()) -> None:
        init(self, ws, blocked)
        rules.append(self)

    runs = {}
    for lazy in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(SameClassLowerRank, "__init__", kept)
            patch.setattr(SameClassLowerRank, "lazy_sums", lazy)
            patch.setattr(SameClassLowerRank, "skip_ahead", False)  # (it leaves out what lazy sums spare)
            rules.clear()
            plans = replay(patch)[0]
            held = sum(len(h) for rule in rules for h in rule.held.values())
            summed = sum(len(s) - 1 for rule in rules for s in rule.summed.values())
            runs[lazy] = plans, held, summed
    (fast, fast_held, fast_summed), (slow, slow_held, slow_summed) = runs[True], runs[False]
    same_plans(fast, slow)
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
    replay(monkeypatch)
    assert shrunk[0] > 0  # running jobs were shrunk to their targets


def test_holders_ranked_ahead_left_out_plan_as_indexing_every_holder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SameClassLowerRank.skip_ahead`: holders ranked at or before the first blocked job are left out at set-up
    (nobody's victim); the same plans as indexing every holder, and some holders left out."""
    held: list[int] = []
    init = SameClassLowerRank.__init__

    def counted(self: SameClassLowerRank, ws: Workspace, blocked: Sequence[JobView] = ()) -> None:
        init(self, ws, blocked)
        held.append(sum(len(h) for h in self.held.values()))

    runs = {}
    for skip in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(SameClassLowerRank, "__init__", counted)
            patch.setattr(SameClassLowerRank, "skip_ahead", skip)
            held.clear()
            runs[skip] = replay(patch)[0], list(held)
    (fast, fast_held), (slow, slow_held) = runs[True], runs[False]
    same_plans(fast, slow)
    assert len(fast_held) == len(slow_held) and all(map(int.__le__, fast_held, slow_held))
    assert sum(fast_held) < sum(slow_held)  # left out at some decisions


@pytest.mark.parametrize("workload", [mixed, two_priorities])
def test_one_class_sorted_by_remaining_alone_orders_as_the_keys(
        workload: Callable[[], Workload], monkeypatch: pytest.MonkeyPatch) -> None:
    """`RemainingOrder.one_class`: while every job is of one class the order sorts the remaining times alone;
    the same orders and plans as sorting the (class, remaining) keys, taken at every decision of `mixed()` and
    at some (not all) of `two_priorities()`."""
    order, one_class = RemainingOrder.__call__, las._one_class
    orders: list[list[str]] = []
    taken: list[bool] = []

    def recorded(self: RemainingOrder, snap: Snapshot) -> list[JobView]:
        out = order(self, snap)
        orders.append([j.id for j in out])
        return out

    def counted(keys: list[tuple[int, int, float]]) -> bool:
        taken.append(one_class(keys))
        return taken[-1]

    runs = {}
    for fast in (True, False):
        with monkeypatch.context() as patch:
            patch.setattr(RemainingOrder, "__call__", recorded)
            patch.setattr(RemainingOrder, "one_class", fast)
            patch.setattr(las, "_one_class", counted)
            orders.clear()
            taken.clear()
            runs[fast] = replay(patch, workload())[0], list(orders), list(taken)
    (fast_plans, fast_orders, fast_taken), (slow_plans, slow_orders, slow_taken) = runs[True], runs[False]
    same_plans(fast_plans, slow_plans)
    assert fast_orders == slow_orders
    assert not slow_taken and len(fast_taken) > 50
    assert all(fast_taken) if workload is mixed else any(fast_taken) and not all(fast_taken)
