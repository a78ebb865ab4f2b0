"""The controller's live, mutable record of each job; policies only see `JobView` copies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainmaster.controller.notes import NoteStreams, Said
from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.cost import CostMeter
from trainmaster.core.job import JobSpec
from trainmaster.core.states import JobState, Transition, check_transition
from trainmaster.policies.snapshot import JobView

# Record fields a JobView shows: changing one marks the record's cached view stale. (A report's fields, `step`,
# `loss` and `steps_per_s`, are not among them: a live view reads them from its record, `LiveJobView`.)
_VIEWED = frozenset({
    "spec", "state", "submit_time", "allocation", "first_start", "running_since", "restarts", "resizes",
    "preemptions", "attained_base", "runtime_base", "since", "last_checkpoint",
})
_PROGRESS = frozenset({"step", "loss", "steps_per_s"})  # viewed too where `JobRecord.live_progress` is off
_SET = object.__setattr__
KEEP = 50  # decisions a record keeps
_ATTAINED = JobView.__dict__["attained"]  # the frozen view's own slots, under LiveJobView's properties
_RUNTIME = JobView.__dict__["runtime"]
_SPENT = JobView.__dict__["spent"]
_STEP = JobView.__dict__["step"]
_LOSS = JobView.__dict__["loss"]
_SPEED = JobView.__dict__["steps_per_s"]


def _from_record(slot: Any, name: str) -> Any:
    """A report's field on a `LiveJobView`: read from its record where it has one, else from the view's own slot
    (which the dataclass `__init__` still sets)."""
    def read(view: JobView) -> object:
        record = getattr(view, "_record", None)
        return slot.__get__(view, JobView) if record is None else getattr(record, name)

    def write(view: JobView, value: object) -> None:
        slot.__set__(view, value)

    return property(read, write)


class ServiceClock:
    """The decision time that live views read attained service, runtime and dollars spent at (from `meter`,
    the controller's cost meter); the controller sets both."""

    __slots__ = ("meter", "now")

    def __init__(self, meter: CostMeter | None = None) -> None:
        self.now = 0.0
        self.meter = meter


class LiveJobView(JobView):
    """A JobView the controller caches across decisions while its record does not change.

    Only `attained`, `runtime` and `spent` grow with time alone; they are computed on
    access from the record's books (the clock's cost meter for `spent`) at the `ServiceClock`'s time (the snapshot's
    `now`), so an unchanged job costs nothing per decision. A view kept past its
    snapshot reads them at the latest decision's time.

    A report's progress (`step`, `loss`, `steps_per_s`) is read from the record too: a running job reports
    every few minutes and no policy reads these fields, so a report does not rebuild the view (nor miss the
    caches policies keep by view identity); read at a decision, they are the record's then. A view kept past
    its snapshot reads the latest report's.
    """

    __slots__ = ("_clock", "_gpus", "_held", "_record", "_since")
    _clock: ServiceClock
    _gpus: int  # GPUs held (0 when none)
    _held: bool  # holds any task
    _record: JobRecord  # whose report fields it reads
    _since: float  # when the record's books were last closed (`JobRecord.since`)

    step = _from_record(_STEP, "step")
    loss = _from_record(_LOSS, "loss")
    steps_per_s = _from_record(_SPEED, "steps_per_s")

    @property  # type: ignore[override]
    def attained(self) -> float:
        base: float = _ATTAINED.__get__(self, JobView)
        clock: ServiceClock | None = getattr(self, "_clock", None)
        return base + self._gpus * (clock.now - self._since) if clock is not None and self._gpus else base

    @attained.setter
    def attained(self, value: float) -> None:  # used by the dataclass __init__
        _ATTAINED.__set__(self, value)

    @property  # type: ignore[override]
    def runtime(self) -> float:
        base: float = _RUNTIME.__get__(self, JobView)
        clock: ServiceClock | None = getattr(self, "_clock", None)
        return base + (clock.now - self._since) if clock is not None and self._held else base

    @runtime.setter
    def runtime(self, value: float) -> None:
        _RUNTIME.__set__(self, value)

    @property  # type: ignore[override]
    def spent(self) -> float:
        """Read from the meter on access: the bill grows with time while the job holds nodes."""
        clock: ServiceClock | None = getattr(self, "_clock", None)
        if clock is None or clock.meter is None:
            return float(_SPENT.__get__(self, JobView))
        return clock.meter.job_cost(self.id, clock.now)

    @spent.setter
    def spent(self, value: float) -> None:
        _SPENT.__set__(self, value)


@dataclass
class JobRecord:
    id: str
    spec: JobSpec
    submit_time: float
    state: JobState = JobState.PENDING
    allocation: Allocation = EMPTY
    first_start: float | None = None
    running_since: float | None = None
    finish_time: float | None = None
    restarts: int = 0  # after failures: a task crashed, a node was lost, the daemon restarted
    resizes: int = 0
    preemptions: int = 0
    retry_at: float | None = None  # while backing off after a failure: when it may start again
    attained_base: float = 0.0  # GPU-seconds before `since`
    runtime_base: float = 0.0
    since: float = 0.0  # when the current allocation began counting
    step: int = 0
    loss: float | None = None
    steps_per_s: float | None = None
    last_checkpoint: float | None = None
    message: str = ""
    history: list[Transition] = field(default_factory=list)
    gpus_held: int = 0  # GPUs of `allocation`, kept by `set_allocation`
    watch: dict[str, None] | None = field(default=None, repr=False, compare=False)  # ids with stale views
    # The controller's "reason last noted by a decision" per job: `note` drops this job's entry (see Controller).
    said: Said | None = field(default=None, repr=False, compare=False)
    # The controller's reasons noted on many jobs at once, not yet in `decisions` (`notes.NoteStreams`).
    lazy: NoteStreams | None = field(default=None, repr=False, compare=False)
    _why: str = field(default="", init=False, repr=False)  # see `why`
    _log: list[tuple[float, str]] = field(default_factory=list, init=False, repr=False)  # see `decisions`

    # (a class switch, not a field) a live view reads `step`, `loss` and `steps_per_s` from its record, so a
    # report rebuilds no view (`LiveJobView`). False: they mark the view stale like any viewed field, and each
    # view holds a copy (the reference).
    live_progress: ClassVar[bool] = True

    def __setattr__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)
        if name in _VIEWED or (name in _PROGRESS and not self.live_progress):
            watch = self.__dict__.get("watch")
            if watch is not None:
                watch[self.id] = None

    def progressed(self, step: int, loss: float | None, steps_per_s: float | None) -> None:
        """A report's progress (a loss or speed of None keeps the last one), without `__setattr__`'s check per
        field (one per report: millions in a long replay). No view goes stale: a live view reads these."""
        fields = self.__dict__
        fields["step"] = step
        if loss is not None:
            fields["loss"] = loss
        if steps_per_s:
            fields["steps_per_s"] = steps_per_s
        watch = fields["watch"]
        if watch is not None and not self.live_progress:
            watch[self.id] = None

    def move(self, target: JobState, now: float, reason: str) -> None:
        """Change state through the transition table, keeping the history."""
        if target is self.state:
            return
        check_transition(self.state, target, self.id)
        self.history.append(Transition(now, self.state, target, reason))
        self.state = target

    def set_allocation(self, alloc: Allocation, now: float) -> None:
        """Change held resources, closing the books on the previous allocation."""
        self.attained_base = self.attained(now)
        self.runtime_base = self.runtime(now)
        self.since = now
        self.allocation = alloc
        self.gpus_held = alloc.gpus(self.spec)

    def attained(self, now: float) -> float:
        if not self.allocation:
            return self.attained_base
        return self.attained_base + self.gpus_held * (now - self.since)

    def runtime(self, now: float) -> float:
        if not self.allocation:
            return self.runtime_base
        return self.runtime_base + (now - self.since)

    @property
    def why(self) -> str:
        """The latest reason from the policy or an action."""
        lazy = self.lazy
        why = lazy.why(self.id) if lazy is not None else None
        return self._why if why is None else why

    @property
    def decisions(self) -> list[tuple[float, str]]:
        """(time, reason) of the latest reasons noted, oldest first (at most `KEEP`)."""
        self.settle()
        return self._log

    @decisions.setter
    def decisions(self, value: list[tuple[float, str]]) -> None:
        self.settle()
        _SET(self, "_log", value)

    def settle(self, keep: int = KEEP) -> None:
        """Render the reasons the controller noted lazily for this job (`notes.NoteStreams`) into `decisions`."""
        lazy = self.lazy
        entries = lazy.take(self.id, keep) if lazy is not None else None
        if not entries:
            return
        _SET(self, "_why", entries[-1][1])
        log = self._log
        for entry in entries:
            if not log or log[-1][1] != entry[1]:
                log.append(entry)
        if len(log) > keep:
            del log[:-keep]

    def note(self, now: float, text: str, keep: int = KEEP) -> None:
        if self.lazy is not None:
            self.settle(keep)
        _SET(self, "_why", text)  # no viewed field: skip `__setattr__` (a decision notes thousands)
        decisions = self._log
        if not decisions or decisions[-1][1] != text:
            decisions.append((now, text))
            if len(decisions) > keep:
                del decisions[:-keep]
        said = self.said
        if said is not None:
            said.drop(self.id)

    def live_view(self, clock: ServiceClock) -> JobView:
        """This job's view for every decision until the record changes (see `LiveJobView`)."""
        view = LiveJobView(
            id=self.id, spec=self.spec, state=self.state, submit_time=self.submit_time,
            allocation=self.allocation, first_start=self.first_start, running_since=self.running_since,
            restarts=self.restarts, resizes=self.resizes, preemptions=self.preemptions,
            attained=self.attained_base, runtime=self.runtime_base, step=self.step,
            loss=self.loss, steps_per_s=self.steps_per_s, last_checkpoint=self.last_checkpoint,
        )
        object.__setattr__(view, "_clock", clock)
        if self.live_progress:
            object.__setattr__(view, "_record", self)
        object.__setattr__(view, "_gpus", self.gpus_held if self.allocation else 0)
        object.__setattr__(view, "_held", bool(self.allocation))
        object.__setattr__(view, "_since", self.since)
        return view
