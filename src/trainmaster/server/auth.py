"""Who may talk to the daemon: loopback only by default; anywhere else only with a token.

The token travels as `Authorization: Bearer <token>`. When one is configured,
every request needs it, the OpenAPI page included; without one, the daemon
refuses to bind anything but a loopback address.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
from pathlib import Path
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from trainmaster.core.errors import TrainmasterError

TOKEN_ENV = "TRAINMASTER_TOKEN"
log = logging.getLogger("trainmaster.server")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_bind(host: str, token: str | None) -> None:
    """Refuse a non-loopback bind without a token."""
    if not is_loopback(host) and not token:
        raise TrainmasterError(
            f"refusing to listen on {host} without a token: anyone who can reach it could run code here "
            f"(set {TOKEN_ENV} or pass --token-file, or bind 127.0.0.1)")


def read_token(path: str | Path | None) -> str | None:
    """The token from a file (first line) or the environment; None when neither is set."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise TrainmasterError(f"--token-file: no such file {p}")
        token = p.read_text().strip()
        if not token:
            raise TrainmasterError(f"--token-file: {p} is empty")
        mode = p.stat().st_mode & 0o777
        if mode & 0o077:
            log.warning("--token-file %s is readable by others (mode %o): chmod 600 %s", p, mode, p)
        return token
    return os.environ.get(TOKEN_ENV) or None


class TokenGuard:
    """ASGI middleware: 401 for any HTTP request without the right bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if scope["path"] == "/" and not given:  # the dashboard page, opened as /?token=... (no header)
                given = f"Bearer {_query_token(scope)}".encode()
            if not hmac.compare_digest(given, self.expected):
                body = json.dumps({"error": "missing or wrong token (send Authorization: Bearer <token>)",
                                   "field": "authorization"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _query_token(scope: Scope) -> str:
    query: bytes = scope.get("query_string", b"")
    return parse_qs(query.decode("latin-1")).get("token", [""])[0]
