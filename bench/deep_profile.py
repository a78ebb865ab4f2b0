"""Where a long replay spends, by stage of the trace: a sampling profiler cheap enough for the full Philly run.

A prefix (`--limit 5000`) profiles the start of the trace; the full trace's cost can lie elsewhere (a longer
line, more running jobs, more reports per decision). A daemon thread reads the main thread's stack every
`--every` seconds and counts each function's own samples (the leaf) and cumulative samples (anywhere on the
stack), per stage (jobs arrived so far, in `--stage` steps); the controller's decisions are wrapped to count,
per stage, decisions, mean pending and running jobs per decision and reports between decisions.

    python -m bench.deep_profile --policy optimus --cluster 80x8 [--limit N] [--top 25] [--out FILE.json]

Under `timeout N` (SIGTERM) it stops and reports the stages seen so far.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from trainmaster.cli.simulate import learns_online
from trainmaster.cli.simulate_cmd import LEARNING_REPORT_INTERVAL
from trainmaster.controller.loop import Controller
from trainmaster.core.errors import SpecError
from trainmaster.core.events import Report
from trainmaster.engines.sim.engine import SimConfig, SimEngine
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.clusters import load_cluster
from trainmaster.workloads.philly import load_philly

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux" / "philly.csv"


def _where(frame: Any) -> str:
    """A frame's function; a generated one (a dataclass' `__init__`, in "<string>") is named with its caller."""
    code = frame.f_code
    name = f"{code.co_name} ({Path(code.co_filename).name}:{code.co_firstlineno})"
    if code.co_filename == "<string>" and frame.f_back is not None:
        name += " < " + _where(frame.f_back)
    return name


_FRAME = frozenset({"deep_profile.py", "<frozen runpy>"})


class _Stopped(Exception):
    """SIGTERM (e.g. from `timeout`): the run stops and the profile so far is reported."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stopped


def profile(policy: str, cluster_text: str, limit: int | None, every: float, stage: int,
            data: Path = DATA) -> dict[str, Any]:
    """Run the replay with the sampler on; per stage: samples by function and the decisions' sizes."""
    workload = load_philly(data, limit=limit)
    engine = SimEngine(load_cluster(cluster_text), workload,
                       SimConfig(report_interval=LEARNING_REPORT_INTERVAL if learns_online(policy) else None))
    controller = Controller(engine, make_policy(policy))
    own: dict[int, Counter[str]] = defaultdict(Counter)
    cum: dict[int, Counter[str]] = defaultdict(Counter)
    sizes: dict[int, Counter[str]] = defaultdict(Counter)
    main, done = threading.get_ident(), threading.Event()

    def stage_of() -> int:
        return len(controller.jobs) // stage

    def sample() -> None:
        while not done.wait(every):
            frame = sys._current_frames().get(main)
            if frame is None:
                continue
            at = stage_of()
            own[at][_where(frame)] += 1
            seen = set()
            while frame is not None:
                if Path(frame.f_code.co_filename).name not in _FRAME:
                    seen.add(_where(frame))
                frame = frame.f_back
            cum[at].update(seen)

    reports = [0]
    handle, cycle = controller.handle, controller.cycle

    def counting_handle(event: Any) -> None:
        if isinstance(event, Report):
            reports[0] += 1
        handle(event)

    def counting_cycle() -> Any:
        s = sizes[stage_of()]
        s["decisions"] += 1
        s["pending"] += len(controller._pending)
        s["running"] += len(controller._held)
        s["reports"] += reports[0]
        reports[0] = 0
        t0 = time.process_time()
        plan = cycle()
        s["decide_ms"] += round((time.process_time() - t0) * 1000)
        return plan

    controller.handle = counting_handle  # type: ignore[method-assign]
    controller.cycle = counting_cycle  # type: ignore[method-assign]
    thread = threading.Thread(target=sample, daemon=True)
    cpu0 = time.process_time()
    thread.start()
    finished = True
    try:
        controller.run()
    except _Stopped:  # (`timeout` ran out: report what was seen so far)
        finished = False
    done.set()
    cpu = time.process_time() - cpu0
    stages = []
    for at in sorted(set(own) | set(sizes)):
        s = sizes[at]
        n = max(1, s["decisions"])
        stages.append({
            "jobs_from": at * stage, "samples": sum(own[at].values()), "decisions": s["decisions"],
            "mean_pending": s["pending"] / n, "mean_running": s["running"] / n, "reports_per_decision":
            s["reports"] / n, "decide_cpu_s": s["decide_ms"] / 1000,
            "own": own[at].most_common(40), "cum": cum[at].most_common(60),
        })
    return {"policy": policy, "cluster": cluster_text, "jobs": len(workload), "finished": finished,
            "arrived": len(controller.jobs), "cpu_s": cpu,
            "decisions": controller.cycles, "every_s": every, "stages": stages}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--policy", default="optimus")
    p.add_argument("--cluster", default="80x8")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--every", type=float, default=0.01, help="seconds between samples")
    p.add_argument("--stage", type=int, default=20000, help="jobs arrived per stage")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=None, help="also write the whole result as JSON")
    args = p.parse_args()
    if args.stage <= 0 or args.every <= 0:
        print("error: --stage and --every must be positive", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _stop)
    try:
        result = profile(args.policy, args.cluster, args.limit, args.every, args.stage, args.data)
    except SpecError as e:  # (a bad --policy, --cluster or --data: say which, no traceback)
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(f"{result['policy']} on {result['cluster']}: {result['jobs']:,} jobs "
          f"({'finished' if result['finished'] else 'stopped at ' + format(result['arrived'], ',') + ' arrived'}), "
          f"{result['decisions']:,} decisions, {result['cpu_s']:.1f} s CPU")
    for st in result["stages"]:
        total = max(1, st["samples"])
        print(f"\n== jobs from {st['jobs_from']:,}: {st['samples']} samples, {st['decisions']:,} decisions "
              f"({st['decide_cpu_s']:.1f} s CPU in decisions), pending {st['mean_pending']:.1f}, running "
              f"{st['mean_running']:.1f}, reports/decision {st['reports_per_decision']:.1f}")
        print("  cumulative:")
        for name, n in st["cum"][:args.top]:
            print(f"    {100 * n / total:5.1f}%  {name}")
        print("  own:")
        for name, n in st["own"][:args.top]:
            print(f"    {100 * n / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
