"""PyTorch's symmetric-memory all-reduces (torch.ops.symm_mem one_shot_all_reduce and
two_shot_all_reduce_) as columns of the CUDA bench. Ranks that share a GPU need
TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1, which the bench sets before its ranks start."""
from __future__ import annotations

ALLOW_SHARED_GPU_ENV = "TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"


def cuda_candidates(world):
    """{"symm one_shot": (prepare, why), "symm two_shot": ...}: prepare(t) returns a call that
    all-reduces t's values (in a symmetric buffer) and returns the tensor holding the sum;
    prepare is None, with why, where symmetric memory does not run here."""
    torch, dist = world.torch, world.dist

    def setup():
        import torch.distributed._symmetric_memory as symm_mem

        group_name = dist.group.WORLD.group_name
        symm_mem.enable_symm_mem_for_group(group_name)
        probe = symm_mem.empty(4, dtype=torch.float32, device=world.device)
        symm_mem.rendezvous(probe, group_name)
        probe.fill_(1.0)
        got = torch.ops.symm_mem.one_shot_all_reduce(probe, "sum", group_name)
        torch.cuda.synchronize()
        if not bool((got == world.size).all()):
            raise RuntimeError(f"a one-shot probe summed to {got.tolist()}, not {world.size}")
        return symm_mem, group_name

    ready, why = world.on_every_rank(setup, limit=100)
    if ready is None:
        return {"symm one_shot": (None, why), "symm two_shot": (None, why)}
    symm_mem, group_name = ready

    def with_op(op_name):
        def prepare(t):
            buf = symm_mem.empty(t.numel(), dtype=t.dtype, device=world.device)
            symm_mem.rendezvous(buf, group_name)
            buf.copy_(t)
            op = getattr(torch.ops.symm_mem, op_name)
            # one_shot returns a new tensor; two_shot_ reduces buf in place.
            return lambda: op(buf, "sum", group_name)
        return prepare

    return {"symm one_shot": (with_op("one_shot_all_reduce"), None),
            "symm two_shot": (with_op("two_shot_all_reduce_"), None)}
