"""pycomm's all-reduce of CUDA tensors: the direct API, the hook, the backend.

Ranks are processes; on a host with fewer GPUs than ranks they share GPUs
(rank r on cuda:r % count), which CUDA IPC allows between processes. Values
are integer-valued, so sums are exact and every algorithm must equal the
reference computed here; every rank must hold bitwise the same bytes.

Without a GPU the GPU tests skip (CI compiles the CUDA sources but cannot run
them); what does not need a GPU runs everywhere.
"""
import copy
import hashlib
import time

import pytest
import torch
import torch.distributed as dist

import pycomm
from support.process_world import ProcessWorld

pytestmark = pytest.mark.ranks

needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not pycomm.cuda_built(),
    reason="needs a CUDA GPU and a build with the CUDA sources: pycomm's CUDA path runs only there")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
          torch.int8, torch.uint8]
OPS = ["sum", "avg", "max", "min", "product"]
COUNTS = [0, 1, 7, 1023, (1 << 20) + 3]
ALGORITHMS = ["auto", "direct", "two_shot", "ring"]
# The first run on a GPU is short: a few dtypes of each kind (a 4-byte float,
# a 2-byte float accumulated in float32, an integer), an op that adds and one
# that compares, and counts that take the vector path, its tail, and pieces
# through the staging buffer, under every algorithm.
SMOKE = ([torch.float32, torch.bfloat16, torch.int32], ["sum", "max"], [1, 7, (1 << 20) + 3],
         ALGORITHMS)


@pytest.mark.fast
def test_backend_registers_for_cuda_where_built():
    devices = dist.Backend.backend_capability["pycomm"]
    assert devices == (["cpu", "cuda"] if pycomm.cuda_built() else ["cpu"])


def _two_shot_on_cpu():
    t = torch.ones(8)
    with pytest.raises(ValueError, match="algorithm: all_reduce runs auto, direct, ring, two_level or single_copy on CPU"):
        pycomm.all_reduce(t, algorithm="two_shot")
    assert torch.equal(t, torch.ones(8))  # refused before anything moved
    return True


def test_two_shot_is_refused_for_cpu_tensors(worlds):
    assert worlds(2).run(_two_shot_on_cpu) == [True, True]


# ---------------------------------------------------------------- in the ranks

def _device():
    rank = dist.get_rank()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def _value(rank, count, dtype, op):
    """Small integers, different on each rank; products stay exact in every dtype."""
    idx = torch.arange(count, dtype=torch.int64)
    if op == "product":
        base = (idx + rank) % 2 + 1  # 1 or 2
    elif dtype in (torch.int8, torch.uint8):
        base = (idx * 3 + rank) % 7
    else:
        base = (idx * 7 + rank * 3) % 101 - 50
    return base


def _reference(world, count, dtype, op):
    vals = torch.stack([_value(r, count, dtype, op) for r in range(world)]).to(torch.float64)
    if op in ("sum", "avg"):
        out = vals.sum(0)
        if op == "avg":
            out = out / world
    elif op == "max":
        out = vals.max(0).values
    elif op == "min":
        out = vals.min(0).values
    else:
        out = vals.prod(0)
    return out.to(dtype)


def _grid(dtypes, ops, counts, algorithms):
    dev = _device()
    rank, world = dist.get_rank(), dist.get_world_size()
    digests = []  # (case, sha256 of the result's bytes), compared across ranks at the end
    for dtype in dtypes:
        for op in ops:
            if op == "avg" and not dtype.is_floating_point:
                continue
            for count in counts:
                for algorithm in algorithms:
                    t = _value(rank, count, dtype, op).to(dtype).to(dev)
                    pycomm.all_reduce(t, op=op, algorithm=algorithm)
                    expect = _reference(world, count, dtype, op)
                    got = t.cpu()
                    where = f"{dtype} {op} count={count} {algorithm}"
                    if op == "avg":
                        # The sum is exact; the division rounds once in the
                        # accumulation type, then to the dtype: within an ulp.
                        rtol = {torch.float64: 1e-15, torch.float32: 1e-7}.get(dtype, 1e-2)
                        torch.testing.assert_close(got, expect, rtol=rtol, atol=0, msg=where)
                    else:
                        assert torch.equal(got, expect), where
                    digests.append((where, hashlib.sha256(got.view(torch.uint8).numpy().tobytes()
                                                          if count else b"").hexdigest()))
    # Bitwise the same on every rank. One exchange for the whole grid: processes
    # without MPS take turns on the GPU, and a gloo round per case would double
    # the grid's time.
    every = [None] * world
    dist.all_gather_object(every, digests)
    for r, theirs in enumerate(every):
        for (where, mine), (_, other) in zip(digests, theirs):
            assert mine == other, f"{where}: rank {r}'s bytes differ from rank {rank}'s"
    return len(digests)


@needs_gpu
@pytest.mark.parametrize("n", [2])
def test_all_reduce_smoke(worlds, n):
    counts = worlds(n).run(_grid, *SMOKE, timeout=300)
    assert counts[0] > 0 and len(set(counts)) == 1


@needs_gpu
@pytest.mark.parametrize("n", [2, 3])
def test_all_reduce_grid(worlds, n):
    counts = worlds(n).run(_grid, DTYPES, OPS, COUNTS, ALGORITHMS, timeout=600)
    assert counts[0] > 0 and len(set(counts)) == 1


def _large_and_async():
    dev = _device()
    rank, world = dist.get_rank(), dist.get_world_size()
    n = 16 << 20  # 64 MiB of float32: more than the staging buffer, in pieces
    t = torch.full((n,), float(rank + 1), device=dev)
    work = pycomm.all_reduce(t, async_op=True)
    fut = work.get_future()
    value = fut.wait()
    assert value[0].data_ptr() == t.data_ptr()  # [t], as torch's Work.get_future()
    expect = float(world * (world + 1) // 2)
    assert bool((t == expect).all())
    # The collective follows what the caller's stream queued before it.
    torch.cuda._sleep(50_000_000)
    t.fill_(1.0)
    pycomm.all_reduce(t)
    assert bool((t == world).all())
    return True


@needs_gpu
def test_large_in_pieces_and_async(worlds):
    assert worlds(2).run(_large_and_async) == [True, True]


def _graph_capture_refused():
    dev = _device()
    t = torch.ones(16, device=dev)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with pytest.raises(ValueError, match="graph capture"):
            with torch.cuda.graph(graph, stream=stream):
                pycomm.all_reduce(t)
    return True


@needs_gpu
def test_graph_capture_is_refused_clearly(worlds):
    # Refused on the caller's rank before anything is queued: every rank refuses.
    assert worlds(2).run(_graph_capture_refused) == [True, True]


def _ddp_hook_matches(compression, sync_bn):
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _device()
    rank = dist.get_rank()
    dtype = torch.float64 if compression is None else torch.float32
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 5))
    if sync_bn:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to(dev, dtype)
    # The reference: DDP's own all-reduce over NCCL where every rank has a GPU of
    # its own, else over the default gloo group (which stages CUDA tensors
    # through the host).
    nccl = (dist.new_group(backend="nccl")
            if torch.cuda.device_count() >= dist.get_world_size() else None)
    ref = DDP(copy.deepcopy(model), device_ids=[dev.index], process_group=nccl)
    ours = DDP(model, device_ids=[dev.index])
    ours.register_comm_hook(pycomm.RingState(compression=compression), pycomm.ring_hook)
    torch.manual_seed(1 + rank)
    for _ in range(3):
        x = torch.randn(4, 3, 8, 8, device=dev, dtype=dtype)
        for m in (ref, ours):
            m.zero_grad()
            m(x).square().sum().backward()
        for a, b in zip(ref.parameters(), ours.parameters()):
            if compression is None:
                torch.testing.assert_close(b.grad, a.grad, rtol=1e-12, atol=1e-12)
            else:
                torch.testing.assert_close(b.grad, a.grad, rtol=2e-2, atol=2e-2)
    return True


@needs_gpu
@pytest.mark.parametrize("compression", [None, "bf16", "fp16"])
def test_ddp_ring_hook_on_cuda(worlds, compression):
    assert worlds(2).run(_ddp_hook_matches, compression, False) == [True, True]


@needs_gpu
def test_sync_batchnorm_under_ring_hook(worlds):
    assert worlds(2).run(_ddp_hook_matches, None, True) == [True, True]


def _backend_on_cuda():
    dev = _device()
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    assert bool((t == world * (world + 1) / 2).all())
    # The other collectives of CUDA tensors go through gloo.
    b = torch.full((10,), float(rank), device=dev)
    dist.broadcast(b, src=1)
    assert bool((b == 1).all())
    return True


@needs_gpu
def test_backend_serves_cuda_tensors():
    w = ProcessWorld(2, backend="cpu:pycomm,cuda:pycomm")
    try:
        assert w.run(_backend_on_cuda) == [True, True]
    finally:
        w.close()


def _late_kernel(sleep_cycles, warm):
    dev = _device()
    t = torch.ones(1 << 16, device=dev)
    if warm:
        # Set-up done first: what is timed below is the kernel's own wait.
        pycomm.all_reduce(t)
        torch.cuda.synchronize()
    if dist.get_rank() == 1:
        # Rank 1 enters the collective on time (the host handshake passes),
        # but its kernel starts only after this sleep on its stream: rank 0's
        # kernel must give up on the GPU at the deadline, not spin forever.
        # Cold, the IPC set-up runs first and must not wait for the sleep
        # (it zeroes its pad on a stream of its own).
        torch.cuda._sleep(sleep_cycles)
    start = time.monotonic()
    try:
        pycomm.all_reduce(t)
    except pycomm.CommTimeout as e:
        return str(e), time.monotonic() - start
    return None, time.monotonic() - start


@needs_gpu
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_a_late_peer_kernel_times_out_on_the_gpu(warm):
    timeout = 3.0
    w = ProcessWorld(2, comm_timeout=timeout)
    try:
        # About 20 s at 2 GHz: far past the timeout.
        results = w.run(_late_kernel, 40_000_000_000, warm, timeout=120)
    finally:
        w.kill()
    (msg0, took0), (msg1, took1) = results
    assert msg0 is not None and "rank 1" in msg0 and "GPU" in msg0, msg0
    assert took0 < timeout + 5.0
    assert msg1 is not None  # rank 1 learns of the abort instead of waiting its turn
