"""The controller's live, mutable record of each job; policies only see `JobView` copies."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmaster.core.allocation import EMPTY, Allocation
from trainmaster.core.job import JobSpec
from trainmaster.core.states import JobState, Transition, check_transition
from trainmaster.policies.snapshot import JobView


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
    restarts: int = 0
    attained_base: float = 0.0  # GPU-seconds before `since`
    runtime_base: float = 0.0
    since: float = 0.0  # when the current allocation began counting
    step: int = 0
    loss: float | None = None
    steps_per_s: float | None = None
    last_checkpoint: float | None = None
    why: str = ""  # latest reason from the policy or an action
    message: str = ""
    history: list[Transition] = field(default_factory=list)
    decisions: list[tuple[float, str]] = field(default_factory=list)

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

    def attained(self, now: float) -> float:
        if not self.allocation:
            return self.attained_base
        return self.attained_base + self.allocation.gpus(self.spec) * (now - self.since)

    def runtime(self, now: float) -> float:
        if not self.allocation:
            return self.runtime_base
        return self.runtime_base + (now - self.since)

    def note(self, now: float, text: str, keep: int = 50) -> None:
        self.why = text
        if not self.decisions or self.decisions[-1][1] != text:
            self.decisions.append((now, text))
            del self.decisions[:-keep]

    def view(self, now: float) -> JobView:
        return JobView(
            id=self.id, spec=self.spec, state=self.state, submit_time=self.submit_time,
            allocation=self.allocation, first_start=self.first_start, running_since=self.running_since,
            restarts=self.restarts, attained=self.attained(now), runtime=self.runtime(now), step=self.step,
            loss=self.loss, steps_per_s=self.steps_per_s, last_checkpoint=self.last_checkpoint,
        )
