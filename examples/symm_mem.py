"""PyTorch's symmetric memory on CPU tensors, on pycomm.

    torchrun --nproc_per_node 4 examples/symm_mem.py

Each rank allocates a buffer that every rank can read and write, writes its share of a
sequence into it, signals the next rank, and reads the previous rank's buffer once that
rank has signalled. Then it all-reduces the buffer two ways: torch's one-shot kernel
(into a new tensor) and dist.all_reduce, which pycomm runs in place on symmetric memory.
Every value is checked against the sum computed here.
"""
import argparse

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem

import pycomm  # noqa: F401  (registers the "pycomm" backend and the CPU symmetric memory)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--numel", type=int, default=1 << 20, help="elements of the buffer (default 1Mi)")
    args = p.parse_args()
    dist.init_process_group("cpu:pycomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD

    buf = symm_mem.empty(args.numel, device="cpu")
    hdl = symm_mem.rendezvous(buf, group)
    buf.copy_(torch.arange(args.numel, dtype=torch.float32) + rank)

    # Point to point through the signal pads: rank r tells r+1 its buffer is ready.
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    hdl.put_signal(nxt)
    hdl.wait_signal(prev)
    seen = hdl.get_buffer(prev, (args.numel,), torch.float32)
    ok_peer = bool(seen[:8].eq(torch.arange(8) + prev).all())
    hdl.barrier()

    want = torch.arange(args.numel, dtype=torch.float32) * world + sum(range(world))
    one_shot = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group.group_name)
    dist.all_reduce(buf)  # in place in every rank's copy: no copy in or out
    ok = ok_peer and torch.equal(one_shot, want) and torch.equal(buf, want)
    print(f"rank {rank}/{world}: peer {prev}'s buffer read directly: {ok_peer}; one-shot and "
          f"in-place all-reduce of {args.numel} floats equal to the sum: "
          f"{torch.equal(one_shot, want) and torch.equal(buf, want)}: {'OK' if ok else 'WRONG'}")
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
