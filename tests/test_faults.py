"""Failures are boring: a dead or stalled peer gives CommTimeout naming it in
bounded time, inputs are never half-written, nothing leaks.

Each scenario that kills a rank runs in a world of its own, discarded after.
"""
import os
import time

import pytest
import torch
import torch.distributed as dist

import pycomm
from support.dying_rank import die_now, die_soon, run_with_a_death
from support.process_world import ProcessWorld, environ, resource_counts

pytestmark = pytest.mark.ranks

WORLD = 3
VICTIM = 1


def input_for(rank, count):
    return (torch.arange(count, dtype=torch.float32) % 7) + rank


def fully_reduced(count):
    return sum(input_for(r, count) for r in range(WORLD))


def die_during(count, when, stamp_path):
    """Survivors all-reduce until an error; the victim SIGKILLs itself `when`:
    'mid-large' / 'mid-small' while collectives run, 'between' while idle."""
    rank = dist.get_rank()
    comm = pycomm.Communicator(timeout=60.0)  # far above the 2 s bound we check
    t = input_for(rank, count)
    pycomm_barrier = comm.barrier
    pycomm_barrier()
    if rank == VICTIM:
        if when == "between":
            comm.all_reduce(t)
            time.sleep(0.2)
            die_now(stamp_path)
        die_soon(stamp_path, 0.3)
        while True:
            t.copy_(input_for(rank, count))
            comm.all_reduce(t)
    calls, error = 0, None
    try:
        while True:
            t.copy_(input_for(rank, count))
            comm.all_reduce(t)
            calls += 1
            if when == "between" and calls == 1:
                time.sleep(0.5)  # the victim dies while this rank is idle
    except pycomm.CommTimeout as e:
        error = str(e)
    seen = time.monotonic()
    state = ("unchanged" if torch.equal(t, input_for(rank, count))
             else "reduced" if torch.equal(t, fully_reduced(count)) else "half-written")
    return error, seen, state, calls


@pytest.mark.parametrize("when,count", [("mid-large", 8 << 20), ("mid-small", 1000),
                                        ("between", 1000)])
def test_dead_peer_is_named_within_two_seconds(tmp_path, when, count):
    results, died = run_with_a_death(ProcessWorld(WORLD), die_during, count, when,
                                     dying_rank=VICTIM, stamp_path=tmp_path / "death")
    for rank, (error, seen, state, calls) in results.items():
        assert error is not None and f"rank {VICTIM}" in error and "exited" in error, error
        assert seen - died < 2.0, f"rank {rank} noticed after {seen - died:.2f} s"
        print(f"[fault] peer killed {when}: rank {rank} raised CommTimeout "
              f"{(seen - died) * 1e3:.1f} ms after the kill")
        assert state in ("unchanged", "reduced"), f"rank {rank}: tensor {state}"


def memory_too_small_case(transport):
    """Ask for more shared memory than the transport has room for (all of /dev/shm's free
    space, or all of the host's available memory): a clear error at set-up, not SIGBUS
    or the OOM killer later."""
    if transport == "posix":
        free = os.statvfs(pycomm._C.shm_dir())
        room = free.f_bavail * free.f_frsize
    else:
        with open("/proc/meminfo") as f:
            room = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    # Two ranks' ring links of the largest buffers (4 GiB, the bound) are more than all the
    # room: 8 GiB a buffer in all.
    env = {"PYCOMM_RING_BUFFER_KB": str(4 << 20), "PYCOMM_RING_BUFFERS": str(max(2, room // (8 << 30) + 2)),
           "PYCOMM_SHM_TRANSPORT": transport}
    with environ(env):
        try:
            pycomm.Communicator(timeout=30)
            return "no error"
        except pycomm.CommError as e:
            return str(e)


@pytest.mark.parametrize("transport", ["memfd", "posix"])
def test_too_little_memory_fails_at_init(worlds, transport):
    messages = worlds(2).run(memory_too_small_case, transport)
    assert "cannot reserve" in messages[0] and "bytes" in messages[0] and "free" in messages[0], \
        messages[0]
    assert "rank 0 could not create" in messages[1] and "cannot reserve" in messages[1], messages[1]


def two_groups_case():
    """Ranks {0,1} and {2,3} each have a subgroup communicator, used at the
    same time as the world one, async, from one process."""
    rank = dist.get_rank()
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[rank // 2]
    sub = pycomm.init(group=mine)
    ok = True
    for i in range(50):
        a = torch.full((5000 + i,), float(rank))
        b = torch.full((300,), float(rank + i))
        wa = pycomm.all_reduce(a, group=mine, async_op=True)
        wb = pycomm.all_reduce(b, async_op=True)
        wa.wait()
        wb.wait()
        pair = rank // 2 * 2
        ok &= bool((a == pair + pair + 1).all()) and bool((b == 6 + 4 * i).all())
    pycomm.destroy(mine)
    return ok and sub.world_size == 2


def test_two_communicators_do_not_interfere(worlds):
    assert worlds(4).run(two_groups_case) == [True] * 4


def create_destroy_case(n):
    def cycle(k):
        for _ in range(k):
            comm = pycomm.Communicator(timeout=30)
            t = torch.ones(10)
            comm.all_reduce(t)
            comm.close()
            del comm

    cycle(5)  # warm-up: allocator arenas and lazily created state settle
    before = resource_counts()
    cycle(n)
    after = resource_counts()
    return before, after



def test_create_destroy_leaks_nothing(worlds):
    for before, after in worlds(2).run(create_destroy_case, 100):
        assert after[0] <= before[0], f"file descriptors: {before[0]} -> {after[0]}"
        # A leak would grow with the 100 communicators; allow allocator noise.
        assert after[1] <= before[1] + 8, f"mappings: {before[1]} -> {after[1]}"
        assert after[2] <= before[2], f"threads: {before[2]} -> {after[2]}"


def group_churn_case(n):
    """n pycomm groups made, used (a collective and a ring of sends, so each
    rank makes and takes a channel) and destroyed: what they leave."""
    from pycomm.tools.doctor import mapped_segment_bytes

    rank, world = dist.get_rank(), dist.get_world_size()

    def cycle(k):
        for _ in range(k):
            group = dist.new_group(backend="cpu:pycomm")
            t = torch.ones(1000)
            dist.all_reduce(t, group=group)
            got = torch.zeros(1000)
            [w.wait() for w in (dist.isend(t, (rank + 1) % world, group=group),
                                dist.irecv(got, (rank - 1) % world, group=group))]
            dist.destroy_process_group(group)
            del group

    cycle(3)  # warm-up
    before = resource_counts() + (rss_bytes(), mapped_segment_bytes())
    cycle(n)
    return before, resource_counts() + (rss_bytes(), mapped_segment_bytes())


def test_group_churn_keeps_descriptors_threads_and_memory_flat(worlds):
    for before, after in worlds(2).run(group_churn_case, 60, timeout=600):
        assert after[0] <= before[0], f"file descriptors: {before[0]} -> {after[0]}"
        assert after[1] <= before[1] + 8, f"mappings: {before[1]} -> {after[1]}"
        assert after[2] <= before[2], f"threads: {before[2]} -> {after[2]}"
        # (The world's own pycomm.init communicator stays mapped throughout.)
        assert after[4] == before[4], f"pycomm's shared memory mapped: {before[4]} -> {after[4]}"
        # 60 groups' sessions and channels are about 300 MiB: a leak of them would show.
        assert after[3] - before[3] < 32 << 20, f"RSS: {before[3] >> 20} -> {after[3] >> 20} MiB"


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


SOAK_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
               torch.uint8, torch.int32, torch.int64]


def soak_case(iterations, seed):
    """Random sizes up to 4 MB, dtypes, ops; sync and async interleaved;
    each checked against torch.distributed (gloo)."""
    g = torch.Generator().manual_seed(seed)  # the same sequence on every rank
    rank = dist.get_rank()
    ops = ["sum", "max", "min", "product", "avg"]
    stock = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
             "product": dist.ReduceOp.PRODUCT, "avg": dist.ReduceOp.SUM}
    bad, rss = [], []
    pending = []
    for it in range(iterations):
        dtype = SOAK_DTYPES[int(torch.randint(len(SOAK_DTYPES), (1,), generator=g))]
        op = ops[int(torch.randint(len(ops), (1,), generator=g))]
        if op == "avg" and not dtype.is_floating_point:
            op = "sum"
        esize = torch.empty((), dtype=dtype).element_size()
        count = int(torch.randint((4 << 20) // esize, (1,), generator=g)) >> \
            int(torch.randint(0, 16, (1,), generator=g))
        use_async = bool(torch.randint(2, (1,), generator=g))
        x = torch.randint(1, 3, (count,), generator=torch.Generator().manual_seed(it * 7 + rank))
        x = x.to(dtype)
        ref = x.clone()
        dist.all_reduce(ref, stock[op])
        if op == "avg":
            ref.div_(dist.get_world_size())
        if use_async:
            pending.append((it, x, ref, pycomm.all_reduce(x, op=op, async_op=True)))
        else:
            pycomm.all_reduce(x, op=op)
            if not torch.equal(x, ref):
                bad.append(it)
        if len(pending) > 4 or it == iterations - 1:
            for i, xa, ra, work in pending:
                work.wait()
                if not torch.equal(xa, ra):
                    bad.append(i)
            pending.clear()
        if it % max(1, iterations // 10) == 0:
            rss.append(rss_bytes())
    return bad, rss


def check_soak(results):
    for rank, (bad, rss) in enumerate(results):
        assert not bad, f"rank {rank}: wrong results at iterations {bad[:10]}"
        # Flat after warm-up: the last sample within 64 MB of the second.
        assert rss[-1] - rss[1] < 64 << 20, f"rank {rank}: RSS grew {rss}"


def test_soak_short(worlds):
    check_soak(worlds(3).run(soak_case, 300, 1))


@pytest.mark.soak
def test_soak_long(worlds):
    check_soak(worlds(3).run(soak_case, 10_000, 2, timeout=3 * 3600))
