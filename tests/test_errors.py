"""Bad calls fail at once with a clear error, and leave the tensor untouched."""
import re
import time

import pytest
import torch
import torch.distributed as dist

import pycomm

pytestmark = pytest.mark.ranks


def expect_error(fn, exc_type, pattern):
    try:
        fn()
    except exc_type as e:
        if not re.search(pattern, str(e)):
            return f"{exc_type.__name__} raised, but {str(e)!r} does not match {pattern!r}"
        return None
    except BaseException as e:  # noqa: BLE001
        return f"expected {exc_type.__name__}, got {type(e).__name__}: {e}"
    return f"expected {exc_type.__name__}, nothing raised"


def bad_argument_cases():
    """Every rank makes the same bad calls; none may reach the other ranks."""
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    cases = {
        # Written in place: no two elements may share memory (any other layout is staged).
        "expanded view": (lambda t: pycomm.all_reduce(torch.zeros(3).expand(4, 3)), ValueError,
                          r"tensor: is written, but some of its elements share memory"),
        "sparse": (lambda t: pycomm.all_reduce(t.to_sparse()), TypeError, r"tensor: sparse"),
        "meta device": (lambda t: pycomm.all_reduce(torch.empty(3, device="meta")), TypeError,
                        r"tensor: expected a CPU (or CUDA )?tensor"),
        # Every dtype with arithmetic reduces (bool, int16, complex too); these do not.
        "complex max": (lambda t: pycomm.all_reduce(torch.zeros(3, dtype=torch.complex64), op="max"),
                        ValueError, r"op: 'max' is not defined for complex tensors"),
        "float8": (lambda t: pycomm.all_reduce(torch.zeros(3, dtype=torch.float8_e4m3fn)), TypeError,
                   r"tensor: torch.float8_e4m3fn tensors have no arithmetic"),
        "bool avg": (lambda t: pycomm.all_reduce(torch.zeros(3, dtype=torch.bool), op="avg"), ValueError,
                     r"op: 'avg' is not defined for integer and bool tensors"),
        "not a tensor": (lambda t: pycomm.all_reduce([1.0, 2.0]), TypeError, r"tensor: expected a torch.Tensor"),
        "unknown op": (lambda t: pycomm.all_reduce(t, op="mean"), ValueError, r"op: unknown reduction 'mean'"),
        "bitwise op": (lambda t: pycomm.all_reduce(t, op=dist.ReduceOp.BAND), ValueError, r"op: unsupported"),
        "unknown algorithm": (lambda t: pycomm.all_reduce(t, algorithm="tree"), ValueError,
                              r"algorithm: unknown algorithm 'tree'"),
        "restore_on_failure not a bool": (lambda t: pycomm.all_reduce(t, restore_on_failure="x"),
                                          TypeError, r"restore_on_failure: expected True, False or None"),
        "algorithm not a string": (lambda t: pycomm.all_reduce(t, algorithm=3), ValueError, r"algorithm:"),
        "integer avg": (lambda t: pycomm.all_reduce(torch.ones(3, dtype=torch.int32), op="avg"), ValueError,
                        r"op: 'avg' is not defined for integer"),
    }
    problems = []
    for name, (call, exc, pattern) in cases.items():
        t = base.clone()
        problem = expect_error(lambda: call(t), exc, pattern)
        if problem:
            problems.append(f"{name}: {problem}")
        if not torch.equal(t, base):
            problems.append(f"{name}: the tensor changed")
    # The communicator is still in step: a good call works after all that.
    t = torch.ones(5)
    pycomm.all_reduce(t)
    if t[0].item() != dist.get_world_size():
        problems.append("a valid all_reduce after the bad calls returned a wrong value")
    return problems


def test_bad_arguments_raise_before_anything_is_sent(worlds):
    for rank, problems in enumerate(worlds(2).run(bad_argument_cases)):
        assert not problems, f"rank {rank}: {problems}"


def strided_cases():
    """pycomm.all_reduce takes any strided layout, as dist.all_reduce does: a
    transposed view, a slice with steps, a conj view; only the view's elements change."""
    world, rank = dist.get_world_size(), dist.get_rank()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1
    problems = []
    t = base * (rank + 1)
    pycomm.all_reduce(t.t())
    if not torch.equal(t, base * sum(range(1, world + 1))):
        problems.append(f"transposed: {t.tolist()}")
    t = base * (rank + 1)
    view = t[:, ::2]
    pycomm.all_reduce(view, op="max")
    want = base * (rank + 1)
    want[:, ::2] = base[:, ::2] * world
    if not torch.equal(t, want):
        problems.append(f"slice with steps: {t.tolist()}")
    c = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) * (rank + 1)
    pycomm.all_reduce(c.conj())  # the conj view's values, reduced and written back through it
    if not torch.equal(c.resolve_conj(), torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) *
                       sum(range(1, world + 1))):
        problems.append(f"conj view: {c.tolist()}")
    return problems


def test_any_strided_layout_is_reduced_through_its_view(worlds):
    for rank, problems in enumerate(worlds(2).run(strided_cases)):
        assert not problems, f"rank {rank}: {problems}"


def mismatch_case(kind):
    rank = dist.get_rank()
    t = torch.full((100,), float(rank + 1))
    original = t.clone()
    if kind == "count":
        t = torch.full((100 + 50 * rank,), float(rank + 1))
        original = t.clone()
        call = lambda: pycomm.all_reduce(t)  # noqa: E731
    elif kind == "count-ring-vs-direct":
        t = torch.full((10 if rank == 0 else 1_000_000,), 1.0)
        original = t.clone()
        call = lambda: pycomm.all_reduce(t)  # noqa: E731
    elif kind == "dtype":
        t = t.to(torch.float64) if rank == 1 else t
        original = t.clone()
        call = lambda: pycomm.all_reduce(t)  # noqa: E731
    elif kind == "op":
        call = lambda: pycomm.all_reduce(t, op="max" if rank == 1 else "sum")  # noqa: E731
    elif kind == "collective":
        call = (lambda: pycomm.barrier()) if rank == 1 else (lambda: pycomm.all_reduce(t))  # noqa: E731
    start = time.monotonic()
    try:
        call()
        outcome = "no error"
    except pycomm.CollectiveMismatch as e:
        outcome = str(e)
    elapsed = time.monotonic() - start
    unchanged = torch.equal(t, original)
    # Still usable afterwards.
    ok = torch.ones(3)
    pycomm.all_reduce(ok)
    return outcome, unchanged, elapsed, ok[0].item()


@pytest.mark.parametrize("kind,what", [("count", "count differs on rank 1"),
                                       ("count-ring-vs-direct", "count differs on rank 0"),  # rank 0 is the odd one
                                       ("dtype", "dtype differs on rank 1"),
                                       ("op", "op differs on rank 1"),
                                       ("collective", "collective differs on rank 1")])
def test_mismatch_raises_on_every_rank(worlds, kind, what):
    world = worlds(3)
    results = world.run(mismatch_case, kind)
    for rank, (outcome, unchanged, elapsed, ok) in enumerate(results):
        assert what in outcome, f"rank {rank}: {outcome}"
        assert "rank 0 called" in outcome and "rank 2 called" in outcome
        assert unchanged, f"rank {rank}: input changed"
        assert elapsed < 5.0
        print(f"[fault] mismatch ({kind}): rank {rank} raised after {elapsed * 1e3:.2f} ms")
        assert ok == 3.0
    assert len({r[0] for r in results}) == 1, "every rank reports the same mismatch"


def absent_rank_case(timeout_s, entered_one):
    """A fresh communicator with a short timeout; rank 1 never calls (after one
    all-reduce of every rank, with entered_one)."""
    comm = pycomm.Communicator(timeout=timeout_s)
    rank = dist.get_rank()
    if entered_one:
        comm.all_reduce(torch.ones(3))
    t = torch.full((1000,), float(rank))
    outcome, elapsed = "no error", 0.0
    if rank != 1:
        start = time.monotonic()
        try:
            comm.all_reduce(t)
        except pycomm.CommTimeout as e:
            outcome = str(e)
        elapsed = time.monotonic() - start
    dist.barrier()  # (gloo) rank 1 comes back only now
    late = "no error"
    if rank == 1:
        try:
            comm.all_reduce(t)
        except pycomm.CommTimeout as e:
            late = str(e)
    comm.close()
    return outcome, elapsed, late, bool((t == rank).all())


@pytest.mark.parametrize("entered_one", [False, True])
def test_absent_rank_times_out_naming_it(worlds, entered_one):
    timeout_s = 1.0
    results = worlds(3).run(absent_rank_case, timeout_s, entered_one)
    # What the absent rank did, in words: #0 read as "no collective yet" to no one.
    said = ("rank 1 (the last it entered is #1)" if entered_one else
            "rank 1 (it has entered no collective on this communicator yet)")
    for rank in (0, 2):
        outcome, elapsed, _, unchanged = results[rank]
        assert "rank 1" in outcome and "Timed out after" in outcome, outcome
        assert f"still waiting for {said} to enter" in outcome, outcome
        assert timeout_s * 0.95 <= elapsed <= timeout_s + 2.0, elapsed  # 2 shared cores: late
        print(f"[fault] absent rank: rank {rank} raised CommTimeout after {elapsed:.3f} s "
              f"(timeout {timeout_s} s)")
        assert unchanged
    late = results[1][2]
    assert "aborted by rank" in late, late
    assert results[1][3]


@pytest.mark.fast
def test_peer_died_is_a_timeout_and_a_comm_error():
    """pycomm.PeerDied (a peer's process exited) under CommTimeout, so `except
    pycomm.CommTimeout` written before it still catches a dead peer; matches() reads its
    text after DDP wrapped it."""
    assert issubclass(pycomm.PeerDied, pycomm.CommTimeout)
    assert issubclass(pycomm.PeerDied, pycomm.CommError)
    assert not issubclass(pycomm.PeerDied, pycomm.CollectiveMismatch)
    assert pycomm.PeerDied.__module__ == "pycomm" and "PeerDied" in pycomm.__all__
    died = pycomm.PeerDied("rank 0: rank 1 (pid 7) exited during all_reduce #3")
    try:
        raise died
    except pycomm.CommTimeout as e:
        assert e is died
    wrapped = RuntimeError("pycomm.PeerDied: rank 0: rank 1 (pid 7) exited during all_reduce #3")
    for cls in (pycomm.CommError, pycomm.CommTimeout, pycomm.PeerDied):
        assert cls.matches(wrapped) and cls.matches(died)
    assert not pycomm.CollectiveMismatch.matches(wrapped)
    # A plain timeout is not a death.
    assert not pycomm.PeerDied.matches(RuntimeError("pycomm.CommTimeout: rank 0: Timed out"))


@pytest.mark.fast
def test_init_requires_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group exists in this process")
    with pytest.raises(RuntimeError, match="pycomm.init: call torch.distributed.init_process_group"):
        pycomm.init()
    # The error names the call the user made, not the set-up behind it.
    with pytest.raises(RuntimeError, match="pycomm.all_reduce: call torch.distributed.init_process_group"):
        pycomm.all_reduce(torch.ones(2))


TIMEOUT_RANGE = "expected 0.001 to 1000000000 s"


@pytest.mark.fast
def test_bad_timeout_is_rejected(monkeypatch):
    """A timeout of nan never expires, inf neither, and 0 or less has passed already: each is
    refused, from the argument, from PYCOMM_TIMEOUT and from the group's own timeout, naming
    where it came from and the range."""
    import datetime
    import math

    from pycomm.config import timeout_seconds

    monkeypatch.delenv("PYCOMM_TIMEOUT", raising=False)
    for bad in ("10", True):
        with pytest.raises(ValueError, match=r"^timeout: expected a positive number of seconds"):
            timeout_seconds(bad)
    for bad, said in [(0, "0"), (-1, "-1"), (math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"),
                      (1e-6, "1e-06"), (10**400, "inf"), (datetime.timedelta(0), "0"),
                      (datetime.timedelta(days=36500), "3153600000")]:
        with pytest.raises(ValueError, match=rf"^timeout: {TIMEOUT_RANGE}, got {said} s$"):
            timeout_seconds(bad)
    for raw in ("nan", "inf", "0", "-5"):
        monkeypatch.setenv("PYCOMM_TIMEOUT", raw)
        with pytest.raises(ValueError, match=rf"^PYCOMM_TIMEOUT: {TIMEOUT_RANGE}, got {raw} s$"):
            timeout_seconds(None)
    monkeypatch.delenv("PYCOMM_TIMEOUT")
    with pytest.raises(ValueError, match=rf"^the group's timeout: {TIMEOUT_RANGE}, got 0 s$"):
        timeout_seconds(None, default=0.0)
    # A group's timeout of centuries is no deadline in any run: the longest serves.
    assert timeout_seconds(None, default=datetime.timedelta.max.total_seconds()) == 1e9
    assert timeout_seconds(2) == 2.0 and timeout_seconds(datetime.timedelta(minutes=1)) == 60.0
    assert timeout_seconds(0.001) == 0.001 and timeout_seconds(1e9) == 1e9


def _with_env(env: dict, make):
    """make() with the variables `env` set (restored after): "no error", or its ValueError's text."""
    from support.process_world import environ

    with environ(env):
        try:
            make().close()
            return "no error"
        except ValueError as e:
            return str(e)


def settings_attack_case():
    """Every rank is given a setting that crashed a group (a ring buffer of 2^52 KiB: its
    segment's size wrapped, and the first 256 KiB all-reduce wrote past it) or a timeout
    with no deadline. Each is refused on every rank, naming it, before a communicator is
    made; the rank's communicator runs on, and a new one works."""
    huge = {"PYCOMM_RING_BUFFER_KB": "4503599627370496"}
    said = {"PYCOMM_RING_BUFFER_KB": _with_env(huge, lambda: pycomm.Communicator(timeout=30))}
    for raw in ("nan", "inf", "0"):
        said[f"PYCOMM_TIMEOUT={raw}"] = _with_env({"PYCOMM_TIMEOUT": raw}, pycomm.Communicator)
        said[f"timeout={raw}"] = _with_env({}, lambda: pycomm.Communicator(timeout=float(raw)))
    world = dist.get_world_size()
    t = torch.ones(64 << 10)  # 256 KiB, through the ring's links
    pycomm.all_reduce(t, algorithm="ring")
    comm = pycomm.Communicator(timeout=30)
    u = torch.ones(64 << 10)
    comm.all_reduce(u, algorithm="ring")
    comm.close()
    return said, bool((t == world).all()), bool((u == world).all())


def test_settings_that_would_crash_a_group_are_refused_on_every_rank(worlds):
    for rank, (said, old_ok, new_ok) in enumerate(worlds(2).run(settings_attack_case)):
        assert said["PYCOMM_RING_BUFFER_KB"] == ("PYCOMM_RING_BUFFER_KB: expected 0.0625 to 4194304 KiB, "
                                                 "got 4503599627370496 KiB"), (rank, said)
        for raw in ("nan", "inf", "0"):
            assert said[f"PYCOMM_TIMEOUT={raw}"] == f"PYCOMM_TIMEOUT: {TIMEOUT_RANGE}, got {raw} s", (rank, said)
            assert said[f"timeout={raw}"] == f"timeout: {TIMEOUT_RANGE}, got {raw} s", (rank, said)
        assert old_ok and new_ok, f"rank {rank}: a 256 KiB ring all-reduce after the refusals was wrong"


def async_mismatch_case():
    t = torch.ones(10 + dist.get_rank())
    work = pycomm.all_reduce(t, async_op=True)
    seen = []
    for wait in (lambda: work.get_future().wait(), work.wait):
        try:
            wait()
            seen.append("no error")
        except pycomm.CollectiveMismatch:
            seen.append("CollectiveMismatch")
        except Exception as e:  # noqa: BLE001
            seen.append(type(e).__name__)
    return seen


def test_async_errors_keep_their_type(worlds):
    for seen in worlds(2).run(async_mismatch_case):
        assert seen == ["CollectiveMismatch", "CollectiveMismatch"]
