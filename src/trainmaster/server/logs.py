"""The daemon's own log: one `key=value` line per event (logfmt), greppable and machine-parsable.

    ts=2026-11-23T14:05:12.345Z level=info logger=trainmaster.server event=request method=GET
        path=/v1/jobs status=200 ms=1.8                                          (one line)
    ts=... level=info logger=trainmaster.server event=decision cycle=12 jobs=3 pending=1 running=2
        gated=0 changes=1 rejected=0 ms=0.41 snapshot_ms=0.01 admit_ms=0.02 ... (one line)

`event` names what happened (request, decision, recovered, listening, ...);
the other keys depend on it. Values with spaces or quotes are double-quoted
with backslash escapes. A log call adds keys with `extra={"fields": {...}}`;
a plain message becomes `event=log msg="..."`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LEVELS = ("debug", "info", "warning")
log = logging.getLogger("trainmaster.server")


def value(v: object) -> str:
    """One logfmt value: bare when it is a plain token, else double-quoted."""
    if isinstance(v, float):
        return f"{v:.4g}"
    text = str(v)
    if text and all(c.isalnum() or c in "-_./:@+,%" for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        parts = [f"ts={ts}", f"level={record.levelname.lower()}", f"logger={record.name}"]
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        message = record.getMessage()
        if fields is not None:
            parts.append(f"event={value(message)}")
            parts.extend(f"{k}={value(v)}" for k, v in fields.items())
        else:
            parts.append(f"event=log msg={value(message)}")
        if record.exc_info:
            parts.append(f"error={value(self.formatException(record.exc_info))}")
        return " ".join(parts)


def setup(level: str = "info") -> None:
    """Send every logger (ours, uvicorn's) to stderr as logfmt at `level` (debug | info | warning)."""
    if level not in LEVELS:
        raise ValueError(f"--log-level: {level!r} is not one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
        logger.setLevel("WARNING")  # requests are logged by RequestLog, one line each


class RequestLog:
    """ASGI middleware: `event=request method path status ms` once the response is complete (streams too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # unless a response starts

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            fields = {"method": scope["method"], "path": scope["path"], "status": status,
                      "ms": round((time.perf_counter() - start) * 1000, 2)}
            log.log(logging.WARNING if status >= 500 else logging.INFO, "request", extra={"fields": fields})
