"""Slurm-shaped commands over the REST API: submit, queue, status, logs, cancel, why, nodes, queues.

Every command takes `--url` (or TRAINMASTER_URL; the token comes from
TRAINMASTER_TOKEN) and `--json` for scripts. Exit codes:
0 ok, 2 bad input or a refused request, 3 no such job, 4 server unreachable,
1 a server error.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainmaster.cli.console import LONG, make_console
from trainmaster.core.timefmt import clock, humanize, relative
from trainmaster.core.timefmt import duration as _duration

if TYPE_CHECKING:
    from trainmaster.cli.client import Client

MAX_TAIL = 1_000_000  # the server's bound (trainmaster.server.app.MAX_TAIL)
EXIT_CODES = "exit codes: 0 ok, 2 bad input or refused, 3 no such job, 4 server unreachable, 1 server error"
STATE_STYLE = {"running": "green", "starting": "cyan", "pending": "yellow", "succeeded": "bold green",
               "failed": "bold red", "cancelled": "magenta", "rejected": "red"}

Handler = Callable[["Client", argparse.Namespace, Console], Any]


def _command(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str,
             handler: Handler) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help, epilog=EXIT_CODES)
    p.add_argument("--url", default=None, help="server address (default: TRAINMASTER_URL or http://127.0.0.1:8765)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")

    def run(args: argparse.Namespace) -> int:
        from trainmaster.cli.client import Client  # httpx: only for a command that runs, not for every parser

        console = make_console()  # piped: never folded or cut
        with Client(args.url) as client:
            result = handler(client, args, console)
        if args.json and result is not None:
            print(json.dumps(result, indent=2))
        return 0

    p.set_defaults(func=run)
    return p


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "submit", "submit a job YAML to the server", submit)
    p.add_argument("file", help="the job YAML")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a field, e.g. --set spec.roles.worker.max=4 (repeatable)")
    p = _command(sub, "queue", "list jobs (like squeue)", queue)
    p.add_argument("--all", action="store_true", help="include ended jobs")
    p.add_argument("--queue", dest="queue_name", default=None, help="only this queue")
    p.add_argument("--state", action="append", default=[], help="only jobs in this state (repeatable)")
    p = _command(sub, "status", "show one job", status)
    p.add_argument("job")
    p = _command(sub, "logs", "print a job's task logs", logs)
    p.add_argument("job")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    p.add_argument("--task", default=None, help="one task, e.g. worker-0")
    p.add_argument("--tail", type=_lines, default=None, metavar="N",
                   help="start at each task's last N lines (with -f: then follow)")
    p = _command(sub, "cancel", "cancel a job", cancel)
    p.add_argument("job")
    p = _command(sub, "why", "why a job waits (or runs where it does), and when it should start", why)
    p.add_argument("job")
    _command(sub, "nodes", "list the nodes and what runs on them", nodes)
    _command(sub, "queues", "list the queues and their use", queues)


# -- handlers -------------------------------------------------------------------
def submit(client: Client, args: argparse.Namespace, console: Console) -> Any:
    row = client.submit(args.file, args.overrides)
    if not args.json:
        print(row["id"])
    return row


def queue(client: Client, args: argparse.Namespace, console: Console) -> Any:
    rows = client.jobs(args.state, args.queue_name, active=not args.all and not args.state)
    if args.json:
        return rows
    now = time.time()
    table = Table(box=None, header_style="bold")
    priced = any(r.get("cost") is not None for r in rows)  # a COST column only where nodes have prices
    numeric = ("PRIO", "STEP", "LOSS", "RESTARTS", "RESIZES", "PREEMPTED", "COST")
    for col in ("JOB", "QUEUE", "PRIO", "STATE", "AGE", "ALLOCATION", "STEP", "LOSS", "RESTARTS", "RESIZES",
                "PREEMPTED", *(("COST",) if priced else ()), "REASON"):
        table.add_column(col, justify="right" if col in numeric else "left",
                         **(LONG if col == "REASON" else {"overflow": "fold"}))
    for r in rows:
        end = r["finish_time"] or now
        table.add_row(r["id"], r["queue"], str(r["priority"]), _state(r["state"]), _duration(end - r["submit_time"]),
                      r["allocation"] or "-", str(r["step"]), _num(r["loss"]), str(r["restarts"]),
                      str(r["resizes"]), str(r["preemptions"]), *((_dollars(r.get("cost")),) if priced else ()),
                      escape(humanize(r["message"] if r["state"] in ("failed", "rejected", "cancelled")
                                      else r["why"], now)))
    console.print(table if rows else "no jobs")
    return None


def _dollars(value: float | None) -> str:
    """`$1.23` (a cent shown as `<$0.01`); `-` when the nodes have no prices."""
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else "<$0.01"


def status(client: Client, args: argparse.Namespace, console: Console) -> Any:
    row = client.job(args.job)
    if args.json:
        return row
    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    jct = _duration(row["jct"]) if row["jct"] is not None else "-"
    wait = _duration(row["first_start"] - row["submit_time"]) if row["first_start"] else "-"
    for key, value in (("job", row["id"]), ("state", _state(row["state"])), ("queue", row["queue"]),
                       ("priority", row["priority"]), ("allocation", row["allocation"] or "-"),
                       ("step", row["step"]), ("loss", _num(row["loss"])), ("steps/s", _num(row["steps_per_s"])),
                       ("restarts (failures)", row["restarts"]), ("resizes", row["resizes"]),
                       ("preemptions", row["preemptions"]), ("cost", _dollars(row.get("cost"))),
                       ("waited", wait), ("jct", jct),
                       ("why", escape(humanize(row["why"], time.time()))),
                       ("message", escape(humanize(row["message"] or "-", time.time())))):
        table.add_row(key, str(value))
    console.print(table)
    return None


def logs(client: Client, args: argparse.Namespace, console: Console) -> Any:
    if args.json and not args.follow:
        return {"id": args.job, "logs": client.logs(args.job, args.task, args.tail)}
    for line in client.log_lines(args.job, args.task, args.tail, follow=args.follow):
        print(line, flush=args.follow)
    return None


def _lines(text: str) -> int:
    """`--tail N`: a whole number of lines, checked here so a typo is one line, not a server round trip."""
    if not text.isdigit() or int(text) > MAX_TAIL:
        raise argparse.ArgumentTypeError(f"{text!r} is not a line count (write a whole number 0..{MAX_TAIL})")
    return int(text)


def cancel(client: Client, args: argparse.Namespace, console: Console) -> Any:
    row = client.cancel(args.job)
    if not args.json:
        print(f"{row['id']}: cancel requested")
    return row


def why(client: Client, args: argparse.Namespace, console: Console) -> Any:
    out = client.why(args.job)
    if args.json:
        return out
    now = time.time()
    category = f" ({out['category']})" if out.get("category") else ""
    reason = escape(humanize(out.get("reason") or "-", now))
    console.print(f"[bold]{out['id']}[/bold] is {_state(out['state'])}{category}: {reason}", highlight=False)
    if out.get("eta") is not None:
        console.print(f"predicted start: {clock(out['eta'])} ({relative(out['eta'], now)})", highlight=False)
    elif out["state"] == "pending":
        console.print("predicted start: unknown (running jobs have no estimates, or it waits on people)")
    for d in out.get("decisions", [])[-10:]:
        console.print(f"  {relative(d['time'], now):>12}  {escape(humanize(d['text'], now))}", highlight=False)
    return None


def nodes(client: Client, args: argparse.Namespace, console: Console) -> Any:
    rows = client.nodes()
    if args.json:
        return rows
    table = Table(box=None, header_style="bold")
    for col in ("NODE", "CPU free/total", "MEM GiB free/total", "GPU free/total", "TASKS"):
        table.add_column(col, overflow="fold")
    for n in rows:
        cap, free = n["capacity"], n["free"]
        table.add_row(n["name"] + (" (transient)" if n["transient"] else ""),
                      f"{free['cpu']:g}/{cap['cpu']:g}", f"{free['memory_gib']:g}/{cap['memory_gib']:g}",
                      f"{free['gpu']}/{cap['gpu']}", " ".join(n["tasks"]) or "-")
    console.print(table)
    return None


def queues(client: Client, args: argparse.Namespace, console: Console) -> Any:
    rows = client.queues()
    if args.json:
        return rows
    table = Table(box=None, header_style="bold")
    for col in ("QUEUE", "WEIGHT", "QUOTA", "PENDING", "RUNNING", "CPU", "GPU"):
        table.add_column(col)
    for q in rows:
        quota = q["quota"]
        table.add_row(q["name"], f"{q['weight']:g}", "-" if quota is None else
                      f"cpu={quota['cpu']:g} gpu={quota['gpu']}", str(q["pending"]), str(q["running"]),
                      f"{q['cpu']:g}", str(q["gpus"]))
    console.print(table)
    return None


# -- formatting -------------------------------------------------------------------
def _state(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


