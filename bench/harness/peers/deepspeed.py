"""DeepSpeed's shared-memory all-reduce on CPU tensors, where deepspeed imports: all_reduce
only, sum on float32, bfloat16 or float16. Never installed by the benchmarks.

What DeepSpeed offers (0.19): the op builder ShareMemCommBuilder (the CPU accelerator's
create_op_builder, or deepspeed.ops.op_builder.cpu) compiles csrc/cpu/comm/shm.cpp and
shm_interface.cpp at first use into a module with initialize(size, rank) and
vector_kernel_level(), and registers the op torch.ops.deepspeed.inference_all_reduce_ (sum,
in place; all_reduce_outer_loop over 32 MiB chunks: a naive all-reduce below 1 MiB, a
distributed reduce above). deepspeed.comm.inference_all_reduce calls that op on CPU after
its own checks (its kernels need avx2 for float32, avx512bw for 16-bit floats, which
vector_kernel_level reports), else falls back to torch's all_reduce; this column calls the
op itself, as a compiled graph does. Older DeepSpeed had inference_all_reduce on the module
itself, which the column also takes where it finds it.

initialize() maps every rank's workspace, named after the uid, MASTER_ADDR and MASTER_PORT
(/dev/shm/deepspeed_allreduce_buffer_<uid>_<addr>_<port>_<rank>), and spins until each peer
has made its own: it is called only once every rank has loaded the op, with a name of this
run's own (two runs would otherwise share buffers), and the names are unlinked once every
rank has mapped them (DeepSpeed leaves them in /dev/shm)."""
from __future__ import annotations

import importlib.util
import os
import time

from .peer import Peer

# Its kernels' instruction sets: vector_kernel_level() at least this, by dtype.
KERNEL_LEVEL = {"float32": 1, "bfloat16": 2, "float16": 2}
LEVEL_ISA = {1: "avx2", 2: "avx512bw"}
SHM_NAME = "/dev/shm/deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}"


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("deepspeed")
    except Exception:  # noqa: BLE001 - any failure: unknown
        return "?"


def _builder():
    """DeepSpeed's ShareMemCommBuilder: the accelerator's, else the CPU one."""
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None:  # an accelerator without it (CUDA): the CPU op builder has it
        from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

        builder = ShareMemCommBuilder()
    return builder


def _load(torch):
    """(the compiled module, the all-reduce: fn(tensor)): its op where the build registers
    one, else the module's own inference_all_reduce (older DeepSpeed)."""
    shm = _builder().load()
    if hasattr(torch.ops, "deepspeed") and hasattr(torch.ops.deepspeed, "inference_all_reduce_"):
        return shm, torch.ops.deepspeed.inference_all_reduce_, \
            "torch.ops.deepspeed.inference_all_reduce_"
    if hasattr(shm, "inference_all_reduce"):
        from deepspeed.comm import ReduceOp

        return shm, (lambda t: shm.inference_all_reduce(t, ReduceOp.SUM)), \
            "the shm module's inference_all_reduce"
    raise RuntimeError(f"its ShareMemCommBuilder module has no inference_all_reduce and "
                       f"registers no torch.ops.deepspeed.inference_all_reduce_ (it has: "
                       f"{', '.join(n for n in dir(shm) if not n.startswith('_'))})")


def peer(world, op_name: str, dtype: str):
    """(its column, None) or (None, why not, naming DeepSpeed's version)."""
    if importlib.util.find_spec("deepspeed") is None:
        return None, "deepspeed column absent: deepspeed is not importable (not installed)"
    version = _version()
    absent = f"deepspeed column absent (DeepSpeed {version}):"
    if op_name != "sum" or dtype not in KERNEL_LEVEL:
        return None, (f"{absent} its shm all-reduce does sum on "
                      f"{', '.join(KERNEL_LEVEL)} only, not {op_name} on {dtype}")
    if world.device.type != "cpu":
        return None, f"{absent} its shm all-reduce takes CPU tensors"
    torch = world.torch
    t0 = time.perf_counter()
    # Rank 0 compiles the op (at first use, a minute or so) while the others wait; then they
    # load what it built.
    built, err = world.on_every_rank(lambda: _load(torch) if world.rank == 0 else None)
    if not err:
        loaded, err = world.on_every_rank(lambda: built if world.rank == 0 else _load(torch))
    if err:
        return None, f"{absent} its op does not load: {err}"
    shm, all_reduce, route = loaded
    built_s = time.perf_counter() - t0
    need = KERNEL_LEVEL[dtype]
    if shm.vector_kernel_level() < need:
        # Checked before any rank initialises: its kernels would fault and leave the peers
        # spinning on the shared flags.
        return None, (f"{absent} its {dtype} kernels need {LEVEL_ISA[need]}, which this CPU "
                      f"lacks (vector_kernel_level {shm.vector_kernel_level()})")
    # A workspace name of this run's own, agreed through rank 0.
    run_id = world.from_rank0(os.getpid())
    addr, port = "pycomm-bench", str(run_id)
    names = [SHM_NAME.format(uid=os.getuid(), addr=addr, port=port, rank=r)
             for r in range(world.size)]
    _, err = world.on_every_rank(lambda: _initialize(shm, world, addr, port))
    if err:
        return None, f"{absent} initialize() failed: {err}"
    probe = torch.full((4,), float(world.rank + 1), dtype=getattr(torch, dtype))
    _, err = world.on_every_rank(lambda: all_reduce(probe))
    world.barrier()  # every rank has mapped every workspace: their names can go
    try:
        os.unlink(names[world.rank])
    except OSError:
        pass
    want = world.size * (world.size + 1) / 2
    if err or not bool((probe.float() == want).all()):
        return None, (f"{absent} a probe all-reduce " + (f"failed: {err}" if err else
                      f"summed to {probe.tolist()}, not {want:g}"))
    p = Peer("deepspeed", "deepspeed",
             f"deepspeed = DeepSpeed {version}'s shared-memory all-reduce, {route} (what "
             f"deepspeed.comm.inference_all_reduce calls on CPU; op ShareMemCommBuilder, "
             f"loaded in {built_s:.0f} s)")
    p.calls = {"all_reduce": lambda i, o: all_reduce(o)}
    p.exact = {"all_reduce": True}
    return p, None


def _initialize(shm, world, addr: str, port: str):
    """shm.initialize(size, rank) with every rank on this host (LOCAL_SIZE) and this run's
    workspace names; the variables it reads are put back after."""
    saved = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_SIZE")}
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=port, LOCAL_SIZE=str(world.size))
    try:
        shm.initialize(world.size, world.rank)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
