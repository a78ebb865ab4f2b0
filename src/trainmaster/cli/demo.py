"""`make demo`: the main job end to end on this machine.

Until the daemon and local engine land, this replays a built-in synthetic
workload in the simulator under every preset and compares them.
"""

from __future__ import annotations

import sys

from trainmaster.cli.main import main as cli_main
from trainmaster.policies.registry import available


def main() -> int:
    return cli_main(["simulate", "--workload", "synthetic:300", "--cluster", "8x4",
                     "--policy", ",".join(available()), "--out", "out/demo"])


if __name__ == "__main__":
    sys.exit(main())
