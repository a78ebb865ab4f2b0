"""Balanced parameter assignment (PAA) against MXNet's rule and round-robin, on real layer shapes."""

from __future__ import annotations

import itertools

import pytest

from trainmaster.train.paa import (
    assign,
    imbalance,
    loads,
    mxnet_rule,
    plan,
    resnet50_blocks,
    round_robin,
    vgg16_blocks,
)


def test_block_lists_match_the_published_parameter_counts() -> None:
    assert sum(resnet50_blocks()) == 25_557_032  # torchvision resnet50
    assert sum(vgg16_blocks()) == 138_357_544  # torchvision vgg16
    assert len(vgg16_blocks()) == 32  # 16 layers, weight + bias each


@pytest.mark.parametrize("blocks", [resnet50_blocks(), vgg16_blocks()], ids=["resnet-50", "vgg-16"])
@pytest.mark.parametrize("servers", [2, 3, 4, 8, 16])
def test_paa_is_more_even_than_both_baselines(blocks: list[int], servers: int) -> None:
    paa = imbalance(plan(blocks, servers), servers)
    assert paa < imbalance(mxnet_rule(blocks, servers), servers)
    assert paa < imbalance(round_robin(blocks, servers), servers)
    assert paa < 1.001


@pytest.mark.parametrize("servers", [1, 3, 7])
def test_shards_cover_every_block_exactly_once(servers: int) -> None:
    blocks = [5, 3_000_000, 0, 17, 1_200_000, 999_999, 4096]
    shards = plan(blocks, servers)
    for b, size in enumerate(blocks):
        parts = sorted((s.start, s.length) for s in shards if s.block == b)
        assert parts[0][0] == 0
        assert sum(length for _, length in parts) == size
        assert all(a + la == c for (a, la), (c, _) in itertools.pairwise(parts))
    assert sum(loads(shards, servers)) == sum(blocks)
    assert all(0 <= s.server < servers for s in shards)


def test_small_blocks_are_never_split_and_assign_is_a_valid_server_map() -> None:
    blocks = [100, 200, 300, 5000]
    shards = plan(blocks, 3, min_split=1024)
    assert sum(1 for s in shards if s.block in (0, 1, 2)) == 3
    servers = assign(resnet50_blocks(), 4)
    assert len(servers) == len(resnet50_blocks()) and set(servers) <= {0, 1, 2, 3}
    with pytest.raises(ValueError):
        plan(blocks, 0)
