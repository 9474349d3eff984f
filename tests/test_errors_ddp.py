"""pycomm's errors through DDP: DDP re-raises an error of a comm hook or of a
backend as its own RuntimeError, so `except pycomm.CommError` misses it. Its
text begins with pycomm's class name and names the rank, and
pycomm.CommError.matches (and each subclass's) recognises it.

The fault: between forward and backward, rank 1 queues one stray all-reduce on
the communicator DDP uses. Rank 0's first gradient bucket meets it: both raise
CollectiveMismatch. Rank 1's own bucket comes next and waits for a rank 0 that
has left the step, so rank 1's DDP raises CommTimeout at the group's short
timeout. Each case runs in a group of its own, so the shared world's default
communicator stays healthy.
"""
import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import pycomm
from support.process_world import ProcessWorld

pytestmark = pytest.mark.ranks

TIMEOUT_S = 2.0
SLACK_S = 3.0  # a loaded 2-core host wakes a waiting rank late


def backward_error(out):
    """What DDP's backward of `out` raises (None if nothing), and the seconds it took."""
    start = time.monotonic()
    try:
        out.sum().backward()
    except Exception as e:  # noqa: BLE001 - what DDP raises is the point
        return e, time.monotonic() - start
    return None, time.monotonic() - start


def ddp_error_case(path):
    rank = dist.get_rank()
    torch.manual_seed(0)
    if path == "hook":
        group = dist.new_group(backend="gloo")
        pycomm.init(group, timeout=TIMEOUT_S)
        model = DDP(torch.nn.Linear(8, 4), process_group=group)
        model.register_comm_hook(pycomm.RingState(group=group), pycomm.ring_hook)

        def stray():
            return pycomm.all_reduce(torch.ones(3), group=group, async_op=True)
    else:
        group = dist.new_group(backend="pycomm", timeout=datetime.timedelta(seconds=TIMEOUT_S))
        model = DDP(torch.nn.Linear(8, 4), process_group=group)

        def stray():
            return dist.all_reduce(torch.ones(3), group=group, async_op=True)

    model(torch.randn(2, 8)).sum().backward()  # a good step first
    out = model(torch.randn(2, 8))
    work = stray() if rank == 1 else None
    caught, elapsed = backward_error(out)
    if work is not None:
        try:
            work.wait()
        except pycomm.CommError:
            pass
    result = {
        "type": type(caught).__name__ if caught is not None else None,
        "is_comm_error": isinstance(caught, pycomm.CommError),
        "message": str(caught) if caught is not None else "",
        "CommError.matches": pycomm.CommError.matches(caught) if caught is not None else None,
        "CommTimeout.matches": pycomm.CommTimeout.matches(caught) if caught is not None else None,
        "CollectiveMismatch.matches":
            pycomm.CollectiveMismatch.matches(caught) if caught is not None else None,
        "elapsed": elapsed,
    }
    if path == "hook":
        pycomm.destroy(group)
    dist.destroy_process_group(group)
    return result


@pytest.mark.parametrize("path", ["hook", "backend"])
def test_ddp_errors_are_recognisable(worlds, path):
    results = worlds(2).run(ddp_error_case, path, timeout=120)
    expected = {0: "pycomm.CollectiveMismatch", 1: "pycomm.CommTimeout"}
    for rank, r in enumerate(results):
        msg = r["message"]
        print(f"[ddp error] {path}: rank {rank}: {r['type']} after {r['elapsed']:.2f} s: "
              f"{msg.splitlines()[0] if msg else ''}")
        assert r["type"] is not None, f"rank {rank}: DDP raised nothing"
        # What DDP raises is not pycomm's class: the reason for matches().
        assert not r["is_comm_error"], f"rank {rank}: DDP now keeps the type; simplify the docs"
        assert msg.startswith(f"{expected[rank]}: rank {rank}:") or \
            msg.startswith(f"{expected[rank]}: collective #"), f"rank {rank}: {msg!r}"
        assert r["CommError.matches"], f"rank {rank}: {msg!r}"
        kind = expected[rank].split(".")[1]
        assert r[f"{kind}.matches"], f"rank {rank}: {msg!r}"
        other = "CommTimeout" if kind == "CollectiveMismatch" else "CollectiveMismatch"
        assert not r[f"{other}.matches"], f"rank {rank}: {msg!r}"
        assert r["elapsed"] < TIMEOUT_S + 10


@pytest.mark.fast
def test_matches_reads_types_and_text():
    timeout = pycomm.CommTimeout("rank 1: all_reduce #3: Timed out after 2 s")
    assert pycomm.CommError.matches(timeout) and pycomm.CommTimeout.matches(timeout)
    assert not pycomm.CollectiveMismatch.matches(timeout)
    ddp_style = RuntimeError("pycomm.CollectiveMismatch: collective #5 does not match across ranks")
    assert pycomm.CommError.matches(ddp_style) and pycomm.CollectiveMismatch.matches(ddp_style)
    assert not pycomm.CommTimeout.matches(ddp_style)
    assert pycomm.CommError.matches(dist.DistBackendError("pycomm.CommTimeout: rank 0: x"))
    assert not pycomm.CommError.matches(RuntimeError("gloo: connection closed by peer"))
    assert not pycomm.CommError.matches(ValueError("pycomm.CommError: not a RuntimeError"))
    try:
        try:
            raise timeout
        except pycomm.CommError as e:
            raise RuntimeError("wrapped") from e
    except RuntimeError as wrapped:
        assert pycomm.CommTimeout.matches(wrapped)


def stall_before_backward_case(stall_s):
    """Issue 30: DDP on a gloo group whose timeout is short, with ring_hook and no
    pycomm.init: the hook's communicator takes the group's timeout, so the rank
    that waits for a stalled peer raises at that timeout (it waited for the
    direct API's 300 s default before). Then what each entry point takes."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    model.register_comm_hook(None, pycomm.ring_hook)
    model(torch.randn(2, 8)).sum().backward()  # a good step: the hook makes its communicator
    timeouts = {"ring_hook": pycomm.get_communicator().timeout_s}

    def group(seconds):
        return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=seconds))

    groups = [group(3), group(5), group(5),
              dist.new_group(backend="pycomm", timeout=datetime.timedelta(seconds=4))]
    pycomm.allreduce_gradients(model.parameters(), group=groups[0])
    timeouts["allreduce_gradients"] = pycomm.get_communicator(groups[0]).timeout_s
    os.environ["PYCOMM_TIMEOUT"] = "7"
    try:
        pycomm.all_reduce(torch.ones(1), group=groups[1])
    finally:
        del os.environ["PYCOMM_TIMEOUT"]
    timeouts["PYCOMM_TIMEOUT over the group's"] = pycomm.get_communicator(groups[1]).timeout_s
    timeouts["argument over the group's"] = pycomm.init(groups[2], timeout=9).timeout_s
    pycomm.all_reduce(torch.ones(1), group=groups[3])
    timeouts["direct API on a pycomm group"] = pycomm.get_communicator(groups[3]).timeout_s
    for g in groups:
        pycomm.destroy(g)
        dist.destroy_process_group(g)

    out = model(torch.randn(2, 8))
    if rank == 1:
        time.sleep(stall_s)  # stalls before backward
    caught, elapsed = backward_error(out)
    return {"timeouts": timeouts, "elapsed": elapsed,
            "CommTimeout.matches": caught is not None and pycomm.CommTimeout.matches(caught),
            "message": str(caught).splitlines()[0] if caught is not None else ""}


def test_ring_hook_takes_the_group_timeout():
    """A 2-rank gloo world whose default group times out after 2 s; rank 1 stalls
    3 s before backward. Rank 0's hook raises CommTimeout naming rank 1 within
    the group's timeout plus a small bound, and rank 1 learns of the abort."""
    world = ProcessWorld(2, comm_timeout=TIMEOUT_S, backend="gloo", pycomm_init=False)
    try:
        results = world.run(stall_before_backward_case, TIMEOUT_S + 1.0, timeout=120)
    finally:
        world.close()
    for rank, r in enumerate(results):
        print(f"[hook timeout] rank {rank}: after {r['elapsed']:.2f} s: {r['message']}")
        assert r["timeouts"] == {"ring_hook": TIMEOUT_S, "allreduce_gradients": 3.0,
                                 "PYCOMM_TIMEOUT over the group's": 7.0,
                                 "argument over the group's": 9.0,
                                 "direct API on a pycomm group": 4.0}, r["timeouts"]
        assert r["CommTimeout.matches"], f"rank {rank}: {r['message']!r}"
    waiting = results[0]
    assert "Timed out after 2 s" in waiting["message"] and "rank 1" in waiting["message"], waiting
    assert TIMEOUT_S * 0.9 <= waiting["elapsed"] < TIMEOUT_S + SLACK_S, waiting["elapsed"]
    assert "aborted by rank 0" in results[1]["message"], results[1]
