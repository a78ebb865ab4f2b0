"""`hold`, `release`, `update`: change a job that has not ended (Slurm's scontrol hold/release/update).

A held job is never started until released; only a pending job can be held
(409 for a running or ended one, exit code 2). `update` changes the priority
or the worker max of a live job, validated like the job document; a lower max
applies to a running job at its next resize or restart.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from rich.console import Console

from trainmaster.cli.jobs import _command
from trainmaster.core.errors import SpecError

if TYPE_CHECKING:
    from trainmaster.cli.client import Client


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = _command(sub, "hold", "keep a pending job from starting until it is released", hold)
    p.add_argument("job")
    p = _command(sub, "release", "let a held job start again", release)
    p.add_argument("job")
    p = _command(sub, "update", "change a live job's priority or worker max", update)
    p.add_argument("job")
    p.add_argument("--priority", type=int, default=None, help="the new priority (higher starts first)")
    p.add_argument("--max", dest="max_workers", type=int, default=None, help="the new worker replica maximum")


def hold(client: Client, args: argparse.Namespace, console: Console) -> Any:
    row = client.hold(args.job)
    if not args.json:
        print(f"{row['id']}: held (`trainmaster release {row['id']}` lets it start)")
    return row


def release(client: Client, args: argparse.Namespace, console: Console) -> Any:
    row = client.release(args.job)
    if not args.json:
        print(f"{row['id']}: released")
    return row


def update(client: Client, args: argparse.Namespace, console: Console) -> Any:
    if args.priority is None and args.max_workers is None:
        raise SpecError("update", "nothing to change", "pass --priority N and/or --max N")
    row = client.update(args.job, args.priority, args.max_workers)
    if not args.json:
        print(f"{row['id']}: priority {row['priority']}" + (f", worker max {args.max_workers}"
                                                           if args.max_workers is not None else ""))
    return row
