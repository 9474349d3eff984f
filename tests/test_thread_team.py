"""A rank's thread team (PYCOMM_THREADS, docs/settings.md): forced on where the ranks fill
the cores (1 rank with a team of 2; 2 ranks with teams of 4, oversubscribed), every
collective and point-to-point exchange gives the bytes a team of one gives, for every dtype
and op, on random inputs whose sums round: the team only splits element-wise work, so
nothing may change."""
import os

import pytest
import torch
import torch.distributed as dist

from support.dtypes_under_test import DTYPES, MORE_INTEGERS
from support.process_world import ProcessWorld, thread_names

pytestmark = pytest.mark.fast

FLOAT_OPS = ["sum", "avg", "min", "max", "product", "premul_sum"]
INT_OPS = ["sum", "min", "max", "product", "band", "bor", "bxor"]
# Above the one-shot's 256 KiB slot and the ring's 256 KiB link in float64: several
# pieces, a short last one, and shares of unequal length.
COUNT = 3 * 65536 + 17


def _reduce_op(op):
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(0.75)
    return getattr(dist.ReduceOp, op.upper())


def _random(dtype, count, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = torch.randn(count, generator=g, dtype=torch.float64)
        x = x * torch.exp2(torch.randint(-6, 7, (count,), generator=g).double())
        return x.to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    return torch.randint(0, 256, (count * dtype.itemsize,), generator=g,
                         dtype=torch.uint8).view(dtype)


def _group(threads, direct_max_kb):
    """A pycomm group whose ranks each run a team of `threads`; the routing table's
    one-shot limit decides the algorithm (0: the ring for every size)."""
    os.environ.update(PYCOMM_THREADS=str(threads), PYCOMM_TEAM_SHARE_KB="4",
                      PYCOMM_DIRECT_MAX_KB=str(direct_max_kb))
    try:
        return dist.new_group(backend="pycomm")
    finally:
        for name in ("PYCOMM_THREADS", "PYCOMM_TEAM_SHARE_KB", "PYCOMM_DIRECT_MAX_KB"):
            del os.environ[name]


def _every_collective(group, dtype, op, seed):
    """Every collective's outputs on this rank, as bytes."""
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {}
    x = _random(dtype, COUNT, seed + rank)
    if op is not None:
        y = x.clone()
        dist.all_reduce(y, op=_reduce_op(op), group=group)
        out["all_reduce"] = y
        y = x.clone()
        dist.reduce(y, dst=world - 1, op=_reduce_op(op), group=group)
        out["reduce"] = y
        big = _random(dtype, COUNT * world, seed + 100 + rank)
        y = torch.empty(COUNT, dtype=dtype)
        dist.reduce_scatter_tensor(y, big, op=_reduce_op(op), group=group)
        out["reduce_scatter"] = y
    else:
        y = torch.empty(COUNT * world, dtype=dtype)
        dist.all_gather_into_tensor(y, x, group=group)
        out["all_gather"] = y
        y = x.clone()
        dist.broadcast(y, src=world - 1, group=group)
        out["broadcast"] = y
        z = x[:COUNT // world * world].contiguous()
        y = torch.empty_like(z)
        dist.all_to_all_single(y, z, group=group)
        out["all_to_all"] = y
        if world > 1:  # point-to-point: each rank's x to the next, through frames of 256 KiB
            y = torch.empty_like(x)  # (the group holds every rank, in order)
            for req in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, (rank + 1) % world, group),
                                               dist.P2POp(dist.irecv, y, (rank - 1) % world, group)]):
                req.wait()
            out["send_recv"] = y
    return {k: v.contiguous().view(torch.uint8) for k, v in out.items()}


def _team_threads():
    return thread_names().count("pycomm-team")


def _teams_match_one_thread(team):
    cases, differ, helpers = 0, [], []
    for direct_max_kb, algo in ((1 << 20, "one-shot"), (0, "ring")):
        one, many = _group(1, direct_max_kb), _group(team, direct_max_kb)
        dtypes = dict(DTYPES, **MORE_INTEGERS, bool=torch.bool)
        for name, dtype in dtypes.items():
            ops = (FLOAT_OPS if dtype.is_floating_point
                   else ["min", "max", "band", "bor", "bxor"] if dtype == torch.bool else INT_OPS)
            for op in ops + [None]:  # None: the collectives that only move data
                seed = hash((name, str(op), algo)) % (1 << 30)
                a, b = _every_collective(one, dtype, op, seed), _every_collective(many, dtype, op, seed)
                for what in a:
                    cases += 1
                    if not torch.equal(a[what], b[what]):
                        differ.append(f"{algo} {what} {name} {op}")
        helpers.append(_team_threads())
        dist.destroy_process_group(one)
        dist.destroy_process_group(many)
        del one, many  # the last references to the groups: their communicators close
    # The helpers exist only once a piece was split among them (team - 1 of them a group),
    # and end with their group.
    import gc
    gc.collect()
    return cases, differ, helpers, _team_threads()


@pytest.mark.ranks
@pytest.mark.parametrize("world_size,team", [(1, 2), (2, 4)])
def test_a_team_gives_the_bytes_of_one_thread(world_size, team):
    w = ProcessWorld(world_size)
    try:
        results = w.run(_teams_match_one_thread, team, timeout=600)
    finally:
        w.close()
    for rank, (cases, differ, helpers, left) in enumerate(results):
        assert not differ, f"rank {rank}: a team of {team} differs from one thread in {differ[:10]}"
        assert cases > 300
        assert helpers == [team - 1] * 2, f"rank {rank}: team helpers {helpers}, expected {team - 1} a group"
        assert left == 0, f"rank {rank}: {left} team helpers outlived their groups"


@pytest.mark.parametrize("value,match", [("0", "^PYCOMM_THREADS: expected 1 to 8192, got 0$"),
                                         ("two", "PYCOMM_THREADS"),
                                         ("-1", "^PYCOMM_THREADS: expected 1 to 8192, got -1$")])
def test_a_team_of_no_threads_is_refused_naming_the_variable(monkeypatch, value, match):
    from pycomm import config

    monkeypatch.setenv("PYCOMM_THREADS", value)
    with pytest.raises(ValueError, match=match):
        config.communicator_config(2, 5.0)


def test_team_perf_times_teams_in_turns_and_checks_their_values(tmp_path):
    """bench/team_perf.py: every team's result exact and bitwise the team of one's, a time
    and a speed-up per team and size (the speed-up of the first team 1 by definition)."""
    import json

    from support.bench_script import run_script

    out = tmp_path / "teams.json"
    stdout, _ = run_script("team_perf.py", ["--nproc", "1", "--threads", "1,2", "-b", "1M", "-e",
                                            "4M", "-f", "4", "--rounds", "2", "--min-time", "0.05",
                                            "--collective", "all", "--json", out], tmp_path, 300)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["collective"], r["size"]) for r in rows] == [
        (c, s) for c in ("all_reduce", "all_gather", "reduce_scatter") for s in (1 << 20, 4 << 20)]
    for r in rows:
        assert r["wrong"] == 0 and r["bitwise_equal"], r
        assert r["t1_speedup"] == 1.0 and r["t1_us"] > 0 and r["t2_us"] > 0, r
    assert "bitwise equal across teams: yes" in stdout
