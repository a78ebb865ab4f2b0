"""Where trainmaster's JCT goes under contention: queueing, preempted waits, start/restart delays, slow running.

Replays Pollux workloads as `bench.job_gap` does (`--fidelity pollux`, 16x4, the preset's settings; the
same replay as `bench.oracle_goodput`'s mode `fitted`) and follows every job's GPUs over time. Per
application, mean s per job: queueing (submit to first start), waits after a preemption (held no GPU
between starts), start/restart delays (allocations x the engine's delay), the rest of its run, the
bound alone (`bench.pollux_bound.best_alone`, the setting's cap) and the excess over it; GPU-weighted
mean size. Cluster-wide: mean GPUs held, and GPU-seconds idle while some job waits for GPUs
(fragmentation and sizes that leave room unused) over the replay.

`--rates` (best21) also follows each job's progress rate while it runs and splits the time it ran into
the bound's share and three losses, per piece of progress `dp` in epoch `e` on `g` GPUs (each rate the
truth's, `PeerTruth.at_counts`, at the batches `bench.pollux_bound` tries): *batch* `dp / r_held -
dp / r(counts)` (the batch it ran below the best one on the GPUs and nodes it held), *placement*
`dp / r(counts) - dp / r(packed g)` (spread over more nodes than `g` needs), *GPUs* `dp / r(packed g) -
dp / r_cap` (held fewer GPUs than its bound's best, the setting's cap at most). With the queueing, the
waits and the (re)start delays they add up to the excess over the bound (`check`: what is left, ~0).
The model's predicted goodput at each held size and batch (`GoodputSpeed.goodput` of the model the
controller held when the run began) against the truth there: time-weighted signed and absolute error.

`--spread` (best27) reads the same pieces for placement alone: the share of each application's GPU-s run on more
nodes than its size needs (`pollux_bound.packed`, 4-GPU nodes), and the truth's charge for it at the batch it ran
(`PeerTruth.at_counts` on the held nodes vs packed, same size and batch; `spread_split`).

`--widths` (best28) reads them for the width of each placement: the share of the sizes one node holds and of the
larger ones run on exactly two nodes (the profiles' slow case), and the seconds each piece would not have run at
the best of a few widths (packed, 3 / 2 / 1 a node, three nodes; same size and batch, the truth's rates;
`width_split`): what any placement rule could still win at the sizes the jobs ran.

    .venv/bin/python -m bench.contention [--load 1] [--workloads 1-2] [--setting elastic] [--rates] [--spread]
        [--widths]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.pollux_bound import DATA, batches_for, best_alone, packed
from bench.presets import CLUSTER, SETTINGS, parse_range, workload
from trainmaster.cli.simulate import config_for, sim_config
from trainmaster.controller.loop import Controller
from trainmaster.controller.records import JobRecord
from trainmaster.core.cluster import parse_shorthand
from trainmaster.engines.sim.engine import SimEngine
from trainmaster.models.speed import Config
from trainmaster.policies.registry import make_policy
from trainmaster.workloads.pollux import load_profile, peer_max_replicas, worker_counts
from trainmaster.workloads.pollux_peer import PeerTruth

COLUMNS = ("jct", "queue", "preempted", "delays", "run rest", "bound", "excess", "allocs", "shrinks", "GPUs",
           "delay GPU-s")
RATE_COLUMNS = ("jct", "bound", "excess", "queue", "waits", "ran", "batch", "placement", "GPUs lost", "check",
                "GPUs", "cap", "pred err %", "pred |err| %",
                "steps/s err %", "2x err %")


@dataclass(frozen=True)
class Piece:
    """A stretch of one job's run at a constant rate: `dt` seconds, `dp` steps (at its submitted batch) from
    `done`, on `counts` replicas per node, with the model's predicted rate there (None: it had none)."""

    dt: float
    dp: float
    done: float
    counts: tuple[int, ...]
    predicted: float | None
    throughput: float = math.nan  # the model's predicted optimizer steps/s there over the truth's, minus 1
    doubling: float = math.nan  # the model's predicted speedup from twice the GPUs (packed) over the truth's, minus 1
    batch: int | None = None  # the global batch it ran at (None: its truth models no batches)


_STEPS: dict[tuple[str, tuple[int, ...]], list[tuple[float, float]]] = {}
_BEST: dict[tuple[str, int, tuple[int, ...], int], float] = {}


def best_rate(truth: PeerTruth, app: str, counts: tuple[int, ...], epoch: int) -> float:
    """The truth's best rate (steps at the submitted batch per s) on `counts` in `epoch`, over the bound's batches
    (`PeerTruth.at_counts`'s rate: the step time, kept per batch, times the epoch's gain ratio)."""
    key = (app, truth.batch_size, counts, epoch)
    got = _BEST.get(key)
    if got is None:
        model = truth.model
        steps = _STEPS.get((app, counts))
        if steps is None:
            grid = batches_for(app, sum(counts)) or batches_for(app, 1)
            batchings = [model.batching(sum(counts), b) for b in grid]
            steps = _STEPS[app, counts] = [(float(x.batch), 1.0 / model.step_time(counts, x)) for x in batchings]
        base = model.gain(float(truth.batch_size), epoch)
        got = _BEST[key] = max(per_s * model.gain(b, epoch) / base for b, per_s in steps)
    return got
def epoch_of(truth: PeerTruth, done: float) -> int:
    """The epoch `done` steps fall in (as `PeerTruth.at_counts` reads it)."""
    ends = truth.model.cumulative_steps(float(truth.batch_size))
    return min(max(bisect.bisect_right(ends, done + 1e-9 * max(ends[-1], 1.0)) - 1, 0), truth.model.epochs - 1)


_CAP: dict[tuple[str, int, int | None, int], float] = {}


def cap_rate(truth: PeerTruth, app: str, cap: int | None, epoch: int) -> float:
    """The bound's rate in `epoch`: the best over 1 to `cap` replicas packed (`pollux_bound.best_per_epoch`'s)."""
    key = (app, truth.batch_size, cap, epoch)
    got = _CAP.get(key)
    if got is None:
        top = min(peer_max_replicas(load_profile(DATA / "profiles" / app)), cap or 10**9)
        got = _CAP[key] = max(best_rate(truth, app, tuple(packed(r)), epoch) for r in range(1, top + 1))
    return got


def rate_split(pieces: Sequence[Piece], truth: PeerTruth, app: str, cap: int | None) -> dict[str, float]:
    """Seconds the job ran, split into the bound's share and the batch, placement and GPU-count losses
    (module doc); the model's time-weighted signed and absolute % error at the held sizes."""
    out = dict.fromkeys(("ran", "at bound", "batch", "placement", "GPUs lost"), 0.0)
    err = abs_err = timed = thr = dbl = 0.0
    for p in pieces:
        e = epoch_of(truth, p.done)
        held = p.dp / p.dt  # (constant over the piece)
        here = best_rate(truth, app, p.counts, e)
        whole = best_rate(truth, app, tuple(packed(sum(p.counts))), e)
        bound = cap_rate(truth, app, cap, e)
        out["ran"] += p.dt
        out["batch"] += p.dt - p.dp / here
        out["placement"] += p.dp / here - p.dp / whole
        out["GPUs lost"] += p.dp / whole - p.dp / bound
        out["at bound"] += p.dp / bound
        if p.predicted is not None and held > 0:
            err += p.dt * (p.predicted / held - 1.0)
            abs_err += p.dt * abs(p.predicted / held - 1.0)
            thr += p.dt * p.throughput
            dbl += p.dt * p.doubling
            timed += p.dt
    out["pred err %"] = 100.0 * err / timed if timed else math.nan
    out["pred |err| %"] = 100.0 * abs_err / timed if timed else math.nan
    out["steps/s err %"] = 100.0 * thr / timed if timed else math.nan
    out["2x err %"] = 100.0 * dbl / timed if timed else math.nan
    return out


SPREAD_COLUMNS = ("GPU-s", "spread GPU-s %", "extra nodes", "spread loss", "spread rate loss %")


def spread_split(pieces: Sequence[Piece], truth: PeerTruth) -> dict[str, float]:
    """GPU-s run on more nodes than the size needs (`packed`), and what the truth charges for it: seconds the job
    would not have run packed at the same size and batch (`dt - dp / r(packed)`: the truth's rate there), the mean
    extra nodes and the rate lost (time-weighted over the spread pieces); pieces without a batch are left out."""
    gpu_s = spread = extra = lost = slow = timed = one_gpu_s = one_lost = 0.0
    for p in pieces:
        g = sum(p.counts)
        gpu_s += p.dt * g
        whole = packed(g)
        if p.batch is None or len(p.counts) <= len(whole):
            continue
        rate = truth.at_counts(whole, p.batch, p.done).rate
        spread += p.dt * g
        extra += p.dt * (len(p.counts) - len(whole))
        lost += p.dt - p.dp / rate
        slow += p.dt * (1.0 - p.dp / p.dt / rate)
        timed += p.dt
        if len(whole) == 1:  # a size one node holds
            one_gpu_s += p.dt * g
            one_lost += p.dt - p.dp / rate
    return {"GPU-s": gpu_s, "spread GPU-s": spread, "spread time": timed, "extra node-s": extra, "spread loss": lost,
            "slow s": slow, "one-node spread GPU-s": one_gpu_s, "one-node loss": one_lost}


def even_over(g: int, nodes: int) -> tuple[int, ...]:
    """`g` replicas split as evenly as they go over `nodes` nodes (at most `g` of them, at least one)."""
    k = max(1, min(nodes, g))
    base, extra = divmod(g, k)
    return (base + 1,) * extra + (base,) * (k - extra)


def widths(g: int, nodes: int) -> list[tuple[int, ...]]:
    """The placements `width_split` tries for `g` replicas on a cluster of `nodes` nodes: packed, at most three,
    two and one a node (evenly), and over three nodes."""
    return [tuple(packed(g)), *(even_over(g, min(-(-g // k), nodes)) for k in (3, 2, 1)), even_over(g, 3)]


def width_split(pieces: Sequence[Piece], truth: PeerTruth, nodes: int) -> dict[str, float]:
    """GPU-s of the sizes one node holds and of the larger ones, each's share run on exactly two nodes, and the
    seconds each would not have run at the best of `widths` (same size and batch, the truth's rates; never
    below 0: the placement it ran at is one choice); pieces without a batch count in the GPU-s only."""
    out = dict.fromkeys(("GPU-s", "one GPU-s", "one two-node GPU-s", "multi GPU-s", "multi two-node GPU-s",
                         "one saved", "multi saved"), 0.0)
    for p in pieces:
        g = sum(p.counts)
        part = "one" if len(packed(g)) == 1 else "multi"
        out["GPU-s"] += p.dt * g
        out[f"{part} GPU-s"] += p.dt * g
        if len(p.counts) == 2:
            out[f"{part} two-node GPU-s"] += p.dt * g
        if p.batch is not None:
            saved = max(p.dt - p.dp / truth.at_counts(c, p.batch, p.done).rate for c in widths(g, nodes))
            out[f"{part} saved"] += max(saved, 0.0)
    return out


def follow_rates(engine: SimEngine, controller: Controller) -> dict[str, list[Piece]]:
    """Wrap the engine's `_advance` / `_set_rate` (bench-only) to record every job's `Piece`s as it runs."""
    pieces: dict[str, list[Piece]] = defaultdict(list)
    ids = {id(job): jid for jid, job in engine._jobs.items()}
    predicted: dict[str, tuple[float | None, float, float]] = {}
    batches: dict[str, int | None] = {}
    advance, set_rate = engine._advance, engine._set_rate

    def advance_(job: Any, now: float) -> None:
        before, since, alloc = job.done, job.since, job.allocation
        advance(job, now)
        if job.running and now > since and job.done > before:
            jid = ids[id(job)]
            pieces[jid].append(Piece(now - since, job.done - before, before, tuple(worker_counts(alloc)),
                                     *predicted.get(jid, (None, math.nan, math.nan)), batches.get(jid)))

    def set_rate_(job: Any, now: float) -> None:
        set_rate(job, now)
        jid = ids[id(job)]
        model = controller.models.get(jid)
        counts = worker_counts(job.allocation)
        predicted[jid] = (None, math.nan, math.nan)
        batches[jid] = job.run.batch if job.run is not None else None
        if model is not None and model.goodput is not None and job.batch is not None and job.run is not None and counts:
            c = Config(workers=sum(counts), ps=0, nodes=len(counts), batch=float(job.batch))
            g = model.goodput
            steps = g.speed.steps_per_s(c)
            w = 2 * sum(counts)
            twice = g.steps_per_s(Config(workers=w, ps=0, nodes=len(packed(w)), batch=float(job.batch)))
            app = jid.rsplit("-", 1)[0]
            e = epoch_of(job.truth, job.done)
            true = best_rate(job.truth, app, tuple(packed(w)), e) / best_rate(job.truth, app, tuple(counts), e)
            pred = twice / max(g.steps_per_s(c), 1e-12)
            predicted[jid] = (g.goodput(c, float(job.batch)), steps / job.run.steps_per_s - 1.0, pred / true - 1.0)

    engine._advance = advance_  # type: ignore[method-assign]
    engine._set_rate = set_rate_  # type: ignore[method-assign]
    return pieces


def replay(load: float, index: int, setting: str, preset: str, rates: bool = False) -> tuple[
        dict[str, list[tuple[float, int]]], dict[str, JobRecord], float, dict[str, list[Piece]]]:
    """Every job's (time, GPUs held) steps, its record, the engine's restart delay, and (`rates`) its `Piece`s."""
    wl = workload(load, index, SETTINGS[setting], False, "pollux")
    config = config_for(preset, sim_config("pollux"))
    engine = SimEngine(parse_shorthand(CLUSTER), wl, config)
    controller = Controller(engine, make_policy(preset))
    pieces = follow_rates(engine, controller) if rates else {}
    steps: dict[str, list[tuple[float, int]]] = defaultdict(list)

    def listen(what: str, record: JobRecord) -> None:
        got = steps[record.id]
        if not got or got[-1][1] != record.gpus_held:
            got.append((engine.clock.now(), record.gpus_held))

    controller.listeners.append(listen)
    controller.run()
    return steps, dict(controller.jobs), config.restart_delay, pieces


def split(record: JobRecord, steps: list[tuple[float, int]], delay: float) -> dict[str, float]:
    """One job's JCT split: queueing, waits after preemption, delays (allocations x delay), the rest of its run."""
    assert record.first_start is not None and record.finish_time is not None, record.id
    held = [(t, g) for t, g in steps if record.first_start <= t <= record.finish_time]
    preempted, gpu_s, allocs, shrinks, wasted, last = 0.0, 0.0, 0, 0, 0.0, (record.first_start, 0)
    for t, g in [*held, (record.finish_time, 0)]:
        if last[1] == 0:
            preempted += t - last[0]
        gpu_s += (t - last[0]) * last[1]
        if last[1]:  # (the GPUs a start or restart holds through its delay)
            wasted += min(delay, t - last[0]) * last[1]
        if g and g != last[1]:
            allocs += 1
            shrinks += 0 < g < last[1]
        last = (t, g)
    queue = record.first_start - record.submit_time
    jct = record.finish_time - record.submit_time
    run = record.finish_time - record.first_start - preempted
    delays = min(allocs * delay, run)
    return {"jct": jct, "queue": queue, "preempted": preempted, "delays": delays, "run rest": run - delays,
            "allocs": allocs, "shrinks": shrinks, "gpu_s": gpu_s, "run": run, "delay GPU-s": wasted}


def idle_while_waiting(records: dict[str, JobRecord], steps: dict[str, list[tuple[float, int]]],
                       total: int) -> tuple[float, float, float]:
    """(GPU-s idle while some job waited without GPUs, GPU-s held, makespan) over the replay."""
    events: list[tuple[float, str, int]] = []
    for jid, rec in records.items():
        assert rec.finish_time is not None
        events.append((rec.submit_time, jid, -1))
        events.extend((t, jid, g) for t, g in steps[jid] if t < rec.finish_time)  # (a stop may be told later)
        events.append((rec.finish_time, jid, -2))
    events.sort(key=lambda e: e[0])
    held: dict[str, int] = {}
    waiting: set[str] = set()
    idle = used = 0.0
    last = events[0][0]
    for t, jid, g in events:
        busy = sum(held.values())
        used += (t - last) * busy
        if waiting:
            idle += (t - last) * (total - busy)
        last = t
        if g == -1:
            waiting.add(jid)
        elif g == -2:
            waiting.discard(jid)
            held.pop(jid, None)
        else:
            held[jid] = g
            (waiting.discard if g else waiting.add)(jid)
    return idle, used, last - events[0][0]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--load", type=float, default=1.0)
    parser.add_argument("--workloads", default="1-2")
    parser.add_argument("--setting", default="elastic", choices=sorted(SETTINGS))
    parser.add_argument("--preset", default="trainmaster")
    parser.add_argument("--rates", action="store_true", help="also split the time run by rate (module doc)")
    parser.add_argument("--spread", action="store_true", help="also the GPU-s run spread over more nodes than "
                        "needed, and the truth's charge for it (module doc)")
    parser.add_argument("--widths", action="store_true", help="also the GPU-s run on two nodes and what the best "
                        "width would have saved (module doc)")
    args = parser.parse_args()
    folder = DATA / ("workloads" if args.load == 1.0 else f"workloads-{args.load:.1f}")
    rows: dict[str, list[dict[str, float]]] = defaultdict(list)
    rated: dict[str, list[dict[str, float]]] = defaultdict(list)
    spreads: dict[str, list[dict[str, float]]] = defaultdict(list)
    wide: dict[str, list[dict[str, float]]] = defaultdict(list)
    follow = args.rates or args.spread or args.widths
    nodes = len(parse_shorthand(CLUSTER).nodes)
    total_gpus = sum(n.capacity.gpu for n in parse_shorthand(CLUSTER).nodes)
    for n in parse_range(args.workloads):
        with open(folder / f"workload-{n}.csv", newline="") as f:
            meta = {r["name"]: r for r in csv.DictReader(f)}
        truths = truths_of(args.load, n, args.setting) if follow else {}
        steps, records, delay, pieces = replay(args.load, n, args.setting, args.preset, follow)
        idle, used, span = idle_while_waiting(records, steps, total_gpus)
        waste = sum(split(rec, steps[jid], delay)["delay GPU-s"] for jid, rec in records.items())
        print(f"workload {n}: GPU-s held through (re)start delays {waste:,.0f} ({waste / used:.1%} of those held)")
        print(f"workload {n}: mean GPUs held {used / span:.1f} of {total_gpus}, GPU-s idle while a job waited "
              f"{idle:,.0f} ({idle / (span * total_gpus):.1%} of the replay's GPU-s), makespan {span:,.0f} s")
        factor = SETTINGS[args.setting]
        for jid, rec in records.items():
            r = meta[jid]
            cap = None if math.isinf(factor) else int(int(r["num_replicas"]) * factor)
            row = split(rec, steps[jid], delay)
            row["bound"] = best_alone(r["application"], cap)[0]
            row["excess"] = row["jct"] - row["bound"]
            row["GPUs"] = row["gpu_s"] / max(row["run"], 1e-9)
            rows[r["application"]].append(row)
            if args.rates:
                rated[r["application"]].append(rated_row(rec, row, pieces[jid], truths[jid], r["application"], cap))
            if args.spread:
                spreads[r["application"]].append({**spread_split(pieces[jid], truths[jid]), "ran": row["run"]})
            if args.widths:
                wide[r["application"]].append({**width_split(pieces[jid], truths[jid], nodes), "jct": row["jct"]})
    every = [x for v in rows.values() for x in v]
    excess = sum(x["excess"] for x in every)
    print(f"load {args.load:g}, workloads {args.workloads}, {args.setting}, {args.preset}; mean s per job")
    print("| application | jobs | " + " | ".join(COLUMNS) + " | share of excess |")
    print("| --- | ---: |" + " ---: |" * (len(COLUMNS) + 1))
    groups = sorted(rows.items(), key=lambda kv: -sum(x["excess"] for x in kv[1]))
    for app, v in [*groups, ("all", every)]:
        cells = " | ".join(f"{statistics.mean(x[c] for x in v):,.{1 if c in ('allocs', 'shrinks', 'GPUs') else 0}f}"
                           for c in COLUMNS)
        print(f"| {app} | {len(v)} | {cells} | {sum(x['excess'] for x in v) / excess:.0%} |")
    if args.rates:
        print_rates(rated)
    if args.spread:
        print_spread(spreads)
    if args.widths:
        print_widths(wide)


def truths_of(load: float, index: int, setting: str) -> dict[str, PeerTruth]:
    """The workload's jobs' truths (the replay builds its own copy of the same workload)."""
    wl = workload(load, index, SETTINGS[setting], False, "pollux")
    return {j.job_id: j.truth for j in wl.jobs if isinstance(j.truth, PeerTruth)}


def rated_row(rec: JobRecord, row: dict[str, float], pieces: list[Piece], truth: PeerTruth, app: str,
              cap: int | None) -> dict[str, float]:
    """One job's `RATE_COLUMNS`: `split`'s JCT, queueing and bound with `rate_split`'s parts of its run."""
    got = rate_split(pieces, truth, app, cap)
    ran = got["ran"]
    out = {"jct": row["jct"], "bound": row["bound"], "excess": row["excess"], "queue": row["queue"],
           "waits": row["jct"] - row["queue"] - ran, "ran": ran, "batch": got["batch"],
           "placement": got["placement"], "GPUs lost": got["GPUs lost"], "check": got["at bound"] - row["bound"],
           "GPUs": sum(p.dt * sum(p.counts) for p in pieces) / max(ran, 1e-9),
           "cap": float(min(cap or 10**9, peer_max_replicas(load_profile(DATA / "profiles" / app)))),
           "pred err %": got["pred err %"], "pred |err| %": got["pred |err| %"],
           "steps/s err %": got["steps/s err %"], "2x err %": got["2x err %"]}
    return out


def print_spread(spreads: dict[str, list[dict[str, float]]]) -> None:
    """The `--spread` table: per application, the GPU-s run spread, the mean extra nodes while spread, the
    truth's charge (s per job; a negative one: faster spread than packed) and the rate lost while spread."""
    every = [x for v in spreads.values() for x in v]
    print("\nspread: GPU-s on more nodes than the size needs; loss = s a job would not have run packed (same size "
          "and batch, the truth's rate); rate loss = 1 - rate held / rate packed while spread")
    print("| application | jobs | GPU-s a job | spread GPU-s % | extra nodes | spread loss (s a job) | "
          "of the time run % | spread rate loss % | one-node sizes: spread GPU-s % | loss (s a job) |")
    print("| --- | ---: |" + " ---: |" * 8)
    groups = sorted(spreads.items(), key=lambda kv: -sum(x["spread loss"] for x in kv[1]))
    for app, v in [*groups, ("all", every)]:
        t = {k: sum(x[k] for x in v) for k in v[0]}
        timed = t["spread time"] or math.inf  # (none spread: the per-spread-second columns read 0)
        cells = (f"{t['GPU-s'] / len(v):,.0f}", f"{100 * t['spread GPU-s'] / t['GPU-s']:.1f}",
                 f"{t['extra node-s'] / timed:.2f}", f"{t['spread loss'] / len(v):,.1f}",
                 f"{100 * t['spread loss'] / t['ran']:.2f}", f"{100 * t['slow s'] / timed:.1f}",
                 f"{100 * t['one-node spread GPU-s'] / t['GPU-s']:.1f}", f"{t['one-node loss'] / len(v):,.1f}")
        print(f"| {app} | {len(v)} | {' | '.join(cells)} |")


def print_widths(wide: dict[str, list[dict[str, float]]]) -> None:
    """The `--widths` table: per application, the GPU-s a job, the share of the one-node sizes' and of the larger
    sizes' GPU-s run on exactly two nodes, and the s a job the best width would have saved (`width_split`)."""
    every = [x for v in wide.values() for x in v]
    print("\nwidths: two-node = GPU-s on exactly two nodes; saved = s a job not run at the best of packed, 3 / 2 / 1 "
          "a node, three nodes (same size and batch, the truth's rate), and its share of the summed JCT")
    print("| application | jobs | GPU-s a job | one-node sizes: GPU-s % | two-node % | saved (s a job) | larger: "
          "two-node % | saved (s a job) | saved, of the JCT % |")
    print("| --- | ---: |" + " ---: |" * 7)
    for app, v in [*sorted(wide.items()), ("all", every)]:
        t = {k: sum(x[k] for x in v) for k in v[0]}
        cells = (f"{t['GPU-s'] / len(v):,.0f}", f"{100 * t['one GPU-s'] / (t['GPU-s'] or 1):.1f}",
                 f"{100 * t['one two-node GPU-s'] / (t['one GPU-s'] or 1):.1f}", f"{t['one saved'] / len(v):,.1f}",
                 f"{100 * t['multi two-node GPU-s'] / (t['multi GPU-s'] or 1):.1f}",
                 f"{t['multi saved'] / len(v):,.1f}",
                 f"{100 * (t['one saved'] + t['multi saved']) / (t['jct'] or 1):.2f}")
        print(f"| {app} | {len(v)} | {' | '.join(cells)} |")


def print_rates(rated: dict[str, list[dict[str, float]]]) -> None:
    """The `--rates` table: per application, mean s per job, and each part's share of the excess."""
    every = [x for v in rated.values() for x in v]
    excess = sum(x["excess"] for x in every)
    print("\nrates: waits = preempted + (re)start delays; batch / placement / GPUs lost: time run beyond the bound's "
          "(module doc); check = the bound's share of the run - the bound (~0)")
    print("| application | jobs | " + " | ".join(RATE_COLUMNS) + " | share of excess |")
    print("| --- | ---: |" + " ---: |" * (len(RATE_COLUMNS) + 1))
    groups = sorted(rated.items(), key=lambda kv: -sum(x["excess"] for x in kv[1]))
    for app, v in [*groups, ("all", every)]:
        cells = []
        for c in RATE_COLUMNS:
            vals = [x[c] for x in v if not math.isnan(x[c])]
            cells.append(f"{statistics.mean(vals):,.{1 if c in ('GPUs', 'cap') or '%' in c else 0}f}" if vals else "-")
        print(f"| {app} | {len(v)} | {' | '.join(cells)} | {sum(x['excess'] for x in v) / excess:.0%} |")
    parts = ("queue", "waits", "batch", "placement", "GPUs lost", "check")
    print("share of the excess (all): " + ", ".join(f"{c} {sum(x[c] for x in every) / excess:.0%}" for c in parts))


if __name__ == "__main__":
    main()
