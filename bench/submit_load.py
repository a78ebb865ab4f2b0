"""1,000 job submissions through the REST API in a loop: all accepted, none lost, submit latency p50/p99.

Starts a real `trainmaster server` (local engine, fresh data directory) on a
free loopback port, submits N tiny jobs (`sleep 0.05`) one after another,
then waits for every one to finish and checks the store holds each exactly once.

    .venv/bin/python -m bench.submit_load [--jobs 1000] [--policy fifo,trainmaster] [--out bench/results/server.md]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from trainmaster.controller.metrics import percentile

JOB = """apiVersion: trainmaster/v1
kind: TrainingJob
metadata: {{name: tiny-{i}}}
spec:
  command: [sleep, "0.05"]
  roles: {{worker: {{min: 1, resources: {{cpu: 0.5}}}}}}
"""
CLUSTER = "nodes:\n  - {name: n, count: 4, cpu: 2, memory: 4Gi}\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(data: Path, policy: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    (data / "cluster.yaml").write_text(CLUSTER)
    proc = subprocess.Popen([sys.executable, "-m", "trainmaster.cli.main", "server", "--data-dir", str(data),
                             "--port", str(port), "--cluster", str(data / "cluster.yaml"), "--policy", policy],
                            stdout=(data / "server.log").open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return proc, url
        time.sleep(0.1)
    raise RuntimeError("server did not start: " + (data / "server.log").read_text())


def run(jobs: int, policy: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(Path(tmp), policy)
        try:
            http = httpx.Client(base_url=url, timeout=30)
            latencies, ids = [], []
            t0 = time.perf_counter()
            for i in range(jobs):
                body = JOB.format(i=i)
                start = time.perf_counter()
                r = http.post("/v1/jobs", content=body, headers={"content-type": "application/yaml"})
                latencies.append(time.perf_counter() - start)
                if r.status_code != 201:
                    raise SystemExit(f"submission {i} refused: {r.status_code} {r.text}")
                ids.append(r.json()["id"])
            submit_s = time.perf_counter() - t0
            listed = [j["id"] for j in http.get("/v1/jobs").json()]
            if sorted(listed) != sorted(ids) or len(set(ids)) != jobs:
                raise SystemExit(f"lost or duplicated jobs: {len(listed)} listed, {len(set(ids))} unique ids")
            while True:
                rows = http.get("/v1/jobs").json()
                left = [r for r in rows if r["state"] not in ("succeeded", "failed", "cancelled", "rejected")]
                if not left:
                    break
                time.sleep(0.5)
            drain_s = time.perf_counter() - t0
            succeeded = sum(r["state"] == "succeeded" for r in rows)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    ms = [x * 1000 for x in latencies]
    return {"jobs": jobs, "accepted": len(ids), "listed": len(listed), "succeeded": succeeded,
            "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms),
            "mean_ms": statistics.fmean(ms), "submit_per_s": jobs / submit_s, "all_done_s": drain_s}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1000)
    p.add_argument("--policy", default="fifo,trainmaster", help="comma-separated presets, one run each")
    p.add_argument("--out", type=Path, default=Path("bench/results/server.md"))
    args = p.parse_args()
    results = {name: run(args.jobs, name) for name in args.policy.split(",")}
    lines = [
        "# Server: submissions through the REST API",
        "",
        f"Command: `.venv/bin/python -m bench.submit_load --jobs {args.jobs} --policy {args.policy}`  ",
        "Machine: 2-core x86 box, 24 GiB, no GPU (shared with other work while measured)  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        "One client submits tiny jobs (`sleep 0.05`, 0.5 CPU) back to back to a real `trainmaster server`",
        "(local engine, 4 virtual nodes of 2 CPUs, SQLite store committed before each 201), while the",
        "jobs already accepted start and finish. Then it checks every id is listed once and waits for all.",
        "",
        "| policy | jobs | accepted (201) | listed after | succeeded | submit p50 | submit p99 | max | submissions/s"
        " | all finished after |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r['jobs']} | {r['accepted']} | {r['listed']} | {r['succeeded']} | {r['p50_ms']:.1f} ms"
            f" | {r['p99_ms']:.1f} ms | {r['max_ms']:.1f} ms | {r['submit_per_s']:.0f} | {r['all_done_s']:.1f} s |")
    lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
