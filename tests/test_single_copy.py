"""The single copy (cross-memory attach, csrc/core/transport/cross_memory.h): the routing
table's rule, the group's agreement at set-up and its refusals, every collective and
point-to-point on both sides of the threshold in one group (values exact against gloo,
bitwise equal across ranks), the list forms read straight into each tensor, and what
pycomm doctor says. The core's grids run natively (csrc/core/tests/test_single_copy.cpp);
CI runs the backend's own grids again with the single copy forced on and off."""
import contextlib
import os

import pytest
import torch
import torch.distributed as dist

import pycomm
from pycomm import _C, routing
from support.process_world import reference_group

pytestmark = pytest.mark.ranks


def _route(collective, nbytes, single_copy=True, local_size=2, min_bytes=32 << 10, rooted_max=1 << 20, **kw):
    return routing.route(collective, local_size=local_size, count=nbytes // 4, single_copy=single_copy,
                         single_copy_min_bytes=min_bytes, single_copy_rooted_max_bytes=rooted_max,
                         direct_max_bytes=64 << 10, **kw).algorithm


@pytest.mark.fast
def test_the_table_takes_the_single_copy_where_it_was_measured_to_win():
    for c in ("all_gather", "reduce_scatter", "broadcast", "gather", "scatter"):
        assert _route(c, 1 << 20) == "single_copy"
        assert _route(c, 32 << 10) == "single_copy"          # the threshold is inclusive
        assert _route(c, 1 << 20, single_copy=False) != "single_copy"
        assert _route(c, 1 << 20, local_size=1) != "single_copy"  # nobody to read
        assert _route(c, 16 << 10) != "single_copy"
    # The rooted ones stage above their maximum, where the root's copy in overlaps the others'.
    for c in ("broadcast", "gather", "scatter"):
        assert _route(c, (1 << 20) + 4) == "direct"
        assert _route(c, 16 << 20, rooted_max=32 << 20) == "single_copy"
    assert _route("all_gather", 16 << 20) == "single_copy"
    # all_reduce takes it only where asked for (the ring was as fast); reduce keeps its
    # staging (read by the root alone, the reduction would fall to one core); all_to_all
    # stays pairwise, its large blocks going straight inside it.
    assert _route("all_reduce", 16 << 20) == "ring"
    assert _route("all_reduce", 32 << 10) == "direct"
    assert _route("reduce", 1 << 20) == "direct"
    assert _route("all_to_all", 1 << 20) == "pairwise"
    # Across hosts, the hierarchical plan's.
    assert routing.route("all_gather", hosts=2, local_size=2, count=1 << 20,
                         single_copy=True).plan == "hierarchical"
    assert "single_copy" in routing.ALGORITHMS and "single_copy" in routing.DESCRIPTIONS


SETTINGS = ("PYCOMM_SINGLE_COPY", "PYCOMM_SINGLE_COPY_MIN_KB", "PYCOMM_SINGLE_COPY_ROOTED_MAX_KB")


@pytest.fixture
def defaults(monkeypatch):
    """The settings' defaults, whatever the environment (CI runs this file forced on and off)."""
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.fast
def test_the_thresholds_are_read_from_their_variables(defaults):
    monkeypatch = defaults

    def algo(nbytes=128 << 10):
        return routing.route("broadcast", local_size=2, count=nbytes // 4, single_copy=True).algorithm
    assert algo() == "single_copy"
    assert algo(2 << 20) == "direct"
    monkeypatch.setenv("PYCOMM_SINGLE_COPY_ROOTED_MAX_KB", "4096")
    assert algo(2 << 20) == "single_copy"
    monkeypatch.setenv("PYCOMM_SINGLE_COPY_MIN_KB", "256")
    assert algo() == "direct"
    monkeypatch.setenv("PYCOMM_SINGLE_COPY", "sometimes")
    from pycomm import config
    with pytest.raises(ValueError, match="PYCOMM_SINGLE_COPY: expected one of auto, cma, off"):
        config.communicator_config(2, 1.0)


@pytest.mark.fast
def test_doctor_says_whether_and_why(defaults):
    from pycomm.tools import doctor

    info = doctor._single_copy()
    assert info["unavailable"] == ""  # this host: a child reads its parent
    line = "\n".join(doctor._single_copy_lines(info))
    assert line.startswith("single copy  auto: messages of 32 KiB a rank and more are copied once")
    off = dict(info, setting="off")
    assert "every message goes through the shared-memory staging" in doctor._single_copy_lines(off)[0]
    refused = dict(info, unavailable="process_vm_readv: Operation not permitted (a seccomp profile)")
    assert doctor._single_copy_lines(refused)[0] == (
        "single copy  unavailable here (process_vm_readv: Operation not permitted (a seccomp profile)): "
        "groups stage every message, copied in and out")
    assert "set-up fails" in doctor._single_copy_lines(dict(refused, setting="cma"))[0]
    yama = "\n".join(doctor._single_copy_lines(dict(info, yama_ptrace_scope=1)))
    assert "only groups of 2 ranks" in yama


# ---------------------------------------------------------------------------- in the ranks

@contextlib.contextmanager
def _setting(name, value):
    """PYCOMM_<name> = value in this rank while the block makes its groups."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _group_with(setting):
    """A new pycomm group whose ranks take `setting` (this rank's) for PYCOMM_SINGLE_COPY."""
    with _setting("PYCOMM_SINGLE_COPY", setting):
        return dist.new_group(backend="pycomm")


def _communicator(group):
    return _C.communicator_of(group._get_backend(torch.device("cpu")))


def agreement_case():
    rank = dist.get_rank()
    out = {}
    on = _group_with("auto")
    out["auto"] = (_communicator(on).single_copy, _communicator(on).single_copy_reason)
    off = _group_with("off" if rank == 1 else "auto")
    out["one_off"] = (_communicator(off).single_copy, _communicator(off).single_copy_reason)
    # cma where one rank is off: set-up fails on every rank, naming why.
    try:
        _group_with("off" if rank == 1 else "cma")
        out["cma"] = "made"
    except Exception as e:  # noqa: BLE001 - the test reads the message
        out["cma"] = f"{type(e).__name__}: {e}"
    # An explicit single_copy on a group that has none: refused by name, nothing moved.
    # (pycomm.all_reduce makes a communicator of its own over the group, with the same setting.)
    t = torch.ones(8)
    try:
        with _setting("PYCOMM_SINGLE_COPY", "off" if rank == 1 else "auto"):
            pycomm.all_reduce(t, algorithm="single_copy", group=off)
        out["asked"] = "ran"
    except ValueError as e:
        out["asked"] = str(e)
    out["asked_left"] = t.tolist()
    return out


def test_every_rank_agrees_and_one_rank_off_turns_it_off_for_all(worlds):
    results = worlds(3).run(agreement_case)
    for rank, r in enumerate(results):
        assert r["auto"] == (True, "every rank reads every peer's memory")
        assert r["one_off"] == (False, "rank 1 has PYCOMM_SINGLE_COPY=off")
        # cma on ranks 0 and 2, off on rank 1: set-up fails on every rank, rank 1 included.
        assert "PYCOMM_SINGLE_COPY=cma on rank 0, but the group cannot read its peers' memory: " \
               "rank 1 has PYCOMM_SINGLE_COPY=off" in r["cma"], r["cma"]
        assert "all_reduce runs single_copy only where the group's ranks read each other's memory, and " \
               "this group does not: rank 1 has PYCOMM_SINGLE_COPY=off" in r["asked"], r["asked"]
        assert r["asked_left"] == [1.0] * 8


SIZES = [1, 1000, 16383, 16384, 16385, 100003, 262144, 262145, (1 << 20) + 5]
# elements: 64 KiB of floats at 16384, 1 MiB (the rooted ones' maximum) at 262144


def collectives_case(threshold_kb):
    """Every collective through dist.* on a group whose threshold is `threshold_kb`, at sizes
    on both sides of it, against gloo's results (the reference group), bitwise."""
    # auto whatever the environment, for the group and the direct API's communicator over
    # it: this case is about the single copy (CI runs the backend's own grids with it off).
    with _setting("PYCOMM_SINGLE_COPY", "auto"):
        return _collectives(threshold_kb)


def _collectives(threshold_kb):
    with _setting("PYCOMM_SINGLE_COPY_MIN_KB", str(threshold_kb)):
        group = dist.new_group(backend="pycomm")
    ref = reference_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    bad = []

    def same(label, got, want):
        if not torch.equal(got, want):
            bad.append(label)

    def alike(label, collective, make_out, *args, **kwargs):
        """collective(out, *args) on pycomm's group and on gloo's, each into an output of its
        own from make_out(): the two must be bitwise the same. Returns gloo's."""
        got, want = make_out(), make_out()
        collective(got, *args, group=group, **kwargs)
        collective(want, *args, group=ref, **kwargs)
        same(label, got, want)
        return want

    def unset(count, dtype):
        """An output that holds no right answer by chance before the collective."""
        return lambda: torch.full((count,), 77, dtype=dtype)

    for n in SIZES:
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            g = torch.Generator().manual_seed(n * 7 + rank)
            x = torch.randint(-50, 50, (n,), generator=g).to(dtype)
            b = alike(f"all_reduce {n} {dtype}", dist.all_reduce, x.clone)
            y = x.clone()
            pycomm.all_reduce(y, group=group)  # the direct API, restore_on_failure by default
            same(f"pycomm.all_reduce {n} {dtype}", y, b)
            y = x.clone()
            pycomm.all_reduce(y, group=group, algorithm="single_copy")
            same(f"pycomm.all_reduce single_copy {n} {dtype}", y, b)
            for root in range(world):
                alike(f"broadcast {n} {dtype} root {root}", dist.broadcast, x.clone, root)
            want = alike(f"all_gather {n} {dtype}", dist.all_gather_into_tensor,
                         unset(n * world, dtype), x)
            outs = [torch.full((n,), 77, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, x, group=group)
            same(f"all_gather list {n} {dtype}", torch.cat(outs), want)
            big = torch.randint(-50, 50, (n * world,), generator=g).to(dtype)
            alike(f"reduce_scatter {n} {dtype}", dist.reduce_scatter_tensor, unset(n, dtype), big)
            alike(f"all_to_all {n} {dtype}", dist.all_to_all_single, unset(n * world, dtype),
                  big)
            root = n % world
            gl = [torch.full((n,), 77, dtype=dtype) for _ in range(world)] if rank == root else None
            gw = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
            dist.gather(x, gl, dst=root, group=group)
            dist.gather(x, gw, dst=root, group=ref)
            if rank == root:
                same(f"gather {n} {dtype}", torch.cat(gl), torch.cat(gw))
            sl = [x + r for r in range(world)] if rank == root else None
            alike(f"scatter {n} {dtype}", dist.scatter, unset(n, dtype), sl, src=root)
    dist.destroy_process_group(group)
    return bad


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_collective_on_both_sides_of_the_threshold_equals_gloo(backend_worlds, world_size):
    for bad in backend_worlds(world_size).run(collectives_case, 64):
        assert bad == []


def test_everything_single_copy_from_one_element_equals_gloo(backend_worlds):
    # Threshold 0: every message that has a byte goes straight.
    for bad in backend_worlds(2).run(collectives_case, 0):
        assert bad == []
