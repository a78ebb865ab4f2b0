"""Times as people read and write them: `1h05m`, `in 3m20s`, `5m ago`, `--since 2h`, ISO dates.

Shared by the CLI and by `controller.why`, so a reason that names an instant
(`reserved n-0 from t=1763901234`) reads the same everywhere.
"""

from __future__ import annotations

import re
from datetime import datetime

from trainmaster.core.errors import SpecError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
# `t=<seconds>` in a policy's reason; on the real clock the seconds are an epoch (after 1973).
_INSTANT = re.compile(r"\bt=(\d{9,}(?:\.\d+)?)")


def duration(seconds: float) -> str:
    """`4.2s`, `42s`, `3m07s`, `2h05m`, `3d04h`: short, never more than two units."""
    seconds = max(0.0, seconds)
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def relative(t: float, now: float) -> str:
    """`in 3m07s`, `3m07s ago`, or `now` within half a second."""
    delta = t - now
    if abs(delta) < 0.5:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(-delta)} ago"


def clock(t: float) -> str:
    """Local wall-clock time of an epoch: `14:05:12`, with the date when it is not today."""
    when = datetime.fromtimestamp(t)
    today = datetime.now().date()
    return when.strftime("%H:%M:%S" if when.date() == today else "%Y-%m-%d %H:%M:%S")


def humanize(text: str, now: float) -> str:
    """Rewrite epoch instants `t=1763901234` in a reason as `14:05:12 (in 3m07s)`; simulated `t=` stay."""
    return _INSTANT.sub(lambda m: f"{clock(float(m.group(1)))} ({relative(float(m.group(1)), now)})", text)


def parse_when(text: str, now: float, field: str) -> float:
    """An instant from `2h` / `30m` / `1d` (that long ago), an ISO date or date-time, or epoch seconds."""
    m = _AGO.match(text)
    if m:
        return now - float(m.group(1)) * _UNITS[m.group(2)]
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()  # naive: local time, like `date`
    except ValueError:
        raise SpecError(field, f"{text!r} is not a time",
                        "write a span ago (30m, 2h, 1d) or an ISO date (2026-11-23 or 2026-11-23T14:00)") from None
