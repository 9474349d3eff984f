"""Where a group's shared memory comes from, and how much of it there is.

A group takes the memfd transport wherever it can (anonymous memory handed
between ranks over a Unix socket, nothing in /dev/shm), or the posix one (files
in /dev/shm) when asked or when memfds are refused. Its session segment grows
with the ranks, not their square; a point-to-point channel is made only when a
pair first talks. A process that is not in the group gets nothing from its
ranks' servers, and a wrong token is refused with a clear error where it was
tried (tests/test_strangers.py has the other attacks).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import pycomm_segments, pycomm_sockets, servers_left_by_this_run
from support.process_world import ProcessWorld, validating_on_gloo

from pycomm.tools.doctor import mapped_segment_bytes

pytestmark = [pytest.mark.fast,
              pytest.mark.skipif(validating_on_gloo(), reason="pycomm's own memory")]


def group_memory_case():
    """A fresh pycomm group: what it maps before any send, after a ring of
    sends, and after it is destroyed; and what its transport left in /dev/shm."""
    import torch
    import torch.distributed as dist

    from pycomm import _C, config

    rank, world = dist.get_rank(), dist.get_world_size()
    before = mapped_segment_bytes()
    group = dist.new_group(backend="cpu:pycomm")
    t = torch.ones(4)
    dist.all_reduce(t, group=group)  # the group is set up and in use
    session = mapped_segment_bytes() - before
    nxt, prev = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(4)
    # Waited for in a list that goes with it: a Work holds its group's memory.
    [w.wait() for w in (dist.isend(t * rank, nxt, group=group), dist.irecv(got, prev, group=group))]
    with_ring = mapped_segment_bytes() - before
    dist.destroy_process_group(group)
    del group
    after = mapped_segment_bytes() - before
    dist.barrier()  # every rank is done with the group
    in_dev_shm = pycomm_segments()
    cost = _C.shared_memory_cost(world, config.communicator_config(world, 60.0))
    return dict(session=session, with_ring=with_ring, after=after, got=got.tolist(),
                expected=[float(world * prev)] * 4, in_dev_shm=in_dev_shm, **cost)


@pytest.mark.ranks
@pytest.mark.parametrize("transport", ["memfd", "posix"])
def test_a_group_maps_its_session_then_a_channel_per_pair_that_talks(transport, tmp_path):
    # posix: in a folder of its own, so that a small /dev/shm is no matter.
    world = ProcessWorld(3, backend="cpu:pycomm",
                         env={"PYCOMM_SHM_TRANSPORT": transport, "PYCOMM_SHM_DIR": str(tmp_path)})
    try:
        results = world.run(group_memory_case, timeout=180)
    finally:
        world.close()
    for r in results:
        assert r["got"] == r["expected"]
        # The session segment alone: no channel before a pair talks.
        assert r["session"] == r["session_bytes"], r
        # One channel made (to the next rank), one taken (from the previous).
        assert r["with_ring"] == r["session_bytes"] + 2 * r["channel_bytes"], r
        assert r["after"] == 0, r
        # posix names are unlinked once both ends mapped them; memfd has none.
        assert r["in_dev_shm"] == [], r
    # A rank's share: about 2 MiB at the default settings.
    assert results[0]["session_bytes"] / 3 <= 2.1 * (1 << 20)


def test_group_memory_grows_with_the_ranks_not_their_square():
    from pycomm import _C, config

    per_rank = {}
    for w in (2, 4, 8, 16, 32, 64, 128):
        per_rank[w] = _C.shared_memory_cost(w, config.communicator_config(w, 1.0))["session_bytes"] / w
    assert all(v <= 2.1 * (1 << 20) for v in per_rank.values()), per_rank
    # Per rank, the cost stays flat (control lines grow with W: 32 KiB a rank at 128).
    assert per_rank[128] < 1.05 * per_rank[4], per_rank


def disagreeing_case(transport_of_rank):
    import torch.distributed as dist

    import pycomm

    os.environ["PYCOMM_SHM_TRANSPORT"] = transport_of_rank[dist.get_rank()]
    try:
        pycomm.Communicator(timeout=20)
    except pycomm.CommError as e:
        return str(e)
    finally:
        del os.environ["PYCOMM_SHM_TRANSPORT"]
    return None


@pytest.mark.ranks
def test_ranks_that_take_no_transport_in_common_fail_on_every_rank(worlds):
    messages = worlds(2).run(disagreeing_case, {0: "memfd", 1: "posix"}, timeout=120)
    for m in messages:
        assert m is not None and "no shared-memory transport in common" in m, m
        assert "rank 0 takes memfd" in m and "rank 1 takes posix" in m, m


def test_a_wrong_token_is_refused_and_the_memory_is_not_handed_over():
    """Rank 0 of a 2-rank group runs here; another process of this host and
    user, which knows the group's place and rank 1's digest (all the store
    holds) but not rank 1's token, asks for the session as rank 1."""
    import pycomm  # noqa: F401
    from pycomm import _C, config

    if _C.memfd_unavailable_reason():
        pytest.skip(_C.memfd_unavailable_reason())
    server, token = _C.new_group_id(), _C.new_group_secret()
    digest = _C.token_digest(token)
    cfg = config.communicator_config(2, 5.0)
    rank0 = _C.Communicator(0, 2, f"memfd:{server}", True, cfg, members=["", digest])
    intruder = textwrap.dedent(f"""
        import pycomm
        from pycomm import _C, config
        cfg = config.communicator_config(2, 5.0)
        try:
            _C.Communicator(1, 2, "memfd:{server}", False, cfg, token="{digest}")
        except pycomm.CommError as e:
            print("REFUSED", e)
        else:
            print("GOT THE MEMORY")
    """)
    try:
        out = subprocess.run([sys.executable, "-c", intruder], capture_output=True, text=True,
                             timeout=120)
    finally:
        rank0.unlink_name()
        rank0.close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("REFUSED"), out.stdout
    assert "wrong token for rank 1" in out.stdout and "rank 1" in out.stdout, out.stdout


def test_nothing_is_left_on_any_socket_after_a_group_closes():
    from pycomm import _C, config

    if _C.memfd_unavailable_reason():
        pytest.skip(_C.memfd_unavailable_reason())
    before = set(pycomm_sockets())
    group_id = _C.new_group_id()
    c = _C.Communicator(0, 1, f"memfd:{group_id}", True,
                        config.communicator_config(1, 5.0))
    assert c.transport == "memfd"
    assert any(group_id in s for s in pycomm_sockets())
    c.unlink_name()
    c.close()
    del c
    assert not servers_left_by_this_run(before)


_POD_RANK = textwrap.dedent("""
    import datetime, json, os, sys
    import torch, torch.distributed as dist
    import pycomm
    rank, port = int(sys.argv[1]), int(sys.argv[2])
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("cpu:pycomm", store=store, rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    got = torch.zeros(10)
    if rank == 0:
        dist.send(torch.arange(10.0), 1)
    else:
        dist.recv(got, 0)
    dist.barrier()
    print(json.dumps({"pid": os.getpid(), "ns": os.stat("/proc/self/ns/pid").st_ino,
                      "sum": t[0].item(), "got": got.tolist()}))
    dist.destroy_process_group()
""")


@pytest.mark.ranks
def test_ranks_in_separate_pid_namespaces_share_memory():
    """Two containers of one pod: one network namespace, a PID namespace each
    (here: rank 1 under `unshare --pid --fork`). Each rank's pid means nothing
    to the other, so neither watches it (a wrong pid would look dead at once)."""
    import datetime
    import json

    import torch.distributed as dist

    if subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode:
        pytest.skip("unshare --pid is refused here (it needs root or CAP_SYS_ADMIN)")
    store = dist.TCPStore("127.0.0.1", 0, None, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    port = str(store.port)
    ranks = [subprocess.Popen([sys.executable, "-c", _POD_RANK, "0", port], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
             subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", _POD_RANK, "1",
                               port], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)]
    outs = []
    for p in ranks:
        try:
            out, err = p.communicate(timeout=180)
        finally:
            p.kill()
        assert p.returncode == 0, err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert outs[0]["ns"] != outs[1]["ns"] and outs[1]["pid"] == 1, outs
    assert [o["sum"] for o in outs] == [3.0, 3.0]
    assert outs[1]["got"] == [float(i) for i in range(10)]


def test_an_unknown_transport_is_an_error_naming_the_variable(monkeypatch):
    from pycomm import config

    monkeypatch.setenv("PYCOMM_SHM_TRANSPORT", "sysv")
    with pytest.raises(ValueError, match="PYCOMM_SHM_TRANSPORT: expected one of auto, memfd, "
                                         "posix, got 'sysv'"):
        config.communicator_config(2, 5.0)
