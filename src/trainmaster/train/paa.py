"""Balanced parameter assignment for parameter servers (Optimus' PAA, EuroSys'18 section 5.1).

A parameter server's step time is set by its busiest server, so parameter
blocks (one tensor each) should load the servers evenly. `plan` fills the
servers largest block first, always onto the least-loaded server, and splits a
block when it would push that server past the even share `ceil(total/p)`: at
most about p-1 splits, and loads within one small block of perfectly even.
`assign` is the no-split form `train.ps` uses (one server per tensor).

Two baselines for comparison (`bench/paa.py`): MXNet's kvstore rule (blocks
under 1M parameters go to server `key*9973 mod p`, larger ones are split evenly
over all servers) and round-robin by key.

Standard library only (train/ may import nothing but it and torch).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

MXNET_BIGARRAY_BOUND = 1_000_000  # MXNET_KVSTORE_BIGARRAY_BOUND's default


@dataclass(frozen=True, slots=True)
class Shard:
    """Parameters `[start, start + length)` of block `block` live on `server`."""

    block: int
    server: int
    start: int
    length: int


def _check(sizes: Sequence[int], servers: int) -> None:
    if servers < 1:
        raise ValueError(f"need at least one server, got {servers}")
    if any(s < 0 for s in sizes):
        raise ValueError("block sizes must not be negative")


def plan(sizes: Sequence[int], servers: int, *, min_split: int = 1024) -> list[Shard]:
    """PAA: balanced shards; blocks under `min_split` parameters are never split."""
    _check(sizes, servers)
    cap = -(-sum(sizes) // servers)  # the even share, rounded up
    heap = [(0, s) for s in range(servers)]  # (load, server): least loaded first
    out: list[Shard] = []
    for block in sorted(range(len(sizes)), key=lambda b: (-sizes[b], b)):
        start, left = 0, sizes[block]
        while True:
            load, server = heapq.heappop(heap)
            room = cap - load
            # All of it when it fits or is too small to split (a full server then overfills a little).
            take = left if left <= room or left < min_split or room < min_split else room
            out.append(Shard(block, server, start, take))
            heapq.heappush(heap, (load + take, server))
            start += take
            left -= take
            if left <= 0:
                break
    return out


def assign(sizes: Sequence[int], servers: int) -> list[int]:
    """One server per block (no splits): largest first onto the least-loaded server."""
    _check(sizes, servers)
    heap = [(0, s) for s in range(servers)]
    out = [0] * len(sizes)
    for block in sorted(range(len(sizes)), key=lambda b: (-sizes[b], b)):
        load, server = heapq.heappop(heap)
        out[block] = server
        heapq.heappush(heap, (load + sizes[block], server))
    return out


def mxnet_rule(sizes: Sequence[int], servers: int, bound: int = MXNET_BIGARRAY_BOUND) -> list[Shard]:
    """MXNet kvstore: small blocks hashed by `key*9973 mod p`, big ones split evenly over every server."""
    _check(sizes, servers)
    out: list[Shard] = []
    for key, size in enumerate(sizes):
        if size < bound:
            out.append(Shard(key, (key * 9973) % servers, 0, size))
            continue
        start = 0
        for server in range(servers):
            length = size // servers + (1 if server < size % servers else 0)
            out.append(Shard(key, server, start, length))
            start += length
    return out


def round_robin(sizes: Sequence[int], servers: int) -> list[Shard]:
    """Block `i` on server `i mod p`, unsplit."""
    _check(sizes, servers)
    return [Shard(key, key % servers, 0, size) for key, size in enumerate(sizes)]


def loads(shards: Sequence[Shard], servers: int) -> list[int]:
    out = [0] * servers
    for shard in shards:
        out[shard.server] += shard.length
    return out


def imbalance(shards: Sequence[Shard], servers: int) -> float:
    """Max over mean server load (1.0 is perfectly even)."""
    per = loads(shards, servers)
    mean = sum(per) / servers
    return max(per) / mean if mean > 0 else 1.0


# -- reference block lists from the real layer shapes (one block per learnable tensor) --------


def vgg16_blocks() -> list[int]:
    """VGG-16 (Simonyan & Zisserman, configuration D): 13 3x3 convs and 3 FC layers, weight and bias each.

    138,357,544 parameters, as torchvision's vgg16.
    """
    cfg = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]
    out: list[int] = []
    cin = 3
    for c in cfg:
        if c:
            out += [c * cin * 9, c]
            cin = c
    for fin, fout in ((512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)):
        out += [fin * fout, fout]
    return out


def resnet50_blocks() -> list[int]:
    """ResNet-50 (He et al.): bias-free convs, each followed by batch norm (weight, bias); 25,557,032 parameters."""
    out = [64 * 3 * 49, 64, 64]  # stem conv 7x7 and its batch norm
    cin = 64
    for width, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            for k_in, k_out, k in ((cin, width, 1), (width, width, 3), (width, 4 * width, 1)):
                out += [k_out * k_in * k * k, k_out, k_out]
            if b == 0:  # projection shortcut
                out += [4 * width * cin, 4 * width, 4 * width]
            cin = 4 * width
    out += [2048 * 1000, 1000]
    return out
