"""Communicators: creation over a torch.distributed group, and the collectives.

A communicator is set up collectively by every rank of a group: rank 0 creates
a shared-memory segment under a fresh name and publishes it through the
group's store; the others map it; once all have mapped it every rank unlinks
the name, so nothing stays in /dev/shm even if a process is killed later.
"""
from __future__ import annotations

import datetime
import os
import threading
import time
from typing import Union

import torch
import torch.distributed as dist

from . import _C

__all__ = ["Communicator", "init", "all_reduce", "barrier", "destroy", "get_communicator"]

_OP_NAMES = ("sum", "avg", "max", "min", "product")
_ALGORITHMS = ("auto", "ring", "direct")
_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "product",
}

def _default_direct_max_kb(world: int) -> float:
    # Measured on a 2-core host (bench/allreduce_perf.py --algorithm direct|ring):
    # two ranks: the pipelined ring is faster from 32 B up (at 32 KiB 4.4 us vs
    # 9.6 us); three or four: the one-shot, with its single synchronisation, is
    # faster up to about 64 KiB.
    return 0.0625 if world == 2 else 64


def _default_spin_us(world: int) -> float:
    # Spinning helps only when every rank has a core of its own; with more ranks
    # than cores it burns the time slice the awaited rank needs (measured with 3
    # ranks on 2 cores: 8-byte ring all-reduce 98 us with a 20 us spin, 16 us
    # without).
    return 20 if world <= len(os.sched_getaffinity(0)) else 0


# Tuning knobs, read once per communicator; the environment overrides them for
# experiments. Callables take the world size.
_DEFAULTS = {
    "PYCOMM_DIRECT_KB": 256,         # per-rank slot of the one-shot algorithm
    "PYCOMM_RING_BUFFER_KB": 256,    # one pipelined ring message
    "PYCOMM_RING_BUFFERS": 4,        # ring messages in flight per link
    "PYCOMM_DIRECT_MAX_KB": _default_direct_max_kb,  # auto: one-shot up to this size
    "PYCOMM_SPIN_US": _default_spin_us,
    "PYCOMM_YIELD_US": 200,
    "PYCOMM_RESTORE_ON_FAILURE": 1,  # keep inputs intact when a collective fails
}


def _env_number(name: str, world: int) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        default = _DEFAULTS[name]
        return default(world) if callable(default) else default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None


def _timeout_seconds(timeout) -> float:
    if timeout is None:
        return float(os.environ.get("PYCOMM_TIMEOUT", 300))
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds or a timedelta, "
                         f"got {timeout!r}")
    return float(timeout)


def _store_of(group):
    if group is None or group is dist.GroupMember.WORLD:
        return dist.distributed_c10d._get_default_store()
    return dist.distributed_c10d._get_process_group_store(group)


class Communicator:
    """A shared-memory communicator over the ranks of one torch.distributed group.

    All ranks of the group must create it together (it is collective), and
    issue the same collectives in the same order.
    """

    def __init__(self, group=None, timeout=None):
        if not dist.is_initialized():
            raise RuntimeError("pycomm.init: call torch.distributed.init_process_group first")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("group: this process is not a member of the group")
        timeout_s = _timeout_seconds(timeout)
        store = _store_of(group)
        # Every rank creates its communicators in the same order, so each one's
        # own count names this communicator identically on every rank.
        serial = store.add(f"pycomm/serial/{self.rank}", 1)
        key = f"pycomm/comm/{serial}"
        w = self.world_size
        options = dict(
            timeout_s=timeout_s,
            direct_bytes=int(_env_number("PYCOMM_DIRECT_KB", w) * 1024),
            ring_buffer_bytes=int(_env_number("PYCOMM_RING_BUFFER_KB", w) * 1024),
            ring_buffers=int(_env_number("PYCOMM_RING_BUFFERS", w)),
            direct_max_bytes=int(_env_number("PYCOMM_DIRECT_MAX_KB", w) * 1024),
            spin_us=_env_number("PYCOMM_SPIN_US", w),
            yield_us=_env_number("PYCOMM_YIELD_US", w),
            restore_on_failure=bool(_env_number("PYCOMM_RESTORE_ON_FAILURE", w)),
        )
        if self.rank == 0:
            _C.remove_stale_segments()
            name = _C.new_segment_name()
            try:
                impl = _C.Communicator(self.rank, self.world_size, name, True, **options)
            except Exception as e:
                # Tell the other ranks, or they would wait for a name forever.
                store.set(f"{key}/name", "!" + str(e))
                raise
            store.set(f"{key}/name", name)
        else:
            name = store.get(f"{key}/name").decode()
            if name.startswith("!"):
                raise _C.CommError(f"pycomm.init: rank 0 could not create the communicator: "
                                   f"{name[1:]}")
            impl = _C.Communicator(self.rank, self.world_size, name, False, **options)
        # Wait until every rank has mapped the segment, then unlink its name.
        # Every rank unlinks (the first wins), so a rank that dies here cannot
        # leave it behind for the others.
        store.add(f"{key}/attached", 1)
        _wait_for_count(store, f"{key}/attached", self.world_size, timeout_s, self.rank)
        impl.unlink_name()
        impl.start()
        self._impl = impl
        self.timeout_s = timeout_s
        self.segment_name = name

    def all_reduce(self, tensor, op="sum", async_op=False, algorithm="auto"):
        """In-place all-reduce; see pycomm.all_reduce."""
        # The common case (a tensor, string op and algorithm) costs three class
        # checks here; the native layer validates the strings themselves.
        if tensor.__class__ is not torch.Tensor:
            _check_tensor_type(tensor)
        if op.__class__ is not str:
            op = _op_name(op)
        if algorithm.__class__ is not str:
            _algorithm_name(algorithm)
        return self._impl.all_reduce(tensor, op, async_op, algorithm)

    def barrier(self):
        """Returns once every rank of the group has called barrier()."""
        self._impl.barrier()

    def close(self):
        """Stops the worker thread and unmaps the shared memory. Idempotent."""
        impl = getattr(self, "_impl", None)
        if impl is not None:
            impl.close()

    def __repr__(self):
        return (f"pycomm.Communicator(rank={self.rank}, world_size={self.world_size}, "
                f"timeout_s={self.timeout_s})")


def _wait_for_count(store, key, target, timeout_s, rank):
    deadline = time.monotonic() + timeout_s
    delay = 1e-4
    while store.add(key, 0) < target:
        if time.monotonic() > deadline:
            raise _C.CommTimeout(f"pycomm.init: rank {rank} timed out after {timeout_s} s waiting "
                                 f"for every rank to map the shared memory")
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def _check_tensor_type(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor: expected a torch.Tensor, got {type(tensor).__name__}")
    return tensor


def _op_name(op) -> str:
    if op.__class__ is str:
        return op  # checked by the native layer
    for reduce_op, name in _REDUCE_OPS.items():
        if op == reduce_op:
            return name
    raise ValueError(f"op: unsupported reduction {op!r}; expected one of {', '.join(_OP_NAMES)} "
                     f"or the matching torch.distributed.ReduceOp")


def _algorithm_name(algorithm) -> str:
    if algorithm.__class__ is not str:
        raise ValueError(f"algorithm: expected one of {', '.join(_ALGORITHMS)}, got {algorithm!r}")
    return algorithm


_communicators: dict = {}
_lock = threading.Lock()


def _key(group):
    # The default group has two spellings; both name one communicator.
    return None if group is dist.GroupMember.WORLD else group


def init(group=None, timeout=None) -> Communicator:
    """Creates (collectively) the communicator for `group` and makes it the one
    that pycomm.all_reduce(..., group=group) uses. Returns the existing one if
    there is one (its timeout stays as it was)."""
    group = _key(group)
    with _lock:
        comm = _communicators.get(group)
        if comm is None:
            comm = Communicator(group, timeout)
            _communicators[group] = comm
        return comm


def get_communicator(group=None) -> Communicator:
    comm = _communicators.get(_key(group))
    return comm if comm is not None else init(group)


def destroy(group=None) -> None:
    """Closes the communicator of `group` (collective use of it must be over)."""
    with _lock:
        comm = _communicators.pop(_key(group), None)
    if comm is not None:
        comm.close()


def all_reduce(tensor: torch.Tensor, op: Union[str, "dist.ReduceOp"] = "sum", group=None,
               async_op: bool = False, algorithm: str = "auto"):
    """Reduces `tensor` in place across the ranks of `group`.

    op: "sum" | "avg" | "max" | "min" | "product", or a torch.distributed.ReduceOp.
    algorithm: "auto" (by size), "ring" or "direct".
    Returns None, or with async_op=True a work object with .wait() and
    .get_future().
    """
    comm = _communicators.get(group)
    if comm is None:
        comm = init(group)
    return comm.all_reduce(tensor, op, async_op, algorithm)


def barrier(group=None) -> None:
    get_communicator(group).barrier()


def _close_all():
    for group in list(_communicators):
        destroy(group)


import atexit  # noqa: E402

atexit.register(_close_all)
