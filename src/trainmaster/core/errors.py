"""User-facing errors: one clear line naming the field and the fix."""

from __future__ import annotations


class TrainmasterError(Exception):
    """Base of every error the faces turn into one line and exit code 2."""


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters: an error line quotes bad input, never megabytes of it."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


class SpecError(TrainmasterError):
    """A job, queue or cluster spec is invalid; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        field = field if len(field) <= 120 else f"{field[:117]}..."  # paths hold user-written keys
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class IllegalTransition(TrainmasterError):
    """A job state change that the transition table forbids."""
