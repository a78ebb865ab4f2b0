"""What the engine tells a task, read from the environment it was started with.

The names are the contract between engines and `trainmaster.train`; a plain
`python train.py` with none of them set runs as a single worker that writes
its checkpoints to `./checkpoint` and reports nowhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

EXIT_PREEMPTED = 75
"""Exit code of a task that checkpointed and stopped on request (resize, preemption); EX_TEMPFAIL."""


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    try:
        return int(raw) if raw.strip() else default
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a whole number") from None


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    try:
        return float(raw) if raw.strip() else default
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not a number") from None


@dataclass(frozen=True)
class TaskEnv:
    """One task's identity, rendezvous and scheduler hooks."""

    job_id: str = "local"
    role: str = "worker"  # worker | ps
    index: int = 0  # index within the role
    rank: int = 0  # rank among the workers (collectives)
    world_size: int = 1  # number of workers
    local_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    attempt: int = 0  # bumped by the engine on every (re)launch
    checkpoint_dir: str = "checkpoint"
    checkpoint_every: float = 300.0  # seconds between periodic checkpoints (rank 0)
    report_file: str | None = None  # JSON lines of progress; only the reporting task has one
    cpus: int = 0  # cores this task is pinned to (0: not set)
    batch_mode: str = "keep"  # keep: the batch is global, split over workers; per-worker: it is per worker
    stop_check_every: int = 0  # steps between agreeing on a stop across workers (0: adaptive, ~every 50 ms)
    architecture: str = "allreduce"
    ps_addrs: tuple[str, ...] = field(default=())  # host:port of each parameter server
    ps_mode: str = "sync"  # sync | async

    @property
    def is_chief(self) -> bool:
        """Rank 0 of the workers saves checkpoints and reports progress."""
        return self.role == "worker" and self.rank == 0

    def local_batch_size(self, batch: int) -> int:
        """Per-worker batch: `batch` split over the workers (TM_BATCH_MODE=keep) or `batch` itself (per-worker)."""
        if self.batch_mode == "per-worker":
            return batch
        return max(1, -(-batch // self.world_size))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TaskEnv:
        e = os.environ if env is None else env
        ps = tuple(a for a in e.get("TM_PS_ADDRS", "").split(",") if a.strip())
        return cls(
            job_id=e.get("TM_JOB_ID", "local"),
            role=e.get("TM_ROLE", "worker"),
            index=_int(e, "TM_INDEX", _int(e, "RANK", 0)),
            rank=_int(e, "RANK", 0),
            world_size=max(1, _int(e, "WORLD_SIZE", 1)),
            local_rank=_int(e, "LOCAL_RANK", 0),
            master_addr=e.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(e, "MASTER_PORT", 29500),
            attempt=_int(e, "TM_ATTEMPT", 0),
            checkpoint_dir=e.get("TM_CHECKPOINT_DIR", "checkpoint"),
            checkpoint_every=_float(e, "TM_CHECKPOINT_EVERY", 300.0),
            report_file=e.get("TM_REPORT_FILE") or None,
            cpus=_int(e, "TM_CPUS", 0),
            batch_mode=e.get("TM_BATCH_MODE", "keep"),
            stop_check_every=max(0, _int(e, "TM_STOP_CHECK_EVERY", 0)),
            architecture=e.get("TM_ARCH", "allreduce"),
            ps_addrs=ps,
            ps_mode=e.get("TM_PS_MODE", "sync"),
        )
