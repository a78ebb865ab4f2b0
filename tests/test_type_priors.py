"""`TypePriors` keeps each type's count of rows per shape and its rows' features: the same fits (or none) as
counting and computing them from the rows at each refit."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from trainmaster.models.priors import TypePriors
from trainmaster.models.speed import Config, Form, Row

SHAPES = [(1, 0, 1), (2, 0, 1), (4, 0, 1), (8, 0, 1), (8, 0, 2), (16, 0, 2), (16, 0, 4), (2, 1, 1), (4, 2, 2)]


def _recount(priors: TypePriors, key: tuple[str, Form]) -> Counter[tuple[int, int, int]]:
    return Counter((r.config.workers, r.config.ps, r.config.nodes) for r in priors.rows(*key))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_shape_counts_give_the_fits_the_rows_give(seed: int) -> None:
    """Jobs grow their rows (new configurations, some of one shape at two batches), their means move, the
    oldest are dropped past `max_jobs`, a dropped job comes back: after every update both books fit alike."""
    rng = random.Random(seed)
    kept, counted = TypePriors(max_jobs=3), TypePriors(max_jobs=3)
    counted.count_shapes = counted.keep_features = False
    learners: dict[str, dict[Config, Row]] = {}
    last: dict[tuple[Form, int, bool], bool] = {}
    flips = Counter[bool]()  # (a fit where there was none: True; none where there was one, by eviction: False)
    for _ in range(300):
        job = f"j{rng.randrange(8)}"
        form = rng.choice([Form.ALLREDUCE, Form.PS_SYNC])
        rows = learners.setdefault(f"{job}-{form.value}", {})
        if not rows or rng.random() < 0.1:  # a new configuration (a shape seen at another batch now and then)
            w, p, n = rng.choice(SHAPES)
            c = Config(w, p, n, batch=rng.choice([32.0, 64.0]))
            rows[c] = Row(c, rng.uniform(0.1, 2.0), 1)
        else:  # a mean that moved
            c = rng.choice(list(rows))
            rows[c] = Row(c, rows[c].y * rng.uniform(0.8, 1.2), rows[c].count + 1)
        for priors in (kept, counted):
            priors.update("t", form, job, rows)
        assert kept._shapes[("t", form)] == _recount(kept, ("t", form))
        assert kept._table[("t", form)].keys() == kept._rows[("t", form)].keys()
        for need in (3, 5, 7, 9):
            for cross in (True, False):
                fast, slow = kept.fitted("t", form, need, cross), counted.fitted("t", form, need, cross)
                assert fast == slow
                had = last.get((form, need, cross))
                if had is not None and had != (fast is not None):
                    flips[fast is not None] += 1
                last[form, need, cross] = fast is not None
    assert flips[True] >= 5 and flips[False] >= 5  # the threshold was crossed both ways
