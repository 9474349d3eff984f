"""Collective set-up of a shared-memory communicator through a store.

Every wait here ends at pycomm's timeout and names the ranks that never
arrived; a rank whose process exits during set-up is noticed at once (each
rank publishes its pid before anything else, and the others watch those pids);
ranks on different hosts get a clear error instead of a missing file (callers
split a group that spans hosts first: topology.py); and a
failed set-up removes its segment on every path.

    1. every rank publishes "<pid> <host>";
    2. rank 0 waits for all of them, checks they share its host, creates the
       segment and publishes its name (or "!<error>");
    3. the others wait for the name and map the segment;
    4. all count themselves in and wait for the count; then every rank
       unlinks the name (the first wins), so nothing stays in /dev/shm even if
       a process is killed later.
Any rank that fails sets an abort key, which every waiting rank checks.
"""
from __future__ import annotations

import os
import select
import socket
import time

from . import _C

_POLL_MIN_S = 1e-4
_POLL_MAX_S = 0.01


def host_identity() -> str:
    """Which host this process runs on: $PYCOMM_HOST_ID, else hostname and boot id."""
    override = os.environ.get("PYCOMM_HOST_ID")
    if override:
        return override
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}/{boot}"


class _Peers:
    """The pids published so far, watched through pidfds (which also see a
    process that exited but was not reaped yet)."""

    def __init__(self):
        self.fds = {}

    def watch(self, rank: int, pid: int):
        if rank in self.fds or pid == os.getpid():
            return
        try:
            self.fds[rank] = os.pidfd_open(pid)
        except (OSError, AttributeError):
            pass  # already gone (seen at the next check) or no pidfd: the deadline still holds

    def first_dead(self):
        if not self.fds:
            return None
        ready, _, _ = select.select(list(self.fds.values()), [], [], 0)
        dead = sorted(r for r, fd in self.fds.items() if fd in ready)
        return dead[0] if dead else None

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class _Rendezvous:
    def __init__(self, store, prefix: str, rank: int, world: int, timeout_s: float, what: str):
        self.store = store
        self.prefix = prefix
        self.rank = rank
        self.world = world
        self.timeout_s = timeout_s
        self.what = what
        self.deadline = time.monotonic() + timeout_s
        self.peers = _Peers()
        self.hosts = {}
        self.reported = False  # whether the others were told of a failure

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def fail(self, message: str, exc=_C.CommError):
        self.tell_others(exc.__name__, message)
        raise exc(f"rank {self.rank}: {self.what}: {message}")

    def tell_others(self, kind: str, message: str):
        """Sets the abort key, so the others' waits end now rather than at the
        deadline. The first failure's reason stays: later ones do not overwrite it."""
        self.reported = True
        try:
            self.store.compare_set(self.key("abort"), "", f"{kind}|rank {self.rank}: {message}")
        except Exception:  # noqa: BLE001 - the store may be what failed
            pass

    def _check_peers(self, waiting_for: str):
        if self.store.check([self.key("abort")]):
            self.reported = True  # the others know already
            kind, reason = self.store.get(self.key("abort")).decode().split("|", 1)
            exc = {"CommTimeout": _C.CommTimeout, "PeerDied": _C.PeerDied}.get(kind, _C.CommError)
            raise exc(f"rank {self.rank}: {self.what}: set-up failed on another rank ({reason})")
        dead = self.peers.first_dead()
        if dead is not None:
            self.fail(f"rank {dead} exited while rank {self.rank} was waiting for {waiting_for}: "
                      f"its process is gone (killed, crashed or ended)", _C.PeerDied)

    def _watch_published_pids(self):
        """Watches the pid of every rank on this host that has published one."""
        for r in range(self.world):
            if r in self.hosts:
                continue
            k = self.key(f"pid/{r}")
            if self.store.check([k]):
                pid, host = self.store.get(k).decode().split(" ", 1)
                self.hosts[r] = host
                if host == self.hosts.get(self.rank):
                    self.peers.watch(r, int(pid))

    def wait_until(self, ready, waiting_for: str, missing):
        """Polls ready() until true; fails at the deadline naming missing()."""
        delay = _POLL_MIN_S
        while not ready():
            self._watch_published_pids()
            self._check_peers(waiting_for)
            if time.monotonic() > self.deadline:
                ranks = ", ".join(str(r) for r in missing()) or "none (but the set-up did not complete)"
                self.fail(f"Timed out after {self.timeout_s:g} s waiting for {waiting_for}; "
                          f"ranks that never arrived: {ranks}", _C.CommTimeout)
            time.sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)

    def publish_pid(self):
        me = f"{os.getpid()} {host_identity()}"
        self.hosts[self.rank] = me.split(" ", 1)[1]
        self.store.set(self.key(f"pid/{self.rank}"), me)

    def unpublished(self):
        """The ranks that have not published their pid yet."""
        return [r for r in range(self.world) if not self.store.check([self.key(f"pid/{r}")])]

    def wait_for_pids(self):
        """Waits until every rank has published its pid and host, and watches
        the pids of those on this host."""
        keys = [self.key(f"pid/{r}") for r in range(self.world)]
        self.wait_until(lambda: self.store.check(keys), "every rank to start set-up", self.unpublished)
        self._watch_published_pids()

    def gather_pids(self):
        self.wait_for_pids()
        others = {r: h for r, h in self.hosts.items() if h != self.hosts[self.rank]}
        if others:
            r = min(others)
            self.fail(f"rank {r} runs on another host ({others[r]}) than rank {self.rank} "
                      f"({self.hosts[self.rank]}): pycomm's shared memory needs every rank of a "
                      f"communicator on one host (groups that span hosts run hierarchically, "
                      f"through topology.py)")


def gather_hosts(store, prefix: str, rank: int, world: int, timeout_s: float, what: str):
    """Collective: every rank publishes its pid and host identity (step 1
    above) and learns every rank's host identity, in rank order. The wait ends
    at timeout_s naming the ranks that never arrived, at once if one of them
    exits; a create_communicator under the same prefix that follows finds
    every rank published already."""
    rdv = _Rendezvous(store, prefix, rank, world, timeout_s, what)
    try:
        rdv.publish_pid()
        rdv.wait_for_pids()
        return [rdv.hosts[r] for r in range(world)]
    finally:
        rdv.peers.close()


def create_communicator(store, prefix: str, rank: int, world: int, timeout_s: float,
                        config: dict, what: str, tag: str = ""):
    """Collectively creates and starts a native communicator (see the module doc)."""
    rdv = _Rendezvous(store, prefix, rank, world, timeout_s, what)
    impl = None
    try:
        rdv.publish_pid()
        if rank == 0:
            rdv.gather_pids()
            _C.remove_stale_segments()
            name = _C.new_segment_name(tag)
            try:
                impl = _C.Communicator(rank, world, name, True, config)
            except Exception as e:
                rdv.fail(f"rank 0 could not create the shared memory: {e}")
            store.set(rdv.key("name"), name)
        else:
            name_key = rdv.key("name")
            # Rank 0 creates it once every rank has published its pid: those
            # that have not are the ones missing, else rank 0 itself.
            rdv.wait_until(lambda: store.check([name_key]), "rank 0 to create the shared memory",
                           lambda: rdv.unpublished() or [0])
            name = store.get(name_key).decode()
            impl = _C.Communicator(rank, world, name, False, config)
        count_key = rdv.key("attached")
        store.set(rdv.key(f"attached/{rank}"), "1")
        store.add(count_key, 1)
        rdv.wait_until(lambda: store.add(count_key, 0) >= world, "every rank to map the shared memory",
                       lambda: [r for r in range(world) if not store.check([rdv.key(f"attached/{r}")])])
        impl.unlink_name()
        impl.start()
        return impl
    except BaseException as e:
        if impl is not None:
            # Removes the name (whoever created it): nothing stays in /dev/shm.
            impl.unlink_name()
            impl.close()
        if not rdv.reported:
            # E.g. this rank could not map the segment: the others need not
            # wait for it until their deadline.
            rdv.tell_others(type(e).__name__ if isinstance(e, _C.CommTimeout) else "CommError",
                            f"{type(e).__name__}: {e}")
        raise
    finally:
        rdv.peers.close()
