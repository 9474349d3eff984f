"""A pool of rank processes that lives across many test cases.

Spawning a process group costs seconds on a 2-core machine, so each world
size is started once: every rank initialises torch.distributed, then runs the
functions the test sends it and sends back what they return. A failure in any
rank is raised in the test with that rank's traceback. A rank that does not
answer in time fails the test, never hangs it.

Two kinds of world:
- backend="gloo" (the default): the default group is gloo and every rank also
  creates a pycomm communicator over it (`pycomm.init`), unless pycomm_init is
  off: then comm_timeout is the gloo group's own timeout, and pycomm's
  communicators take it from there when first used.
- any other backend string, e.g. "cpu:pycomm": the default group uses it, and
  every rank also creates a gloo group over all ranks, `reference_group()`,
  that tests use to compute references with the stock backend.

Rendezvous goes through a TCPStore that the test process creates on port 0
(the OS picks a free port and the store keeps it bound), and the ranks join as
clients: no port is picked, released and bound again, so no other process can
take it in between.
"""
from __future__ import annotations

import contextlib
import datetime
import multiprocessing as mp
import os
import time
import traceback
from multiprocessing.connection import wait

# The backend the backend tests run on. PYCOMM_TEST_BACKEND=gloo runs them on
# gloo instead, to check the tests' own references (cases gloo cannot do are
# left out then, and only then).
TEST_BACKEND = os.environ.get("PYCOMM_TEST_BACKEND", "cpu:pycomm")


def validating_on_gloo() -> bool:
    return "pycomm" not in TEST_BACKEND


_REFERENCE_GROUP = None


@contextlib.contextmanager
def environ(values: dict):
    """In a rank (where pytest's monkeypatch does not reach): the variables `values` set
    for the block, and put back as they were after it."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def thread_names() -> list:
    """The names of this process's threads (pycomm names its own: thread_name.h)."""
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass  # a thread that ended meanwhile
    return names


def resource_counts() -> tuple:
    """This process's open fds, mappings and threads: what a leak would grow."""
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    threads = len(os.listdir("/proc/self/task"))
    return fds, maps, threads


def reference_group():
    """In a rank: a gloo group over every rank (the default group in a gloo world)."""
    import torch.distributed as dist

    return _REFERENCE_GROUP if _REFERENCE_GROUP is not None else dist.group.WORLD


def _set_up(rank, world_size, port, backend, comm_timeout, pycomm_init=True):
    global _REFERENCE_GROUP
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # Rendezvous may wait for slow-starting peers far longer than a short
    # collective timeout under test.
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                          timeout=datetime.timedelta(seconds=max(comm_timeout or 0, 60.0)))
    group_timeout = {} if comm_timeout is None else \
        {"timeout": datetime.timedelta(seconds=comm_timeout)}
    if backend == "gloo" and pycomm_init:
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size)
        import pycomm

        pycomm.init(timeout=comm_timeout)
    elif backend == "gloo":
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                                **group_timeout)
        import pycomm  # noqa: F401
    else:
        import pycomm  # noqa: F401  (registers the "pycomm" backend)

        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                **group_timeout)
        _REFERENCE_GROUP = dist.new_group(backend="gloo")


def _tear_down(backend):
    import torch.distributed as dist

    if backend == "gloo":
        import pycomm

        pycomm.destroy()
    dist.destroy_process_group()


def _rank_main(rank, world_size, port, conn, comm_timeout, backend="gloo", env=None,
               pycomm_init=True):
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.update(env or {})
    try:
        _set_up(rank, world_size, port, backend, comm_timeout, pycomm_init)
        setup_error = None
    except BaseException:  # noqa: BLE001 - reported with every request, not as a bare EOF
        setup_error = f"rank {rank} could not start ({backend}):\n{traceback.format_exc()}"
    while True:
        msg = conn.recv()
        if msg is None:
            break
        if setup_error is not None:
            conn.send(("error", setup_error))
            continue
        fn, args = msg
        try:
            conn.send(("ok", fn(*args)))
        except BaseException:  # noqa: BLE001 - everything goes back to the test
            conn.send(("error", traceback.format_exc()))
    if setup_error is None:
        _tear_down(backend)
    conn.send(("closed", None))


class RankFailed(AssertionError):
    pass


class ProcessWorld:
    """world_size rank processes. comm_timeout (s): pycomm's timeout in a gloo
    world (with pycomm_init off: the gloo group's), the default group's timeout
    otherwise (None: torch's default).
    env: variables set in each rank before torch is imported; a list of dicts
    gives each rank its own (e.g. PYCOMM_HOST_ID, to pose as several hosts)."""

    def __init__(self, world_size: int, comm_timeout: float | None = 60.0, backend: str = "gloo",
                 env: dict | list | None = None, pycomm_init: bool = True):
        import torch.distributed as dist

        ctx = mp.get_context("spawn")
        # Port 0: the OS picks a free port, and it stays bound by this store
        # for the world's lifetime.
        self.store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=max(comm_timeout or 0, 60.0)))
        port = self.store.port
        self.world_size = world_size
        self.backend = backend
        self.failed = False  # a run raised: some rank may be out of step
        self.conns = []
        self.procs = []
        for rank in range(world_size):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_rank_main,
                            args=(rank, world_size, port, child, comm_timeout, backend,
                                  dict((env[rank] if isinstance(env, (list, tuple)) else env)
                                       or {}), pycomm_init),
                            daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)

    @property
    def pids(self):
        return [p.pid for p in self.procs]

    def run(self, fn, *args, ranks=None, timeout: float = 240.0, may_die=()):
        """Runs fn(*args) on every rank (or on `ranks`); returns the results by
        rank (None for a rank in `may_die` that died)."""
        try:
            return self._run(fn, args, ranks, timeout, may_die)
        except BaseException:
            self.failed = True
            raise

    def _run(self, fn, args, ranks, timeout, may_die):
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

    def end(self):
        """Closes the world, or kills it where a test failed in it (its ranks may not answer)."""
        self.kill() if self.failed else self.close()


class WorldPool:
    """Worlds started once and kept across tests: pool(key) is the world make(key) started.
    A world in which a test failed is replaced, as a dead one is: one failure (an aborted
    communicator, a rank left out of step) must not fail every later test of that key for
    the same cause."""

    def __init__(self, make):
        self._make, self._started = make, {}

    def __call__(self, key):
        w = self._started.get(key)
        if w is None or not w.alive() or w.failed:
            if w is not None:
                w.kill()
            w = self._started[key] = self._make(key)
        return w

    def pids(self) -> list:
        return [pid for w in self._started.values() for pid in w.pids]

    def close(self):
        for w in self._started.values():
            w.end()
