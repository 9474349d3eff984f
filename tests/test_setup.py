"""Set-up is bounded like every collective: a missing or dead rank, or ranks on
different hosts, give a clear error on every rank within pycomm's timeout, and a
failed set-up leaves nothing in /dev/shm. Each case runs its own short-lived
processes (a failed set-up is the point), over a TCP store the test owns."""
from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import time
import traceback

import pytest

from conftest import pycomm_segments, pycomm_sockets, servers_left_by_this_run

pytestmark = pytest.mark.ranks


def _rank(rank, world, port, behaviour, env, out):
    os.environ.update(env)
    import torch.distributed as dist

    import pycomm
    from pycomm import _C
    from pycomm.rendezvous import pid_record

    store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    group_store = dist.distributed_c10d._get_default_store()  # what pycomm.init uses
    t0 = time.monotonic()
    try:
        if behaviour == "absent":
            time.sleep(float(env["PYCOMM_TIMEOUT"]) + 3)
            out.put((rank, "absent", 0.0, ""))
            return
        if behaviour == "exit-after-pid":
            # Starts set-up as pycomm.init would (its first communicator): the
            # pid goes first, then it dies.
            group_store.add(f"pycomm/serial/{rank}", 1)
            group_store.set(f"pycomm/comm/1/transports/{rank}", "memfd,posix")
            group_store.set(f"pycomm/comm/1/token/{rank}", _C.token_digest(_C.new_group_secret()))
            group_store.set(f"pycomm/comm/1/pid/{rank}", pid_record())
            time.sleep(0.3)
            os._exit(3)
        if behaviour == "exit-after-create":
            group_store.add(f"pycomm/serial/{rank}", 1)
            group_store.set(f"pycomm/comm/1/transports/{rank}", "memfd,posix")
            group_store.set(f"pycomm/comm/1/token/{rank}", _C.token_digest(_C.new_group_secret()))
            group_store.set(f"pycomm/comm/1/pid/{rank}", pid_record())
            while not group_store.check(["pycomm/comm/1/place"]):
                time.sleep(0.01)
            os._exit(3)
        pycomm.init()
        out.put((rank, "ok", time.monotonic() - t0, ""))
    except Exception as e:  # noqa: BLE001
        out.put((rank, type(e).__name__, time.monotonic() - t0, str(e) or traceback.format_exc()))


def run_setup(behaviours, env, deadline_s=40):
    """Runs one rank per behaviour; returns {rank: (outcome, seconds, message)}."""
    import torch.distributed as dist

    world = len(behaviours)
    store = dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, store.port, b, env.get(r, env.get("all", {})), out))
             for r, b in enumerate(behaviours)]
    for p in procs:
        p.start()
    results = {}
    expected = [r for r, b in enumerate(behaviours) if not b.startswith("exit")]
    end = time.monotonic() + deadline_s
    while len(results) < len(expected) and time.monotonic() < end:
        try:
            r, outcome, seconds, message = out.get(timeout=1)
            results[r] = (outcome, seconds, message)
        except Exception:  # noqa: BLE001 - queue.Empty
            pass
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    assert len(results) == len(expected), f"ranks {set(expected) - set(results)} never answered: a hang"
    return results


def test_absent_rank_0_is_named_within_the_timeout():
    before = set(pycomm_segments())
    env = {"all": {"PYCOMM_TIMEOUT": "2"}}
    res = run_setup(["absent", "init", "init"], env)
    for r in (1, 2):
        outcome, seconds, message = res[r]
        assert outcome == "CommTimeout", res[r]
        # Bounded by pycomm's timeout, not the store's (60 s here).
        assert 1.9 <= seconds < 2 + 5, res[r]
        assert "ranks that never arrived: 0" in message and "pycomm.init" in message, message
    assert set(pycomm_segments()) == before


def test_absent_last_rank_is_named_on_every_rank():
    before = set(pycomm_segments())
    env = {"all": {"PYCOMM_TIMEOUT": "2"}}
    res = run_setup(["init", "init", "absent"], env)
    assert res[0][0] == "CommTimeout" and "ranks that never arrived: 2" in res[0][2], res[0]
    # Rank 1 learns it from rank 0 at once, not at its own deadline.
    assert res[1][0] in ("CommTimeout", "CommError") and "never arrived: 2" in res[1][2], res[1]
    assert set(pycomm_segments()) == before


def test_a_rank_that_exits_during_set_up_is_noticed_at_once():
    before = set(pycomm_segments())
    env = {"all": {"PYCOMM_TIMEOUT": "30"}}
    res = run_setup(["init", "init", "exit-after-pid"], env)
    for r in (0, 1):
        outcome, seconds, message = res[r]
        # PeerDied (a CommTimeout): the rank that saw it exit, and the one it told.
        assert outcome in ("PeerDied", "CommError"), res[r]
        assert "rank 2 exited" in message, message
        assert seconds < 15, f"rank {r} took {seconds:.1f} s (timeout 30 s): not noticed at once"
    assert set(pycomm_segments()) == before


@pytest.mark.parametrize("transport", ["memfd", "posix"])
def test_creator_removes_its_segment_when_set_up_fails_after_creating_it(transport, tmp_path,
                                                                         monkeypatch):
    # posix: in a folder of its own, so that a small /dev/shm is no matter.
    monkeypatch.setenv("PYCOMM_SHM_DIR", str(tmp_path))
    before, sockets = set(pycomm_segments()), set(pycomm_sockets())
    env = {"all": {"PYCOMM_TIMEOUT": "30", "PYCOMM_SHM_TRANSPORT": transport,
                   "PYCOMM_SHM_DIR": str(tmp_path)}}
    res = run_setup(["init", "exit-after-create"], env)
    outcome, seconds, message = res[0]
    assert outcome == "PeerDied" and "rank 1 exited" in message, res[0]
    assert seconds < 15, res[0]
    assert set(pycomm_segments()) == before, "the creator left its segment behind"
    assert not servers_left_by_this_run(sockets), "the creator left its segment server behind"


def test_ranks_on_different_hosts_run_hierarchically():
    """A communicator over two hosts is no error: it splits into one per host,
    with gloo between them (tests/test_hierarchical.py runs its collectives)."""
    env = {0: {"PYCOMM_TIMEOUT": "20", "PYCOMM_HOST_ID": "host-a"},
           1: {"PYCOMM_TIMEOUT": "20", "PYCOMM_HOST_ID": "host-b"}}
    res = run_setup(["init", "init"], env)
    for r in (0, 1):
        outcome, seconds, message = res[r]
        assert outcome == "ok", res[r]
        assert seconds < 15, res[r]
