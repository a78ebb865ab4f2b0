"""The dashboard's routes: the page at `/`, the reads it needs beyond the job API, and `/metrics`.

First paint is light: `/` comes with what the first screen shows embedded
(the newest FIRST_ROWS jobs with the columns the table draws, job counts per
state, nodes and queues), so the page draws it without a request of its own;
the pending reasons (a controller call) and the timeline (events per job)
load after, and older jobs only on "show more" (server-side paging).

Auth is the API's: the TokenGuard middleware covers these routes too. A browser
cannot send a bearer header when it opens a page, so `/` alone also accepts the
token once as `/?token=...` (see `auth.TokenGuard`); the page keeps it in
sessionStorage and sends it as `Authorization: Bearer` on every fetch.
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import HTMLResponse, Response

from trainmaster.controller.loop import Controller
from trainmaster.controller.why import explain_pending
from trainmaster.core.errors import TrainmasterError
from trainmaster.server.daemon import Daemon
from trainmaster.server.prom import CONTENT_TYPE, exposition, registry_for
from trainmaster.server.report import embed_json, render_page

FIRST_ROWS = 50  # jobs in the page itself: a screenful, and the table's first page (dashboard.js PAGE)
TABLE_COLUMNS = ("id", "queue", "state", "submit_time", "first_start", "finish_time", "allocation", "step", "loss",
                 "restarts", "resizes", "preemptions", "cost", "message", "why")  # what the job table draws
PENDING_TTL = 1.0  # seconds one answer of /v1/pending serves every poller (each costs a controller call)
PAGE_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
                                           "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:"}


class PendingCache:
    """Why every pending job waits, with predicted starts, from one controller call per `ttl` seconds."""

    def __init__(self, daemon: Daemon, ttl: float = PENDING_TTL) -> None:
        self.daemon = daemon
        self.ttl = ttl
        self._lock = threading.Lock()
        self._at = -float("inf")
        self._value: dict[str, Any] = {}

    def get(self) -> dict[str, Any]:
        with self._lock:  # concurrent pollers wait for one answer instead of queueing many calls
            if time.monotonic() - self._at >= self.ttl:
                self._value = self._ask()
                self._at = time.monotonic()
            return self._value

    def _ask(self) -> dict[str, Any]:
        submitted = {r["id"]: r["submit_time"] for r in self.daemon.store.jobs(["pending"])}

        def ask(c: Controller) -> dict[str, Any]:
            return {"now": c.clock.now(), "source": "controller",
                    "jobs": [w.as_dict() for w in explain_pending(c)]}

        if self.daemon.alive:
            try:
                out = self.daemon.call(ask, timeout=5.0)
                for job in out["jobs"]:
                    job["submitted"] = submitted.get(job["job"])
                return out
            except (TrainmasterError, TimeoutError):
                pass  # busy: answer from the store
        return {"now": self.daemon.controller.clock.now(), "source": "store", "jobs": [
            {"job": jid, "state": "pending", "category": "waiting", "reason": "", "eta": None, "submitted": t}
            for jid, t in submitted.items()]}


def timeline(daemon: Daemon, limit: int) -> dict[str, Any]:
    """The newest `limit` jobs in submit order, each with its state changes (for the Gantt chart)."""
    rows = list(reversed(daemon.store.jobs(newest_first=True, limit=limit)))
    jobs = []
    for row in rows:
        changes = [(e["time"], e["state"]) for e in daemon.store.events(row["id"])]
        jobs.append({k: row[k] for k in ("id", "name", "queue", "state", "submit_time", "first_start", "finish_time")}
                    | {"changes": changes})
    return {"now": daemon.controller.clock.now(), "jobs": jobs}


def overview(daemon: Daemon, limit: int, columns: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The newest `limit` jobs (newest first; only `columns` when given), the total, and jobs per state."""
    jobs = daemon.store.jobs(newest_first=True, limit=limit)
    if columns is not None:
        jobs = [{k: job[k] for k in columns if k in job} for job in jobs]
    return {"now": daemon.controller.clock.now(), "total": daemon.store.count(), "states": daemon.store.state_counts(),
            "jobs": jobs}


def first_screen(daemon: Daemon) -> str:
    """What the overview's first paint draws, as a JSON block for the page (see the module docstring)."""
    first = {"overview": overview(daemon, FIRST_ROWS, TABLE_COLUMNS), "nodes": [dict(n) for n in daemon.nodes_view],
             "queues": [dict(q) for q in daemon.queues_view]}
    return f'<script id="tm-first" type="application/json">{embed_json(first)}</script>'


def mount(app: FastAPI, daemon: Daemon) -> None:
    """Add `/`, `/v1/overview`, `/v1/pending`, `/v1/timeline` and `/metrics` to the daemon's app."""
    page = render_page(None)
    pending = PendingCache(daemon)
    registry = registry_for(daemon)

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page.replace("<!--TM_FIRST-->", first_screen(daemon), 1), headers=PAGE_HEADERS)

    @app.get("/v1/overview")
    def jobs_overview(limit: Annotated[int, Query(ge=1, le=1_000_000)] = 200) -> dict[str, Any]:
        """The newest `limit` jobs with every stored column (newest first), the total, and jobs per state."""
        return overview(daemon, limit)

    @app.get("/v1/pending")
    def pending_jobs() -> dict[str, Any]:
        """Every pending job's wait reason, category and predicted start (`eta`, on the daemon's clock `now`)."""
        return pending.get()

    @app.get("/v1/timeline")
    def recent(limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> dict[str, Any]:
        """The newest jobs with their state changes over time: what the dashboard's Gantt chart draws."""
        return timeline(daemon, limit)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(exposition(registry), media_type=CONTENT_TYPE)
