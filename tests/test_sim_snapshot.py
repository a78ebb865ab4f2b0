"""The controller's incremental snapshot: cached views and kept totals equal a from-scratch scan, every cycle.

The replay speed (bench/philly_replay.py) rests on the controller keeping views,
free capacity, held allocations and pending ids up to date instead of
rebuilding them per decision; these tests check each against a full rebuild at
every decision of runs that start, preempt, requeue and finish jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmaster.controller.loop import Controller
from trainmaster.core.cluster import parse_shorthand
from trainmaster.core.resources import Resources
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.policies.snapshot import Plan, Policy, Snapshot
from trainmaster.workloads.loaders import load_workload


@dataclass
class Audited:
    """Wraps a policy; before each decision compares the snapshot with a rebuild from the controller's records."""

    inner: Policy
    controller: Controller | None = None
    checked: int = 0
    preempted_seen: bool = False
    previous: dict[str, object] = field(default_factory=dict)
    reused: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def interval(self) -> float | None:
        return self.inner.interval

    @property
    def uses_models(self) -> bool:
        return self.inner.uses_models

    @property
    def reads_few_jobs(self) -> bool:
        return self.inner.reads_few_jobs

    def decide(self, snap: Snapshot) -> Plan:
        c = self.controller
        assert c is not None
        now = snap.now
        assert list(snap.jobs) == list(c.live)
        for jid, view in snap.jobs.items():
            record = c.live[jid]
            assert view.state is record.state and view.allocation == record.allocation
            assert (view.step, view.restarts, view.running_since) == (
                record.step,
                record.restarts,
                record.running_since,
            )
            assert view.attained == record.attained(now) and view.runtime == record.runtime(now)
            if self.previous.get(jid) is view:
                self.reused += 1
        self.previous = dict(snap.jobs)
        total = Resources()
        for res in snap.free.values():
            total = total + res
        assert snap.free_total == total
        assert snap.held == {jid: v.allocation for jid, v in snap.jobs.items() if v.active}
        assert snap.pending_ids == tuple(jid for jid, v in snap.jobs.items() if v.pending)
        self.preempted_seen = self.preempted_seen or any(v.pending and v.restarts for v in snap.jobs.values())
        self.checked += 1
        return self.inner.decide(snap)


def _audit(policy: str, workload: str, cluster: str, **config: float) -> Audited:
    audited = Audited(make_policy(policy))
    engine = SimEngine(parse_shorthand(cluster), load_workload(workload, seed=3), SimConfig(**config))  # type: ignore[arg-type]
    controller = Controller(engine, audited, check=True)
    audited.controller = controller
    engine.revoke("n1", at=20_000.0)
    controller.run()
    assert all(r.state.terminal for r in controller.jobs.values())
    return audited


def test_incremental_snapshot_matches_rebuild_under_preemption() -> None:
    audited = _audit("tiresias", "synthetic:50:20", "3x4", report_interval=900.0)
    assert audited.checked > 100
    assert audited.preempted_seen  # tiresias preempted and requeued jobs along the way
    assert audited.reused > audited.checked  # unchanged jobs kept their view objects


def test_incremental_snapshot_matches_rebuild_under_fifo() -> None:
    audited = _audit("fifo", "synthetic:40:30", "2x4")
    assert audited.checked > 40 and audited.reused > 0
