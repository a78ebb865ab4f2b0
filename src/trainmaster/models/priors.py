"""Per-job-type priors: speed observations pooled across the jobs of one type (`spec.job_type`).

A new job of a known type starts from what its siblings taught: the same
model family scales the same way once the batch size is a feature (the forms
in `speed` all take the global batch M). Bounded: only the newest jobs count.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from trainmaster.models.speed import Config, Form, Row, SpeedFit, deferred_fit, features, fit, goodput_features

MAX_JOBS_PER_TYPE = 50
_UNFITTED: object = object()  # (`fitted`: no fit kept for the key yet; a kept one may be None)
Shape = tuple[int, int, int]  # workers, parameter servers, nodes: what `fitted` counts distinct configurations by


def _shapes(rows: dict[Config, Row]) -> Counter[Shape]:
    return Counter((c.workers, c.ps, c.nodes) for c in rows)


class TypePriors:
    """Observations by (type, form), job and configuration; a fit cached per (type, form) until new data arrives.

    Each (type, form) also keeps how many of its rows have each shape (`Shape`), updated as a job's rows are
    replaced or dropped: `fitted` answers "too few distinct configurations" from it without rebuilding every
    row of the type after each update (a type's prior is read at the next report after every update).
    Each job's rows' `features` are kept too, computed when its configurations change: a refit after an
    update (one job's means moved) hands `fit` the same rows of features it would compute.

    Local-batch caps (`BatchRange.local_max`): each job's is kept with its rows. The goodput law's fit
    (`cross_slope=False`, all-reduce) counts each row's micro-batches with the cap of the job that ran it
    (`goodput_features`, kept per job as `features` are: what that job computed); a job asking for
    the prior predicts with its own (`speed.for_local_max`). Siblings that declare different caps thus share
    one fit: the fixed cost per micro-batch is the model's, the count each job's.
    """

    count_shapes = True  # False: count the distinct configurations from the rows at each refit (the reference)
    # `speed.deferred_fit`: a refit solved when its coefficients are first read, not when it is asked for (each
    # report's model captures its type's fit; on Philly's trainmaster run nobody reads a running job's speed).
    # False: solved at once (the reference).
    defer_fits = True
    keep_features = True  # False: `fit` computes every row's features at each refit (the reference)

    def __init__(self, max_jobs: int = MAX_JOBS_PER_TYPE) -> None:
        self.max_jobs = max_jobs
        self._rows: dict[tuple[str, Form], OrderedDict[str, dict[Config, Row]]] = {}
        self._fits: dict[tuple[str, Form, bool], SpeedFit | None] = {}  # (type, form, cross_slope) -> fit
        self._shapes: dict[tuple[str, Form], Counter[Shape]] = {}  # rows per shape, over the jobs in `_rows`
        self._table: dict[tuple[str, Form], dict[str, list[tuple[float, ...]]]] = {}  # job -> its rows' features
        self._caps: dict[tuple[str, Form], dict[str, int]] = {}  # job -> its local-batch cap (jobs that declare one)
        self._micro: dict[tuple[str, Form], dict[str, list[tuple[float, ...]]]] = {}  # job -> `goodput_features`
        self.version: dict[tuple[str, Form], int] = {}
        self.updates = 0  # `update`s over every (type, form): a reader tells "none since" with one int compare

    def update(self, job_type: str, form: Form, job_id: str, rows: dict[Config, Row],
               local_max: int | None = None) -> None:
        """Replace `job_id`'s rows; `local_max`: its local-batch cap, if it declares one."""
        key = (job_type, form)
        jobs: OrderedDict[str, dict[Config, Row]] = self._rows.setdefault(key, OrderedDict())
        shapes = self._shapes.setdefault(key, Counter())
        table = self._table.setdefault(key, {})
        if local_max is not None:
            self._caps.setdefault(key, {})[job_id] = local_max
        old = jobs.get(job_id)
        if old is None or old.keys() != rows.keys():  # (else only the rows' means moved)
            if old is not None:
                shapes -= _shapes(old)
            shapes += _shapes(rows)
            table[job_id] = [features(form, c) for c in rows]
            if form is Form.ALLREDUCE:
                self._micro.setdefault(key, {})[job_id] = [goodput_features(c, local_max) for c in rows]
        jobs[job_id] = dict(rows)
        jobs.move_to_end(job_id)
        while len(jobs) > self.max_jobs:
            gone, dropped = jobs.popitem(last=False)
            shapes -= _shapes(dropped)
            del table[gone]
            self._caps.get(key, {}).pop(gone, None)
            self._micro.get(key, {}).pop(gone, None)
        self._fits.pop((*key, True), None)
        self._fits.pop((*key, False), None)
        self.version[key] = self.version.get(key, 0) + 1
        self.updates += 1

    def rows(self, job_type: str, form: Form, exclude: str | None = None) -> list[Row]:
        jobs = self._rows.get((job_type, form))
        if jobs is None:
            return []
        return [row for jid, rows in jobs.items() if jid != exclude for row in rows.values()]

    def local_maxes(self, job_type: str, form: Form, exclude: str | None = None) -> list[int | None]:
        """Each of `rows`' local-batch cap (its job's; None where it declared none), in `rows`' order."""
        jobs = self._rows.get((job_type, form))
        if jobs is None:
            return []
        caps = self._caps.get((job_type, form), {})
        return [caps.get(jid) for jid, rows in jobs.items() if jid != exclude for _ in rows]

    def jobs(self, job_type: str, form: Form) -> int:
        return len(self._rows.get((job_type, form), {}))

    def fitted(self, job_type: str, form: Form, min_configs: int, cross_slope: bool = True) -> SpeedFit | None:
        """The pooled fit of this type, or None while it has seen fewer than `min_configs` configurations.

        `cross_slope`: as `speed.fit`'s (False: the goodput law's optimistic cross-node sync).
        """
        key = (job_type, form, cross_slope)
        found = self._fits.get(key, _UNFITTED)  # (one lookup: a key's hash is a Python call, its `Form`'s)
        if found is not _UNFITTED:
            return found  # type: ignore[return-value]
        if self.count_shapes:
            enough = len(self._shapes.get((job_type, form), ())) >= min_configs
        else:
            enough = len({(r.config.workers, r.config.ps, r.config.nodes)
                          for r in self.rows(job_type, form)}) >= min_configs
        if not enough:
            self._fits[key] = None
        elif not cross_slope and form is Form.ALLREDUCE:
            rows = self.rows(job_type, form)
            if self.keep_features:  # (kept per job, as `_table`)
                micro = self._micro[job_type, form]
                counted = [f for jid in self._rows[job_type, form] for f in micro[jid]]
            else:
                counted = [goodput_features(r.config, m)
                           for r, m in zip(rows, self.local_maxes(job_type, form), strict=True)]
            self._fits[key] = fit(form, rows, cross_slope=False, table=counted)
        elif self.keep_features:  # (the rows and their features in the same order: job by job, row by row)
            table = self._table[job_type, form]
            solve = deferred_fit if self.defer_fits else fit
            self._fits[key] = solve(form, self.rows(job_type, form), cross_slope=cross_slope,
                                    table=[f for jid in self._rows[job_type, form] for f in table[jid]])
        else:
            self._fits[key] = fit(form, self.rows(job_type, form), cross_slope=cross_slope)
        return self._fits[key]
