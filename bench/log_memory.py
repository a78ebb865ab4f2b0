"""Daemon memory while serving a 1 GB task log: the whole file, then `tail=100`; RSS sampled throughout.

Starts a real `trainmaster server` (fresh data directory), runs one tiny job to the end, replaces its
`worker-0.log` with SIZE bytes of 100-byte lines, then fetches it through the REST API, the whole log
streamed to the client and the last 100 lines, while a thread samples the daemon's resident memory
(psutil) every 20 ms. Before this change the endpoint read the file at once (400 MB took the daemon
from 179 MB to 1.0 GB, issue 9); the goal is flat, under 200 MB.

    .venv/bin/python -m bench.log_memory [--size-mb 1024] [--out bench/results/server.md]
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil

from bench.submit_load import start_server

LINE = 100  # bytes per line, newline included
JOB = """apiVersion: trainmaster/v1
kind: TrainingJob
metadata: {name: chatty}
spec:
  command: [sh, -c, "echo hello"]
  roles: {worker: {min: 1, resources: {cpu: 0.5}}}
"""
SECTION = "## Daemon memory while serving a 1 GB log"


class RssSampler:
    """Peak and last resident set size of one process, sampled in a thread."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        self.proc = psutil.Process(pid)
        self.every = every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def write_log(path: Path, size: int) -> int:
    """`size` bytes of numbered 100-byte lines, written 8 MiB at a time; returns the line count."""
    lines = size // LINE
    per_block = (8 << 20) // LINE
    with path.open("wb") as f:
        for first in range(0, lines, per_block):
            f.write(b"".join(b"%012d " % i + b"x" * (LINE - 14) + b"\n"
                             for i in range(first, min(lines, first + per_block))))
    return lines


def run(size: int) -> dict[str, float]:
    mib = 2**20
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        proc, url = start_server(data, "fifo")
        try:
            http = httpx.Client(base_url=url, timeout=120)
            jid = http.post("/v1/jobs", content=JOB, headers={"content-type": "application/yaml"}).json()["id"]
            while http.get(f"/v1/jobs/{jid}").json()["state"] not in ("succeeded", "failed"):
                time.sleep(0.1)
            lines = write_log(data / "runs" / jid / "worker-0.log", size)
            daemon = psutil.Process(proc.pid)
            before = daemon.memory_info().rss
            received = 0
            t0 = time.perf_counter()
            with RssSampler(proc.pid) as full, http.stream("GET", f"/v1/jobs/{jid}/logs",
                                                             params={"task": "worker-0"}) as r:
                for chunk in r.iter_bytes():
                    received += len(chunk)
            full_s = time.perf_counter() - t0
            if received != lines * LINE:
                raise SystemExit(f"received {received} bytes of {lines * LINE}")
            t0 = time.perf_counter()
            with RssSampler(proc.pid) as tail:
                text = http.get(f"/v1/jobs/{jid}/logs", params={"task": "worker-0", "tail": 100}).text
            tail_s = time.perf_counter() - t0
            got = text.splitlines()
            if len(got) != 100 or not got[-1].startswith(f"{lines - 1:012d} "):
                raise SystemExit(f"tail=100 gave {len(got)} lines ending {got[-1][:20] if got else None!r}")
            after = daemon.memory_info().rss
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
    return {"size_mib": size / mib, "before_mib": before / mib, "full_peak_mib": full.peak / mib,
            "full_s": full_s, "full_mib_s": received / mib / full_s, "tail_peak_mib": tail.peak / mib,
            "tail_ms": tail_s * 1000, "after_mib": after / mib}


def replace_section(path: Path, text: str) -> None:
    """Write this benchmark's section of `path`, keeping the rest (other benchmarks write the rest)."""
    old = path.read_text() if path.exists() else ""
    head, _, rest = old.partition(SECTION)
    tail = rest[rest.find("\n## "):] if "\n## " in rest else ""
    path.write_text(head.rstrip("\n") + "\n\n" + text.rstrip("\n") + "\n" + tail)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=int, default=1024, help="log size in MiB")
    p.add_argument("--out", type=Path, default=Path("bench/results/server.md"))
    args = p.parse_args()
    r = run(args.size_mb * 2**20)
    text = "\n".join([
        SECTION,
        "",
        f"Command: `.venv/bin/python -m bench.log_memory --size-mb {args.size_mb}`  ",
        "Machine: 2-core x86 box, 24 GiB, no GPU (shared with other work while measured)  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        f"A finished job's `worker-0.log` of {r['size_mib']:.0f} MiB (100-byte lines) served by a real",
        "`trainmaster server`; the daemon's RSS sampled every 20 ms (psutil) during each request.",
        "",
        "| daemon RSS before | peak, whole log streamed | throughput | peak, `tail=100` | tail latency | after |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {r['before_mib']:.0f} MiB | {r['full_peak_mib']:.0f} MiB ({r['full_s']:.1f} s) | "
        f"{r['full_mib_s']:.0f} MiB/s | {r['tail_peak_mib']:.0f} MiB | {r['tail_ms']:.0f} ms | "
        f"{r['after_mib']:.0f} MiB |",
        "",
        "Before the change the endpoint read the file into memory at once: a 400 MB log took the daemon",
        "from 179 MB to 1.0 GB (issue 9).",
    ])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    replace_section(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
