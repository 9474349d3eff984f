"""Ranks pinned to the nodes of a posed two-node topology (PYCOMM_TOPOLOGY, over the first two
CPUs this process may use) run their large all-reduces two_level (PYCOMM_TWO_LEVEL=on: auto
wants 6 ranks a domain), and those that are not run them flat. For each layout (the node each rank pins itself to, "-" for none) the ranks pin
themselves, make a pycomm group and its pycomm.all_reduce communicator, and check:
  - which algorithm dist.all_reduce took (auto): the one whose result it equals bit for bit,
    among pycomm.all_reduce's explicit ones;
  - exact values with integer-valued floats, against the float64 sum of every rank's input;
  - random floats within a stated tolerance of that sum, and bitwise equal on every rank.

    torchrun --nproc_per_node 4 tests/scripts/numa_two_level.py [--layouts 0011,0101,0001,001-]

Each rank prints one JSON line: {layout: {"large": algorithm, "small": algorithm, ...}}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist

import pycomm
from pycomm import host_cpus

LARGE = (1 << 18) + 5  # float32 elements: 1 MiB and a tail, above two_level_min_bytes
SMALL = 200            # 800 bytes: the one-shot's


def inputs(rank: int, n: int, integer: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + n + integer)
    if integer:
        return torch.randint(-4, 5, (n,), generator=g).float()
    return torch.randn(n, generator=g)


def pin(node: str, layout) -> None:
    cpus = sorted(c for cs in layout.nodes.values() for c in cs) if node == "-" else layout.nodes[int(node)]
    os.sched_setaffinity(0, cpus)


def taken(group, x: torch.Tensor) -> str:
    """The algorithm dist.all_reduce took on x: the explicit one it equals bit for bit."""
    auto = x.clone()
    dist.all_reduce(auto, group=group)
    same = []
    for algorithm in ("two_level", "ring", "direct"):
        y = x.clone()
        pycomm.all_reduce(y, group=group, algorithm=algorithm)
        if torch.equal(y, auto):
            same.append(algorithm)
    return "/".join(same) or "none"


def check_layout(pins: str, world: int, rank: int) -> dict:
    layout = host_cpus.numa_layout()
    pin(pins[rank], layout)
    group = dist.new_group(backend="cpu:pycomm")
    pycomm.init(group)  # pycomm.all_reduce's communicator, made while pinned alike
    out = {"pinned_node": host_cpus.pinned_node(layout)}
    for integer in (True, False):
        x = inputs(rank, LARGE, integer)
        want = sum(inputs(r, LARGE, integer).double() for r in range(world))
        got = x.clone()
        dist.all_reduce(got, group=group)
        err = (got.double() - want).abs().max().item()
        out["exact" if integer else "float_max_error"] = err == 0 if integer else err
        digest = hashlib.sha256(got.numpy().tobytes()).hexdigest()
        digests = [None] * world
        dist.all_gather_object(digests, digest, group=group)
        out["bitwise_across_ranks" + ("_int" if integer else "")] = len(set(digests)) == 1
    # Random floats tell the algorithms apart: each adds in its own order.
    out["large"] = taken(group, inputs(rank, LARGE, False))
    out["small"] = taken(group, inputs(rank, SMALL, False))
    pycomm.destroy(group)
    dist.destroy_process_group(group)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layouts", default="0011,0101,0001,001-,0000",
                   help="comma-separated: each rank's node (0 or 1), '-' for not pinned")
    p.add_argument("--two-level", default="on", choices=("auto", "on", "off"),
                   help="PYCOMM_TWO_LEVEL (auto takes the ring below 6 ranks a domain)")
    args = p.parse_args()
    os.environ["PYCOMM_TWO_LEVEL"] = args.two_level
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("numa_two_level: needs two CPUs to pose two nodes")
    os.environ["PYCOMM_TOPOLOGY"] = f"{cpus[0]};{cpus[1]}"
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {}
    for pins in args.layouts.split(","):
        if len(pins) != world:
            raise SystemExit(f"--layouts: {pins!r} does not name {world} ranks")
        results[pins] = check_layout(pins, world, rank)
    print(json.dumps({"rank": rank, "layouts": results}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
