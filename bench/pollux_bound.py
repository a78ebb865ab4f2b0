"""What the `--fidelity pollux` truth allows: each Pollux job's run time alone, at its request and at its best.

At load 0.5 queueing is small and a job's JCT is close to its run time, so
the mean JCT of any policy there is bounded by how fast each job can run
alone. Per workload: the mean over its jobs of the run time alone on 16x4
(a) at the requested replicas and batch (`PeerTruth.runtime`), and (b) at
the best replicas x batch for each epoch (replicas 1 to the job's cap,
`peer_max_replicas`; batches from the smallest to the largest validated one,
geometric; packed 4 per node): no queueing, no restart, no learning, the
truth known. Pollux's published mean at load 0.5 is 1,534 s; if (b) were
near it, our truth would be what held us back, not the policy.

    .venv/bin/python -m bench.pollux_bound [--load 0.5] [--workloads 1-4]
    .venv/bin/python -m bench.pollux_bound --app yolov3    # per epoch: noise scale, best size, seconds
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from functools import cache
from pathlib import Path

from trainmaster.workloads.pollux import load_profile, peer_max_replicas
from trainmaster.workloads.pollux_peer import PeerTruth, peer_model

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux"
BATCHES = 40  # geometric steps between the smallest and largest validated batch


def packed(replicas: int) -> list[int]:
    full, rest = divmod(replicas, 4)
    return [4] * full + ([rest] if rest else [])


@cache
def batch_grid(app: str) -> tuple[int, ...]:
    """The global batches the bound tries: geometric between the smallest and largest validated, and those."""
    profile = load_profile(DATA / "profiles" / app)
    model = peer_model(profile)
    ratio = model.max_batch / model.init_batch
    return tuple(sorted({int(model.init_batch * ratio ** (i / BATCHES)) for i in range(BATCHES + 1)}
                        | set(profile.validation)))


def batches_for(app: str, replicas: int) -> list[int]:
    """`batch_grid`'s batches `replicas` can train (at least the smallest profiled local batch each)."""
    profile = load_profile(DATA / "profiles" / app)
    smallest_local = min(c.local_bsz[0] for c in profile.placements.values())
    return [b for b in batch_grid(app) if b >= replicas * smallest_local]


@cache
def best_per_epoch(app: str, cap: int | None = None) -> tuple[tuple[float, float, int, int], ...]:
    """Per epoch: (the truth's noise scale at the smallest batch, seconds alone at the best, replicas, batch).

    `cap`: at most this many replicas (default: the job's own cap, `peer_max_replicas`). The noise
    scale `init_batch * var / sqr` says how much a larger batch is worth in that epoch (near 0: no
    more than the smallest), which is what a policy's batch and size choices follow."""
    profile = load_profile(DATA / "profiles" / app)
    model = peer_model(profile)
    out = []
    for e in range(model.epochs):
        progress = model.boundaries[e + 1] - model.boundaries[e]
        best = (math.inf, 1, model.init_batch)
        for r in range(1, min(peer_max_replicas(profile), cap or 10**9) + 1):
            for b in batches_for(app, r):
                batching = model.batching(r, b)
                seconds = progress * model.step_time(packed(r), batching) / model.gain(float(batching.batch), e)
                best = min(best, (seconds, r, b))
        sqr, var = model.grad_stats(float(model.init_batch), e)
        out.append((model.init_batch * var / sqr if sqr > 0 else math.inf, *best))
    return tuple(out)


def best_alone(app: str, cap: int | None = None) -> tuple[float, int, int]:
    """(seconds alone at the best replicas x batch per epoch, replicas and batch of the last epoch's best).

    `cap`: at most this many replicas (default: the job's own cap, `peer_max_replicas`)."""
    epochs = best_per_epoch(app, cap)
    return sum(e[1] for e in epochs), epochs[-1][2], epochs[-1][3]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=0.5, choices=(0.5, 1.0, 1.5, 2.0))
    parser.add_argument("--workloads", default="1-4")
    parser.add_argument("--app", default="", help="print this application's best size and noise scale per epoch")
    args = parser.parse_args()
    if args.app:
        print(f"| {args.app} epoch | noise scale (samples) | best replicas x batch | seconds |")
        print("| ---: | ---: | --- | ---: |")
        for e, (phi, seconds, r, b) in enumerate(best_per_epoch(args.app)):
            print(f"| {e} | {phi:,.1f} | {r} x {b} | {seconds:,.0f} |")
        return
    lo, _, hi = args.workloads.partition("-")
    folder = DATA / ("workloads" if args.load == 1.0 else f"workloads-{args.load:.1f}")
    print("| workload | jobs | (a) requested, mean s | (b) best per epoch, mean s | (b) / (a) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    means = []
    for n in range(int(lo), int(hi or lo) + 1):
        with open(folder / f"workload-{n}.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        requested = [PeerTruth.of(load_profile(DATA / "profiles" / r["application"]), int(r["batch_size"]))
                     .runtime(int(r["num_replicas"])) for r in rows]
        best = [best_alone(r["application"])[0] for r in rows]
        means.append((statistics.mean(requested), statistics.mean(best)))
        print(f"| {n} | {len(rows)} | {means[-1][0]:,.0f} | {means[-1][1]:,.0f} | {means[-1][1] / means[-1][0]:.2f} |")
    a, b = statistics.mean(m[0] for m in means), statistics.mean(m[1] for m in means)
    print(f"| mean | | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")
    print()
    print("| application | best alone s | last epoch's best replicas x batch |")
    print("| --- | ---: | --- |")
    for app in sorted(p.name for p in (DATA / "profiles").iterdir() if p.is_dir()):
        seconds, r, b = best_alone(app)
        print(f"| {app} | {seconds:,.0f} | {r} x {b} |")


if __name__ == "__main__":
    main()
