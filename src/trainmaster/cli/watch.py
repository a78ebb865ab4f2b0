"""`queue --watch [SECONDS]`: redraw the queue until Ctrl-C (like `watch squeue`).

On a terminal each redraw clears the screen; piped, redraws follow each
other under a `--- HH:MM:SS` line. `--count N` stops after N redraws (scripts).
"""

from __future__ import annotations

import argparse
import sys
import time

from trainmaster.core.errors import SpecError

CLEAR = "\x1b[H\x1b[2J"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.choices["queue"]
    p.add_argument("--watch", type=float, nargs="?", const=2.0, default=None, metavar="SECONDS",
                   help="redraw every SECONDS (default 2) until Ctrl-C")
    p.add_argument("--count", type=int, default=None, metavar="N", help="with --watch: stop after N redraws")
    once = p.get_default("func")

    def queue(args: argparse.Namespace) -> int:
        if args.watch is None:
            code: int = once(args)
            return code
        if not args.watch > 0 or (args.count is not None and args.count < 1):
            raise SpecError("--watch", "needs a positive interval (and --count at least 1)", "e.g. --watch 5")
        drawn = 0
        try:
            while True:
                if sys.stdout.isatty():
                    print(CLEAR, end="", flush=True)
                else:
                    print(f"--- {time.strftime('%H:%M:%S')}", flush=True)
                once(args)
                sys.stdout.flush()
                drawn += 1
                if args.count is not None and drawn >= args.count:
                    return 0
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0

    p.set_defaults(func=queue)
