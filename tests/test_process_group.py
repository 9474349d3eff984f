"""pycomm.ProcessGroup(store, rank, world_size, timeout): a c10d backend made
without a default group, as dist.ProcessGroupGloo is, for frameworks that
build their groups themselves (torchft: tests/test_torchft.py). Two rank
processes of its own, over a TCP store the test owns, run every case in turn;
the ranks meet through the store (store.wait), never through a sleep."""
from __future__ import annotations

import datetime
import multiprocessing as mp
import threading
import time
import traceback

import pytest

pytestmark = pytest.mark.ranks

WORLD = 2


def _rank(rank, port, out):
    try:
        out.put((rank, _cases(rank, port)))
    except Exception:  # noqa: BLE001
        out.put((rank, traceback.format_exc()))


def _group(store, prefix, rank, seconds):
    import torch.distributed as dist

    import pycomm

    return pycomm.ProcessGroup(dist.PrefixStore(prefix, store), rank, WORLD,
                               datetime.timedelta(seconds=seconds))


def _c10d_error(backend):
    """c10d's word on the backend's health, Backend.get_error, where torch
    binds it in Python (2.14 on); "unbound" on older releases."""
    return str(backend.get_error()) if hasattr(backend, "get_error") else "unbound"


def _raised(backend):
    """What pycomm's own check of the group raises: "nothing" while whole."""
    import pycomm

    try:
        pycomm._C.communicator_of(backend).raise_if_broken()
        return "nothing"
    except pycomm.CommError as e:
        return f"{type(e).__name__}: {e}"


def _blocked_all_reduce(backend, async_op):
    """Rank 0's all-reduce that rank 1 never joins, waited for in a thread of
    its own (async_op: the call runs on pycomm's worker; else in that
    thread); returns the thread and where it writes what it raised and when."""
    import torch
    import torch.distributed as dist

    opts = dist.AllreduceOptions()
    opts.asyncOp = async_op
    seen = {}

    def wait():
        try:
            backend.allreduce([torch.ones(100)], opts).wait()
            seen["error"] = None
        except Exception as e:  # noqa: BLE001
            seen["error"], seen["at"] = e, time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    return thread, seen


def _cases(rank, port):
    import torch
    import torch.distributed as dist

    import pycomm

    store = dist.TCPStore("127.0.0.1", port, WORLD, is_master=False,
                          timeout=datetime.timedelta(seconds=60))
    res = {"default_group": dist.is_initialized()}

    b = _group(store, "quorum/1/", rank, 20)
    t = torch.full((1023,), float(rank + 1))
    b.allreduce([t]).wait()
    res["sum"] = bool((t == 3).all())
    res["name"] = b.name()
    # c10d's Backend has the property from torch 2.14 on (2.13's has none to answer).
    res["supports_reconfigure"] = getattr(b, "supports_reconfigure", "absent")
    res["torch_has_reconfigure"] = hasattr(torch._C._distributed_c10d.Backend, "supports_reconfigure")
    # Every collective c10d has, through the same backend: one more, as a check.
    g = [torch.empty(3) for _ in range(WORLD)]
    b.allgather([g], [torch.full((3,), float(rank))]).wait()
    res["gathered"] = [x.tolist() for x in g]

    # The same prefix again (torchft may configure twice under one): a fresh group each time.
    again = []
    for i in range(3):
        c = _group(store, "quorum/1/", rank, 20)
        u = torch.full((7,), float(i + rank))
        c.allreduce([u]).wait()
        again.append(u.tolist() == [float(2 * i + 1)] * 7)
        c.shutdown()
    res["same_prefix"] = again

    # set_timeout: made with 20 s, set to 0.5 s; rank 1 never joins rank 0's call.
    if rank == 0:
        b.set_timeout(datetime.timedelta(seconds=0.5))
        start = time.monotonic()
        try:
            b.allreduce([t]).wait()
            res["timeout"] = "no error"
        except pycomm.CommTimeout as e:
            res["timeout"] = (time.monotonic() - start, str(e))
        store.set("timed_out", "1")
    else:
        store.wait(["timed_out"])
    # Either rank's backend knows the group is broken, and why.
    res["error_type"] = _c10d_error(b)
    res["raised"] = _raised(b)
    b.abort()

    # abort() from another thread wakes rank 0's call at once, on pycomm's
    # worker or in the calling thread; the group's timeout (30 s) is far off.
    for async_op in (True, False):
        d = _group(store, f"abort/{async_op}/", rank, 30)
        d.allreduce([torch.ones(1)]).wait()  # set up and in step
        if rank == 0:
            # Rank 1 is done with that call too: the abort must not reach it mid-call.
            store.wait([f"in_step/{async_op}"])
            thread, seen = _blocked_all_reduce(d, async_op)
            aborted = time.monotonic()
            d.abort()
            thread.join(timeout=20)
            res[f"abort async_op={async_op}"] = (not thread.is_alive(), type(seen.get("error")).__name__,
                                                 seen.get("at", aborted + 99) - aborted)
            store.set(f"aborted/{async_op}", "1")
        else:
            store.set(f"in_step/{async_op}", "1")
            store.wait([f"aborted/{async_op}"])
            # Told through the session: rank 1's backend is broken too.
            res[f"peer sees abort {async_op}"] = (_c10d_error(d), _raised(d))
            d.abort()
    return res


def test_a_backend_without_a_default_group_takes_torchfts_calls():
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, WORLD, is_master=True, wait_for_workers=False)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, store.port, out)) for r in range(WORLD)]
    for p in procs:
        p.start()
    try:
        results = dict(out.get(timeout=120) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=20)
            if p.is_alive():
                p.kill()
    import torch

    broken = ("ErrorType.COMM_ERROR" if hasattr(torch._C._distributed_c10d.Backend, "get_error")
              else "unbound")
    for rank in range(WORLD):
        res = results[rank]
        assert isinstance(res, dict), (rank, res, results)  # else the rank's traceback
        assert res["default_group"] is False
        assert res["sum"] and res["name"] == "pycomm"
        # pycomm implements no c10d reconfigure(): a new membership is a new ProcessGroup.
        expected = False if res["torch_has_reconfigure"] else "absent"
        assert res["supports_reconfigure"] == expected, res["supports_reconfigure"]
        assert res["gathered"] == [[0.0] * 3, [1.0] * 3]
        assert res["same_prefix"] == [True] * 3
        assert res["error_type"] == broken, res
        assert res["raised"].startswith("CommTimeout") and "0.5 s" in res["raised"], res["raised"]
    elapsed, message = results[0]["timeout"]
    assert 0.45 <= elapsed < 5, (elapsed, message)  # the new 0.5 s, not the 20 s it was made with
    assert "Timed out after 0.5 s" in message and "rank 1" in message, message
    for async_op in (True, False):
        woke, raised, after = results[0][f"abort async_op={async_op}"]
        assert woke and raised in ("CommError", "CommTimeout"), results[0]
        assert after < 2.0, f"abort woke the call {after:.2f} s later (async_op={async_op})"
        # An abort reads as CommTimeout on the peers (pycomm's errors.h), naming who aborted.
        c10d_says, raised = results[1][f"peer sees abort {async_op}"]
        assert c10d_says == broken and raised.startswith("CommTimeout"), (c10d_says, raised)
        assert "aborted by rank 0" in raised, raised
