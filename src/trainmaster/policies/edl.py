"""`edl`: PaddlePaddle EDL's scheduler: elastic fill up to the load line, services first, greedy start.

Training jobs start at `min` wherever they fit (no reservation), grow into
idle capacity least-fulfilled first while load stays under 0.97, and shrink
toward `min` when pending jobs or services need room; a service that still
cannot start evicts training jobs.
"""

from __future__ import annotations

from trainmaster.policies.cycle import Cycle
from trainmaster.policies.trainmaster import build


def make() -> Cycle:
    return build("edl", backfill="greedy", elastic=True, preemption=True)
