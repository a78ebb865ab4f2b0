"""`simulate --out DIR` writes DIR/index.html: the dashboard page with the replay embedded (no server needed).

The page and its charts are the daemon's (`server.report`); this module only
shapes a replay's results into the data the page's static mode reads.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from trainmaster.server.report import render_page

if TYPE_CHECKING:
    from trainmaster.cli.simulate import Result

TIMELINE_ROWS = 300  # jobs the page's Gantt chart draws per policy
MAX_JOBS = 5_000  # per-job rows embedded per policy (report.json has them all); the JCT CDF uses every job
MAX_POINTS = 4_000  # utilization steps embedded per policy (a Philly replay has ~10^5)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def page_data(report: Mapping[str, Any], results: Sequence[Result]) -> dict[str, Any]:
    """`report.json`'s content plus what the charts need: per-job running segments and GPU use over time."""
    policies = []
    for r in results:
        shown = report["policies"][r.policy]
        jobs = [{**job, "segments": [[a, _finite(b)] for a, b in r.running.get(job["id"], [])]}
                for job in shown["jobs"][:MAX_JOBS]]
        jcts = sorted(round(j["jct"], 1) for j in shown["jobs"] if j["state"] == "succeeded" and j["jct"] is not None)
        stride = max(1, math.ceil(len(r.usage) / MAX_POINTS))
        usage = [[t, used] for t, used in r.usage[::stride]]
        policies.append({"name": r.policy, "summary": shown["summary"], "rejected": shown["rejected"],
                         "capacity": r.capacity, "usage": usage, "jobs": jobs, "jobs_total": len(shown["jobs"]),
                         "jcts": jcts})
    return {key: report[key] for key in ("workload", "jobs", "cluster", "nodes", "gpus", "seed")} | {
        "timeline_max": TIMELINE_ROWS, "policies": policies}


def render(report: Mapping[str, Any], results: Sequence[Result]) -> str:
    return render_page(page_data(report, results), title=f"trainmaster: {report['workload']} on {report['cluster']}")
