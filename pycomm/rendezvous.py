"""Collective set-up of a shared-memory communicator through a store.

Every wait here ends at pycomm's timeout and names the ranks that never
arrived; a rank whose process exits during set-up is noticed at once (each
rank publishes its pid before anything else, and the others watch those pids);
ranks on different hosts get a clear error instead of a missing segment
(callers split a group that spans hosts first: topology.py); and a failed
set-up leaves nothing behind on any path.

    1. every rank publishes the transports it takes (its shm_transport setting,
       and whether memfds work here), the NUMA node it is pinned to (-1:
       none) and the SHA-256 digest of a token only it knows (written once:
       a rank that finds its key taken fails, rather than be impersonated),
       then "<pid> <PID namespace> <host>";
    2. rank 0 waits for all of them, checks they share its host, picks the
       transport every rank takes (memfd before posix), creates the session
       segment and publishes its place: "memfd:<server id>" (its server hands
       the segment to a rank that shows the token behind its digest) or
       "posix:<name>" (a file in /dev/shm, this user's, mode 0600);
    3. the others wait for the place, check it is of the transport the ranks
       agreed on, and map the segment (memfd: showing their token);
    4. all count themselves in and wait for the count; then every rank
       makes the segment unobtainable (posix: unlinks the name; memfd: rank 0
       stops offering it), so nothing stays behind even if a process is
       killed later, and reads every rank's node (the routing table's NUMA
       domains).
The store is readable (and writable) by any local process that reaches its
port: it carries no secret. The group's secret, which the ranks' servers ask
for afterwards, is made by rank 0 inside the session segment.
Any rank that fails sets an abort key, which every waiting rank checks.
"""
from __future__ import annotations

import functools
import os
import select
import socket
import time

from . import _C, host_cpus

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


@functools.lru_cache(maxsize=None)
def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "?"


@functools.lru_cache(maxsize=None)
def memfd_unavailable_reason() -> str:
    """Why this host cannot take the memfd transport ('' when it can): asked once."""
    return _C.memfd_unavailable_reason()


def pid_record() -> str:
    """What a rank publishes of itself at step 1: "<pid> <PID namespace> <host>"."""
    return f"{os.getpid()} {_pid_namespace()} {host_identity()}"


def transports_taken(setting: str):
    """The transports a rank with this shm_transport setting takes, best first."""
    memfd_ok = not memfd_unavailable_reason()
    if setting == "posix":
        return ["posix"]
    if setting == "memfd":
        return ["memfd"] if memfd_ok else []
    return ["memfd", "posix"] if memfd_ok else ["posix"]


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
                pid, pid_ns, host = self.store.get(k).decode().split(" ", 2)
                self.hosts[r] = host
                # A pid names a process only in its own PID namespace (containers
                # of one pod may have their own): others are not watched.
                # An unknown namespace ("?") is not assumed to be ours.
                if host == self.hosts.get(self.rank) and pid_ns == _pid_namespace() != "?":
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
        self.hosts[self.rank] = host_identity()
        self.store.set(self.key(f"pid/{self.rank}"), pid_record())

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


def _agreed_transport(rdv):
    """The first transport every rank takes, and why none (None, reason) otherwise."""
    # Published before each rank's pid, unless gather_hosts published the pids first.
    keys = [rdv.key(f"transports/{r}") for r in range(rdv.world)]
    rdv.wait_until(lambda: rdv.store.check(keys), "every rank to start set-up",
                   lambda: [r for r, k in enumerate(keys) if not rdv.store.check([k])])
    # One request, not one per rank: every rank above 0 asks too.
    taken = {r: v.decode().split(",") for r, v in enumerate(rdv.store.multi_get(keys))}
    for choice in ("memfd", "posix"):
        if all(choice in t for t in taken.values()):
            return choice, ""
    why = "; ".join(f"rank {r} takes {' or '.join(t) if t != [''] else 'none'}"
                    for r, t in sorted(taken.items()))
    hint = memfd_unavailable_reason()
    return None, (f"the ranks take no shared-memory transport in common ({why}); set "
                  f"PYCOMM_SHM_TRANSPORT alike on every rank (auto, memfd or posix)"
                  + (f"; memfd is unavailable on rank {rdv.rank}: {hint}" if hint else ""))


def _publish_token_digest(rdv):
    """Publishes the digest of a fresh token (step 1) and returns the token.
    Written once: a value already there means another process wrote this
    rank's key, and would be let in as this rank."""
    token = _C.new_group_secret()
    digest = _C.token_digest(token)
    now = rdv.store.compare_set(rdv.key(f"token/{rdv.rank}"), "", digest)
    if (now.decode() if isinstance(now, bytes) else now) != digest:
        rdv.fail(f"rank {rdv.rank}'s key in the store was written before it (by another process "
                 f"that reaches the store, or a rank started twice): refusing to set up a group "
                 f"that someone else could join as rank {rdv.rank}")
    return token


def create_communicator(store, prefix: str, rank: int, world: int, timeout_s: float,
                        config: dict, what: str, tag: str = ""):
    """Collectively creates and starts a native communicator (see the module doc)."""
    rdv = _Rendezvous(store, prefix, rank, world, timeout_s, what)
    impl = None
    try:
        store.set(rdv.key(f"transports/{rank}"), ",".join(transports_taken(config["shm_transport"])))
        store.set(rdv.key(f"node/{rank}"), str(host_cpus.pinned_node()))
        token = _publish_token_digest(rdv) if rank else ""
        rdv.publish_pid()
        if rank == 0:
            rdv.gather_pids()
            transport, why_none = _agreed_transport(rdv)
            if transport is None:
                rdv.fail(why_none)
            members = []
            if transport == "memfd":
                place = f"memfd:{_C.new_group_id()}"
                # Each rank publishes its digest before its pid; still waited
                # for, watching the ranks, never read blind (a store get would
                # wait out the store's own timeout).
                keys = [rdv.key(f"token/{r}") for r in range(1, world)]
                rdv.wait_until(lambda: store.check(keys), "every rank's token digest",
                               lambda: [r for r in range(1, world) if not store.check([keys[r - 1]])])
                members = [""] + ([v.decode() for v in store.multi_get(keys)] if keys else [])
            else:
                _C.remove_stale_segments()
                place = f"posix:{_C.new_segment_name(tag)}"
            try:
                impl = _C.Communicator(rank, world, place, True, config, members=members)
            except Exception as e:
                rdv.fail(f"rank 0 could not create the shared memory: {e}")
            store.set(rdv.key("place"), place)
        else:
            place_key = rdv.key("place")
            # Rank 0 creates it once every rank has published its pid: those
            # that have not are the ones missing, else rank 0 itself.
            rdv.wait_until(lambda: store.check([place_key]), "rank 0 to create the shared memory",
                           lambda: rdv.unpublished() or [0])
            place = store.get(place_key).decode()
            transport, _ = _agreed_transport(rdv)
            if place.split(":", 1)[0] != transport:
                rdv.fail(f"the group's place in the store is '{place[:80]}', not of the transport the "
                         f"ranks agreed on ({transport}): written by another process? Refusing it")
            impl = _C.Communicator(rank, world, place, False, config, token=token)
        count_key = rdv.key("attached")
        store.set(rdv.key(f"attached/{rank}"), "1")
        store.add(count_key, 1)
        rdv.wait_until(lambda: store.add(count_key, 0) >= world, "every rank to map the shared memory",
                       lambda: [r for r in range(world) if not store.check([rdv.key(f"attached/{r}")])])
        impl.unlink_name()
        # Published before each rank's pid, which every rank has seen by now.
        impl.numa_nodes = [int(v) for v in store.multi_get([rdv.key(f"node/{r}") for r in range(world)])]
        impl.start()
        return impl
    except BaseException as e:
        if impl is not None:
            # Makes the segment unobtainable (whoever created it): nothing stays behind.
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
