"""Parameter-server load balance: PAA against MXNet's kvstore rule and round-robin.

Blocks are the learnable tensors of ResNet-50 and VGG-16 built from their real
layer shapes (`trainmaster.train.paa`); load = parameters per server; a step waits
for the busiest server, so max/mean load is the slowdown against perfect balance.

    .venv/bin/python -m bench.paa
"""

from __future__ import annotations

import time

from trainmaster.train.paa import imbalance, mxnet_rule, plan, resnet50_blocks, round_robin, vgg16_blocks

SERVERS = (2, 4, 8, 16)


def main() -> None:
    print("max/mean parameters per server (1.000 = even); PAA splits in brackets")
    print("| model | servers | PAA | MXNet rule | round-robin |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, blocks in (("ResNet-50 (161 tensors, 25.6M)", resnet50_blocks()),
                         ("VGG-16 (32 tensors, 138.4M)", vgg16_blocks())):
        for p in SERVERS:
            shards = plan(blocks, p)
            splits = len(shards) - len(blocks)
            print(f"| {name} | {p} | {imbalance(shards, p):.3f} ({splits}) | "
                  f"{imbalance(mxnet_rule(blocks, p), p):.3f} | {imbalance(round_robin(blocks, p), p):.3f} |")
    blocks = resnet50_blocks() * 100
    t0 = time.perf_counter()
    plan(blocks, 64)
    print(f"\nPAA on {len(blocks):,} blocks and 64 servers: {1000 * (time.perf_counter() - t0):.1f} ms")


if __name__ == "__main__":
    main()
