"""Assemble and run the daemon: store, local engine, policy, controller thread, HTTP server."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import uvicorn

from trainmaster.controller.autoscale import MarketSetup, attach
from trainmaster.core.errors import SpecError, TrainmasterError
from trainmaster.core.queue import load_queues
from trainmaster.engines.gang import GangEngine
from trainmaster.engines.registry import make_engine
from trainmaster.policies.registry import make_policy
from trainmaster.server.app import MAX_BODY, create_app
from trainmaster.server.auth import check_bind
from trainmaster.server.daemon import Daemon
from trainmaster.server.logs import setup as setup_logs
from trainmaster.server.store import Store
from trainmaster.workloads.clusters import load_cluster

log = logging.getLogger("trainmaster.server")
DEFAULT_POLICY = "trainmaster"


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    policy: str | None = None  # None: DEFAULT_POLICY
    engine: str = "local"  # a name from engines.registry
    cluster: str | None = None  # shorthand (2x0) or a cluster YAML; None: the engine's default (this machine)
    queues: Path | None = None
    max_body: int = MAX_BODY
    poll: float = 0.1
    ledger_journal: Path | None = None  # append every booking of cores and GPUs here (audits, the chaos test)
    log_level: str = "info"  # debug | info | warning (server.logs)
    market: MarketSetup = field(default_factory=MarketSetup)  # revocations, replacements, the autoscaler


def check_port(host: str, port: int) -> None:
    """Fail with one line, before any job is touched, when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise TrainmasterError(f"cannot listen on {host}:{port}: {exc.strerror} "
                                   "(another trainmaster server? pick one with --port)") from None


def private_dir(path: Path) -> Path:
    """Create (or tighten) a folder only its owner can enter: job logs and the store may hold secrets."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """Create (or tighten) a file to 0600 before anything writes to it (SQLite's -wal/-shm files copy its mode)."""
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return path


def lock_data_dir(data_dir: Path) -> IO[bytes]:
    """One daemon per data directory, or two would start the same jobs; the kernel drops the lock on kill -9."""
    private_dir(data_dir)
    handle = private_file(data_dir / "server.lock").open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise TrainmasterError(f"another trainmaster server is using {data_dir}; stop it or pick another "
                               "--data-dir") from None
    return handle


def build(config: ServerConfig) -> tuple[Daemon, Store, Path]:
    """Open the store and engine and recover unfinished jobs; the caller holds the data-dir lock."""
    policy = make_policy(config.policy or DEFAULT_POLICY)
    queues = load_queues(config.queues) if config.queues else None
    cluster = load_cluster(config.cluster) if config.cluster else None
    private_dir(config.data_dir)
    run_dir = private_dir(config.data_dir / "runs")
    store = Store(private_file(config.data_dir / "trainmaster.db"))
    engine = make_engine(config.engine, cluster=cluster, run_dir=run_dir, ledger_journal=config.ledger_journal,
                         market=config.market.market, replace_delay=config.market.replace_delay)
    daemon = Daemon(store, engine, policy, queues=queues, poll=config.poll)
    if config.market.market is not None or config.market.autoscale is not None:
        if config.engine != "local" or not isinstance(engine, GangEngine):
            raise SpecError("--autoscale", f"the {config.engine} engine's nodes come from Ray's own autoscaler",
                            "drop --market/--autoscale, or use --engine local (virtual nodes on this machine)")
        attach(daemon.controller, engine, config.market)
    return daemon, store, run_dir


class Server(uvicorn.Server):
    """uvicorn's server, telling the daemon when a stop signal arrives.

    On SIGINT/SIGTERM uvicorn waits for every open response to end before it
    exits, and a `logs?follow` stream of a running job would end only with
    the job, even after its client has gone: the stream's generator runs in a
    worker thread that no cancellation reaches. The daemon's `closing` event
    ends such streams at their next poll.
    """

    def __init__(self, config: uvicorn.Config, daemon: Daemon) -> None:
        super().__init__(config)
        self.daemon = daemon

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.daemon.closing.set()
        super().handle_exit(sig, frame)


def _terminated(signum: int, frame: FrameType | None) -> None:
    """SIGTERM, once uvicorn has shut down (it restores the handler it found and raises the signal again):
    leave through `serve`'s cleanup, as SIGINT does, so the daemon stops its tasks (they checkpoint) and the
    process exits 0, instead of dying by the signal with its tasks left running."""
    raise SystemExit(0)


def serve(config: ServerConfig) -> int:
    """Run until SIGINT/SIGTERM; the jobs' state stays in the data directory for the next start."""
    setup_logs(config.log_level)
    check_bind(config.host, config.token)
    check_port(config.host, config.port)
    lock = lock_data_dir(config.data_dir)
    daemon, store, _ = build(config)
    app = create_app(daemon, token=config.token, max_body=config.max_body)
    daemon.start()
    log.info("listening", extra={"fields": {
        "url": f"http://{config.host}:{config.port}", "policy": daemon.policy.name,
        "nodes": len(daemon.controller.cluster), "data_dir": str(config.data_dir),
        "token": "required" if config.token else "off"}})
    server = Server(uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                                   access_log=False, log_config=None), daemon)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        server.run()
    finally:
        daemon.stop()
        store.close()
        lock.close()
    return 0
