"""`trainmaster history`: accounting for ended and live jobs, like Slurm's sacct.

Columns: id, queue, state, submit, start, end, elapsed, exit code, GPU-hours,
restarts, resizes, preemptions, cost (blank until prices exist); `--format`
picks and orders them. `--since` / `--until` keep the jobs alive at some
point in that window (`2h` ago, `1d`, an ISO date or date-time).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainmaster.cli.console import LONG
from trainmaster.cli.jobs import _command, _state
from trainmaster.core.errors import SpecError
from trainmaster.core.timefmt import duration, parse_when

if TYPE_CHECKING:
    from trainmaster.cli.client import Client


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _opt(fmt: Callable[[Any], str]) -> Callable[[Any], str]:
    return lambda v: "" if v is None else fmt(v)


# name -> (header, right-aligned, format of the value)
COLUMNS: dict[str, tuple[str, bool, Callable[[Any], str]]] = {
    "id": ("JOB", False, str), "name": ("NAME", False, str), "queue": ("QUEUE", False, str),
    "priority": ("PRIO", True, str), "state": ("STATE", False, _state),
    "submit": ("SUBMIT", False, _when), "start": ("START", False, _when), "end": ("END", False, _when),
    "elapsed": ("ELAPSED", True, _opt(duration)), "exit_code": ("EXIT", True, _opt(str)),
    "gpu_hours": ("GPU-H", True, lambda v: f"{v:.3f}"), "restarts": ("RESTARTS", True, str),
    "resizes": ("RESIZES", True, str), "preemptions": ("PREEMPTS", True, str),
    "cost": ("COST", True, _opt(lambda v: f"{v:.2f}")), "message": ("MESSAGE", False, str),
}
ALIASES = {"exit": "exit_code", "gpuhours": "gpu_hours", "gpu-hours": "gpu_hours", "job": "id",
           "preempts": "preemptions"}
DEFAULT = ("id", "queue", "state", "submit", "start", "end", "elapsed", "exit_code", "gpu_hours", "restarts",
           "resizes", "preemptions", "cost")


def columns(fmt: str | None) -> list[str]:
    """The columns `--format a,b,c` asks for, in its order (sacct's --format)."""
    if fmt is None:
        return list(DEFAULT)
    out = []
    for raw in fmt.split(","):
        name = ALIASES.get(raw.strip().lower(), raw.strip().lower())
        if name not in COLUMNS:
            raise SpecError("--format", f"unknown column {raw.strip()!r}", f"use some of {','.join(COLUMNS)}")
        out.append(name)
    return out


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "history", "accounting of past and live jobs (like sacct)", history)
    p.add_argument("--state", action="append", default=[], help="only jobs in this state (repeatable)")
    p.add_argument("--queue", dest="queue_name", default=None, help="only this queue")
    p.add_argument("--since", default=None, help="only jobs alive after this: 2h (ago), 1d, or an ISO date")
    p.add_argument("--until", default=None, help="only jobs submitted before this (same forms as --since)")
    p.add_argument("--format", default=None, metavar="COLS",
                   help=f"columns to show, in order (default {','.join(DEFAULT)}; also name,priority,message)")


def history(client: Client, args: argparse.Namespace, console: Console) -> Any:
    cols = columns(args.format)
    now = time.time()
    since = None if args.since is None else parse_when(args.since, now, "--since")
    until = None if args.until is None else parse_when(args.until, now, "--until")
    rows = client.history(args.state, args.queue_name, since, until)
    if args.json:
        return rows
    table = Table(box=None, header_style="bold")
    for name in cols:
        header, right, _ = COLUMNS[name]
        table.add_column(header, justify="right" if right else "left", **(LONG if name == "message" else {}))
    for r in rows:
        table.add_row(*(COLUMNS[name][2](r.get(name)) if name == "state" else escape(COLUMNS[name][2](r.get(name)))
                        for name in cols))
    console.print(table if rows else "no jobs")
    return None
