"""Groups that span hosts: the backend's hierarchical collectives (shared
memory inside each host, gloo between hosts), on ranks of this machine that
pose as several hosts through PYCOMM_HOST_ID.

Layouts: 4 ranks as 2 hosts x 2 ranks (torchrun's order), and 3 ranks as 2 + 1
with the hosts interleaved (host a: ranks 0 and 2, host b: rank 1), where the
algorithms that need equal hosts fall back. Every collective runs the backend
tests' own grids (tests/test_backend_*.py: the same self-computed
references, results compared bitwise across ranks), once per layout in one
process world each. Then DDP (no hook, and pycomm.ring_hook through the direct
API) against plain DDP on gloo, and a rank killed on one "host".
"""
import time

import pytest
import torch
import torch.distributed as dist

from conftest import segments_of
from support.collective_checks import BIG, COUNTS, Checks, check, reduce_reference, reduction_input
from support.dying_rank import die_soon, run_with_a_death
from support.process_world import ProcessWorld, WorldPool
from test_backend_async import async_case, coalesced_case
from test_backend_groups import forwarded_case
from test_backend_moves import (all_gather_grid, all_to_all_grid, barrier_case, broadcast_grid,
                                moves_every_dtype_case)
from test_backend_reductions import (all_reduce_grid, big_case, more_dtypes_grid, reduce_grid,
                                     reduce_scatter_grid)

pytestmark = pytest.mark.ranks

LAYOUTS = {"2x2": ["host-a", "host-a", "host-b", "host-b"], "2+1": ["host-a", "host-b", "host-a"]}
TIMEOUT = 30.0


def host_env(hosts, **extra):
    return [dict(extra, PYCOMM_HOST_ID=h, PYCOMM_TIMEOUT=str(TIMEOUT)) for h in hosts]


@pytest.fixture(scope="module")
def layout_worlds():
    """layout_worlds(name): a world of LAYOUTS[name], started once for the module."""
    pool = WorldPool(lambda name: ProcessWorld(len(LAYOUTS[name]), TIMEOUT, backend="cpu:pycomm",
                                               env=host_env(LAYOUTS[name])))
    yield pool
    pool.close()


# ---------------------------------------------------------------------------
# The layout, without processes.

@pytest.mark.fast
def test_layout_orders_hosts_by_lowest_rank():
    from pycomm.topology import HostLayout

    lay = HostLayout.from_identities(["b", "a", "b", "a", "c"])
    assert lay.hosts == ((0, 2), (1, 3), (4,)) and lay.names == ("b", "a", "c")
    assert not lay.uniform and lay.world == 5
    assert lay.host_of(3) == 1 and lay.local_rank(3) == 1 and lay.local_rank(4) == 0
    assert HostLayout.from_identities(["x"] * 3).all_reduce_algorithm(1 << 20).startswith("shared")


@pytest.mark.fast
def test_all_reduce_algorithm_by_size_and_layout():
    from pycomm.topology import HostLayout

    even = HostLayout.from_identities(["a", "a", "b", "b"])
    uneven = HostLayout.from_identities(["a", "a", "a", "b"])
    assert even.all_reduce_algorithm(1024, leader_max_bytes=64 << 10) == "leader"
    assert even.all_reduce_algorithm(16 << 20, leader_max_bytes=64 << 10) == "rs-ar-ag"
    assert uneven.all_reduce_algorithm(16 << 20, leader_max_bytes=64 << 10) == "leader"
    # Fewer elements than ranks per host: nothing to split.
    assert even.all_reduce_algorithm(4, itemsize=4, leader_max_bytes=0) == "leader"


# ---------------------------------------------------------------------------
# Every collective, against the backend tests' references.

def layout_case():
    import pycomm
    from pycomm.topology import HostLayout

    comm = pycomm.get_communicator()  # the direct API over the default group
    return [list(h) for h in comm.layout.hosts], isinstance(comm.layout, HostLayout)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_collective_matches_references(layout_worlds, layout):
    world = layout_worlds(layout)
    n = len(LAYOUTS[layout])
    started = time.monotonic()
    check(world.run(all_reduce_grid, COUNTS + [(1 << 20) + 3]), f"all_reduce {layout}")
    check(world.run(reduce_grid, [0, 7, 1023, 65537]), f"reduce {layout}")
    check(world.run(reduce_scatter_grid, [0, 1, 7, 1023, 65537]), f"reduce_scatter {layout}")
    check(world.run(broadcast_grid, COUNTS), f"broadcast {layout}")
    check(world.run(all_gather_grid, COUNTS), f"all_gather {layout}")
    check(world.run(all_to_all_grid), f"all_to_all {layout}")
    check(world.run(coalesced_case), f"coalesced {layout}")
    check(world.run(async_case, 3), f"async {layout}")
    check(world.run(big_case, BIG), f"16M {layout}")
    check(world.run(forwarded_case), f"forwarded {layout}")
    # The dtypes gloo does not reduce or move cross as ones it does (int16 and the unsigned
    # types widened, uint64's bits, bytes).
    check(world.run(more_dtypes_grid, [0, 1, 7, 1023, 65537]), f"more dtypes {layout}")
    check(world.run(moves_every_dtype_case, [0, 6, 1023 * 6]), f"moves {layout}")
    results = world.run(barrier_case)
    for i in range(5):
        late = results[0][0][i][0]
        entered = results[late][0][i][1]
        for rank, (times, completed) in enumerate(results):
            assert times[i][2] >= entered and completed, f"barrier round {i}: rank {rank}"
    hosts = world.run(layout_case)
    want = [[r for r in range(n) if LAYOUTS[layout][r] == h]
            for h in dict.fromkeys(LAYOUTS[layout])]
    assert all(h == (want, True) for h in hosts), hosts
    print(f"[hierarchical] {layout}: every collective in {time.monotonic() - started:.1f} s")


def direct_api_case():
    """pycomm.all_reduce across hosts: every op, both algorithms' sizes."""
    import pycomm

    rank, world = dist.get_rank(), dist.get_world_size()
    c = Checks()
    for count in (0, 5, 1023, 300_001):
        for op in ("sum", "avg", "max", "min", "product"):
            key = ("direct", op, count)
            inputs = [reduction_input(key, r, count, torch.float32, op, world)
                      for r in range(world)]
            y = inputs[rank].clone()
            pycomm.all_reduce(y, op=op)
            want = reduce_reference(inputs, op, None, torch.float32, world)
            c.equal_everywhere(f"pycomm.all_reduce {op} n={count}", y, want)
            z = inputs[rank].clone()
            work = pycomm.all_reduce(z, op=op, async_op=True)
            got = work.get_future().wait()  # [z], as on one host and as torch's Work
            c.equal(f"async {op} n={count}", got[0], want)
    pycomm.barrier()
    return c.out()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_direct_api_across_hosts(layout_worlds, layout):
    check(layout_worlds(layout).run(direct_api_case), f"pycomm.all_reduce {layout}")


# ---------------------------------------------------------------------------
# DDP.

@pytest.mark.parametrize("variant", ["plain", "ring-hook"])
def test_ddp_matches_gloo_on_two_hosts(layout_worlds, variant):
    import test_backend_training as training

    training.check(layout_worlds("2x2").run(training.ddp_case, variant), f"DDP 2x2 {variant}")


# ---------------------------------------------------------------------------
# A rank killed on one "host".

VICTIM = 3  # host-b's second rank


def die_during_all_reduce(stamp_path):
    rank = dist.get_rank()
    t = torch.ones(1 << 20)
    dist.all_reduce(t)  # every rank is up

    if rank == VICTIM:
        die_soon(stamp_path, 0.3)
    calls, error = 0, None
    try:
        while True:
            dist.all_reduce(t)
            calls += 1
    except Exception as e:  # noqa: BLE001
        error = (type(e).__name__, isinstance(e, RuntimeError), str(e).splitlines()[0][:300])
    return error, time.monotonic(), calls


def test_killed_rank_on_one_host_makes_both_hosts_raise(tmp_path):
    timeout = 10.0
    world = ProcessWorld(4, timeout, backend="cpu:pycomm", env=[
        dict(e, PYCOMM_TIMEOUT=str(timeout)) for e in host_env(LAYOUTS["2x2"])])
    results, died = run_with_a_death(world, die_during_all_reduce, dying_rank=VICTIM,
                                     stamp_path=tmp_path / "death")
    for rank, (error, seen, calls) in results.items():
        assert error is not None, f"rank {rank}: no error"
        name, is_runtime_error, msg = error
        # pycomm's CommError/CommTimeout are RuntimeErrors, as are gloo's.
        assert is_runtime_error, f"rank {rank}: {name}: {msg}"
        assert seen - died < timeout + 5, f"rank {rank} raised {seen - died:.1f} s after the kill"
        print(f"[fault] 2x2, rank {VICTIM} killed: rank {rank} raised {name} "
              f"{seen - died:.2f} s later: {msg}")
    assert not segments_of(world.pids), f"left in /dev/shm: {segments_of(world.pids)}"
