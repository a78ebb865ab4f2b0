"""Online learning wired into the controller: reports in, fitted models out to `controller.models`.

`attach_learning(controller)` appends a report sink that feeds every job's
reports to a `ModelBook` and publishes the job's `JobModel` in
`controller.models[job_id]`, which each snapshot carries to the policy. A
listener publishes a model (from its type's prior) when a job is submitted,
refreshes same-type jobs still without their own points when a type prior
grows, and drops finished jobs. Models learn from reports only, whatever the engine.
Waiting jobs without reports are kept in `ModelGroups` (one model per group, copied when a snapshot's
reader asks), not in `controller.models`: a refit costs O(groups), not O(waiting jobs).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from trainmaster.controller.model_groups import ModelGroups
from trainmaster.controller.records import JobRecord
from trainmaster.core.allocation import Allocation
from trainmaster.core.cluster import Cluster
from trainmaster.core.events import Report
from trainmaster.core.job import JobSpec
from trainmaster.models.book import JobModel, ModelBook
from trainmaster.models.speed import N_PARAMS, Form, SpeedPredictor

if TYPE_CHECKING:
    from trainmaster.controller.loop import Controller

_ENDED = frozenset({"succeeded", "failed", "cancelled", "rejected"})
_NONE: dict[str, JobRecord] = {}  # (a type without such jobs: read and popped from, never written)


def one_gpu_type(cluster: Cluster, alloc: Allocation | None, spec: JobSpec) -> str | None:
    """The GPU type of every GPU task of `alloc`, or None (no GPUs, mixed types, a node gone)."""
    if not alloc:
        return None
    found: str | None = None
    for (role, node), _ in alloc.counts.items():
        if not spec.roles[role].resources.gpu:
            continue
        if node not in cluster:
            return None
        kind = cluster.node(node).gpu_type
        if kind is None or (found is not None and kind != found):
            return None
        found = kind
    return found


class Learning:
    """The report sink and job listener that keep `controller.models` fitted."""

    grouped = True  # False: one model per waiting job in `controller.models`, rebuilt at refresh (the reference)

    def __init__(self, controller: Controller, book: ModelBook | None = None) -> None:
        self.controller = controller
        self.book = book or ModelBook()
        self._waiting: dict[str, dict[str, JobRecord]] = {}  # job type -> live jobs without own points
        self._stale: dict[str, None] = {}  # job types whose waiting jobs' models `refresh` republishes
        self.defer = True  # False: republish them at every report that teaches their type (the slow reference)
        # job type -> the prior fit per form that every waiting job of the type was last published from
        self._seen: dict[str, dict[Form, SpeedPredictor | None]] = {}
        self.skip_same_prior = True  # False: check every waiting job at each refresh (the slow reference)
        self.one_fit = True  # False: each waiting job's speed asked of the book at refresh (the slow reference)
        self.lazy = True  # False: build the reporting job's whole model at each report (the slow reference)
        self.shared = True  # False: build each waiting job's model afresh at refresh (the slow reference)
        self.keep_gpu_type = True  # False: `one_gpu_type` asked at every report (the slow reference)
        # job -> the allocation, cluster and spec its last report's `one_gpu_type` was asked of, and the answer
        self._gpu_type: dict[str, tuple[Allocation | None, Cluster, JobSpec, str | None]] = {}
        self.groups = ModelGroups()  # waiting jobs without reports, one model per group (`grouped`)
        self._loose: dict[str, dict[str, JobRecord]] = {}  # job type -> its waiting jobs not in `groups`
        # A reporting job's model is built once per snapshot (`publish`), not at each report: most are replaced
        # by the job's next report before any snapshot reads them. Exact: between a job's report and the
        # snapshot its model reads only its own learner and its type's shared state, and the book calls
        # `_type_moving` before a report changes the latter. False: built at every report (the reference).
        self.once_per_snapshot = True
        self._unpublished: dict[str | None, dict[str, JobSpec]] = {}  # job type -> reported jobs, their spec
        # A reporting job's model is renewed in place, not rebuilt, where it reads as a rebuilt one would
        # (`ModelBook.republished`): caches kept by model identity keep serving. False: built anew (the reference).
        self.keep_models = True
        # A report its job's learner only counts (`ModelBook.repeat`: most of a long run's) moves the learner,
        # the two GPU-type rates and the job's place in the publish queue alone. False: `observe` (the reference).
        self.fast_repeats = True
        self.spared = 0  # reports whose model was never built (the job reported again first)
        self.early = 0  # types published between snapshots because a report moved their shared state

    def _grouping(self) -> bool:
        """Whether newly published jobs without reports go to `groups` (their speed is their type's fit alone)."""
        return self.grouped and self.shared and self.one_fit and self.book.own_min > 0 and self.book.use_priors

    def view(self) -> Mapping[str, JobModel]:
        """The models a snapshot carries: `controller.models` and the grouped jobs', frozen now."""
        if not self.groups:
            return MappingProxyType(dict(self.controller.models))
        return self.groups.view(self.controller.models)

    def __call__(self, report: Report, record: JobRecord) -> None:
        """Report sink: learn from one report; its job's model is built now or at `publish` (`once_per_snapshot`)."""
        held = self._gpu_type.get(record.id)  # (a job reports from one allocation many times: asked once)
        if held is not None and held[0] is report.allocation and held[3] is not None \
                and held[1] is self.controller.cluster and held[2] is record.spec and self.fast_repeats \
                and self.keep_gpu_type and self.once_per_snapshot and record.id in self.controller.models:
            # A report its job's learner only counts (`ModelBook.repeat`) from a job that reported here before on
            # this allocation (its kept GPU type is not None: the allocation is not empty, so it is the one
            # `observe` reads). It waits nowhere and sits in no group since (`on_event` puts it there at
            # submission only), no refit moves its type's prior, `_type_moving` is not due, nor is `refresh`
            # (the pooled rates hold `gpu_type`; without priors `_stale` is empty): only its place in the
            # publish queue moves, as on the path below. Else nothing moved: the path below.
            job_type = record.spec.job_type
            learner = self.book.repeat(record.id, job_type, report, held[3])
            if learner is not None:
                unpublished = self._unpublished.get(job_type)
                if unpublished is None:
                    unpublished = self._unpublished[job_type] = {}
                elif unpublished.pop(record.id, None) is not None:
                    self.spared += 1
                if learner.steps:
                    learner.loss_curve()
                unpublished[record.id] = record.spec
                return
        book = self.book
        spec = record.spec
        before = book.priors.updates  # (`book.observe` updates the priors of this job's type and form alone)
        alloc, cluster = report.allocation or record.allocation, self.controller.cluster
        if held is not None and held[0] is alloc and held[1] is cluster and held[2] is spec and self.keep_gpu_type:
            gpu_type = held[3]
        else:
            gpu_type = one_gpu_type(cluster, alloc, spec)
            self._gpu_type[record.id] = (alloc, cluster, spec, gpu_type)
        job_type = spec.job_type
        if job_type and job_type in self._stale and gpu_type is not None \
                and gpu_type not in book.pooled_types(job_type):
            self.refresh()  # (the type's GPU types are about to change: publish what they were)
        models = self.controller.models
        if not self.once_per_snapshot or record.id not in models:  # (a first model at once: its key's place)
            book.observe(record.id, spec, report, record.allocation, gpu_type)
            models[record.id] = self._built(record.id, spec)
        else:
            unpublished = self._unpublished.get(job_type)
            if unpublished is not None and unpublished.pop(record.id, None) is not None:
                self.spared += 1  # (out before `observe`: its own learner moves now, its model is this report's)
            if book.observe(record.id, spec, report, record.allocation, gpu_type, self._type_moving):
                models[record.id] = self._built(record.id, spec)  # (see `observe`)
            else:
                learner = book.learners[record.id]
                if learner.steps:  # (refits follow each report's point count, as if built; none without points)
                    learner.loss_curve()
                unpublished = self._unpublished.get(job_type)  # (`_type_moving` may have built and dropped them)
                if unpublished is None:
                    unpublished = self._unpublished[job_type] = {}
                unpublished[record.id] = spec
        if not job_type:
            return
        waiting = self._waiting.get(job_type, _NONE)
        waiting.pop(record.id, None)  # it has points of its own now
        self._loose.get(job_type, _NONE).pop(record.id, None)
        if record.id in self.groups.group_of:
            self.groups.leave(record.id)
        if waiting and book.priors.updates != before:  # its type learned: refresh the siblings
            if self.defer and len(book.pooled_types(job_type)) < 2:
                # Deferred to the next snapshot: until then only the prior changes their models (it only
                # grows by reports like this one), so one refresh equals every eager one (O(waiting) each).
                self._stale[job_type] = None
            else:  # (their relative GPU speeds follow every report of the type: refresh now)
                self._stale.pop(job_type, None)
                self._seen.pop(job_type, None)
                for jid, other in self._loose.get(job_type, {}).items():
                    self.controller.models[jid] = book.model(jid, other.spec)
                self._rebuild_groups(job_type)

    def publish(self) -> None:
        """Build the models of the jobs that reported since the last call (before each snapshot; a reader of
        `controller.models` between snapshots calls it first)."""
        while self._unpublished:
            self._publish_type(next(iter(self._unpublished)))

    def _type_moving(self, job_type: str) -> None:
        """`ModelBook.observe`'s call before a report changes its type's shared state: build the type's
        unpublished models from the state they were reported in (the reporting job's own is out already)."""
        if self._unpublished.get(job_type):
            self.early += 1
            self._publish_type(job_type)

    def _publish_type(self, job_type: str | None) -> None:
        """Build the models of the type's jobs that reported since they were last built (`once_per_snapshot`)."""
        unpublished = self._unpublished.pop(job_type, None)
        if not unpublished:
            return
        models = self.controller.models
        for jid, spec in unpublished.items():
            models[jid] = self._built(jid, spec)

    def _built(self, job_id: str, spec: JobSpec) -> JobModel:
        """The model of a job that reported: its last one renewed where it can be (`keep_models`), else built."""
        book = self.book
        if not self.lazy:
            return book.model(job_id, spec)
        if self.keep_models:
            return book.republished(job_id, spec, self.controller.models.get(job_id))
        return book.published(job_id, spec)

    def refresh(self) -> None:
        """Republish the models of the waiting jobs whose type's prior learned (before each snapshot)."""
        self.publish()
        if not self._stale:
            return
        book, models = self.book, self.controller.models
        for job_type in self._stale:
            seen = self._seen.get(job_type)
            if seen is not None and self.skip_same_prior and book.own_min > 0 \
                    and all(book.priors.fitted(job_type, form, N_PARAMS[form]) is fit for form, fit in seen.items()):
                # A job without reports takes its speed from its type's prior fit alone (`ModelBook._fit_speed`):
                # the same fit object (or still none) as at the last refresh gives each the same speed.
                continue
            fits: dict[Form, SpeedPredictor | None] = {}
            unreported: dict[Form, tuple[SpeedPredictor | None, str]] = {}  # speed of the form's jobs without reports
            type_speeds: dict[str | None, Mapping[str, float]] = {}  # theirs (their type's pooled rates alone)
            made: dict[tuple[object, ...], JobModel] = {}  # `ModelBook.unreported_model`'s models to copy
            shared = self.shared and self.one_fit
            for jid, other in self._loose.get(job_type, {}).items():
                learner = book.learner(jid, other.spec)
                form = learner.form
                if form not in fits:
                    fits[form] = book.priors.fitted(job_type, form, N_PARAMS[form])
                if not shared or learner.version:
                    # (its type's fit, looked up once per form, is all that moves a job without reports)
                    now = book.unreported_speed(learner, fits[form]) if self.one_fit else book.speed(learner)
                else:  # (the same for every job of the form without reports: asked once)
                    got = unreported.get(form)
                    now = unreported[form] = book.unreported_speed(learner, fits[form]) if got is None else got
                had = models.get(jid)
                if had is not None and now == (had.speed, had.basis):
                    continue  # (a prior that cannot predict yet: the same model; without reports nothing else moves)
                if not shared or learner.version:
                    models[jid] = book.model(jid, other.spec, now if self.one_fit else None)
                    continue
                kind = learner.spec.job_type
                type_speed = type_speeds.get(kind)
                if type_speed is None:
                    type_speed = type_speeds[kind] = book.type_speed(learner)
                models[jid] = book.unreported_model(learner, other.spec, now, type_speed, made)
            self._refresh_groups(job_type, fits, type_speeds.get(job_type))
            self._seen[job_type] = fits
        self._stale.clear()

    def _refresh_groups(self, job_type: str, fits: dict[Form, SpeedPredictor | None],
                        type_speed: Mapping[str, float] | None) -> None:
        """`refresh` of the type's groups: a group whose speed moved reads a template built once (as
        `ModelBook.unreported_model`'s); groups that now read alike merge. `fits`: filled per form seen."""
        groups, book = self.groups, self.book
        made: dict[tuple[object, ...], int] = {}
        for gid in list(groups.by_type.get(job_type, ())):
            template = groups.templates[gid]
            jid, other = next(iter(groups.members[gid].items()))
            learner = book.learner(jid, other.spec)
            form = learner.form
            if form not in fits:
                fits[form] = book.priors.fitted(job_type, form, N_PARAMS[form])
            now = book.unreported_speed(learner, fits[form])
            if now == (template.speed, template.basis):
                continue  # (as each job's check in `refresh`: the group's jobs share the model it compares)
            if type_speed is None:
                type_speed = book.type_speed(learner)
            key = (form, template.batch, template.remaining, id(now[0]), now[1])
            into = made.get(key)
            if into is None:
                made[key] = gid
                groups.retemplate(gid, book.model(jid, other.spec, now, type_speed))
            else:
                made[key] = groups.merge(gid, into)

    def _rebuild_groups(self, job_type: str) -> None:
        """The eager republish's (`model` for every waiting job) for the type's groups: once per group."""
        groups, book = self.groups, self.book
        made: dict[tuple[object, ...], int] = {}
        for gid in list(groups.by_type.get(job_type, ())):
            jid, other = next(iter(groups.members[gid].items()))
            template = book.model(jid, other.spec)
            key = (template.form, template.batch, template.remaining, id(template.speed), template.basis)
            into = made.get(key)
            if into is None:
                made[key] = gid
                groups.retemplate(gid, template)
            else:
                made[key] = groups.merge(gid, into)

    def on_event(self, what: str, record: JobRecord) -> None:
        """Listener: publish a prior model for new jobs; forget ended ones."""
        if what == "submitted":
            model = self.book.model(record.id, record.spec)
            job_type = record.spec.job_type
            if job_type and self._grouping() and not self.book.learner(record.id, record.spec).version:
                self.groups.join(record, model)
            else:
                self.controller.models[record.id] = model
                if job_type:
                    self._loose.setdefault(job_type, {})[record.id] = record
            if job_type:
                self._waiting.setdefault(job_type, {})[record.id] = record
                seen = self._seen.get(job_type)
                if seen is not None and (model.form not in seen or model.speed is not seen[model.form]):
                    self._seen.pop(job_type)  # (published from another fit: check each job at the next refresh)
        elif what in _ENDED:
            self._unpublished.get(record.spec.job_type, {}).pop(record.id, None)
            self.controller.models.pop(record.id, None)
            self.book.forget(record.id)
            self._gpu_type.pop(record.id, None)
            if record.spec.job_type:
                self._waiting.get(record.spec.job_type, {}).pop(record.id, None)
                self._loose.get(record.spec.job_type, {}).pop(record.id, None)
                self.groups.leave(record.id)


def attach_learning(controller: Controller, book: ModelBook | None = None) -> Learning:
    """Install online learning on `controller`; returns it (its `book` holds every learner)."""
    learning = Learning(controller, book)
    controller.report_sinks.append(learning)
    controller.listeners.append(learning.on_event)
    controller.before_snapshot.append(learning.refresh)
    controller.models_view = learning.view
    return learning
