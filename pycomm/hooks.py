"""DDP communication hooks over pycomm's communicator.

    model = DDP(model)
    model.register_comm_hook(None, pycomm.ring_hook)                  # fp32, average
    model.register_comm_hook(pycomm.RingState(compression="bf16"), pycomm.ring_hook)

The hook returns at once with a future that pycomm's worker thread completes,
so the all-reduce of one bucket overlaps the backward pass of the next.
"""
from typing import Optional

import torch
import torch.distributed as dist

from . import comm as _comm
from .bucket_ops import flatten, unflatten
from .bucketing import wire_dtype

__all__ = ["RingState", "ring_hook"]


class RingState:
    """Options of ring_hook.

    group: the process group whose communicator to use (None: the default group),
        made on first use with the group's timeout (or PYCOMM_TIMEOUT; pycomm.init
        (group, timeout=...) beforehand sets another).
    compression: None, "bf16" or "fp16": gradients travel in that dtype; the cast
        and the 1/N scaling happen in one pass of pycomm's bucketing kernel.
    algorithm: "auto", "ring" or "direct" (see pycomm.all_reduce).
    """

    __slots__ = ("group", "compression", "algorithm", "_communicator", "_wire_buffers")

    def __init__(self, group=None, compression: Optional[str] = None, algorithm: str = "auto"):
        wire_dtype(compression)  # validates
        _comm.checked_algorithm(algorithm)
        if group is not None and not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"group: expected a torch.distributed.ProcessGroup or None, "
                            f"got {type(group).__name__}")
        self.group = group
        self.compression = compression
        self.algorithm = algorithm
        self._communicator = None
        # The compressed copy of each bucket, reused every step: DDP reduces a
        # bucket once per step and waits for it before the next backward.
        self._wire_buffers = {}

    def communicator(self) -> _comm.Communicator:
        if self._communicator is None:
            self._communicator = _comm.get_communicator(self.group)
        return self._communicator

    def __repr__(self):
        return (f"pycomm.RingState(group={self.group!r}, compression={self.compression!r}, "
                f"algorithm={self.algorithm!r})")


_DEFAULT_STATE: Optional[RingState] = None


def _state_of(state) -> RingState:
    global _DEFAULT_STATE
    if state is None:
        if _DEFAULT_STATE is None:
            _DEFAULT_STATE = RingState()
        return _DEFAULT_STATE
    if not isinstance(state, RingState):
        raise TypeError(f"state: expected None or a pycomm.RingState, got {type(state).__name__}")
    return state


# DDP checks these annotations: they must be the real classes, not strings.
def ring_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket's gradients over the group, like DDP's default hook.

    Uncompressed: an in-place "avg" all-reduce of the bucket's buffer.
    Compressed: the buffer is cast (and scaled by 1/N) into a bf16/fp16 copy in
    one kernel pass, summed, and cast back into the buffer in place.
    """
    st = _state_of(state)
    comm = st.communicator()
    buffer = bucket.buffer()
    wire = wire_dtype(st.compression)
    if wire is None or buffer.dtype == wire or not buffer.is_floating_point():
        # DDP's Python-hook interface wants a future holding the tensor itself
        # (all_reduce_future's, made without a Python callback on pycomm's
        # thread). A failed step cannot use a restored bucket: no restore copy.
        return comm.all_reduce_future(buffer, "avg", algorithm=st.algorithm,
                                      restore_on_failure=False)
    key = (bucket.index(), buffer.numel(), buffer.device)
    compressed = st._wire_buffers.get(key)
    if compressed is None:
        compressed = st._wire_buffers[key] = torch.empty(buffer.numel(), dtype=wire,
                                                         device=buffer.device)
    flatten([buffer], scale=1.0 / comm.world_size, out=compressed)
    fut = comm.all_reduce(compressed, op="sum", async_op=True, algorithm=st.algorithm,
                          restore_on_failure=False).get_future()

    def decompress(f):
        unflatten(f.value()[0], [buffer])  # the future holds [compressed]
        return buffer

    return fut.then(decompress)
