"""A pool of rank processes that lives across many test cases.

Spawning a process group costs seconds on a 2-core machine, so each world
size is started once: every rank initialises torch.distributed (gloo) and a
pycomm communicator, then runs the functions the test sends it and sends back
what they return. A failure in any rank is raised in the test with that rank's
traceback. A rank that does not answer in time fails the test, never hangs it.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
from multiprocessing.connection import wait


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, world_size, port, conn, comm_timeout):
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    import pycomm

    pycomm.init(timeout=comm_timeout)
    while True:
        msg = conn.recv()
        if msg is None:
            break
        fn, args = msg
        try:
            conn.send(("ok", fn(*args)))
        except BaseException:  # noqa: BLE001 - everything goes back to the test
            conn.send(("error", traceback.format_exc()))
    pycomm.destroy()
    dist.destroy_process_group()
    conn.send(("closed", None))


class RankFailed(AssertionError):
    pass


class ProcessWorld:
    def __init__(self, world_size: int, comm_timeout: float = 60.0):
        ctx = mp.get_context("spawn")
        port = free_port()
        self.world_size = world_size
        self.conns = []
        self.procs = []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main, args=(rank, world_size, port, child, comm_timeout),
                            daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    def run(self, fn, *args, ranks=None, timeout: float = 240.0, may_die=()):
        """Runs fn(*args) on every rank (or on `ranks`); returns the results by
        rank (None for a rank in `may_die` that died)."""
        ranks = range(self.world_size) if ranks is None else ranks
        for r in ranks:
            self.conns[r].send((fn, args))
        results = {}
        pending = {self.conns[r]: r for r in ranks}
        deadline = time.monotonic() + timeout
        while pending:
            ready = wait(list(pending), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                self.kill()
                raise RankFailed(f"ranks {sorted(pending.values())} did not answer within "
                                 f"{timeout} s running {fn.__name__}")
            for conn in ready:
                r = pending.pop(conn)
                try:
                    status, value = conn.recv()
                except EOFError:
                    if r in may_die:
                        results[r] = ("ok", None)
                        continue
                    self.kill()
                    raise RankFailed(f"rank {r} died running {fn.__name__}") from None
                results[r] = (status, value)
        errors = {r: v for r, (s, v) in results.items() if s != "ok"}
        if errors:
            r = min(errors)
            raise RankFailed(f"rank {r} failed running {fn.__name__}:\n{errors[r]}")
        return [results[r][1] for r in sorted(results)]

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def kill(self):
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(timeout=10)

    def close(self):
        for conn, p in zip(self.conns, self.procs):
            if p.is_alive():
                try:
                    conn.send(None)
                except (BrokenPipeError, OSError):
                    pass
        for conn, p in zip(self.conns, self.procs):
            if p.is_alive() and conn.poll(30):
                try:
                    conn.recv()
                except EOFError:
                    pass
            p.join(timeout=10)
        self.kill()
