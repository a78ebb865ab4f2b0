"""How right the goodput law's speed fit is at sizes a job has not run yet, against the `--fidelity pollux` truth.

Per application and global batch (the smallest validated one, and 4x it), the law
(`speed.fit(ALLREDUCE, rows, cross_slope=False)`, what adaptive jobs are sized on) is fitted to the
truth's steps/s at the sizes a job would have run (scenario `one-node`: 1, 2, 4 GPUs on one node,
at B and 2B; `one-multi`: plus 8 GPUs on two nodes) and asked for sizes it has not (16 / 4 nodes,
12 / 3, 8 / 2, 6 / 2, 3 / 1, at B). Printed: each variant's mean absolute % error of predicted
steps/s, per scenario, and the per-app errors. Variants: `reference` (the law as it is) and `micro`
(its fixed term counted once per micro-batch the truth accumulates: what a law would read if jobs
declared their local-batch cap, as Pollux's do; yolov3 8, bert 12, imagenet 200, cifar10 1,024).
The thirteenth look's other variants (bench/results/trainmaster.md) were measured with `speed.fit`
patched (kept outside the repo).

    PYTHONPATH=src:. python -m bench.speed_predict [--variants reference,micro]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path

from trainmaster.models import speed
from trainmaster.models.speed import Config, Form, Row
from trainmaster.workloads.pollux import load_profile
from trainmaster.workloads.pollux_peer import PeerModel, peer_model

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "pollux" / "profiles"
APPS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
SEEN: dict[str, tuple[tuple[int, ...], ...]] = {
    "one-node": ((1,), (2,), (4,)),
    "one-multi": ((1,), (2,), (4,), (4, 4)),
}
VARIANTS = ("reference", "micro")
UNSEEN: tuple[tuple[int, ...], ...] = ((4, 4, 4, 4), (4, 4, 4), (4, 4), (4, 2), (3,))


def truth(model: PeerModel, counts: Sequence[int], batch: int) -> tuple[Config, float, tuple[float, ...]]:
    """The configuration the job would report (trained batch), its true steps/s, and its features with the
    fixed term counted per micro-batch (what a law that knew the job's local-batch cap would read)."""
    batching = model.batching(sum(counts), batch)
    c = Config(workers=sum(counts), nodes=sum(1 for n in counts if n > 0), batch=float(batching.batch))
    return c, 1.0 / model.step_time(counts, batching), speed.goodput_row(c, batching.count)


def errors(app: str, batch: int, scenario: str, micro: bool = False) -> list[float]:
    """Signed % errors of predicted steps/s at the unseen sizes; `micro`: the fixed term per micro-batch."""
    model = peer_model(load_profile(DATA / app))
    rows, table = [], []
    for counts in SEEN[scenario]:
        for b in (batch, 2 * batch):
            c, f, x = truth(model, counts, b)
            rows.append(Row(c, 1.0 / f))
            table.append(x)
    law = speed.fit(Form.ALLREDUCE, rows, cross_slope=False, table=table if micro else None)
    assert law is not None
    out = []
    for counts in UNSEEN:
        c, f, x = truth(model, counts, batch)
        predicted = 1.0 / sum(t * v for t, v in zip(law.theta, x, strict=True)) if micro else law.steps_per_s(c)
        out.append(100.0 * (predicted - f) / f)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, of: " + ", ".join(VARIANTS))
    args = parser.parse_args(argv)
    sizes = " ".join(f"{sum(c)}/{len(c)}" for c in UNSEEN)
    for variant in args.variants.split(","):
        micro = variant == "micro"
        print(f"## variant {variant} (unseen sizes {sizes})")
        for scenario in SEEN:
            every: list[float] = []
            lines = []
            for app in APPS:
                base = min(peer_model(load_profile(DATA / app)).profile.validation)
                for batch in (base, 4 * base):
                    errs = errors(app, batch, scenario, micro)
                    every += [abs(e) for e in errs]
                    lines.append(f"  {app} B={batch}: " + " ".join(f"{e:+.0f}%" for e in errs))
            print(f"{scenario}: mean abs error {statistics.mean(every):.1f}%")
            print("\n".join(lines))


if __name__ == "__main__":
    main()
