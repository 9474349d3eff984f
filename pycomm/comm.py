"""Communicators: creation over a torch.distributed group, and the collectives.

A communicator is set up collectively by every rank of a group, through the
group's store (rendezvous.py), and nothing of it stays behind once set up.
On a "pycomm" process group it is that group's own backend (backend.py:
group_backend), so pycomm's direct API and the hooks make no second segment or
worker thread; on any other group it is a backend of the same factory
(create_backend), so pycomm's direct API enters the one front-end dist.*
enters (csrc/torch/frontend.h), on one host and across hosts; on one host it
has no gloo fallback, and refuses what would go there with the argument's error.
"""
from __future__ import annotations

import threading
import warnings
from typing import Optional, Union

import torch
import torch.distributed as dist

from . import _C, torch_compat
from .config import timeout_seconds

__all__ = ["Communicator", "init", "all_reduce", "barrier", "destroy", "get_communicator"]

_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.PRODUCT: "product",
}


def _store_of(group):
    if group is None or group is dist.GroupMember.WORLD:
        return dist.distributed_c10d._get_default_store()
    return dist.distributed_c10d._get_process_group_store(group)


class Communicator:
    """A shared-memory communicator over the ranks of one torch.distributed group.

    All ranks of the group must create it together (it is collective), and
    issue the same collectives in the same order.
    """

    def __init__(self, group=None, timeout=None, _caller="pycomm.init"):
        if not dist.is_initialized():
            raise RuntimeError(f"{_caller}: call torch.distributed.init_process_group first")
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        if self.rank < 0:
            raise ValueError("group: this process is not a member of the group")
        from .backend import create_backend, group_backend

        own = group_backend(group)
        if own is not None:
            # A "pycomm" group: its backend is this communicator, one segment
            # and worker thread for dist.* and pycomm's API alike; it keeps the
            # group's timeout (the group's backend's set_timeout changes it).
            self._backend, self.layout = own
            self._owned = False
            self.timeout_s = _C.communicator_of(self._backend).timeout_s
            if timeout is not None and timeout_seconds(timeout) != self.timeout_s:
                warnings.warn(f"{_caller}: timeout={timeout!r} not taken: on a pycomm group the "
                              f"communicator is the group's backend, whose timeout is "
                              f"{self.timeout_s:g} s", RuntimeWarning, stacklevel=3)
            return
        # The argument, else PYCOMM_TIMEOUT, else the group's own timeout,
        # else the settings table's default.
        group_timeout = torch_compat.group_timeout(group)
        self.timeout_s = timeout_seconds(
            timeout, default=None if group_timeout is None else group_timeout.total_seconds())
        # Without a fallback: what would go to it is refused with the argument's error.
        self._backend, self.layout = create_backend(_store_of(group), self.rank, self.world_size,
                                                    self.timeout_s, _caller, tag="c")
        self._owned = True

    def all_reduce(self, tensor, op="sum", async_op=False, algorithm="auto",
                   restore_on_failure=None):
        """In-place all-reduce; see pycomm.all_reduce."""
        op, algorithm = _names(tensor, op, algorithm, restore_on_failure)
        return _C.all_reduce(self._backend, tensor, op, async_op, algorithm, restore_on_failure)

    def all_reduce_future(self, tensor, op="sum", algorithm="auto",
                          restore_on_failure=None) -> torch.futures.Future:
        """Starts an in-place all-reduce and returns a torch.futures.Future whose
        value is `tensor` itself, as a DDP communication hook returns it (the
        work object's get_future() holds [tensor], as torch's own does)."""
        op, algorithm = _names(tensor, op, algorithm, restore_on_failure)
        return _C.all_reduce(self._backend, tensor, op, True, algorithm, restore_on_failure,
                             python_future=True)

    def barrier(self):
        """Returns once every rank of the group has called barrier()."""
        _C.barrier(self._backend)

    def close(self):
        """Finishes what was issued, stops the worker thread and unmaps the
        shared memory; on a pycomm group, only lets go of the group's backend,
        which the group closes. Idempotent."""
        backend = self.__dict__.pop("_backend", None)
        if backend is not None and self._owned:
            backend.shutdown()

    def __repr__(self):
        return (f"pycomm.Communicator(rank={self.rank}, world_size={self.world_size}, "
                f"timeout_s={self.timeout_s})")


def _names(tensor, op, algorithm, restore_on_failure=None):
    """The op and algorithm as the names the native layer takes. The common case
    (a tensor, string op and algorithm) costs a few class checks here; the
    native layer validates the strings themselves."""
    if restore_on_failure is not None and restore_on_failure.__class__ is not bool:
        raise TypeError(f"restore_on_failure: expected True, False or None, got {restore_on_failure!r}")
    if tensor.__class__ is not torch.Tensor:
        _check_tensor_type(tensor)
    if op.__class__ is not str:
        op = _op_name(op)
    if algorithm.__class__ is not str:
        algorithm = checked_algorithm(algorithm)
    return op, algorithm


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
    # A ReduceOp's repr is an object address: name it by its type instead.
    kind = getattr(op, "op", op) if isinstance(op, dist.ReduceOp) else op
    shown = getattr(kind, "name", None) or repr(op)
    hint = ("; PREMUL_SUM runs through the backend (dist.all_reduce on a pycomm group)"
            if shown == "PREMUL_SUM" else "")
    raise ValueError(f"op: unsupported reduction {shown}; expected one of "
                     f"{', '.join(_REDUCE_OPS.values())} or the matching torch.distributed.ReduceOp{hint}")


def checked_algorithm(algorithm) -> str:
    """`algorithm` if pycomm.all_reduce takes it, else ValueError naming the ones it takes."""
    if isinstance(algorithm, str):
        _C.check_all_reduce_names("sum", algorithm)
        return str(algorithm)
    _C.check_all_reduce_names("sum", repr(algorithm))  # not a name: the error lists the names
    raise ValueError(f"algorithm: expected a name, got {algorithm!r}")


_communicators: dict = {}
_lock = threading.Lock()


def _key(group):
    # The default group has two spellings; both name one communicator.
    return None if group is dist.GroupMember.WORLD else group


def init(group=None, timeout=None, _caller="pycomm.init") -> Communicator:
    """Creates (collectively) the communicator for `group` and makes it the one
    that pycomm.all_reduce(..., group=group), ring_hook and allreduce_gradients
    use. Returns the existing one if there is one (its timeout stays as it was).

    timeout: seconds or a timedelta; None: $PYCOMM_TIMEOUT, else the group's own
    timeout (init_process_group's or new_group's), else pycomm's default."""
    group = _key(group)
    with _lock:
        comm = _communicators.get(group)
        if comm is None:
            comm = Communicator(group, timeout, _caller=_caller)
            _communicators[group] = comm
        return comm


def get_communicator(group=None, _caller="pycomm.init") -> Communicator:
    comm = _communicators.get(_key(group))
    return comm if comm is not None else init(group, _caller=_caller)


def destroy(group=None) -> None:
    """Closes the communicator of `group` (collective use of it must be over)."""
    with _lock:
        comm = _communicators.pop(_key(group), None)
    if comm is not None:
        comm.close()


def all_reduce(tensor: torch.Tensor, op: Union[str, "dist.ReduceOp"] = "sum", group=None,
               async_op: bool = False, algorithm: str = "auto",
               restore_on_failure: Optional[bool] = None):
    """Reduces `tensor` in place across the ranks of `group`.

    tensor: a CPU tensor (host shared memory), or a CUDA tensor (device
        buffers mapped between the ranks' processes with CUDA IPC; ranks of one
        host; it has run on a GPU once, values right, with no speed target
        judged yet: docs/cuda.md).
    op: "sum" | "avg" | "max" | "min" | "product", or a torch.distributed.ReduceOp.
    algorithm: "auto" (by size, and by NUMA domain where the ranks are pinned to
        several), "ring" or "direct" (one shot); for CPU tensors also "two_level"
        (reduce in each NUMA domain, exchange between domains, gather back), for
        CUDA tensors "two_shot".
    restore_on_failure: if the collective fails part way (a peer died or timed
        out), put the tensor back as it was. None: on (PYCOMM_RESTORE_ON_FAILURE
        sets the default); off saves one copy of the tensor per call. CPU
        tensors only.
    Returns None, or with async_op=True a work object with .wait(),
    .is_completed() and .get_future(): a torch.futures.Future whose value is
    [tensor], as torch's own Work.get_future() gives (a DDP comm hook returns
    ``work.get_future().then(lambda f: f.value()[0])``).
    """
    comm = _communicators.get(group)
    if comm is None:
        comm = init(group, _caller="pycomm.all_reduce")
    return comm.all_reduce(tensor, op, async_op, algorithm, restore_on_failure)


def barrier(group=None) -> None:
    get_communicator(group, _caller="pycomm.barrier").barrier()


def _close_all():
    for group in list(_communicators):
        destroy(group)


import atexit  # noqa: E402

atexit.register(_close_all)
