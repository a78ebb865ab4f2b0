"""Waiting jobs without reports, grouped by the model they share, one template model per group.

A job without reports of its own has a model that is its form, batch, target and its type's prior alone:
every such job of one (type, form, batch, steps left) published at the same refresh reads the same but for its
id. `Learning` keeps them here as groups rather than one `JobModel` per job, so a type's prior refit
republishes O(groups) templates, not O(waiting jobs) models (Philly: ~700 waiting jobs, one group). A
snapshot reads them through `ModelsView`, which builds a job's copy (`set_fields`) when a policy reads it:
policies read the models of the few waiting jobs that fit their minimum, not thousands.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import fields
from operator import attrgetter, is_

from trainmaster.controller.records import JobRecord
from trainmaster.models.book import JobModel, set_fields

_JoinKey = tuple[str, object, float, float | None]  # job type, form, batch, steps left
# `JobModel`'s fields compared by identity (fits, curves and laws have no value equality; a form is an enum);
# every other field but the id by value. Derived from the dataclass: a field added later is compared too.
_BY_IDENTITY = ("form", "speed", "curve", "goodput")
_BY_VALUE = tuple(f.name for f in fields(JobModel) if f.name not in {"job_id", *_BY_IDENTITY})
_identities, _values = attrgetter(*_BY_IDENTITY), attrgetter(*_BY_VALUE)


def same_but_id(a: JobModel, b: JobModel) -> bool:
    """Whether two models of jobs without reports read alike (what `Learning.refresh` compares, and the rest)."""
    return type(a) is type(b) is JobModel and all(map(is_, _identities(a), _identities(b))) \
        and _values(a) == _values(b)


class ModelGroups:
    """Groups of waiting jobs that share one model but for its id; their copies built on read, kept per job."""

    def __init__(self) -> None:
        self.group_of: dict[str, int] = {}  # job -> its group
        self.templates: dict[int, JobModel] = {}  # group -> the model its jobs read (with their own ids)
        self.members: dict[int, dict[str, JobRecord]] = {}  # group -> its jobs
        self.by_type: dict[str, dict[int, None]] = {}  # job type -> its groups
        self._open: dict[_JoinKey, int] = {}  # the group a newly published job of that key may join
        self._copies: dict[str, tuple[JobModel, JobModel]] = {}  # job -> (the template it was copied from, copy)
        self._next = 0

    def __len__(self) -> int:
        return len(self.group_of)

    def groups_of_type(self, job_type: str) -> int:
        return len(self.by_type.get(job_type, ()))

    def join(self, record: JobRecord, model: JobModel) -> None:
        """Put a newly published job (no reports; `model` as `ModelBook.model` built it) in a group."""
        job_type = record.spec.job_type or ""
        key = (job_type, model.form, model.batch, model.remaining)
        gid = self._open.get(key)
        if gid is None or not same_but_id(self.templates[gid], model):
            gid = self._new(job_type, model)
            self._open[key] = gid
        self.members[gid][record.id] = record
        self.group_of[record.id] = gid

    def _new(self, job_type: str, template: JobModel) -> int:
        gid = self._next = self._next + 1
        self.templates[gid] = template
        self.members[gid] = {}
        self.by_type.setdefault(job_type, {})[gid] = None
        return gid

    def leave(self, job_id: str) -> None:
        """Take a job out of its group (it reported, or ended); an emptied group goes."""
        gid = self.group_of.pop(job_id, None)
        if gid is None:
            return
        self._copies.pop(job_id, None)
        members = self.members[gid]
        record = members.pop(job_id)
        if not members:
            self._drop(gid, record.spec.job_type or "")

    def _drop(self, gid: int, job_type: str) -> None:
        template = self.templates.pop(gid)
        del self.members[gid]
        del self.by_type[job_type][gid]
        key = (job_type, template.form, template.batch, template.remaining)
        if self._open.get(key) == gid:
            del self._open[key]

    def retemplate(self, gid: int, template: JobModel) -> None:
        """Every job of the group reads `template` from now on; newly published jobs alike join it."""
        self.templates[gid] = template
        job_type = next(iter(self.members[gid].values())).spec.job_type or ""
        self._open[job_type, template.form, template.batch, template.remaining] = gid

    def merge(self, gid: int, into: int) -> int:
        """Put group `gid`'s jobs with group `into`'s (they read `into`'s template); returns the group that stays.

        The smaller group's jobs move: the larger keeps its id and takes `into`'s template."""
        if len(self.members[gid]) > len(self.members[into]):
            self.templates[gid] = self.templates[into]
            gid, into = into, gid
        moving, staying = self.members[gid], self.members[into]
        staying.update(moving)
        group_of = self.group_of
        for jid in moving:
            group_of[jid] = into
        moving.clear()
        job_type = next(iter(staying.values())).spec.job_type or ""
        template = self.templates[into]
        self._drop(gid, job_type)
        self._open[job_type, template.form, template.batch, template.remaining] = into
        return into

    def view(self, own: dict[str, JobModel]) -> ModelsView:
        """A frozen mapping of every job's model: `own`'s (copied) and the grouped jobs' (copied on read)."""
        return ModelsView(dict(own), dict(self.group_of), dict(self.templates), self._copies)


class ModelsView(Mapping[str, JobModel]):
    """A snapshot's models: published ones as they are, grouped jobs' as copies of their group's template."""

    __slots__ = ("_copies", "_group_of", "_own", "_templates")

    def __init__(self, own: dict[str, JobModel], group_of: dict[str, int], templates: dict[int, JobModel],
                 copies: dict[str, tuple[JobModel, JobModel]]) -> None:
        self._own, self._group_of, self._templates, self._copies = own, group_of, templates, copies

    def _copy(self, job_id: str, gid: int) -> JobModel:
        template = self._templates[gid]
        held = self._copies.get(job_id)
        if held is not None and held[0] is template:  # (read before from this template: the same object)
            return held[1]
        made = template if template.job_id == job_id else \
            set_fields(object.__new__(JobModel), {**template.__dict__, "job_id": job_id})
        self._copies[job_id] = (template, made)
        return made

    def get(self, key: str, default: JobModel | None = None) -> JobModel | None:  # type: ignore[override]
        found = self._own.get(key)
        if found is not None:
            return found
        gid = self._group_of.get(key)
        return default if gid is None else self._copy(key, gid)

    def __getitem__(self, key: str) -> JobModel:
        found = self._own.get(key)
        if found is not None:
            return found
        return self._copy(key, self._group_of[key])

    def __contains__(self, key: object) -> bool:
        return key in self._own or key in self._group_of

    def __iter__(self) -> Iterator[str]:
        yield from self._own
        yield from self._group_of

    def __len__(self) -> int:
        return len(self._own) + len(self._group_of)

