"""`trainmaster server`: the daemon (scheduler on the local engine + REST API), state in a data directory."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from urllib.parse import urlsplit

from trainmaster.cli import market
from trainmaster.engines.registry import ENGINES

DATA_ENV = "TRAINMASTER_HOME"
MAX_BODY = 1 << 20  # bytes; the server's default (trainmaster.server.app.MAX_BODY)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("server", help="run the scheduler daemon and its REST API",
                       description="Run the scheduler daemon: jobs survive a restart (even kill -9). "
                                   "Binds 127.0.0.1 unless a token is set (TRAINMASTER_TOKEN or --token-file).")
    p.add_argument("--data-dir", type=Path, default=None,
                   help=f"where the store and job runs live (default: {DATA_ENV} or ~/.trainmaster)")
    p.add_argument("--host", default=None,
                   help="address to bind (default: TRAINMASTER_URL's host, else 127.0.0.1); anything but loopback "
                        "needs a token")
    p.add_argument("--port", type=int, default=None,
                   help="port (default: TRAINMASTER_URL's port, else 8765), so one variable points the CLI and "
                        "the server at the same address")
    p.add_argument("--token-file", type=Path, default=None, help="file holding the API token")
    p.add_argument("--policy", default=None, help="scheduling preset (default: trainmaster)")
    p.add_argument("--cluster", default=None,
                   help="virtual nodes: a cluster YAML or shorthand; default: this machine as one node")
    p.add_argument("--queues", type=Path, default=None, help="queues YAML (default: one queue, `default`)")
    p.add_argument("--engine", default="local", choices=ENGINES, help="where jobs run (default: local, this machine)")
    p.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                   help="with --engine ray: the Ray head's GCS address (default: RAY_ADDRESS, else the cluster "
                        "started on this machine); the run dir must be on storage every Ray node sees")
    p.add_argument("--max-body", type=int, default=MAX_BODY, help="largest request body in bytes")
    p.add_argument("--ledger-journal", type=Path, default=None, metavar="FILE",
                   help="append every booking of cores and GPUs to FILE (JSON lines), to audit that none is "
                        "ever held twice")
    market.add_options(p)
    p.add_argument("--log-level", choices=("debug", "info", "warning"), default="info",
                   help="server log detail: one key=value line per request, decision, recovery (default: info)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: the server's dependencies (FastAPI, the engine) would slow every other command.
    from trainmaster.cli.client import URL_ENV  # the CLI's server address: the server binds it when no flag says
    from trainmaster.server.auth import read_token
    from trainmaster.server.serve import ServerConfig, serve

    if args.ray_address:
        os.environ["RAY_ADDRESS"] = args.ray_address  # read by the ray engine (engines/registry.py)
    data_dir = args.data_dir or Path(os.environ.get(DATA_ENV) or Path.home() / ".trainmaster")
    url = urlsplit(os.environ.get(URL_ENV) or "")
    host = args.host or url.hostname or "127.0.0.1"
    port = args.port or url.port or 8765
    config = ServerConfig(data_dir=data_dir, host=host, port=port, token=read_token(args.token_file),
                          policy=args.policy, cluster=args.cluster, queues=args.queues, max_body=args.max_body,
                          ledger_journal=args.ledger_journal, engine=args.engine, log_level=args.log_level,
                          market=market.setup(args))
    return serve(config)
