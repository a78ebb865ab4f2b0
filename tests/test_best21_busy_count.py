"""best21: `Optimus._busy` counts the arrivals within its window in a deque, with the decisions of the old walk."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from trainmaster.policies.optimus import BUSY_ARRIVALS, BUSY_WINDOW_S, Optimus


def _old_busy(seen: dict[str, float], full: bool, jobs: list[Any], now: float) -> bool:
    """best20's `_busy`: every kept submit time walked at each decision (the reference)."""
    for job in jobs:
        seen[job.id] = job.submit_time
    since = now - BUSY_WINDOW_S
    if len(seen) > 4096:
        for jid in [jid for jid, at in seen.items() if at < since]:
            del seen[jid]
    return full and sum(at >= since for at in seen.values()) >= BUSY_ARRIVALS


def test_the_count_matches_the_walk_over_a_random_stream() -> None:
    rng = random.Random(21)
    opt = Optimus(restart_share=0.02)
    kept: dict[str, float] = {}
    live: list[Any] = []
    now, answers = 0.0, []
    for i in range(3_000):
        now += rng.expovariate(1 / 120.0)
        for k in range(rng.choice((0, 0, 1, 1, 2, 3))):  # arrivals, some seen late (submitted in the past)
            late = rng.random() < 0.2
            live.append(SimpleNamespace(id=f"j{i}-{k}", submit_time=now - (rng.uniform(0, 9_000) if late else 0)))
        live = [j for j in live if rng.random() > 0.05]  # finishes
        opt._full = full = rng.random() < 0.8
        got = opt._busy(live, now)
        assert got == _old_busy(kept, full, live, now), i
        answers.append(got)
        window = list(opt._window)
        assert len(window) == len(opt._arrived) and window == sorted(window)
    assert 0 < sum(answers) < len(answers)  # both answers happen


def test_jobs_leave_the_window_as_it_passes_them() -> None:
    opt = Optimus(restart_share=0.02)
    opt._full = True
    jobs: list[Any] = [SimpleNamespace(id=f"j{i}", submit_time=float(i)) for i in range(BUSY_ARRIVALS)]
    assert opt._busy(jobs, BUSY_WINDOW_S)  # all within [0, window]
    assert not opt._busy(jobs, BUSY_WINDOW_S + 0.5)  # j0 left
    assert len(opt._window) == BUSY_ARRIVALS - 1 and "j0" not in opt._arrived
    assert not opt._busy(jobs, BUSY_WINDOW_S + 0.5)  # and it does not come back
