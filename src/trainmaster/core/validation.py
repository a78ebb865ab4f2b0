"""Pydantic at the edge, shared by the job, queue and cluster YAML: bounds, and one-line errors.

Every number a user writes has a range: wide enough for any real cluster,
narrow enough that nothing downstream overflows (SQLite integers, float
arithmetic in the policies) or turns into NaN. An out-of-range value is a
`SpecError` that names the field and says the range.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from trainmaster.core.errors import SpecError

PRIORITY = (-1_000_000, 1_000_000)
REPLICAS = (0, 10_000)
RESTARTS = (0, 1_000)
STEPS = (1, 10**12)
EPOCHS = (1, 10**6)
LOSS = (-1e12, 1e12)
PLATEAU = (1e-12, 1.0)  # a relative improvement
WINDOW = (1, 10**7)
BATCH = (1, 1 << 24)  # a global batch size, in samples
CHECKPOINT_SECONDS = (0.0, 30 * 86_400.0)
ESTIMATE_SECONDS = (0.0, 365 * 86_400.0)
WEIGHT = (1e-6, 1e6)
COUNT = (0, 100_000)  # nodes in a group, GPUs of a type in a quota
PRICE = (0.0, 1e6)  # per node-hour
MAX_TEXT = 4096  # one command argument, label or name
MAX_ENV_BYTES = 65_536  # one environment value (the kernel refuses arguments over 128 KiB)


class Strict(BaseModel):
    """Unknown fields are errors (a misspelt field must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def bound_text(x: float) -> str:
    """A bound as people write it: `1000000`, `0.5`, `1e-06`."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _range_error(lo: float, hi: float, whole: bool) -> PydanticCustomError:
    return PydanticCustomError("out_of_range", "must be between {lo} and {hi}",
                               {"lo": bound_text(lo), "hi": bound_text(hi), "whole": whole})


def _in_range(lo: float, hi: float, whole: bool) -> tuple[BeforeValidator, AfterValidator]:
    """Checked on the raw number first (a 10**30 must not reach int parsing), then on the parsed one."""

    def before(value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would take true as 1
            raise PydanticCustomError("bool_number", "true/false is not a number")
        if isinstance(value, (int, float)) and not lo <= value <= hi:
            raise _range_error(lo, hi, whole)  # also NaN
        return value

    def after(value: Any) -> Any:
        if not lo <= value <= hi:
            raise _range_error(lo, hi, whole)
        return value

    return BeforeValidator(before), AfterValidator(after)


def _schema(lo: float, hi: float) -> Any:
    return Field(json_schema_extra={"minimum": lo, "maximum": hi})


# The bounded types the models use (the bounds show in the OpenAPI/JSON schema too).
Priority = Annotated[int, *_in_range(*PRIORITY, True), _schema(*PRIORITY)]
Replicas = Annotated[int, *_in_range(*REPLICAS, True), _schema(*REPLICAS)]
Restarts = Annotated[int, *_in_range(*RESTARTS, True), _schema(*RESTARTS)]
Steps = Annotated[int, *_in_range(*STEPS, True), _schema(*STEPS)]
Epochs = Annotated[int, *_in_range(*EPOCHS, True), _schema(*EPOCHS)]
Window = Annotated[int, *_in_range(*WINDOW, True), _schema(*WINDOW)]
Count = Annotated[int, *_in_range(*COUNT, True), _schema(*COUNT)]
Batch = Annotated[int, *_in_range(*BATCH, True), _schema(*BATCH)]
Loss = Annotated[float, *_in_range(*LOSS, False), _schema(*LOSS)]
Plateau = Annotated[float, *_in_range(*PLATEAU, False), _schema(*PLATEAU)]
Weight = Annotated[float, *_in_range(*WEIGHT, False), _schema(*WEIGHT)]
Price = Annotated[float, *_in_range(*PRICE, False), _schema(*PRICE)]


def check_range(value: float, lo: float, hi: float, field: str, what: str = "number") -> None:
    """The same bound for hand-parsed values (resource quantities, durations)."""
    if not lo <= value <= hi:  # False for NaN as well
        raise SpecError(field, f"must be between {bound_text(lo)} and {bound_text(hi)}",
                        f"write a finite {what} in that range")


_FIXES = {
    "extra_forbidden": "remove it or check its spelling against the spec in the README",
    "missing": "add it",
    "literal_error": "use one of the allowed values",
    "int_type": "write a whole number",
    "int_parsing": "write a whole number",
    "int_from_float": "write a whole number",
    "float_type": "write a number",
    "float_parsing": "write a number",
    "bool_type": "write true or false",
    "bool_parsing": "write true or false",
    "list_type": "write a list",
    "dict_type": "write a mapping",
    "string_type": "write a string",
    "string_too_long": "shorten it",
    "string_too_short": "write a non-empty string",
    "too_long": "list fewer items",
    "too_short": "list at least one item",
    "model_type": "write a mapping",
    "int_parsing_size": "write a smaller whole number",
    "bool_number": "write a number",
    "greater_than_equal": "use a value that is not negative",
    "less_than_equal": "use a smaller value",
    "nul_character": "remove the NUL character",
    "env_name": "use letters, digits and _, not starting with a digit",
    "env_value": "pass large data in a file and its path in the environment",
}


def field_path(loc: tuple[int | str, ...], where: str = "") -> str:
    """`("spec", "roles", "worker", "min")` -> `spec.roles.worker.min`; list indices as `[i]`."""
    out = where
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (`X`, `X | None`, `list[X]`, `dict[str, X]`, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def allowed_fields(model: type[BaseModel], loc: tuple[int | str, ...]) -> list[str]:
    """The field names (as written in YAML) of the model an error at `loc` is in; list indices and mapping
    keys on the way are passed over."""
    current = model
    for part in loc:
        field = next((f for name, f in current.model_fields.items() if part in (name, f.alias)), None)
        if field is not None:
            inner = _models_in(field.annotation)
            if not inner:
                return []
            current = inner[0]
    return sorted(f.alias or name for name, f in current.model_fields.items())


def first_error(exc: ValidationError, where: str = "", model: type[BaseModel] | None = None) -> SpecError:
    """The first pydantic error as one line: the field, the problem, the fix (for an unknown field, the
    fields `model` allows there)."""
    err = exc.errors()[0]
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (  # pydantic's own steps, not fields
        "[" in p or p.startswith("constrained-") or p in ("int", "float", "str", "bool"))))
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "out_of_range":
        return SpecError(field_path(loc, where), f"must be between {ctx['lo']} and {ctx['hi']}",
                         f"write a {'whole' if ctx['whole'] else 'finite'} number in that range")
    problem = "unknown field" if kind == "extra_forbidden" else (
        "is required" if kind == "missing" else str(err["msg"])[:1].lower() + str(err["msg"])[1:])
    fix = _FIXES.get(kind, "see the spec in the README")
    if kind == "extra_forbidden" and model is not None and (names := allowed_fields(model, loc[:-1])):
        fix = f"use one of {', '.join(names)}"
    return SpecError(field_path(loc, where), problem, fix)
