"""Revocation models fitted to measured lifetimes, and availability traces replayed as they were recorded.

`LifetimeMarket` samples a transient node's lifetime from the empirical
distribution of GCE preemptible VM lifetimes (ICAC'19, `transient-gce/lifetime/
lifetime.csv`) per GPU type and zone: with the measured probability the VM is
revoked before GCE's 24 h cap, at a lifetime drawn from the piecewise-linear
empirical CDF of the revoked VMs' lifetimes; otherwise it runs to the cap.
A (type, zone) with fewer than `min_zone_vms` measured VMs, or a zone never
measured, uses the type's pooled lifetimes; a type never measured uses all of them.
Every draw is seeded by (seed, node name, join time), so a run is reproducible
to the bit whatever order nodes join in.

`TraceMarket` replays an availability trace instead. Format (CSV, header required):

    time,zone,type,available
    0,us-central1-c,k80,16
    3600,us-central1-c,k80,4

`time` is seconds from the start of the run, `type` a GPU type (`cpu` for nodes without GPUs), `available`
how many transient nodes of that type in that zone may exist from then on.
When it drops below the number that exist, the newest ones get the notice
at `time` and are lost `notice` seconds later; a provider makes no more than
are available.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trainmaster.core.errors import SpecError
from trainmaster.core.gce import GCE_MAX_LIFETIME, GCE_NOTICE
from trainmaster.core.market import Availability, Revocation
from trainmaster.core.node import Node

_ZONE = re.compile(r"([a-z]+-[a-z]+\d-[a-z])")
_TYPES = ("K80", "P100", "V100")


@dataclass(frozen=True, slots=True)
class Lifetime:
    """One measured VM: GPU type, zone, seconds it lived, and whether it was revoked before the cap."""

    gpu_type: str
    zone: str
    seconds: float
    revoked: bool


def read_lifetimes(path: Path) -> list[Lifetime]:
    """The February 2019 section of `lifetime.csv` (the May-June 2018 one has times of day only)."""
    try:
        rows = list(csv.reader(path.read_text().splitlines()))
    except OSError as exc:
        raise SpecError("lifetimes", f"cannot read {path}: {exc.strerror}",
                        "pass transient-gce/lifetime/lifetime.csv") from None
    out: list[Lifetime] = []
    gpu: str | None = None
    for row in rows:
        if not row or not row[0]:
            continue
        head = row[0].strip()
        if head in _TYPES:
            gpu = head.lower()
            continue
        if head.startswith("Previous experiments"):
            break
        if head == "VM name" or gpu is None or len(row) < 3:
            continue
        zone = _ZONE.search(head)
        try:
            start = dt.datetime.strptime(row[1].strip(), "%m/%d/%y %H:%M")
            end = dt.datetime.strptime(row[2].strip(), "%m/%d/%y %H:%M")
        except ValueError:
            raise SpecError("lifetimes", f"row {head!r} has no M/D/YY HH:MM start and end",
                            "pass the ICAC'19 lifetime.csv") from None
        # Times are whole minutes: a VM revoked within its first minute shows 0; count it half a minute.
        seconds = max(30.0, (end - start).total_seconds())
        # A VM that reached the cap was stopped a few minutes after 24 h (scheduling slack): not revoked.
        out.append(Lifetime(gpu, zone.group(1) if zone else "unknown", seconds, seconds < GCE_MAX_LIFETIME))
    if not out:
        raise SpecError("lifetimes", f"{path} holds no K80/P100/V100 sections", "pass the ICAC'19 lifetime.csv")
    return out


@dataclass(frozen=True)
class _Fit:
    """Revocation probability before the cap, and the sorted lifetimes of the revoked VMs."""

    vms: int
    revoked: tuple[float, ...]

    @property
    def p_revoked(self) -> float:
        return len(self.revoked) / self.vms if self.vms else 0.0

    def sample(self, rng: random.Random, cap: float) -> float | None:
        """Seconds until revocation, or None when the VM reaches the cap."""
        if rng.random() >= self.p_revoked:
            return None
        # Inverse of the piecewise-linear empirical CDF through (0, 0) and (L_i, i/k).
        points = (0.0, *self.revoked)
        x = rng.random() * (len(points) - 1)
        i = min(int(x), len(points) - 2)
        return min(cap, points[i] + (x - i) * (points[i + 1] - points[i]))

    def mean_revoked(self) -> float:
        """Mean lifetime of the revoked VMs under the sampled (piecewise-linear) distribution."""
        points = (0.0, *self.revoked)
        return sum((a + b) / 2 for a, b in itertools.pairwise(points)) / max(1, len(self.revoked))


def _fit(items: Iterable[Lifetime]) -> _Fit:
    items = list(items)
    return _Fit(len(items), tuple(sorted(x.seconds for x in items if x.revoked)))


@dataclass
class LifetimeMarket:
    """Revocations of transient nodes drawn from measured lifetimes per GPU type and zone (see module doc)."""

    lifetimes: Sequence[Lifetime]
    seed: int = 0
    notice: float = GCE_NOTICE
    cap: float = GCE_MAX_LIFETIME
    min_zone_vms: int = 8
    _fits: dict[tuple[str, str], _Fit] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.lifetimes:
            raise SpecError("lifetimes", "is empty", "fit the market to at least one measured VM")
        self._fits = {("*", "*"): _fit(self.lifetimes)}
        for t in {x.gpu_type for x in self.lifetimes}:
            self._fits[(t, "*")] = _fit(x for x in self.lifetimes if x.gpu_type == t)
        for t, z in {(x.gpu_type, x.zone) for x in self.lifetimes}:
            zoned = _fit(x for x in self.lifetimes if (x.gpu_type, x.zone) == (t, z))
            if zoned.vms >= self.min_zone_vms:
                self._fits[(t, z)] = zoned

    @classmethod
    def from_csv(cls, path: Path, seed: int = 0, notice: float = GCE_NOTICE) -> LifetimeMarket:
        return cls(read_lifetimes(path), seed=seed, notice=notice)

    def fit_for(self, gpu_type: str | None, zone: str) -> _Fit:
        t = (gpu_type or "").lower()
        return self._fits.get((t, zone)) or self._fits.get((t, "*")) or self._fits[("*", "*")]

    def revocation_probability(self, gpu_type: str | None, zone: str) -> float:
        """Chance that a node of this type in this zone is revoked before the cap."""
        return self.fit_for(gpu_type, zone).p_revoked

    def mean_time_to_loss(self, gpu_type: str | None, zone: str) -> float:
        """Expected seconds a node lives (revocation or the cap): an MTBF for checkpoint intervals."""
        f = self.fit_for(gpu_type, zone)
        return f.p_revoked * f.mean_revoked() + (1 - f.p_revoked) * self.cap

    def revocation(self, node: Node, joined_at: float) -> Revocation | None:
        if not node.transient:
            return None
        rng = random.Random(f"{self.seed}/{node.name}/{joined_at!r}")
        life = self.fit_for(node.gpu_type, node.zone).sample(rng, self.cap)
        lost_at = joined_at + (self.cap if life is None else life)
        return Revocation(node.name, max(joined_at, lost_at - self.notice), lost_at,
                          "lifetime cap" if life is None else "revoked")

    def availability(self) -> Sequence[Availability]:
        return ()


@dataclass
class TraceMarket:
    """Revocations replayed from an availability trace (see module doc); nodes are never revoked otherwise."""

    rows: Sequence[Availability]
    notice: float = GCE_NOTICE

    @classmethod
    def from_csv(cls, path: Path, notice: float = GCE_NOTICE) -> TraceMarket:
        return cls(read_availability(path), notice=notice)

    def revocation(self, node: Node, joined_at: float) -> Revocation | None:
        return None

    def availability(self) -> Sequence[Availability]:
        return self.rows


def read_availability(path: Path) -> list[Availability]:
    """Parse `time,zone,type,available` rows (see module doc), each error naming the line and the fix."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SpecError("availability", f"cannot read {path}: {exc.strerror}",
                        "pass a CSV time,zone,type,available") from None
    reader = csv.reader(lines)
    header = [h.strip().lower() for h in next(reader, [])]
    if header != ["time", "zone", "type", "available"]:
        raise SpecError(f"{path.name}:1", f"header is {','.join(header)!r}", "start with time,zone,type,available")
    out: list[Availability] = []
    for n, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            if len(row) != 4:
                raise ValueError
            t, zone, gpu, count = float(row[0]), row[1].strip(), row[2].strip().lower(), int(row[3])
            if not math.isfinite(t) or t < 0 or count < 0 or not zone or not gpu:
                raise ValueError
        except ValueError:
            raise SpecError(f"{path.name}:{n}", f"{','.join(row)!r} is not time,zone,type,available",
                            "write seconds >= 0, a zone, a GPU type and a count >= 0") from None
        out.append(Availability(t, zone, gpu, count))
    out.sort(key=lambda a: a.time)  # stable: rows at one time keep file order
    return out
