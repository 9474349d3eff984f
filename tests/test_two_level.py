"""The two-level all-reduce of one host whose ranks are pinned to several NUMA domains
(csrc/core/collectives/two_level.h): the routing table's rule, and the whole path on a
posed two-node topology (PYCOMM_TOPOLOGY), where ranks pin themselves, agree on their
domains at set-up and take two_level for their large all-reduces (tests/scripts/
numa_two_level.py). The core's grid of layouts, dtypes and ops, and its team and restore
checks, are native (csrc/core/tests/test_collectives.cpp: two_level_*)."""
import json
import os

import pytest
import torch
import torch.distributed as dist

import pycomm
from pycomm import routing
from support.torchrun_ranks import torchrun

pytestmark = pytest.mark.ranks

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "numa_two_level.py")


@pytest.mark.fast
def test_the_table_takes_two_level_where_it_moves_no_more_bytes_than_the_ring():
    def algo(nbytes, domains=2, local_size=12, two_level="auto", **kw):
        return routing.route("all_reduce", local_size=local_size, count=nbytes // 4, domains=domains,
                             direct_max_bytes=64 << 10, two_level_min_bytes=256 << 10,
                             two_level=two_level, **kw).algorithm
    # auto, 2 domains: from 6 ranks a domain (5 + 4/L against 6 - 2/L tensors a rank).
    assert algo(1 << 20) == "two_level"
    assert algo(1 << 20, local_size=10) == "ring"
    assert algo(1 << 20, local_size=8) == "ring"                     # TP=8 over two sockets
    assert algo(1 << 20, domains=4, local_size=28) == "two_level"    # 4 domains: 7 a domain
    assert algo(1 << 20, domains=4, local_size=24) == "ring"
    assert algo((256 << 10) + 4) == "two_level"
    assert algo(256 << 10) == "ring"        # not above two_level_min_bytes
    assert algo(32 << 10) == "direct"       # the one-shot's, as on one domain
    assert algo(1 << 20, domains=1) == "ring"
    # on: wherever the domains allow; off: never; neither with a domain of one rank, which
    # would reduce every piece whole, alone.
    assert algo(1 << 20, local_size=4, two_level="on") == "two_level"
    assert algo(1 << 20, two_level="off") == "ring"
    assert algo(1 << 20, smallest_domain=1, two_level="on") == "ring"
    assert algo(1 << 20, local_size=2, two_level="on") == "ring"  # TP=2 across two sockets
    assert algo(32 << 10, local_size=4, two_level="on") == "direct"
    # Only all_reduce has the form; an explicit algorithm is kept; CUDA tensors are the CUDA path's.
    assert routing.route("all_gather", local_size=12, count=1 << 20, domains=2).algorithm == "ring"
    assert routing.route("all_reduce", local_size=12, count=1 << 20, domains=2,
                         cuda=True).plan == "cuda"
    with pytest.raises(ValueError, match="two_level: expected auto, on or off"):
        algo(1 << 20, two_level="yes")


@pytest.mark.fast
def test_the_settings_are_read_from_their_variables(monkeypatch):
    def algo():
        return routing.all_reduce_route(hosts=1, local_size=4, nbytes=1 << 20, domains=2).algorithm
    assert algo() == "ring"  # auto: 2 ranks a domain move more bytes than the ring
    monkeypatch.setenv("PYCOMM_TWO_LEVEL", "on")
    assert algo() == "two_level"
    monkeypatch.setenv("PYCOMM_TWO_LEVEL_MIN_KB", "4096")
    assert algo() == "ring"
    monkeypatch.setenv("PYCOMM_TWO_LEVEL", "sometimes")
    with pytest.raises(ValueError, match="PYCOMM_TWO_LEVEL: expected one of auto, on, off"):
        algo()


def test_ranks_pinned_to_two_posed_nodes_take_two_level_and_others_stay_flat():
    res = torchrun(SCRIPT, ranks=4, timeout=240)
    assert res.returncode == 0, res.report()
    by_rank = [json.loads(out.strip().splitlines()[-1])["layouts"] for out in res.ranks]
    expected = {
        "0011": ("two_level", [0, 0, 1, 1]),  # two domains of two
        "0101": ("two_level", [0, 1, 0, 1]),  # interleaved: domains need not be rank blocks
        "0001": ("ring", [0, 0, 0, 1]),       # a domain of one rank
        "001-": ("ring", [0, 0, 1, -1]),      # one rank not pinned: no domains
        "0000": ("ring", [0, 0, 0, 0]),       # one domain
    }
    for layout, (large, nodes) in expected.items():
        seen = [r[layout] for r in by_rank]
        assert [s["pinned_node"] for s in seen] == nodes, (layout, seen)
        for s in seen:
            assert s["large"] == large, (layout, seen)
            # Below two_level_min_bytes the one-shot's: with one domain, two_level's
            # reduce-scatter and all-gather through the slots adds in its order too.
            assert s["small"] in ("direct", "two_level/direct"), (layout, seen)
            assert s["exact"] and s["bitwise_across_ranks"] and s["bitwise_across_ranks_int"], seen
            # 4 standard normals in float32: a few ulps of values up to ~10.
            assert s["float_max_error"] < 1e-5, seen


def _bad_topology_case():
    os.environ["PYCOMM_TOPOLOGY"] = "0-1;1"
    try:
        pycomm.Communicator(dist.group.WORLD)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)
    finally:
        del os.environ["PYCOMM_TOPOLOGY"]
    return None, ""


def test_a_bad_posed_topology_fails_set_up_naming_the_variable(worlds):
    for kind, msg in worlds(2).run(_bad_topology_case):
        assert kind in ("ValueError", "CommError") and "PYCOMM_TOPOLOGY" in msg, (kind, msg)


def _two_level_on_one_domain():
    # No domains (this host's ranks are not pinned): two_level is the reduce-scatter and
    # all-gather through the slots, and gives the exact sum.
    x = torch.arange(300_000, dtype=torch.float32) % 7 + dist.get_rank()
    pycomm.all_reduce(x, algorithm="two_level")
    w = dist.get_world_size()
    return torch.equal(x, (torch.arange(300_000, dtype=torch.float32) % 7) * w + w * (w - 1) / 2)


def test_two_level_can_be_asked_for_by_name(worlds):
    assert worlds(3).run(_two_level_on_one_domain) == [True] * 3


@pytest.mark.fast
def test_numa_perf_pins_ranks_to_nodes_and_times_the_forms_in_turns(tmp_path, monkeypatch):
    """bench/numa_perf.py on this host of one node: two posed nodes, every form exact, auto
    (PYCOMM_TWO_LEVEL=on) taking two_level above its threshold and the one-shot below, a time
    for every column."""
    from support.bench_script import run_script

    monkeypatch.setenv("PYCOMM_TWO_LEVEL", "on")
    out = tmp_path / "numa.json"
    stdout, _ = run_script("numa_perf.py", ["--nproc", "4", "-b", "32K", "-e", "1M", "-f", "32",
                                            "--rounds", "1", "--min-time", "0.05", "--json", out],
                           tmp_path, 300)
    report = json.loads(out.read_text())
    assert report["meta"]["node_of"] == [0, 0, 1, 1], report["meta"]
    rows = report["rows"]
    assert [(r["size"], r["took"]) for r in rows] == [(32 << 10, "direct"), (1 << 20, "two_level")]
    for r in rows:
        assert r["wrong"] == 0 and all(r[f"{c}_us"] > 0 for c in ("gloo", "ring", "two_level", "auto"))
    assert "auto took two_level" in stdout
