"""An example for every command's `--help` (its epilog), kept in one place so none is forgotten.

`add_examples` puts each under its command's own epilog (exit codes and the
like); a test walks every subcommand and fails on one without an example.
"""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, tuple[str, ...]] = {
    "submit": ("trainmaster submit examples/cnn/job.yaml --set spec.roles.worker.max=2",
               "trainmaster submit sweep.yaml --array 0-9:2 --after prep"),
    "queue": ("trainmaster queue --all --queue research", "trainmaster queue --watch 5"),
    "status": ("trainmaster status cnn --json",),
    "logs": ("trainmaster logs cnn -f --task worker-0",),
    "cancel": ("trainmaster cancel cnn",),
    "why": ("trainmaster why cnn",
            "trainmaster why --workload synthetic:300 --cluster 8x4 --policy trainmaster --at 20000"),
    "nodes": ("trainmaster nodes --json",),
    "queues": ("trainmaster queues",),
    "hold": ("trainmaster hold cnn",),
    "release": ("trainmaster release cnn",),
    "update": ("trainmaster update cnn --priority 20 --max 4",),
    "history": ("trainmaster history --since 1d --state failed",
                "trainmaster history --format id,state,elapsed,gpu_hours,exit --json"),
    "simulate": ("trainmaster simulate --workload synthetic:500 --cluster 8x4 --policy fifo,trainmaster",),
    "server": ("trainmaster server --cluster nodes.yaml --queues queues.yaml --log-level debug",),
}


def add_examples(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, parser in sub.choices.items():
        lines = EXAMPLES.get(name)
        if not lines:
            continue
        text = "example" + ("s" if len(lines) > 1 else "") + ":\n" + "\n".join(f"  {line}" for line in lines)
        parser.epilog = text + (f"\n\n{parser.epilog}" if parser.epilog else "")
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
