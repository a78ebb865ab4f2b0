"""User-facing errors: one clear line naming the field and the fix."""

from __future__ import annotations


class TrainmasterError(Exception):
    """Base of every error the faces turn into one line and exit code 2."""


class SpecError(TrainmasterError):
    """A job, queue or cluster spec is invalid; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class IllegalTransition(TrainmasterError):
    """A job state change that the transition table forbids."""
