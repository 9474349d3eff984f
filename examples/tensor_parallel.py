"""A tensor-parallel MLP block with sequence-parallel activations, on pycomm.

    torchrun --nproc_per_node 4 examples/tensor_parallel.py

The block is out = gelu(x @ w1) @ w2, as in a transformer layer. Each rank holds
a column slice of w1 and the matching row slice of w2, and 1/N of the sequence:

    x_local  [S/N, H] --all_gather_single--> x [S, H]
    h = gelu(x @ w1[:, mine])                        [S, F/N]   no communication
    partial = h @ w2[mine, :]                        [S, H]     a partial sum
    out_local = reduce_scatter_single(partial, SUM)   [S/N, H]   summed, sequence-split again

Each step checks every rank's rows against the whole block computed in one
process (float64, so the only difference is the order of the sums).
"""
import argparse
import time

import torch
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the "pycomm" backend)
# dist.all_gather_single and dist.reduce_scatter_single from torch 2.12 on; the old names before.
from pycomm.torch_compat import all_gather_single, reduce_scatter_single


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="forward passes (default 20)")
    p.add_argument("--seq", type=int, default=256, help="sequence length S, a multiple of the "
                   "number of ranks (default 256)")
    p.add_argument("--hidden", type=int, default=512, help="hidden size H (default 512)")
    args = p.parse_args()

    dist.init_process_group("cpu:pycomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    S, H, F = args.seq, args.hidden, 4 * args.hidden
    if S % world:
        raise SystemExit(f"--seq {S} must be a multiple of the {world} ranks")
    dtype = torch.float64

    torch.manual_seed(0)  # every rank makes the whole weights, then keeps its slices
    w1 = torch.randn(H, F, dtype=dtype) / H ** 0.5
    w2 = torch.randn(F, H, dtype=dtype) / F ** 0.5
    mine = slice(rank * F // world, (rank + 1) * F // world)
    w1_local, w2_local = w1[:, mine].contiguous(), w2[mine, :].contiguous()

    x = torch.empty(S, H, dtype=dtype)
    out_local = torch.empty(S // world, H, dtype=dtype)
    worst, comm_s = 0.0, 0.0
    for step in range(args.steps):
        inputs = torch.randn(S, H, dtype=dtype, generator=torch.Generator().manual_seed(step))
        x_local = inputs.chunk(world)[rank].contiguous()  # this rank's part of the sequence

        t0 = time.perf_counter()
        all_gather_single(x, x_local)
        t1 = time.perf_counter()
        partial = torch.nn.functional.gelu(x @ w1_local) @ w2_local
        t2 = time.perf_counter()
        reduce_scatter_single(out_local, partial, op=dist.ReduceOp.SUM)
        comm_s += (t1 - t0) + (time.perf_counter() - t2)

        reference = (torch.nn.functional.gelu(inputs @ w1) @ w2).chunk(world)[rank]
        error = torch.tensor([(out_local - reference).abs().max().item()
                              if torch.equal(x, inputs) else float("inf")], dtype=dtype)
        dist.all_reduce(error, op=dist.ReduceOp.MAX)
        worst = max(worst, error.item())
        if rank == 0 and (step % max(1, args.steps // 4) == 0 or step == args.steps - 1):
            print(f"step {step:3d}  max |out - single-process reference| over {world} ranks: "
                  f"{error.item():.2e}", flush=True)

    ok = worst < 1e-9
    if rank == 0:
        print(f"tensor parallel over {world} ranks: S={S} H={H} F={F} float64, {args.steps} steps, "
              f"{comm_s / max(1, args.steps) * 1e3:.2f} ms a step in the two collectives on rank 0 "
              f"(waiting for slower ranks included); worst error {worst:.2e}: "
              f"{'OK' if ok else 'WRONG'}")
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
