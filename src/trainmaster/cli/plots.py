"""PNG plots of a `simulate` run (matplotlib, Agg backend: no display needed).

- `jct-cdf.png`: the distribution of job completion times, one line per policy;
- `utilization.png`: the cluster's GPUs in use over time, one panel per policy;
- `timeline-<policy>.png`: one row per job, waiting in grey and running in colour
  (only for workloads small enough to read).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from trainmaster.cli.simulate import Result

HOUR = 3600.0


def jct_cdf(results: Sequence[Result], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for r in results:
        jcts = sorted(o.jct / HOUR for o in r.outcomes if o.jct is not None and o.state.value == "succeeded")
        if not jcts:
            continue
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step(jcts, ys, where="post", label=f"{r.policy} (mean {r.summary.mean_jct / HOUR:.2f} h)")
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title("JCT distribution")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def utilization(results: Sequence[Result], path: Path) -> None:
    fig, axes = plt.subplots(len(results), 1, figsize=(8, 1.6 + 1.5 * len(results)), dpi=110, sharex=True,
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results, strict=True):
        points = r.usage or [(0.0, 0)]
        end = max((o.finish for o in r.outcomes if o.finish is not None), default=points[-1][0])
        xs = [t / HOUR for t, _ in points] + [end / HOUR]
        ys = [100.0 * used / max(r.capacity, 1) for _, used in points] + [0.0]
        ax.fill_between(xs, ys, step="post", alpha=0.35)
        ax.step(xs, ys, where="post", linewidth=0.8)
        util = r.summary.gpu_utilization
        ax.set_ylabel("% GPUs")
        ax.set_ylim(0, 105)
        ax.set_title(f"{r.policy}: {'-' if math.isnan(util) else f'{100 * util:.1f}%'} average utilization",
                     fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("simulated time (hours)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def job_timeline(r: Result, path: Path) -> None:
    """One row per job in submit order: grey while it waits, coloured while it holds GPUs."""
    done = sorted((o for o in r.outcomes if o.finish is not None and o.first_start is not None),
                  key=lambda o: (o.submit, o.id))
    height = min(40.0, 1.5 + 0.06 * len(done))
    fig, ax = plt.subplots(figsize=(9, height), dpi=100)
    widest = max((o.gpus_requested for o in done), default=1)
    cmap = plt.get_cmap("viridis")
    for row, o in enumerate(done):
        assert o.finish is not None
        ax.broken_barh([(o.submit / HOUR, (o.finish - o.submit) / HOUR)], (row - 0.4, 0.8), color="0.85")
        spans = [(a / HOUR, (b - a) / HOUR) for a, b in r.running.get(o.id, [])]
        ax.broken_barh(spans, (row - 0.4, 0.8), color=cmap(o.gpus_requested / max(widest, 1)))
    scale = plt.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, widest))
    fig.colorbar(scale, ax=ax, label="GPUs requested", fraction=0.03, pad=0.01)
    ax.set_ylim(-1, len(done))
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (hours)")
    ax.set_ylabel("job (submit order)")
    ax.set_title(f"{r.policy}: per-job timeline (grey: waiting; colour: running)", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_plots(results: Sequence[Result], out: Path, *, timeline: bool) -> list[str]:
    """Write every plot into `out`; returns the file names."""
    names = ["jct-cdf.png", "utilization.png"]
    jct_cdf(results, out / names[0])
    utilization(results, out / names[1])
    if timeline:
        for r in results:
            name = f"timeline-{r.policy}.png"
            job_timeline(r, out / name)
            names.append(name)
    return names
