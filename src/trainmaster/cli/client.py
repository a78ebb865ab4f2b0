"""The Python SDK: `trainmaster.Client` talks to a running `trainmaster server`; the CLI is built on it.

```python
from trainmaster import Client
c = Client()                                   # TRAINMASTER_URL, TRAINMASTER_TOKEN, or 127.0.0.1:8765
job = c.submit("examples/digits/job.yaml", overrides=["spec.roles.worker.max=2"])  # workdir: the YAML's folder
c.wait(job["id"])
print(c.metrics(job["id"])["reports"][-1]["loss"])
```

Errors are `TrainmasterError`s with an `exit_code` the CLI returns:
2 bad input or refused, 3 not found, 4 server unreachable, 1 server error.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from trainmaster.core.errors import SpecError, TrainmasterError
from trainmaster.core.spec import apply_overrides, load_yaml_text, read_job_document, resolve_workdir

URL_ENV = "TRAINMASTER_URL"
TOKEN_ENV = "TRAINMASTER_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8765"
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "rejected"})

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_UNREACHABLE = 0, 1, 2, 3, 4


class ApiError(TrainmasterError):
    """The server refused the request; `status` is the HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = EXIT_NOT_FOUND if status == 404 else EXIT_ERROR if status >= 500 else EXIT_BAD_INPUT


class Unreachable(TrainmasterError):
    exit_code = EXIT_UNREACHABLE


def load_document(job: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> dict[str, Any]:
    """A job document from a YAML path, YAML text or a mapping, with `--set` overrides applied.

    From a path, `spec.workdir` (also one set by an override) is resolved against the
    YAML's folder (`core.spec.resolve_workdir`), so the daemon's working directory never matters.
    """
    folder: Path | None = None
    if isinstance(job, Mapping):
        doc: object = json.loads(json.dumps(job))  # a deep copy that is plain JSON
    else:
        text = str(job)
        if isinstance(job, Path) or "\n" not in text:
            doc, folder = read_job_document(text), Path(text).parent
        else:
            doc = load_yaml_text(text, "job")
    if not isinstance(doc, dict):
        raise SpecError("job", "the job document must be a mapping", "start with `apiVersion: trainmaster/v1`")
    doc = apply_overrides(doc, list(overrides))
    if folder is not None:
        resolve_workdir(doc, folder)
    return doc


class Client:
    """A thin, typed-enough wrapper over the REST API (see `trainmaster.server.app`)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 30.0) -> None:
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get(TOKEN_ENV)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------
    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise Unreachable(f"cannot reach the trainmaster server at {self.url} ({exc.__class__.__name__}); "
                              f"start it with `trainmaster server` or set {URL_ENV}") from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response))
        return response

    def _json(self, method: str, path: str, **kw: Any) -> Any:
        return self._request(method, path, **kw).json()

    # -- the API -------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", "/v1/health")
        return out

    def submit(self, job: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()) -> dict[str, Any]:
        """Submit a job (a YAML path, YAML text, or a mapping); returns it as accepted, with its id."""
        doc = load_document(job, overrides)
        out: dict[str, Any] = self._json("POST", "/v1/jobs", json=doc)
        return out

    def submit_raw(self, body: bytes | str, content_type: str = "application/yaml") -> dict[str, Any]:
        """Send a document as is (no local parsing): what `curl --data-binary @job.yaml` would do."""
        out: dict[str, Any] = self._json("POST", "/v1/jobs", content=body, headers={"content-type": content_type})
        return out

    def jobs(self, states: Iterable[str] = (), queue: str | None = None, active: bool = False) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"state": list(states)}
        if queue:
            params["queue"] = queue
        if active:
            params["all"] = "false"
        out: list[dict[str, Any]] = self._json("GET", "/v1/jobs", params=params)
        return out

    def job(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", f"/v1/jobs/{job_id}")
        return out

    def cancel(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("POST", f"/v1/jobs/{job_id}/cancel")
        return out

    def why(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", f"/v1/jobs/{job_id}/why")
        return out

    def metrics(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("GET", f"/v1/jobs/{job_id}/metrics")
        return out

    def logs(self, job_id: str, task: str | None = None, tail: int | None = None) -> str:
        """The job's log text (every task's lines prefixed `[task] ` unless one is asked for)."""
        return self._request("GET", f"/v1/jobs/{job_id}/logs", params=_log_params(task, tail, False)).text

    def log_lines(self, job_id: str, task: str | None = None, tail: int | None = None, follow: bool = False
                  ) -> Iterator[str]:
        """Yield log lines as the server streams them (`tail`: from each task's last N; `follow`: until the end)."""
        try:
            with self._http.stream("GET", f"/v1/jobs/{job_id}/logs", params=_log_params(task, tail, follow),
                                   timeout=None if follow else self._http.timeout) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError(response.status_code, _message(response))
                yield from response.iter_lines()
        except httpx.TransportError as exc:
            raise Unreachable(f"lost the trainmaster server at {self.url} ({exc.__class__.__name__})") from None

    def follow_logs(self, job_id: str, task: str | None = None, tail: int | None = None) -> Iterator[str]:
        """Yield log lines as they are written, until the job ends."""
        return self.log_lines(job_id, task, tail, follow=True)

    def nodes(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._json("GET", "/v1/nodes")
        return out

    def queues(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self._json("GET", "/v1/queues")
        return out

    # -- Slurm-shaped control and accounting ------------------------------------
    def hold(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("POST", f"/v1/jobs/{job_id}/hold")
        return out

    def release(self, job_id: str) -> dict[str, Any]:
        out: dict[str, Any] = self._json("POST", f"/v1/jobs/{job_id}/release")
        return out

    def update(self, job_id: str, priority: int | None = None, max_workers: int | None = None) -> dict[str, Any]:
        body = {k: v for k, v in (("priority", priority), ("max", max_workers)) if v is not None}
        out: dict[str, Any] = self._json("POST", f"/v1/jobs/{job_id}/update", json=body)
        return out

    def history(self, states: Iterable[str] = (), queue: str | None = None, since: float | None = None,
                until: float | None = None) -> list[dict[str, Any]]:
        params = {"state": list(states), "queue": queue, "since": since, "until": until}
        out: list[dict[str, Any]] = self._json("GET", "/v1/history",
                                               params={k: v for k, v in params.items() if v is not None})
        return out

    def wait(self, job_ids: str | Iterable[str], timeout: float | None = None, poll: float = 0.5
             ) -> list[dict[str, Any]]:
        """Block until every job has ended; returns their final records."""
        ids = [job_ids] if isinstance(job_ids, str) else list(job_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rows = [self.job(i) for i in ids]
            if all(r["state"] in TERMINAL for r in rows):
                return rows
            if deadline is not None and time.monotonic() > deadline:
                left = [r["id"] for r in rows if r["state"] not in TERMINAL]
                raise TrainmasterError(f"timed out waiting for {', '.join(left)}")
            time.sleep(poll)


def _log_params(task: str | None, tail: int | None, follow: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"follow": "true"} if follow else {}
    if task:
        params["task"] = task
    if tail is not None:
        params["tail"] = tail
    return params


def _message(response: httpx.Response) -> str:
    if response.status_code == 401:
        return (f"the server wants a token: set {TOKEN_ENV}, or pass --token TOKEN or --token-file FILE "
                f"(it answered 401: {response.text.strip()[:120]})")
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text.strip()[:200]}"
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return f"HTTP {response.status_code}: {body}"
