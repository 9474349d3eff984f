"""Launched by torchrun (tests/test_backend_training.py::test_torchrun_launch):

    torchrun --standalone --nproc_per_node 3 tests/scripts/backend_smoke.py

Initialises the default group on pycomm the way users do, from torchrun's
environment, checks a few collectives, and prints one "ok" line per rank.
PYCOMM_TEST_BACKEND overrides the backend (gloo, to check the script itself).
"""
import os
import sys

import torch
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the "pycomm" backend)
from pycomm.torch_compat import all_gather_single, reduce_scatter_single


def main():
    backend = os.environ.get("PYCOMM_TEST_BACKEND", "cpu:pycomm")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
    problems = []

    def expect(what, got, want):
        if not torch.equal(got, want):
            problems.append(f"{what}: got {got.tolist()[:8]}, want {want.tolist()[:8]}")

    t = torch.arange(1001, dtype=torch.float32) + rank
    dist.all_reduce(t)
    expect("all_reduce sum", t, sum(torch.arange(1001, dtype=torch.float32) + r for r in range(world)))

    t = torch.full((17,), rank, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    expect("all_reduce max", t, torch.full((17,), world - 1, dtype=torch.int64))

    t = torch.full((300,), float(rank), dtype=torch.bfloat16)
    dist.broadcast(t, src=world - 1)
    expect("broadcast", t, torch.full((300,), float(world - 1), dtype=torch.bfloat16))

    out = torch.zeros(5 * world)
    all_gather_single(out, torch.full((5,), float(rank)))
    expect("all_gather_single", out, torch.arange(world, dtype=torch.float32).repeat_interleave(5))

    out = torch.zeros(4)
    reduce_scatter_single(out, torch.arange(4 * world, dtype=torch.float32))
    expect("reduce_scatter_single", out,
           world * torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32))

    out = torch.zeros(world)
    dist.all_to_all_single(out, torch.arange(world, dtype=torch.float32) + 10 * rank)
    expect("all_to_all_single", out, torch.arange(world, dtype=torch.float32) * 10 + rank)

    t = torch.ones(64)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    expect("async all_reduce", t, torch.full((64,), float(world)))

    dist.barrier()
    dist.destroy_process_group()
    if problems:
        print(f"backend_smoke rank {rank}/{world}: FAILED: " + "; ".join(problems), flush=True)
        return 1
    print(f"backend_smoke rank {rank}/{world}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
