"""`make demo`: the daemon end to end on this machine with the real examples.

Starts `trainmaster server` (fresh data directory, this machine split into two
virtual nodes of 2 CPUs), submits a mixed workload through the SDK, an elastic
all-reduce CNN, a fixed-size digits MLP, a parameter-server job and jobs of two
priorities, arriving over time, shows live progress and every allocation
change as it happens, and ends with a summary table: JCT, restarts, resizes, preemptions, final loss
and how each job's allocation changed.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from trainmaster.cli.client import TERMINAL, Client
from trainmaster.core.errors import TrainmasterError

CLUSTER_YAML = "nodes:\n  - {name: node, count: 2, cpu: 2, memory: 6Gi}\n"


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the start
    label: str
    path: str
    overrides: tuple[str, ...]


# Arrivals chosen so the allocation moves: the CNN grows into the idle nodes, shrinks when the
# others arrive, a priority-10 job goes ahead of the queue, and the CNN grows back as jobs finish.
WORKLOAD = (
    Arrival(0, "elastic all-reduce CNN, 1-4 workers", "examples/cnn/job.yaml",
            ("metadata.name=cnn-elastic", "spec.target.steps=1500")),
    Arrival(12, "fixed MLP, 1 worker", "examples/digits/job.yaml",
            ("metadata.name=digits-fixed", "spec.roles.worker.max=1", "spec.target.steps=2500")),
    Arrival(20, "parameter server, 2 workers + 1-2 PS", "examples/ps/job.yaml",
            ("metadata.name=ps-sync", "spec.target.steps=300")),
    Arrival(30, "priority 10 elastic MLP, 1-2 workers", "examples/digits/job.yaml",
            ("metadata.name=digits-urgent", "metadata.priority=10", "spec.target.steps=2500")),
    Arrival(34, "elastic CNN, 1-4 workers", "examples/cnn/job.yaml",
            ("metadata.name=cnn-late", "spec.target.steps=600")),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(data: Path, policy: str | None, console: Console,
                 ray_address: str | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cluster = data / "cluster.yaml"
    cluster.write_text(CLUSTER_YAML)
    cmd = [sys.executable, "-m", "trainmaster.cli.main", "server", "--data-dir", str(data), "--port", str(port),
           *(["--engine", "ray", "--ray-address", ray_address] if ray_address else ["--cluster", str(cluster)])]
    if policy:
        cmd += ["--policy", policy]
    proc = subprocess.Popen(cmd, stdout=(data / "server.log").open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    client = Client(url)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TrainmasterError(f"the server exited: {(data / 'server.log').read_text()[-1000:]}")
        with contextlib.suppress(TrainmasterError):
            health = client.health()
            console.print(f"server up at {url}, policy [bold]{health['policy']}[/bold], data in {data}")
            return proc, url
        time.sleep(0.2)
    raise TrainmasterError("the server did not start within 60 s")


COUNTS = ("restarts", "resizes", "preempted")  # restarts after failures, apart from planned resizes and preemptions


def counts(row: dict[str, Any]) -> tuple[str, str, str]:
    return str(row["restarts"]), str(row["resizes"]), str(row["preemptions"])


def progress_table(rows: list[dict[str, Any]], labels: dict[str, str], elapsed: float) -> Table:
    used = sum(r["tasks"] for r in rows)
    table = Table(title=f"t={elapsed:5.1f}s   tasks running: {used}", title_justify="left", header_style="bold")
    for col in ("job", "what", "prio", "state", "allocation", "step", "loss", *COUNTS):
        table.add_column(col, justify="right" if col in ("prio", "step", "loss", *COUNTS) else "left")
    for r in rows:
        table.add_row(r["id"], labels.get(r["id"], ""), str(r["priority"]), r["state"], r["allocation"] or "-",
                      str(r["step"]), "-" if r["loss"] is None else f"{r['loss']:.3f}", *counts(r))
    return table


def compact(allocation: str) -> str:
    """`worker=3@node-0,node-1 ps=1@node-1` -> `3w+1ps`; empty -> `0`."""
    parts = [f"{part.split('@')[0].split('=')[1]}{'w' if part.startswith('worker') else 'ps'}"
             for part in allocation.split()]
    return "+".join(parts) or "0"


def summary_table(client: Client, rows: list[dict[str, Any]], labels: dict[str, str], t0: float) -> Table:
    table = Table(title="summary", title_justify="left", header_style="bold")
    for col in ("job", "what", "prio", "state", "wait", "JCT", *COUNTS, "final loss", "allocation over time"):
        table.add_column(col, justify="right" if col in ("prio", "wait", "JCT", *COUNTS, "final loss") else "left")
    for r in rows:
        path: list[str] = []
        for c in client.metrics(r["id"])["allocations"]:
            if c["what"] in ("start", "resize", "preempted"):
                size = compact(c["allocation"])
                if not path or path[-1].split(" ")[0] != size:
                    path.append(f"{size} @{c['time'] - t0:.0f}s")
        wait = "-" if r["first_start"] is None else f"{r['first_start'] - r['submit_time']:.1f}s"
        jct = "-" if r["jct"] is None else f"{r['jct']:.1f}s"
        loss = "-" if r["loss"] is None else f"{r['loss']:.3f}"
        table.add_row(r["id"], labels.get(r["id"], ""), str(r["priority"]), r["state"], wait, jct,
                      *counts(r), loss, " -> ".join(path) or "-")
    return table


def example(path: str) -> Path:
    """An example YAML from the current folder or else the source checkout; the SDK resolves its workdir."""
    for base in (Path.cwd(), Path(__file__).resolve().parents[3]):
        if (base / path).is_file():
            return base / path
    raise TrainmasterError(f"{path} not found: run the demo from the repository root (`make demo`)")


def run_demo(out: Path, policy: str | None, timeout: float, ray_address: str | None = None) -> int:
    paths = {a.path: example(a.path) for a in WORKLOAD}
    console = Console()
    if console.width < 140:  # the tables need room; a narrow or piped output wraps them instead
        console = Console(width=140)
    data = out / "data"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    proc, url = start_server(data, policy, console, ray_address)
    labels: dict[str, str] = {}
    last_alloc: dict[str, str] = {}
    try:
        client = Client(url)
        t0 = time.time()
        pending = list(WORKLOAD)
        with Live(console=console, refresh_per_second=4, transient=False) as live:
            while True:
                elapsed = time.time() - t0
                while pending and pending[0].at <= elapsed:
                    arrival = pending.pop(0)
                    row = client.submit(paths[arrival.path], arrival.overrides)
                    labels[row["id"]] = arrival.label
                    live.console.print(f"[dim]t={elapsed:5.1f}s[/dim] submitted [bold]{row['id']}[/bold]: "
                                       f"{arrival.label}, priority {row['priority']}")
                rows = client.jobs()
                for r in rows:
                    alloc = r["allocation"] or "-"
                    if last_alloc.get(r["id"], "-") != alloc:
                        live.console.print(f"[dim]t={elapsed:5.1f}s[/dim] {r['id']}: "
                                           f"{last_alloc.get(r['id'], '-')} -> [cyan]{alloc}[/cyan] ({r['state']})")
                        last_alloc[r["id"]] = alloc
                live.update(Group(progress_table(rows, labels, elapsed)))
                if not pending and rows and all(r["state"] in TERMINAL for r in rows):
                    break
                if elapsed > timeout:
                    live.console.print(f"[red]stopping: the workload did not finish within {timeout:.0f}s[/red]")
                    break
                time.sleep(0.5)
        rows = client.jobs()
        console.print()
        console.print(summary_table(client, rows, labels, t0))
        done = sum(r["state"] == "succeeded" for r in rows)
        resizes = sum(max(0, len([c for c in client.metrics(r["id"])["allocations"]
                                  if c["what"] in ("start", "resize")]) - 1) for r in rows)
        console.print(Text(f"{done}/{len(rows)} jobs succeeded in {time.time() - t0:.0f}s; "
                           f"{resizes} resize(s); logs and the store are in {data}"))
        return 0 if done == len(rows) else 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("out/demo"))
    p.add_argument("--policy", default=None, help="scheduling preset (default: the server's best)")
    p.add_argument("--timeout", type=float, default=270.0, help="give up after this many seconds")
    p.add_argument("--ray", action="store_true", help="run the jobs on a 3-node Ray cluster started on this machine "
                   "(the ray engine; `make demo-ray`)")
    args = p.parse_args(argv)
    try:
        if args.ray:
            from trainmaster.engines.ray.localcluster import local_ray_cluster

            with local_ray_cluster(3) as ray_cluster:
                return run_demo(args.out, args.policy, args.timeout, ray_cluster.address)
        return run_demo(args.out, args.policy, args.timeout)
    except TrainmasterError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
