"""Data-parallel training on the CPU ranks of one host, with pycomm.

    torchrun --nproc_per_node 4 examples/ddp_train.py            # pycomm as the backend
    torchrun --nproc_per_node 4 examples/ddp_train.py --hook     # gloo + pycomm.ring_hook

Each rank trains the same small network on its own batches of a synthetic
regression task; DDP averages the gradients (through pycomm's backend, or
through gloo's process group with pycomm's ring hook doing the all-reduce).
Rank 0 prints the loss averaged over the ranks, which goes down, and at the end
checks that every rank holds bitwise the same parameters.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm  # registers the "pycomm" backend


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch", type=int, default=64, help="samples per rank per step (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--hook", action="store_true",
                   help="init_process_group('gloo') and register pycomm.ring_hook, instead of "
                        "the 'cpu:pycomm' backend with DDP's own hook")
    args = p.parse_args()

    dist.init_process_group("gloo" if args.hook else "cpu:pycomm")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same model and teacher everywhere (DDP broadcasts rank 0's anyway)
    teacher = torch.nn.Linear(32, 1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    model = DDP(model)
    if args.hook:
        model.register_comm_hook(None, pycomm.ring_hook)  # averages, as DDP's default does
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    data = torch.Generator().manual_seed(1000 + rank)  # each rank: batches of its own
    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        x = torch.randn(args.batch, 32, generator=data)
        with torch.no_grad():
            y = teacher(x)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here
        opt.step()
        # pycomm's own API beside the backend: the communicator is made on
        # first use (pycomm.init() is optional).
        mean = loss.detach().clone()
        pycomm.all_reduce(mean, op="avg")
        losses.append(mean.item())
        if rank == 0 and (step % max(1, args.steps // 5) == 0 or step == args.steps - 1):
            print(f"step {step:4d}  loss {losses[-1]:.4f} (mean over {world} ranks)", flush=True)
    elapsed = time.perf_counter() - start

    # Every rank must hold the same parameters: compare each rank's with rank 0's.
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    theirs = flat.clone()
    dist.broadcast(theirs, src=0)
    same = torch.tensor([1.0 if torch.equal(flat, theirs) else 0.0])
    pycomm.all_reduce(same, op="min")
    if rank == 0:
        how = "gloo + pycomm.ring_hook" if args.hook else "backend cpu:pycomm"
        print(f"{how}: {world} ranks, {args.steps} steps in {elapsed:.2f} s "
              f"({elapsed / max(1, args.steps) * 1e3:.1f} ms a step); loss {losses[0]:.4f} -> "
              f"{losses[-1]:.4f}; parameters bitwise identical on every rank: {bool(same.item())}")
    dist.destroy_process_group()
    if not same.item() or (args.steps >= 10 and not losses[-1] < losses[0]):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
