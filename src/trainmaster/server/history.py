"""`trainmaster history` (Slurm's sacct): one accounting row per job, from the store.

GPU-hours integrate the GPUs a job held between its recorded allocation
changes (every start, resize, preemption and end is an event with the GPUs
held after it). Elapsed is the time from the first start to the end (or now).
The time filter keeps jobs whose life [submit, end or now] overlaps
[since, until], as sacct's --starttime/--endtime select jobs eligible or
running in the window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from trainmaster.server.store import Store

_EXIT = re.compile(r"exited with code (-?\d+)")


def gpu_seconds(changes: Sequence[tuple[float, str, int]], end: float) -> float:
    """GPU-seconds held: each change's GPUs until the next change (the last one until `end`)."""
    total = 0.0
    for (t, _, gpus), (t_next, _, _) in zip(changes, [*changes[1:], (end, "", 0)], strict=True):
        total += gpus * max(0.0, min(t_next, end) - t)
    return total


def exit_code(state: str, message: str) -> int | None:
    """0 for a success, the task's exit status when the engine reported one, else None."""
    if state == "succeeded":
        return 0
    m = _EXIT.search(message or "")
    return int(m.group(1)) if m else None


def history(store: Store, now: float, states: Iterable[str] = (), queue: str | None = None,
            since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
    rows = [r for r in store.jobs(states, queue)
            if (since is None or (r["finish_time"] or now) >= since)
            and (until is None or r["submit_time"] <= until)]
    changes = store.allocation_changes([r["id"] for r in rows])
    out = []
    for r in rows:
        end = r["finish_time"]
        events = changes.get(r["id"], [])
        start = r["first_start"]
        out.append({
            "id": r["id"], "name": r["name"], "queue": r["queue"], "priority": r["priority"], "state": r["state"],
            "submit": r["submit_time"], "start": start, "end": end,
            "elapsed": None if start is None else (end if end is not None else now) - start,
            "exit_code": exit_code(r["state"], r["message"]), "message": r["message"],
            "gpu_hours": gpu_seconds(events, end if end is not None else now) / 3600,
            "restarts": r["restarts"], "resizes": r["resizes"], "preemptions": r["preemptions"],
            "cost": r["cost"],  # None: the nodes have no prices
            "held": r.get("held", False),
        })
    return out
