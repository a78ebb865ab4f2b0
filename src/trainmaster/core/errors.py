"""User-facing errors: one clear line naming the field and the fix."""

from __future__ import annotations

import reprlib


class TrainmasterError(Exception):
    """Base of every error the faces turn into one line and exit code 2."""


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 40, 40


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)`, cut to `limit` characters: an error line quotes bad input, never megabytes of it
    (nor recurses through a deeply nested one, nor converts a 5000-digit number)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"<a {value.bit_length()}-bit number>"
    try:
        text = _REPR.repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


def one_line(text: str, limit: int) -> str:
    """`text` with control characters escaped (a key may hold a newline), cut to `limit` characters."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else f"{text[:limit - 3]}..."


class SpecError(TrainmasterError):
    """A job, queue or cluster spec is invalid; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        field, problem = one_line(field, 120), one_line(problem, 300)  # both may quote what the user wrote
        self.field = field
        self.problem = problem
        self.fix = fix
        text = f"{field}: {problem}" if field else problem
        if fix:
            text += f" ({fix})"
        super().__init__(text)


class IllegalTransition(TrainmasterError):
    """A job state change that the transition table forbids."""
