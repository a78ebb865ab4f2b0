"""The goodput law beyond a job's largest size by its type's pooled scaling (`ModelBook.anchor_unseen`, off; best25,
issue 11: screened, lost w1 and w2 at load 1, kept behind the switch)."""

from __future__ import annotations

import pytest

from trainmaster.core.allocation import Allocation, Placement
from trainmaster.core.events import Report
from trainmaster.core.job import BatchRange, JobSpec, Role, simple_job
from trainmaster.models.book import ModelBook
from trainmaster.models.speed import Anchored, Config, Form, MicroFit, SpeedFit, SpeedPredictor, for_local_max

BOUNDS = BatchRange(min=256, max=8192, base=2048)
# step time a + b m + sync: one-node 0.02 s; across nodes 0.15 s + 0.01 s per replica past 2 (the type, siblings)
TYPE = SpeedFit(Form.ALLREDUCE, (0.01, 0.0004, 0.02, 0.0, 0.15, 0.01))
# a job of the type that runs across nodes with a flatter sync (0.05 s per replica): its own rows say so up to 8
OWN = SpeedFit(Form.ALLREDUCE, (0.01, 0.0004, 0.02, 0.0, 0.15, 0.005))


def observe(book: ModelBook, job: str, spec: JobSpec, law: SpeedPredictor,
            runs: tuple[tuple[int, int, int], ...]) -> None:
    """`job` reports once per (workers, nodes, global batch) run, packed, at `law`'s speed."""
    for i, (w, nodes, batch) in enumerate(runs):
        per = -(-w // nodes)
        alloc = Allocation.of(Placement(Role.WORKER, f"n{k // per}") for k in range(w))
        speed = law.steps_per_s(Config(w, 0, nodes, float(batch)))
        book.observe(job, spec, Report(float(i), job, 10 * (i + 1), loss=1.0, steps_per_s=speed, allocation=alloc,
                                       batch=batch, grad_sqr=1.0, grad_var=0.1))


def test_anchored_is_the_own_law_up_to_the_anchor_and_the_type_ratio_beyond() -> None:
    law = Anchored(OWN, TYPE, 8, 2)
    for w, n in ((1, 1), (4, 1), (8, 2), (6, 2)):
        c = Config(w, 0, n, 2048.0)
        assert law.steps_per_s(c) == OWN.steps_per_s(c)
    for w, n, batch in ((16, 4, 2048.0), (32, 8, 2048.0), (16, 4, 4096.0), (12, 3, 1024.0)):
        c = Config(w, 0, n, batch)
        anchor = Config(8, 0, 2, batch)
        want = OWN.steps_per_s(anchor) * TYPE.steps_per_s(c) / TYPE.steps_per_s(anchor)
        assert law.steps_per_s(c) == pytest.approx(want, rel=1e-12)
        assert law.steps_per_s(c) != pytest.approx(OWN.steps_per_s(c), rel=1e-3)  # the shapes differ there
    # an anchor on one node stays there (the law's sync differs by regime): 8 on 2 from 4 on 1
    one = Anchored(OWN, TYPE, 4, 1)
    c, anchor = Config(8, 0, 2, 2048.0), Config(4, 0, 1, 2048.0)
    assert one.steps_per_s(c) == pytest.approx(OWN.steps_per_s(anchor) * TYPE.steps_per_s(c) / TYPE.steps_per_s(anchor),
                                               rel=1e-12)
    # 16 on 4 nodes, by hand: own at 8 on 2 is 1 / 0.2924 s; the type's step 0.3224 s there, 0.3512 s at 16 on 4
    assert law.steps_per_s(Config(16, 0, 4, 2048.0)) == pytest.approx(0.3224 / 0.3512 / 0.2924, rel=1e-9)


@pytest.mark.parametrize("on", [False, True])
def test_a_job_beyond_its_largest_size_reads_its_types_scaling(on: bool) -> None:
    """Siblings ran 8 to 64 GPUs on the type's law; job "a" ran 1-4 on one node and 8 on 2 at its own. Switch on:
    its goodput law at 16 and 32 GPUs is its own speed at 8 on 2 times the type's pooled fit's speedup from there
    (the type's shape: within 3% of the type's law's ratio); at its own sizes the own fit. Off: the own fit."""
    book = ModelBook()
    book.anchor_unseen = on
    for s in ("s1", "s2"):
        sib = simple_job(s, 1, max_gpus=64, adaptive_batch=BOUNDS, job_type="t")
        observe(book, s, sib, TYPE, ((8, 2, 2048), (16, 4, 2048), (32, 8, 2048), (64, 16, 4096), (16, 4, 4096)))
    spec = simple_job("a", 1, max_gpus=64, adaptive_batch=BOUNDS, job_type="t")
    observe(book, "a", spec, OWN, ((1, 1, 2048), (2, 1, 2048), (4, 1, 2048), (8, 2, 2048)))
    model = book.model("a", spec)
    assert model.basis == "own fit" and model.goodput is not None
    law = model.goodput.speed
    anchor = Config(8, 0, 2, 2048.0)
    if not on:
        assert isinstance(law, MicroFit)
        return
    assert isinstance(law, Anchored) and (law.workers, law.nodes) == (8, 2)
    own = law.own
    assert isinstance(own, MicroFit)
    typed = for_local_max(book.priors.fitted("t", Form.ALLREDUCE, 6, False), None)
    assert typed is not None and law.type_law == typed
    for w, n in ((4, 1), (8, 2)):
        assert law.steps_per_s(Config(w, 0, n, 2048.0)) == own.steps_per_s(Config(w, 0, n, 2048.0))
    for w, n in ((16, 4), (32, 8)):
        c = Config(w, 0, n, 2048.0)
        got = law.steps_per_s(c)
        assert got == pytest.approx(own.steps_per_s(anchor) * typed.steps_per_s(c) / typed.steps_per_s(anchor),
                                    rel=1e-12)
        # the speedup from its largest size is the type's (its siblings measured it; the pooled fit holds job "a"'s
        # rows too: within 3%), nearer it than the own fit's (16 on 4: 0.908 and 0.889 against the type's 0.918;
        # the own fit's one multi-node size leaves its slope to the siblings' rows, weighted 1 in all)
        ratio, typed_ratio = got / law.steps_per_s(anchor), TYPE.steps_per_s(c) / TYPE.steps_per_s(anchor)
        assert ratio == pytest.approx(typed_ratio, rel=0.03)
        assert abs(ratio - typed_ratio) < abs(own.steps_per_s(c) / own.steps_per_s(anchor) - typed_ratio)
