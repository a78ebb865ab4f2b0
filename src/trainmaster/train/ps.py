"""Parameter-server mode over plain TCP: shards of the parameters live in PS processes.

Messages are length-prefixed `torch.save` payloads loaded with
`weights_only=True` (tensors, numbers, strings, dicts; no arbitrary pickles).
Worker 0 seeds the servers with its (possibly restored) parameters; every
worker then sends its gradients and gets the new parameters back. `sync`
averages one gradient from each worker per step (a barrier on each server);
`async` applies each gradient as it arrives (Hogwild-style staleness).
Parameters are assigned to servers by Optimus' balanced assignment
(`trainmaster.train.paa.assign`, one server per tensor).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from trainmaster.train.env import EXIT_PREEMPTED, TaskEnv
from trainmaster.train.paa import assign

_HEADER = struct.Struct("!Q")


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    buf = io.BytesIO()
    torch.save(message, buf)
    data = buf.getvalue()
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        chunk = sock.recv(min(n - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("parameter-server connection closed")
        chunks += chunk
    return bytes(chunks)


def _recv(sock: socket.socket) -> dict[str, Any]:
    (n,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size))
    message: dict[str, Any] = torch.load(io.BytesIO(_recv_exact(sock, n)), weights_only=True)
    return message


def split_parameters(sizes: Sequence[int], servers: int) -> list[int]:
    """Server index of each parameter tensor: Optimus' balanced assignment (`train.paa.assign`)."""
    return assign(sizes, servers)


class _Shard:
    """The parameters one server holds and the update rule (SGD with optional momentum)."""

    def __init__(self, workers: int, mode: str) -> None:
        self.workers = workers
        self.mode = mode
        self.params: dict[str, torch.Tensor] = {}
        self.momentum: dict[str, torch.Tensor] = {}
        self.lr = 0.1
        self.beta = 0.0
        self.pending: dict[str, torch.Tensor] = {}
        self.arrived = 0
        self.version = 0
        self.stopping = False
        self.done = 0
        self.connections = 0
        self.cond = threading.Condition()

    def init(self, params: dict[str, torch.Tensor], lr: float, momentum: float) -> None:
        with self.cond:
            if not self.params:
                self.params = {k: v.clone() for k, v in params.items()}
                self.lr, self.beta = lr, momentum
                self.cond.notify_all()

    def wait_ready(self) -> None:
        with self.cond:
            while not self.params and not self.stopping:
                self.cond.wait(0.5)

    def _apply(self, grads: dict[str, torch.Tensor], scale: float) -> None:
        with torch.no_grad():
            for name, grad in grads.items():
                g = grad * scale
                if self.beta:
                    buf = self.momentum.get(name)
                    buf = g.clone() if buf is None else buf.mul_(self.beta).add_(g)
                    self.momentum[name] = buf
                    g = buf
                self.params[name].sub_(g, alpha=self.lr)
        self.version += 1

    def push(self, grads: dict[str, torch.Tensor]) -> None:
        with self.cond:
            if self.mode == "async":
                self._apply(grads, 1.0)
                return
            for name, grad in grads.items():
                acc = self.pending.get(name)
                self.pending[name] = grad.clone() if acc is None else acc.add_(grad)
            self.arrived += 1
            version = self.version
            if self.arrived >= self.workers:
                self._apply(self.pending, 1.0 / self.arrived)
                self.pending, self.arrived = {}, 0
                self.cond.notify_all()
                return
            while self.version == version and not self.stopping:
                self.cond.wait(0.5)

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy of the parameters (async pushes may update them meanwhile)."""
        with self.cond:
            return {"params": {k: v.clone() for k, v in self.params.items()}, "stopping": self.stopping}

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        shard = self.server.shard
        with shard.cond:
            shard.connections += 1
        try:
            while True:
                message = _recv(self.request)
                op = message["op"]
                if op == "init":
                    shard.init(message["params"], float(message["lr"]), float(message["momentum"]))
                    _send(self.request, {"ok": True})
                elif op == "pull":
                    shard.wait_ready()
                    _send(self.request, shard.snapshot())
                elif op == "push":
                    shard.push(message["grads"])
                    _send(self.request, shard.snapshot())
                elif op == "bye":
                    with shard.cond:
                        shard.done += 1
                        shard.cond.notify_all()
                    _send(self.request, {"ok": True})
                    return
        except (ConnectionError, OSError):
            return
        finally:
            with shard.cond:
                shard.connections -= 1
                shard.cond.notify_all()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], shard: _Shard) -> None:
        self.shard = shard
        super().__init__(address, _Handler)


def serve(env: TaskEnv | None = None, *, linger: float = 10.0) -> int:
    """Run this task's parameter server until every worker says bye (0) or a stop request drains it (75)."""
    env = env or TaskEnv.from_env()
    host, port = env.ps_addrs[env.index].rsplit(":", 1)
    shard = _Shard(workers=env.world_size, mode=env.ps_mode)
    server = _Server((host, int(port)), shard)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, frame: shard.stop())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    stopped_at: float | None = None
    code = 0
    with shard.cond:
        while shard.done < shard.workers:
            if shard.stopping:
                stopped_at = stopped_at or time.monotonic()
                if shard.connections == 0 or time.monotonic() - stopped_at > linger:
                    code = EXIT_PREEMPTED
                    break
            shard.cond.wait(0.2)
    server.shutdown()
    server.server_close()
    print(f"trainmaster: parameter server {env.index} exits with {code}", file=sys.stderr, flush=True)
    return code


class ParameterClient:
    """A worker's connection to every server; keeps `model` equal to the servers' parameters."""

    def __init__(self, model: nn.Module, env: TaskEnv, *, lr: float, momentum: float = 0.0,
                 connect_timeout: float = 60.0, on_stop: Callable[[], None] | None = None) -> None:
        self.model = model
        self.on_stop = on_stop
        self.env = env
        self.stopping = False
        named = dict(model.named_parameters())
        self.names = list(named)
        owner = split_parameters([p.numel() for p in named.values()], len(env.ps_addrs))
        self.owner = dict(zip(self.names, owner, strict=True))
        self.socks = [self._connect(addr, connect_timeout) for addr in env.ps_addrs]
        if env.rank == 0:
            for s, sock in enumerate(self.socks):
                shard = {n: p.detach().cpu() for n, p in named.items() if self.owner[n] == s}
                _send(sock, {"op": "init", "params": shard, "lr": lr, "momentum": momentum})
                _recv(sock)
        self.pull()

    def pull(self) -> None:
        """Load the servers' current parameters into the model."""
        for sock in self.socks:
            _send(sock, {"op": "pull"})
        self._load([_recv(sock) for sock in self.socks])

    @staticmethod
    def _connect(addr: str, timeout: float) -> socket.socket:
        host, port = addr.rsplit(":", 1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection((host, int(port)), timeout=5.0)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                return sock
            except OSError:
                if time.monotonic() > deadline:
                    raise ConnectionError(f"no parameter server at {addr} after {timeout:.0f}s") from None
                time.sleep(0.1)

    def _load(self, replies: list[dict[str, Any]]) -> None:
        named = dict(self.model.named_parameters())
        with torch.no_grad():
            for reply in replies:
                self.stopping = self.stopping or bool(reply["stopping"])
                for name, value in reply["params"].items():
                    named[name].copy_(value)

    def step(self) -> bool:
        """Send this worker's gradients, load the updated parameters; True when the servers are stopping."""
        named = dict(self.model.named_parameters())
        for s, sock in enumerate(self.socks):
            grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().cpu()
                     for n, p in named.items() if self.owner[n] == s}
            _send(sock, {"op": "push", "grads": grads})
        self._load([_recv(sock) for sock in self.socks])
        if self.stopping and self.on_stop is not None:
            self.on_stop()
        return self.stopping

    def close(self) -> None:
        for sock in self.socks:
            try:
                _send(sock, {"op": "bye"})
                _recv(sock)
            except (ConnectionError, OSError):
                pass
            sock.close()


def main_ps() -> None:
    """Entry point for a PS task: serve, then exit with the server's code."""
    sys.stdout.flush()
    os._exit(serve())
