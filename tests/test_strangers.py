"""What a stranger on the host can do to a group: nothing.

Each test performs one attack (docs/failures.md, "Who may join a group") and
shows it refused with a clear error, the group unharmed and nothing left
behind. A stranger is another user (uid 65534, where the tests run as root;
skipped with its reason otherwise) or another process of the same user that
is not in the group. The attacks talk to pycomm's sockets and files as any
program could, with no pycomm code of their own.
"""
from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from conftest import pycomm_sockets
from support.process_world import reference_group, validating_on_gloo

pytestmark = [pytest.mark.fast,
              pytest.mark.skipif(validating_on_gloo(), reason="pycomm's own servers and files")]

NOBODY = 65534
AS_ROOT = os.geteuid() == 0


def _python_for(uid):
    """A Python that `uid` may run: ours, or the system's (ours may lie
    under a home only its owner can enter), or None."""
    for python in (sys.executable, "/usr/bin/python3"):
        try:
            if subprocess.run([python, "-c", "pass"], user=uid, timeout=60).returncode == 0:
                return python
        except OSError:
            pass
    return None


STRANGER_PYTHON = {None: sys.executable, NOBODY: _python_for(NOBODY) if AS_ROOT else None}
OTHER_USER = pytest.param(
    NOBODY, id="another-user",
    marks=pytest.mark.skipif(STRANGER_PYTHON[NOBODY] is None,
                             reason="needs root, and a Python that uid 65534 may run, to run a "
                                    "stranger as another user"))
SAME_USER = pytest.param(None, id="same-user")

# The stranger: a program of its own, run as `uid`. It prints "ready" once
# its attack is in place and keeps it so until it is killed, or prints what
# the servers answered and exits.
_STRANGER = textwrap.dedent(r"""
    import json, socket, struct, sys, time
    action, names, extra = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    held = []

    def connect(name):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\0" + name)
        return s

    if action == "hold":  # connections that never say a word
        for name in names:
            held += [connect(name) for _ in range(extra["each"])]
    elif action == "squat":  # the names the group's ranks would bind, as guessed from the ones seen
        for name in names:
            for suffix in extra["suffixes"]:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.bind("\0" + name + suffix)
                    s.listen(8)
                    held.append(s)
                except OSError:
                    pass
    elif action == "ask":  # every value the store holds, shown as proof, for every key
        answers = []
        for name in names:
            for key, rank in extra["keys"]:
                for proof in extra["proofs"]:
                    s = connect(name)
                    s.settimeout(2)  # a server that offered nothing yet accepts nothing yet
                    s.sendall(struct.pack("<II32sQiI", 0x70637351, 2, bytes.fromhex(proof), key, rank, 0))
                    try:
                        msg, fds, _, _ = socket.recv_fds(s, 128, 4)
                    except OSError as e:
                        answers.append([None, f"{name} key {key}: {e!r}", 0])
                        continue
                    magic, status = struct.unpack("<II", msg[:8])
                    answers.append([status, msg[8:].rstrip(b"\0").decode(), len(fds)])
                    s.close()
        print(json.dumps(answers), flush=True)
        sys.exit(0)
    print("ready", flush=True)
    time.sleep(3600)
""")


def _start_stranger(action, names, extra, uid):
    import json

    p = subprocess.Popen([STRANGER_PYTHON[uid], "-c", _STRANGER, action, json.dumps(names), json.dumps(extra)],
                         stdout=subprocess.PIPE, text=True, user=uid)
    if action != "ask":
        assert p.stdout.readline().strip() == "ready"
    return p


def _new_sockets(before):
    return sorted(n[1:] for n in set(pycomm_sockets()) - before)


def stranger_at_first_send_case(action, extra, uid):
    """A fresh group; rank 0 starts the stranger against the group's servers
    (as /proc/net/unix shows them to anyone); then the group's first send,
    which fetches a channel through those servers, and an all-reduce."""
    import torch
    import torch.distributed as dist

    ref = reference_group()
    rank = dist.get_rank()
    dist.barrier(group=ref)
    before = set(pycomm_sockets())
    dist.barrier(group=ref)
    group = dist.new_group(backend="cpu:pycomm", timeout=datetime.timedelta(seconds=6))
    dist.barrier(group=ref)
    names = _new_sockets(before)
    stranger = _start_stranger(action, names, extra, uid) if rank == 0 else None
    dist.barrier(group=ref)
    try:
        t0 = time.monotonic()
        x = torch.arange(1000.0) if rank == 0 else torch.zeros(1000)
        if rank == 0:
            dist.send(x, 1, group=group)
        else:
            dist.recv(x, 0, group=group)
        y = torch.full((100,), float(rank + 1))
        dist.all_reduce(y, group=group)
        elapsed = time.monotonic() - t0
        dist.barrier(group=ref)
    finally:
        if stranger is not None:
            stranger.kill()
            stranger.wait()
    dist.destroy_process_group(group)
    return len(names), elapsed, x.tolist() == list(range(1000)), y.tolist() == [3.0] * 100


@pytest.mark.ranks
@pytest.mark.parametrize("uid", [OTHER_USER, SAME_USER])
def test_silent_connections_do_not_stall_a_group(backend_worlds, uid):
    """Issue 45, hole 1: 16 silent connections to each of the group's servers
    made the first send fail with CommTimeout after 6 s. Another user's are
    closed before a byte is read; the same user's are served side by side."""
    results = backend_worlds(2).run(stranger_at_first_send_case, "hold", {"each": 16}, uid, timeout=120)
    for servers, elapsed, sent, reduced in results:
        assert servers == 2  # every rank's server, bound at set-up
        assert sent and reduced
        assert elapsed < 3.0, f"the first send took {elapsed:.1f} s with the stranger's connections held"


@pytest.mark.ranks
@pytest.mark.parametrize("uid", [OTHER_USER, SAME_USER])
def test_a_stranger_cannot_take_a_ranks_address_first(backend_worlds, uid):
    """Issue 45, hole 2: rank 1 bound pycomm-<group id>-1 only at its first
    send, a name anyone could derive from rank 0's, and a stranger who bound
    it first made that send fail. Every rank now binds a random name at
    set-up and tells it only through the session: the names the stranger
    binds, derived from what it sees, are never asked for."""
    suffixes = ["-0", "-1", "-2", "-x"]
    results = backend_worlds(2).run(stranger_at_first_send_case, "squat", {"suffixes": suffixes}, uid,
                                    timeout=120)
    for servers, elapsed, sent, reduced in results:
        assert servers == 2 and sent and reduced
        assert elapsed < 3.0


class _Recording:
    """A store that notes every value written through it: all a stranger that
    reaches the store's port could read."""

    def __init__(self, store):
        self.store, self.values = store, []

    def set(self, key, value):
        self.values.append(value if isinstance(value, str) else value.decode())
        return self.store.set(key, value)

    def compare_set(self, key, expected, desired):
        self.values.append(desired)
        return self.store.compare_set(key, expected, desired)

    def __getattr__(self, name):
        return getattr(self.store, name)


def everything_in_the_store_case():
    """A fresh group whose set-up goes through a recording store, and a
    message moved (so rank 0's channel to rank 1 exists and was taken); then
    a process of the same user, with every value the store held, asks every
    server of the group for everything."""
    import json

    import torch
    import torch.distributed as dist

    import pycomm.backend

    ref = reference_group()
    rank = dist.get_rank()
    values = []
    real = pycomm.backend.create_communicator

    def recorded(store, *args, **kwargs):
        recording = _Recording(store)
        try:
            return real(recording, *args, **kwargs)
        finally:
            values.extend(recording.values)

    dist.barrier(group=ref)
    before = set(pycomm_sockets())
    dist.barrier(group=ref)
    pycomm.backend.create_communicator = recorded
    try:
        group = dist.new_group(backend="cpu:pycomm")
    finally:
        pycomm.backend.create_communicator = real
    x = torch.arange(64.0) if rank == 0 else torch.zeros(64)
    if rank == 0:
        dist.send(x, 1, group=group)
    else:
        dist.recv(x, 0, group=group)
    seen = [None, None]
    dist.all_gather_object(seen, values, group=ref)
    names = _new_sockets(before)
    answers = None
    if rank == 0:
        # Every 64-digit hex string the store held: the digests, and a
        # secret, were one ever written there.
        proofs = sorted({m for vs in seen for v in vs for m in re.findall(r"[0-9a-f]{64}", v)})
        keys = [[0, 1], [0, 0], [1, 1], [2, 0], [2, 1]]  # the session as rank 1 and 0; both channels
        stranger = _start_stranger("ask", names, {"keys": keys, "proofs": proofs}, None)
        out, _ = stranger.communicate(timeout=60)
        answers = (proofs, json.loads(out))
    dist.barrier(group=ref)
    # The group is unharmed.
    y = torch.ones(8)
    dist.all_reduce(y, group=group)
    dist.destroy_process_group(group)
    return names, seen, answers, x.tolist() == list(range(64)) and y.tolist() == [2.0] * 8


@pytest.mark.ranks
def test_what_the_store_holds_opens_nothing(backend_worlds):
    """Issue 45, hole 4: `memfd:<gid>:<secret>` stayed in the TCPStore, and a
    second process of the same user mapped a live point-to-point channel with
    it. The store now holds each rank's token digest and rank 0's server id,
    nothing that proves membership: every request made with it is refused."""
    names, seen, (proofs, answers), moved = backend_worlds(2).run(everything_in_the_store_case, timeout=120)[0]
    assert moved
    assert len(names) == 2
    assert all(":" not in v.split("memfd:", 1)[-1] for values in seen for v in values if v.startswith("memfd:"))
    assert len(proofs) == 1  # rank 1's digest
    assert len(answers) == len(names) * 5 * len(proofs)
    for status, reason, fds in answers:
        assert status == 1 and fds == 0, reason
        assert "wrong token for rank" in reason or "wrong group secret" in reason, reason


def test_a_rank_whose_token_key_is_taken_refuses_to_set_up():
    """Whoever reaches the store could publish a digest as rank 1 first, and
    be let in as rank 1. The key is written once: rank 1 finds it taken, and
    set-up fails with a clear error, on every rank (the abort key)."""
    import torch.distributed as dist

    import pycomm
    from pycomm import _C, config, rendezvous

    store = dist.HashStore()
    store.set("g/token/1", _C.token_digest(_C.new_group_secret()))  # the stranger's
    with pytest.raises(pycomm.CommError, match="rank 1's key in the store was written before it"):
        rendezvous.create_communicator(store, "g", 1, 2, 5.0, config.communicator_config(2, 5.0), "test")
    assert "rank 1's key in the store was written before it" in store.get("g/abort").decode()


def test_a_place_of_another_transport_than_agreed_is_refused():
    """Issue 45, hole 3: a rank took any place the store named, even a posix
    file in a group that agreed on memfd. Here everything rank 0 publishes is
    there (both take memfd), but the place names a posix file."""
    import torch.distributed as dist

    import pycomm
    from pycomm import _C, config, rendezvous

    if _C.memfd_unavailable_reason():
        pytest.skip(_C.memfd_unavailable_reason())
    store = dist.HashStore()
    store.set("g/transports/0", "memfd,posix")
    store.set("g/node/0", "-1")
    store.set("g/pid/0", rendezvous.pid_record())
    store.set("g/place", "posix:pycomm-planted")
    with pytest.raises(pycomm.CommError, match=r"not of the transport the ranks agreed on \(memfd\)"):
        rendezvous.create_communicator(store, "g", 1, 2, 5.0, config.communicator_config(2, 5.0), "test")


@pytest.fixture
def shm_dir(monkeypatch):
    """A directory of our own as shm_dir(), world-writable as /dev/shm is."""
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o1777)
        monkeypatch.setenv("PYCOMM_SHM_DIR", d)
        yield d


def _attach_as_rank_1(name):
    from pycomm import _C, config

    return _C.Communicator(1, 2, f"posix:{name}", False, config.communicator_config(2, 5.0))


def _planted(shm_dir, name, mode, uid=None):
    """A file of 1 MiB under `name`, as `uid` made it."""
    path = os.path.join(shm_dir, name)
    with open(path, "wb") as f:
        f.write(b"\0" * (1 << 20))
    os.chmod(path, mode)
    if uid is not None:
        os.chown(path, uid, uid)
    return path


@pytest.mark.skipif(not AS_ROOT, reason="needs root to plant a file of another user")
def test_another_users_posix_segment_is_refused(shm_dir):
    """Issue 45, hole 3: a segment another user made (mode 0666) was attached as rank 1."""
    import pycomm

    path = _planted(shm_dir, "pycomm-1-n1-planted", 0o666, uid=NOBODY)
    with pytest.raises(pycomm.CommError, match=r"refusing shared memory .*planted: it belongs to uid 65534"):
        _attach_as_rank_1("pycomm-1-n1-planted")
    assert os.path.exists(path)  # refused, not removed: it is not ours


def test_a_posix_segment_others_may_open_or_not_a_file_is_refused(shm_dir):
    import pycomm

    _planted(shm_dir, "open-to-all", 0o644)
    with pytest.raises(pycomm.CommError, match="its mode is 0644: others may open it"):
        _attach_as_rank_1("open-to-all")
    os.mkfifo(os.path.join(shm_dir, "a-fifo"), 0o600)
    with pytest.raises(pycomm.CommError, match="it is not a regular file"):
        _attach_as_rank_1("a-fifo")
    os.symlink("/etc/hostname", os.path.join(shm_dir, "a-link"))
    with pytest.raises(pycomm.CommError, match="Too many levels of symbolic links"):
        _attach_as_rank_1("a-link")


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", ".hidden", "", "x" * 201, "sp ace"])
def test_a_segment_name_that_leaves_the_directory_is_refused(shm_dir, name):
    with pytest.raises(ValueError, match="a segment name is 1 to 200 letters"):
        _attach_as_rank_1(name)


def test_a_header_whose_sizes_do_not_add_up_is_refused(shm_dir):
    """Issue 45, hole 3: attach did not check the header's offsets against
    the segment's size. Rank 0's real segment, its data offset then made to
    point past the end."""
    import struct

    import pycomm
    from pycomm import _C, config

    name = _C.new_segment_name("header")
    rank0 = _C.Communicator(0, 2, f"posix:{name}", True, config.communicator_config(2, 5.0))
    try:
        with open(os.path.join(shm_dir, name), "r+b") as f:
            f.seek(24)  # magic (8), version and world (4 + 4), total bytes (8): the data offset
            f.write(struct.pack("<Q", 1 << 40))
        with pytest.raises(pycomm.CommError, match="its sizes do not add up"):
            _attach_as_rank_1(name)
    finally:
        rank0.unlink_name()
        rank0.close()
    assert os.listdir(shm_dir) == []


def _dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_the_stale_sweep_touches_only_this_namespaces_and_this_users_files(shm_dir):
    """Issue 45, hole 6: a rank in a new PID namespace took a live group's
    segment for a dead one (its maker's pid is absent there) and, as root,
    removed it, whoever owned it. Only names made in this PID namespace, of
    this user's regular files, whose maker is gone, are removed now."""
    from pycomm import _C

    ns = os.stat("/proc/self/ns/pid").st_ino
    dead = _dead_pid()
    stale = f"pycomm-{dead}-n{ns}-stale"
    kept = {
        f"pycomm-{dead}-n{ns + 1}-of-another-namespace": None,
        f"pycomm-{dead}-no-namespace": None,  # an older pycomm's name: not sure whose
        f"pycomm-{os.getpid()}-n{ns}-alive": None,
    }
    if AS_ROOT:
        kept[f"pycomm-{dead}-n{ns}-of-another-user"] = NOBODY
    _planted(shm_dir, stale, 0o600)
    for name, uid in kept.items():
        _planted(shm_dir, name, 0o600, uid)
    assert _C.remove_stale_segments() == 1
    assert sorted(os.listdir(shm_dir)) == sorted(kept)
