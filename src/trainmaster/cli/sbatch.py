"""`submit --after JOB[,JOB]` and `submit --array 0-9`: Slurm's dependencies and job arrays.

Both become fields of the job document, so the server validates and keeps
them like any other: `--after` sets `spec.after` (the job starts only once
those jobs succeeded; it ends cancelled if one fails, is cancelled or
rejected). `--array` submits one job per index, named NAME-INDEX, with
`TM_ARRAY_INDEX` in its environment (`spec.env`).
"""

from __future__ import annotations

import argparse
import json
import re
from copy import copy
from typing import Any

from trainmaster.cli import jobs
from trainmaster.cli.console import make_console
from trainmaster.core.errors import SpecError

MAX_ARRAY = 1000
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_array(text: str) -> list[int]:
    """`0-9`, `0-9:2`, `1,3,5` or a mix (`1-3,7`): the indices in order, each once."""
    out: dict[int, None] = {}
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise SpecError("--array", f"{part.strip()!r} is not an index range", "write e.g. 0-9, 0-9:2 or 1,3,5")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        step = 1 if m.group(3) is None else int(m.group(3))
        if hi < lo or step < 1:
            raise SpecError("--array", f"{part.strip()!r} is an empty range", "write LOW-HIGH[:STEP] with LOW <= HIGH")
        if len(out) + (hi - lo) // step + 1 > MAX_ARRAY:
            raise SpecError("--array", f"more than {MAX_ARRAY} jobs", "submit a smaller array")
        out.update(dict.fromkeys(range(lo, hi + 1, step)))
    return list(out)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.choices["submit"]
    p.add_argument("--after", action="append", default=[], metavar="JOB[,JOB]",
                   help="start only after these jobs succeeded; if one fails or is cancelled, cancel this one")
    p.add_argument("--array", default=None, metavar="INDICES",
                   help="one job per index (0-9, 0-9:2, 1,3,5), named NAME-INDEX, with TM_ARRAY_INDEX set")
    single = p.get_default("func")

    def submit(args: argparse.Namespace) -> int:
        after = [j.strip() for item in args.after for j in item.split(",") if j.strip()]
        if after:
            args.overrides = [*args.overrides, f"spec.after={json.dumps(after)}"]
        if args.array is None:
            code: int = single(args)
            return code
        return submit_array(args, parse_array(args.array))

    p.set_defaults(func=submit)


def submit_array(args: argparse.Namespace, indices: list[int]) -> int:
    """Submit one job per index through the one `submit` handler; print their ids (or a JSON list)."""
    from trainmaster.cli.client import Client, load_document  # httpx: only when a command runs

    name = load_document(args.file, args.overrides).get("metadata", {}).get("name")
    if not isinstance(name, str):
        raise SpecError("metadata.name", "is required", "add a name: the array's jobs are named NAME-INDEX")
    rows: list[Any] = []
    console = make_console()
    with Client(args.url) as client:
        for i in indices:
            one = copy(args)
            one.overrides = [*args.overrides, f"metadata.name={name}-{i}", f"spec.env.TM_ARRAY_INDEX='{i}'"]
            rows.append(jobs.submit(client, one, console))
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0
