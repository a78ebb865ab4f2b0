"""The job a user submits, as a frozen typed model (the YAML lives in `core.spec`)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from trainmaster.core.resources import Resources


class Architecture(enum.Enum):
    ALLREDUCE = "allreduce"
    PARAMETER_SERVER = "parameter-server"


class Role(enum.Enum):
    WORKER = "worker"
    PS = "ps"

    __hash__ = object.__hash__  # members are singletons: identity hashing, in C (a dict key on hot paths)


class JobKind(enum.Enum):
    """`service` stands for EDL's online services: fixed size, highest priority, start at once."""

    TRAINING = "training"
    SERVICE = "service"


class TransientUse(enum.Enum):
    NEVER = "never"
    ALLOWED = "allowed"
    PREFERRED = "preferred"


@dataclass(frozen=True, slots=True)
class RoleSpec:
    """Replica range and per-replica resources of one role."""

    min: int
    max: int
    resources: Resources

    @property
    def elastic(self) -> bool:
        return self.max > self.min


@dataclass(frozen=True, slots=True)
class Target:
    """When a job is done: after steps, epochs, reaching a loss, or a loss plateau."""

    steps: int | None = None
    epochs: int | None = None
    loss: float | None = None
    plateau: float | None = None  # relative improvement below this over `window` steps
    window: int = 100


@dataclass(frozen=True, slots=True)
class BatchRange:
    """Opt-in to batch-size adaptation (`spec.adaptiveBatch`): the scheduler picks the global batch.

    It stays within `min`..`max`; `base` is the batch the job's learning rate was
    tuned for (Pollux's M0: statistical efficiency is measured against it).
    `local_max`: the most samples one replica computes at once (its memory bound); a larger local
    batch accumulates gradients over `ceil(local / local_max)` micro-batches, each paying the step's
    fixed cost, which the goodput law then counts (`models.speed.micro_batches`). None: never.
    """

    min: int
    max: int
    base: int
    local_max: int | None = None


@dataclass(frozen=True)
class JobSpec:
    """Everything a user says about a job. Immutable; ids are assigned by the controller."""

    name: str
    roles: Mapping[Role, RoleSpec]
    queue: str = "default"
    priority: int = 0
    command: tuple[str, ...] = ()
    workdir: str | None = None
    architecture: Architecture = Architecture.ALLREDUCE
    target: Target = field(default_factory=Target)
    transient: TransientUse = TransientUse.ALLOWED
    gpu_types: tuple[str, ...] = ()  # preference order (placement scores earlier types higher); never a filter
    checkpoint_every: float = 300.0
    max_restarts: int = 5
    kind: JobKind = JobKind.TRAINING
    estimate: float | None = None  # user's runtime estimate in seconds, used by backfill
    job_type: str | None = None  # model family, lets speed models share a prior
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    after: tuple[str, ...] = ()  # ids of jobs that must succeed before this one starts (Slurm afterok)
    require_gpu_types: tuple[str, ...] = ()  # hard filter: GPU tasks run only on these types (empty: any)
    anchors_on_demand: bool = True  # the PS tasks and the chief (worker 0) stay on on-demand nodes
    budget: float | None = None  # dollars the job may spend in all (None: cost-blind)
    deadline: float | None = None  # seconds after submission by which it should finish (None: none)
    checkpoint_auto: bool = False  # `checkpoint.every` left open: the interval follows the revocation rate
    adaptive_batch: BatchRange | None = None  # the scheduler picks the global batch in this range (goodput)

    def role(self, role: Role) -> RoleSpec | None:
        return self.roles.get(role)

    @property
    def min_resources(self) -> Resources:
        """What the gang needs to start: every role at its minimum."""
        out = Resources()
        for spec in self.roles.values():
            out = out + spec.resources * spec.min
        return out

    @property
    def max_resources(self) -> Resources:
        out = Resources()
        for spec in self.roles.values():
            out = out + spec.resources * spec.max
        return out

    @cached_property
    def elastic(self) -> bool:
        """Whether a role may change size; worked out once per spec (the spec is immutable, and every live
        job's is asked at each trainmaster decision). `dataclasses.replace` builds a new spec: no stale answer."""
        return any(r.elastic for r in self.roles.values())

    @property
    def min_gpus(self) -> int:
        return self.min_resources.gpu

    @property
    def anchored(self) -> bool:
        """Whether the gang keeps its anchors (PS tasks, the chief) on on-demand nodes: the job asks
        (`anchors_on_demand`), may use transient nodes at all, and gains from it: a PS job (its servers hold
        the model) or an elastic one (it goes on around its chief with what survives). A fixed-size
        all-reduce gang stops at any loss, its chief's or another worker's: an on-demand chief would buy it
        nothing but the on-demand price (and a node's worth of on-demand room for the rest of its gang)."""
        return (self.anchors_on_demand and self.transient is not TransientUse.NEVER
                and (self.architecture is Architecture.PARAMETER_SERVER or self.elastic))


def simple_job(
    name: str,
    gpus: int = 1,
    *,
    min_gpus: int | None = None,
    max_gpus: int | None = None,
    per_task: Resources | None = None,
    **fields: object,
) -> JobSpec:
    """A one-role all-reduce job of `gpus` one-GPU workers (elastic between min and max)."""
    lo = gpus if min_gpus is None else min_gpus
    hi = gpus if max_gpus is None else max_gpus
    role = RoleSpec(min=lo, max=hi, resources=per_task or Resources(gpu=1))
    return JobSpec(name=name, roles={Role.WORKER: role}, **fields)  # type: ignore[arg-type]
