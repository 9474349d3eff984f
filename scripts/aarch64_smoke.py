"""Two ranks of pycomm's backend, checked against gloo in the same run: all_reduce
(sum, max, min) of six dtypes at sizes that take the direct and the ring
algorithm, equal to gloo's exactly (integer-valued inputs, exact in every
dtype); avg of random floats bitwise the same on both ranks; and DDP's
parameters after 3 steps on pycomm equal to those on gloo. scripts/aarch64_python.sh
runs it on aarch64 under emulation, one process per rank:
    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python3 scripts/aarch64_smoke.py
"""
import os
import platform
import time

import torch
import torch.distributed as dist

import pycomm

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
t0 = time.time()
dist.init_process_group("cpu:pycomm", rank=rank, world_size=world)
gloo = dist.new_group(backend="gloo")
print(f"rank {rank}: {platform.machine()}, torch {torch.__version__}, "
      f"pycomm's vector loops: {pycomm.cpu_vector_path()}", flush=True)
checked = 0
# Integer-valued inputs whose sums over two ranks every dtype holds exactly.
limits = {torch.float32: 10000, torch.float64: 10000, torch.float16: 500, torch.bfloat16: 60,
          torch.int32: 10000, torch.int8: 50}
for dtype, lim in limits.items():
    for n in (7, 1000, 300_001):  # direct below the threshold, the ring above it
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
            g = torch.Generator().manual_seed(rank * 7919 + n)
            x = torch.randint(-lim, lim, (n,), generator=g).to(dtype)
            a, b = x.clone(), x.clone()
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=gloo)
            assert torch.equal(a, b), (dtype, n, op, (a != b).sum())
            checked += 1
# avg of random floats: bitwise the same on every rank
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x = torch.randn(300_001, generator=torch.Generator().manual_seed(rank)).to(dtype)
    pycomm.all_reduce(x, op="avg")
    both = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(both, x, group=gloo)
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert all(torch.equal(both[0].view(bits), t.view(bits)) for t in both), dtype
    checked += 1


# DDP: the same model and data on pycomm (the default group) and on gloo, 3 steps
def train(group):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(m, process_group=group, bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(3):
        g = torch.Generator().manual_seed(100 * rank + step)
        x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in m.parameters()]


p_pycomm, p_gloo = train(None), train(gloo)
assert all(torch.equal(a, b) for a, b in zip(p_pycomm, p_gloo))
checked += 1
dist.barrier()
dist.destroy_process_group()
print(f"rank {rank}: {checked} checks passed (equal to gloo); {time.time() - t0:.0f} s", flush=True)
