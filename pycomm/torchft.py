"""pycomm as torchft's process group: fault-tolerant training whose hung
collectives end in-process.

    from torchft import Manager
    from pycomm.torchft import ProcessGroupPycomm

    manager = Manager(pg=ProcessGroupPycomm(timeout=timedelta(seconds=10)), ...)

torchft (replica groups that leave and rejoin a quorum while training goes on)
reconfigures its process group on every quorum change and aborts it when a
peer hangs. Its gloo group cannot end a blocked call, so torchft runs gloo in
a subprocess to kill it (ProcessGroupBabyGloo); pycomm's session can: abort()
wakes every call blocked on this group, in any thread, at once, and a dead
peer is seen at once (PeerDied naming its pid), not at the timeout. The
replicas must share one host (pycomm's shared memory; across hosts the
hierarchical plan's gloo steps block as gloo does). docs/torchft.md has the
walk through a kill, a hang and a restart.

torchft is imported here only: pycomm never depends on it.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroupWrapper

from . import _C
from .backend import ProcessGroup as pycomm_backend
from .errors import CommError

__all__ = ["ProcessGroupPycomm"]


class ProcessGroupPycomm(ProcessGroupWrapper):
    """A reconfigurable pycomm process group, torchft's ProcessGroupGloo's
    twin: every configure() (each quorum) builds a fresh pycomm.ProcessGroup
    from torchft's store with this group's timeout. It serves every
    collective torchft's DDP, LocalSGD and DiLoCo call (reduce_scatter too,
    which torchft's gloo group refuses), on CPU tensors in shared memory.

    timeout: every collective's and the set-up's (set_timeout changes it for
    the next configure and for the group in use)."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._backend = None  # the pycomm backend of the group in use

    def getBackendName(self) -> str:
        return "torchft-pycomm"

    def _create_pg(self, store, rank: int, world_size: int):
        backend = pycomm_backend(store, rank, world_size, self._timeout)
        pg = dist.ProcessGroup(store, rank, world_size)
        pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
        for device in devices:
            pg._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, backend)
        if self._group_rank is not None and self._group_world_size:
            # torchft's name for the group (its gloo group's), in the logs.
            pg._set_group_name(f"torchft_quorum_{self._quorum_id}_rank_"
                               f"{self._group_rank % self._group_world_size}")
        self._backend = backend
        return pg

    def abort(self, errored: bool = True) -> None:
        # Straight to pycomm's backend: torchft's wrapper reaches a backend's
        # abort through the c10d group only where torch binds it, or for CUDA.
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.abort()
        super().abort(errored)

    def shutdown(self) -> None:
        # Closed now, not when the last reference goes: its worker, segments and server.
        backend, self._backend = self._backend, None
        if backend is not None:
            backend.shutdown()
        super().shutdown()

    def errored(self) -> Optional[Exception]:
        """The error of the group in use (PeerDied, CommTimeout, an abort's),
        None while it is whole."""
        backend = self._backend
        if backend is None:
            return None
        try:
            _C.communicator_of(backend).raise_if_broken()
        except CommError as e:
            return e
        return None

    def set_timeout(self, timeout: timedelta) -> None:
        super().set_timeout(timeout)
        if self._backend is not None:
            self._backend.set_timeout(timeout)
