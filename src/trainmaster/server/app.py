"""The REST API (FastAPI; OpenAPI at /openapi.json, docs at /docs) over a running Daemon.

Status codes: 201 accepted (the job is in the store), 202 cancel requested,
400 malformed body (not YAML/JSON, not a mapping), 401 no or wrong token,
404 unknown job, 409 the job already ended, 413 body too large, 422 the
document is well formed but invalid (unknown field, unknown queue,
impossible resources). Errors are `{"error": "<one line>", "field": ...}`.
"""

from __future__ import annotations

import json
import re
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from trainmaster.controller.loop import Controller
from trainmaster.core.errors import SpecError, TrainmasterError, shown
from trainmaster.core.spec import job_schema, load_yaml_text
from trainmaster.core.states import JobState
from trainmaster.server.auth import TokenGuard
from trainmaster.server.daemon import Daemon
from trainmaster.server.dashboard import mount as mount_dashboard
from trainmaster.server.gate import Conflict
from trainmaster.server.history import history as history_rows
from trainmaster.server.logs import RequestLog
from trainmaster.server.why import explain, from_store

try:  # not `trainmaster.__version__`: the package root re-exports the SDK, which lives above this layer
    VERSION = version("trainmaster")
except PackageNotFoundError:
    VERSION = "unknown"
MAX_BODY = 1 << 20  # a job document is a few hundred bytes; 1 MiB is generous
COMPONENTS = "#/components/schemas/"
MAX_LIMIT = 100_000  # jobs in one listing
MAX_TAIL = 1_000_000  # lines of `logs?tail=N`


class Job(BaseModel):
    """A job as the API shows it."""

    id: str
    name: str
    queue: str
    priority: int
    state: str
    submit_time: float
    first_start: float | None
    finish_time: float | None
    jct: float | None
    restarts: int  # after failures (a task crashed, a node was lost, the daemon restarted)
    resizes: int
    preemptions: int
    step: int
    loss: float | None
    steps_per_s: float | None
    allocation: str
    gpus: int
    tasks: int
    why: str
    message: str
    cancel_requested: bool
    held: bool = False
    cost: float | None = None  # USD so far, when the cluster's nodes have prices (None: no prices known)


class JobUpdate(BaseModel):
    """`trainmaster update JOB --priority N --max N`: the fields a live job may change."""

    priority: int | None = None
    max: int | None = None


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.fix = status, message, field, fix


def _error(status: int, message: str, field: str | None = None, fix: str | None = None) -> JSONResponse:
    line = message if not fix or fix in message else f"{message} ({fix})"
    body: dict[str, Any] = {"error": line}  # the whole line, as the CLI prints it
    if field is not None:
        body["field"] = field
    if fix:
        body["fix"] = fix
    return JSONResponse(body, status_code=status)


def create_app(daemon: Daemon, *, token: str | None = None,
               max_body: int = MAX_BODY, log_poll: float = 0.25) -> FastAPI:
    app = FastAPI(title="trainmaster", version=VERSION,
                  description="Schedule distributed deep-learning training jobs.")
    if token:
        app.add_middleware(TokenGuard, token=token)
    app.add_middleware(RequestLog)  # outermost: one log line per request, refused ones too

    def openapi() -> dict[str, Any]:
        """FastAPI's document plus the job schema (the body is parsed by hand, as YAML or JSON)."""
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            body = job_schema(ref_template=COMPONENTS + "{model}")
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            schemas.update(body.pop("$defs", {}))
            schemas["TrainingJob"] = body
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.message, exc.field, exc.fix)

    @app.exception_handler(SpecError)
    async def spec_error(request: Request, exc: SpecError) -> JSONResponse:
        return _error(422, str(exc), exc.field, exc.fix)

    @app.exception_handler(TrainmasterError)
    async def tm_error(request: Request, exc: TrainmasterError) -> JSONResponse:
        return _error(422, str(exc), "body")  # raised while taking a submitted document

    @app.exception_handler(StarletteHTTPException)
    async def no_route(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """The router's own refusals (no such path, e.g. an empty job id in `/v1/jobs//why`; a wrong method)
        in the API's error shape, naming the path."""
        what = {404: "no such path", 405: f"{request.method} is not allowed on"}.get(exc.status_code, str(exc.detail))
        return _error(exc.status_code, f"{what} {shown(request.url.path)}", "path",
                      "the API's paths and methods are listed at /docs")

    @app.exception_handler(RequestValidationError)
    async def bad_params(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _error(400, f"{where}: {first.get('msg', 'invalid')}", where)

    def job_or_404(job_id: str) -> dict[str, Any]:
        row = daemon.store.job(job_id)
        if row is None:
            raise ApiError(404, f"no job {shown(job_id)}", "job", "list jobs with `trainmaster queue`")
        return row

    @app.get("/v1/health")
    def health() -> dict[str, Any]:
        return {"ok": daemon.alive, "version": VERSION, "policy": daemon.policy.name,
                "jobs": daemon.store.count(), "errors": daemon.errors}

    @app.post("/v1/jobs", status_code=201, response_model=Job, openapi_extra={"requestBody": {
        "required": True, "description": "A TrainingJob document, as YAML or JSON",
        "content": {"application/json": {"schema": {"$ref": f"{COMPONENTS}TrainingJob"}},
                    "application/yaml": {"schema": {"type": "string"}}}}})
    async def submit(request: Request) -> dict[str, Any]:
        """Accept a job. It is committed to the store before this answers."""
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > max_body:
            raise ApiError(413, f"body of {declared} bytes is over the {max_body}-byte limit", "body",
                           "a job document is small; send only the YAML")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise ApiError(413, f"body is over the {max_body}-byte limit", "body",
                               "a job document is small; send only the YAML")
            chunks.append(chunk)
        doc = _parse_body(b"".join(chunks), request.headers.get("content-type", ""))
        row: dict[str, Any] = await run_in_threadpool(daemon.submit, doc)
        return row

    @app.get("/v1/jobs", response_model=list[Job])
    def list_jobs(state: Annotated[list[str] | None, Query()] = None, queue: str | None = None,
                  limit: Annotated[int | None, Query(ge=1, le=MAX_LIMIT)] = None,
                  all: bool = True) -> list[dict[str, Any]]:
        """Jobs in submit order; `all=false` keeps only unfinished ones."""
        states = list(state or [])
        for s in states:
            if s not in {x.value for x in JobState}:
                raise ApiError(400, f"unknown state {shown(s)}", "state",
                               f"use one of {', '.join(x.value for x in JobState)}")
        if not all and not states:
            states = [s.value for s in JobState if not s.terminal]
        return daemon.store.jobs(states, queue, limit)

    @app.get("/v1/jobs/{job_id}", response_model=Job)
    def get_job(job_id: str) -> dict[str, Any]:
        return job_or_404(job_id)

    @app.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=Job)
    def cancel(job_id: str) -> dict[str, Any]:
        row = job_or_404(job_id)
        if JobState(row["state"]).terminal:
            raise ApiError(409, f"job {job_id} already {row['state']}", "job", "nothing to cancel")
        daemon.cancel(job_id)
        return {**row, "cancel_requested": True}

    @app.get("/v1/jobs/{job_id}/why")
    def why(job_id: str) -> dict[str, Any]:
        """Why the job is where it is: the reason, a predicted start for pending jobs, recent decisions."""
        row = job_or_404(job_id)
        live: dict[str, Any] | None = None
        if not JobState(row["state"]).terminal and daemon.alive:

            def ask(c: Controller) -> dict[str, Any] | None:
                return explain(c, job_id, daemon.gate_wait(job_id))

            try:
                live = daemon.call(ask, timeout=5.0)
            except (TrainmasterError, TimeoutError):
                live = None  # the controller is busy or no longer holds it: answer from the store
        out = live or from_store(row)
        return {"id": job_id, "state": row["state"], **out, "decisions": daemon.store.decisions(job_id)}

    @app.get("/v1/jobs/{job_id}/metrics")
    def metrics(job_id: str) -> dict[str, Any]:
        """History: reported step, loss and speed; the allocation after every change."""
        job_or_404(job_id)
        changes = [e for e in daemon.store.events(job_id) if e["what"] != "accepted"]
        return {"id": job_id, "reports": daemon.store.reports(job_id),
                "allocations": [{k: e[k] for k in ("time", "what", "state", "allocation", "gpus", "tasks")}
                                for e in changes]}

    @app.get("/v1/jobs/{job_id}/logs", response_class=StreamingResponse,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    def logs(job_id: str, follow: bool = False, task: str | None = None,
             tail: Annotated[int | None, Query(ge=0, le=MAX_TAIL)] = None) -> StreamingResponse:
        """The tasks' output, streamed. `task` picks one (e.g. worker-0); `tail=N` starts at each task's last N
        lines; `follow` keeps streaming until the job ends."""
        job_or_404(job_id)
        if task is not None and not re.fullmatch(r"(worker|ps)-\d{1,6}", task):
            raise ApiError(400, f"{shown(task)} is not a task name", "task", "write e.g. worker-0 or ps-1")
        engine = daemon.engine  # reads each task's log where it ran (this machine, a Ray node)
        if task is not None:
            names = engine.log_tasks(job_id)
            if task not in names:
                raise ApiError(404, f"no task {shown(task)} in job {job_id}", "task",
                               f"use one of {', '.join(names)}" if names else "the job has not started yet")

        def done() -> bool:
            if daemon.closing.is_set():  # the server is stopping: end the stream (its client sees the end)
                return True
            row = daemon.store.job(job_id)
            return row is None or JobState(row["state"]).terminal

        lines = engine.logs(job_id, task, tail=tail, follow=follow, done=done, poll=log_poll)
        return StreamingResponse(lines, media_type="text/plain; charset=utf-8")

    # -- Slurm-shaped control and accounting: hold, release, update, history ------------------
    @app.exception_handler(Conflict)
    async def conflict(request: Request, exc: Conflict) -> JSONResponse:
        return _error(409, str(exc), "job")

    @app.exception_handler(TimeoutError)
    async def busy(request: Request, exc: TimeoutError) -> JSONResponse:  # `daemon.call` found no time for it
        return _error(503, "the scheduler did not take the request in time", None, "try again in a moment")

    def live_or_409(job_id: str, verb: str) -> dict[str, Any]:
        row = job_or_404(job_id)
        if JobState(row["state"]).terminal:
            raise ApiError(409, f"job {job_id} already {row['state']}", "job", f"nothing to {verb}")
        return row

    @app.post("/v1/jobs/{job_id}/hold", response_model=Job)
    def hold(job_id: str) -> dict[str, Any]:
        """Keep a pending job from starting until it is released (409 unless it is pending)."""
        live_or_409(job_id, "hold")
        daemon.hold(job_id)
        return job_or_404(job_id)

    @app.post("/v1/jobs/{job_id}/release", response_model=Job)
    def release(job_id: str) -> dict[str, Any]:
        live_or_409(job_id, "release")
        daemon.release(job_id)
        return job_or_404(job_id)

    @app.post("/v1/jobs/{job_id}/update", response_model=Job)
    def update(job_id: str, body: JobUpdate) -> dict[str, Any]:
        """Change a live job's priority or its worker max; validated like the job document."""
        live_or_409(job_id, "update")
        if body.priority is None and body.max is None:
            raise ApiError(400, "nothing to update", "body", "send priority and/or max")
        daemon.update(job_id, body.priority, body.max)
        return job_or_404(job_id)

    @app.get("/v1/history")
    def history(state: Annotated[list[str] | None, Query()] = None, queue: str | None = None,
                since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
        """Accounting (sacct): times, elapsed, exit code, GPU-hours, restarts, resizes, preemptions, cost."""
        for s in state or []:
            if s not in {x.value for x in JobState}:
                raise ApiError(400, f"unknown state {s!r}", "state",
                               f"use one of {', '.join(x.value for x in JobState)}")
        return history_rows(daemon.store, daemon.controller.clock.now(), state or [], queue, since, until)

    @app.get("/v1/nodes")
    def nodes() -> list[Any]:
        return [dict(n) for n in daemon.nodes_view]

    @app.get("/v1/queues")
    def queues() -> list[Any]:
        return [dict(q) for q in daemon.queues_view]

    mount_dashboard(app, daemon)  # `/`, /v1/pending, /v1/timeline, /metrics
    return app


def _parse_body(raw: bytes, content_type: str) -> dict[str, Any]:
    """JSON when declared so, else YAML (JSON is YAML too). 400 unless it is a mapping."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "body is not UTF-8 text", "body", "send the job YAML or JSON") from None
    if not text.strip():
        raise ApiError(400, "empty body", "body", "send the job YAML or JSON")
    if "json" in content_type:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ApiError(400, f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                           "body", "fix the JSON syntax") from None
        except (ValueError, RecursionError) as exc:  # a number over Python's digit limit; nesting too deep
            raise ApiError(400, f"malformed JSON: {str(exc)[:200]}", "body", "fix the JSON") from None
    else:
        try:
            doc = load_yaml_text(text, "body")
            doc = json.loads(json.dumps(doc))  # the store keeps JSON: no dates, sets or self-references
        except SpecError as exc:
            raise ApiError(400, str(exc), exc.field, exc.fix) from None
        except (TypeError, ValueError, RecursionError) as exc:
            raise ApiError(400, f"the YAML holds a value JSON cannot (dates, binary, anchors that loop): "
                           f"{str(exc)[:120]}", "body", "write plain strings, numbers, lists and mappings") from None
    if not isinstance(doc, dict):
        raise ApiError(400, "the job document must be a mapping", "body",
                       "start with `apiVersion: trainmaster/v1`")
    return doc
