"""Faults through the "pycomm" torch.distributed backend: a mismatch raises
CollectiveMismatch on every rank; a killed rank makes every waiting rank raise
CommTimeout naming it within ~2 s whatever the timeout; a stalled rank makes
the others raise CommTimeout within the timeout (PYCOMM_TIMEOUT, or the
group's); nothing stays in /dev/shm after any of them.

The non-lethal faults (mismatch, stall) share one 3-rank world of their own,
each in a fresh backend group; each killed rank breaks a world of its own.
Times are time.monotonic() (CLOCK_MONOTONIC: one clock for all processes of a
host) with generous slack: 2 cores are shared with other work.
"""
import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

from pycomm.torch_compat import all_gather_single

from conftest import segments_of
from support.dying_rank import die_now, die_soon, run_with_a_death
from support.process_world import TEST_BACKEND, ProcessWorld, WorldPool, validating_on_gloo

pytestmark = [pytest.mark.ranks,
              pytest.mark.skipif(validating_on_gloo(),
                                 reason="gloo detects no mismatch and has no peer watch")]

WORLD = 3
SLACK = 3.0  # seconds: a loaded 2-core host wakes a waiting rank late
DEATH_BOUND = 2.0  # a dead peer is noticed within this, independent of the timeout


def backend_group(**kwargs):
    """A fresh backend group over every rank (collective: every rank calls it)."""
    return dist.new_group(backend="pycomm", **kwargs)


def outcome(fn):
    """(exception type name, message, seconds) of calling fn(); type None if it returned."""
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - every kind is reported to the test
        import pycomm

        kind = ("CollectiveMismatch" if isinstance(e, pycomm.CollectiveMismatch) else
                "CommTimeout" if isinstance(e, pycomm.CommTimeout) else
                f"CommError:{type(e).__name__}" if isinstance(e, pycomm.CommError) else
                type(e).__name__)
        return kind, str(e), time.monotonic() - start
    return None, "", time.monotonic() - start


# ---------------------------------------------------------------------------
# Mismatches.

def mismatch_calls(kind, rank, odd):
    """What each rank calls: rank `odd` differs from the others in `kind`."""
    me = rank == odd
    if kind == "count":
        t = torch.ones(1000 + (1 if me else 0))
        return lambda g, a: dist.all_reduce(t, group=g, async_op=a)
    if kind == "count-small":
        t = torch.ones(2 if me else 1)
        return lambda g, a: dist.all_reduce(t, group=g, async_op=a)
    if kind == "dtype":
        t = torch.ones(1000, dtype=torch.float64 if me else torch.float32)
        return lambda g, a: dist.all_reduce(t, group=g, async_op=a)
    if kind == "op":
        t = torch.ones(1000)
        op = dist.ReduceOp.MAX if me else dist.ReduceOp.SUM
        return lambda g, a: dist.all_reduce(t, op=op, group=g, async_op=a)
    if kind == "root":
        t = torch.ones(1000)
        src = 1 if me else 0
        return lambda g, a: dist.broadcast(t, src=src, group=g, async_op=a)
    if kind == "reduce-root":
        t = torch.ones(1000)
        dst = 2 if me else 0
        return lambda g, a: dist.reduce(t, dst=dst, group=g, async_op=a)
    if kind == "collective":
        t = torch.ones(1000)
        if me:
            return lambda g, a: dist.broadcast(t, src=0, group=g, async_op=a)
        return lambda g, a: dist.all_reduce(t, group=g, async_op=a)
    if kind == "all_gather-count":
        x = torch.ones(6 if me else 5)
        out = torch.zeros(x.numel() * WORLD)
        return lambda g, a: all_gather_single(out, x, group=g, async_op=a)
    raise ValueError(kind)


MISMATCHES = ["count", "count-small", "dtype", "op", "root", "reduce-root", "collective",
              "all_gather-count"]


def mismatch_case(kind, odd, use_async):
    rank = dist.get_rank()
    group = backend_group(timeout=datetime.timedelta(seconds=60))  # a mismatch is no timeout
    call = mismatch_calls(kind, rank, odd)
    if use_async:
        def run():
            work = call(group, True)
            work.wait()
    else:
        def run():
            call(group, False)
    return outcome(run)


@pytest.fixture(scope="module")
def fault_world():
    """A 3-rank world for the faults that leave every rank alive."""
    pool = WorldPool(lambda n: ProcessWorld(n, backend=TEST_BACKEND))
    yield lambda: pool(WORLD)
    pids = pool.pids()
    pool.close()
    assert not segments_of(pids), f"left in /dev/shm: {segments_of(pids)}"


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", MISMATCHES)
def test_mismatch_raises_on_every_rank(fault_world, kind, use_async):
    world = fault_world()
    odd = MISMATCHES.index(kind) % WORLD  # the odd rank out varies
    results = world.run(mismatch_case, kind, odd, use_async, timeout=180)
    for rank, (exc, msg, seconds) in enumerate(results):
        assert exc == "CollectiveMismatch", \
            f"{kind} (rank {odd} differs): rank {rank} got {exc or 'no error'}: {msg}"
        assert seconds < 10.0, f"{kind}: rank {rank} raised after {seconds:.1f} s"
    print(f"[fault] mismatch {kind} ({'async' if use_async else 'sync'}): "
          f"{max(r[2] for r in results) * 1e3:.0f} ms; rank 0: {results[0][1].splitlines()[0]}")
    assert not segments_of(world.pids), f"left in /dev/shm: {segments_of(world.pids)}"


# ---------------------------------------------------------------------------
# A new timeout: every rank's waits share the deadline agreed at set-up, so
# ProcessGroup.set_timeout keeps it and warns on stderr (TORCH_WARN), where
# c10d's default raises up to torch 2.13.

def set_timeout_case():
    group = backend_group(timeout=datetime.timedelta(seconds=60))
    raised = outcome(lambda: group.set_timeout(datetime.timedelta(seconds=7)))
    t = torch.full((4,), float(dist.get_rank()))
    dist.all_reduce(t, group=group)
    return raised[:2], t.tolist()


def test_set_timeout_keeps_the_group_working(fault_world):
    for rank, (raised, values) in enumerate(fault_world().run(set_timeout_case, timeout=60)):
        assert raised == (None, ""), f"rank {rank}: set_timeout raised {raised}"
        assert values == [float(sum(range(WORLD)))] * 4, f"rank {rank}: {values}"


# ---------------------------------------------------------------------------
# A stalled rank.

STALL_TIMEOUT = 1.0


def stall_case(how, use_async):
    """Rank 2 sleeps well past the timeout before joining; ranks 0 and 1 must
    raise CommTimeout naming it within the timeout (plus slack). how: "env"
    (PYCOMM_TIMEOUT, no group timeout) or "group" (the group's timeout)."""
    rank = dist.get_rank()
    saved = os.environ.pop("PYCOMM_TIMEOUT", None)
    try:
        if how == "env":
            os.environ["PYCOMM_TIMEOUT"] = str(STALL_TIMEOUT)
            group = backend_group()
        else:
            group = backend_group(timeout=datetime.timedelta(seconds=STALL_TIMEOUT))
    finally:
        os.environ.pop("PYCOMM_TIMEOUT", None)
        if saved is not None:
            os.environ["PYCOMM_TIMEOUT"] = saved
    t = torch.ones(1000)
    warm = outcome(lambda: dist.all_reduce(t, group=group))  # the group works
    # c10d's view of the backend's health: Backend.get_error, bound in Python
    # from torch 2.14 on (before, only c10d's C++ calls it).
    backend = group._get_backend(torch.device("cpu"))
    health = (lambda: backend.get_error().name) if hasattr(backend, "get_error") else (lambda: None)
    healthy = health()
    dist.barrier()  # (the default group) start together
    if rank == 2:
        time.sleep(STALL_TIMEOUT + SLACK + 2.0)
    if use_async:
        result = outcome(lambda: dist.all_reduce(t, group=group, async_op=True).wait())
    else:
        result = outcome(lambda: dist.all_reduce(t, group=group))
    return warm, result, (healthy, health())


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("how", ["env", "group"])
def test_stalled_rank_times_out(fault_world, how, use_async):
    world = fault_world()
    results = world.run(stall_case, how, use_async, timeout=180)
    for rank, (warm, (exc, msg, seconds), errors) in enumerate(results):
        assert warm[0] is None, f"rank {rank}: the group failed before the stall: {warm}"
        bound = hasattr(torch._C._distributed_c10d.Backend, "get_error")
        assert errors == (("SUCCESS", "COMM_ERROR") if bound else (None, None)), \
            f"rank {rank}: get_error before and after the stall: {errors}"
        if rank == 2:
            # The late rank must not hang: its peers have given up.
            assert exc is not None and exc.startswith(("Comm", "CollectiveMismatch")), \
                f"the stalled rank got {exc or 'no error'} after {seconds:.1f} s: {msg}"
            assert seconds < STALL_TIMEOUT + SLACK, f"the stalled rank waited {seconds:.1f} s"
            continue
        assert exc == "CommTimeout", f"rank {rank} got {exc or 'no error'}: {msg}"
        assert "rank 2" in msg, f"rank {rank}: the message does not name rank 2: {msg}"
        assert STALL_TIMEOUT * 0.9 <= seconds < STALL_TIMEOUT + SLACK, \
            f"rank {rank} raised after {seconds:.2f} s (timeout {STALL_TIMEOUT} s)"
        print(f"[fault] stall ({how}, {'async' if use_async else 'sync'}): rank {rank} raised "
              f"CommTimeout after {seconds:.2f} s: {msg.splitlines()[0]}")
    assert not segments_of(world.pids), f"left in /dev/shm: {segments_of(world.pids)}"


# ---------------------------------------------------------------------------
# A killed rank.

VICTIM = 1


def die_during(when, stamp_path):
    """Survivors run collectives until an error; the victim SIGKILLs itself
    'mid-large' / 'mid-small' (while collectives run), 'mid-single-copy' (while
    its peers read its tensor straight: large all-gathers, which take the single
    copy where the group has it) or 'while-waiting' (the survivors are already
    blocked in a collective it never joins)."""
    rank = dist.get_rank()
    count = 8 << 20 if when in ("mid-large", "mid-single-copy") else 1000
    t = torch.ones(count)
    gathered = torch.empty(count * dist.get_world_size()) if when == "mid-single-copy" else None
    dist.all_reduce(t)  # every rank is up
    if rank == VICTIM:
        if when == "while-waiting":
            time.sleep(0.5)
            die_now(stamp_path)
        die_soon(stamp_path, 0.3)
        while True:
            if when == "mid-large":
                dist.all_reduce(t)
            elif when == "mid-single-copy":
                dist.all_gather_into_tensor(gathered, t)
            else:
                dist.all_reduce(t)
                dist.broadcast(t, src=0)
    calls, error = 0, None
    try:
        while True:
            if when == "mid-large":
                dist.all_reduce(t)
            elif when == "mid-single-copy":
                dist.all_gather_into_tensor(gathered, t)
            elif when == "mid-small":
                dist.all_reduce(t)
                dist.broadcast(t, src=0)
            else:
                dist.all_reduce(t)  # the victim never comes
            calls += 1
    except Exception as e:  # noqa: BLE001
        import pycomm

        error = (type(e).__name__, isinstance(e, pycomm.CommTimeout), str(e))
    return error, time.monotonic(), calls


@pytest.mark.parametrize("when", ["mid-large", "mid-small", "mid-single-copy", "while-waiting"])
def test_killed_rank_is_named_within_two_seconds(tmp_path, when):
    # A 60 s timeout: only the peer watch can be this quick.
    world = ProcessWorld(WORLD, comm_timeout=60.0, backend=TEST_BACKEND)
    results, died = run_with_a_death(world, die_during, when, dying_rank=VICTIM,
                                     stamp_path=tmp_path / "death")
    for rank, (error, seen, calls) in results.items():
        assert error is not None, f"rank {rank}: no error"
        name, is_timeout, msg = error
        assert is_timeout, f"rank {rank}: expected CommTimeout, got {name}: {msg}"
        assert f"rank {VICTIM}" in msg, f"rank {rank}: the message does not name rank {VICTIM}: {msg}"
        assert seen - died < DEATH_BOUND + SLACK, f"rank {rank} noticed after {seen - died:.2f} s"
        print(f"[fault] rank killed {when}: rank {rank} raised CommTimeout "
              f"{(seen - died) * 1e3:.0f} ms after the kill ({calls} collectives before): "
              f"{msg.splitlines()[0]}")
    assert not segments_of(world.pids), f"left in /dev/shm: {segments_of(world.pids)}"
