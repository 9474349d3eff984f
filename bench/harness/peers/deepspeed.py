"""DeepSpeed's shared-memory all-reduce (inference_all_reduce), where deepspeed imports:
all_reduce only, sum on float32 or bfloat16. Never installed by the benchmarks."""
from __future__ import annotations

import importlib.util
import os

from .peer import Peer


def peer(world, op_name: str, dtype: str):
    """(its column, None) or (None, why not)."""
    if importlib.util.find_spec("deepspeed") is None:
        return None, "deepspeed column absent: deepspeed is not importable (not installed)"
    if op_name != "sum" or dtype not in ("float32", "bfloat16"):
        return None, "deepspeed column absent: its shm all-reduce does sum on float32/bfloat16 only"
    torch = world.torch
    os.environ.setdefault("LOCAL_SIZE", str(world.size))  # all ranks on this host

    def load():
        try:
            from deepspeed.accelerator import get_accelerator

            builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        except Exception:  # noqa: BLE001 - older layouts
            from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

            builder = ShareMemCommBuilder()
        shm = builder.load()
        shm.initialize(world.size, world.rank)
        from deepspeed.comm import ReduceOp

        if shm.inference_all_reduce(torch.ones(4, dtype=getattr(torch, dtype)),
                                    ReduceOp.SUM) != 0:
            raise RuntimeError("inference_all_reduce fell back (returned -1)")
        return shm, ReduceOp.SUM

    loaded, err = world.on_every_rank(load)
    if err:
        return None, f"deepspeed column absent: {err}"
    shm, op = loaded
    p = Peer("deepspeed", "deepspeed", "deepspeed = DeepSpeed's shm inference_all_reduce")
    p.calls, p.exact = {"all_reduce": lambda i, o: shm.inference_all_reduce(o, op)}, \
        {"all_reduce": True}
    return p, None
