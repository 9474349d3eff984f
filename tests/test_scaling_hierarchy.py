"""The scaling model across hosts: the hierarchical all-reduce (inside each host, between
the leaders, inside again), its limits and calibration, and the form the backend's routing
table picks."""
import pytest

from pycomm import routing
from pycomm.tools import scaling
from pycomm.tools.scaling import MIB, Cluster, Interconnect, ring_allreduce_time

pytestmark = pytest.mark.fast

NVLINK = scaling.get_interconnect("nvlink")
# --------------------------------------------------------------------------- hierarchy

ETH = scaling.get_interconnect("10gbe")


def test_hierarchical_time_is_its_three_steps():
    """Intra ring of the message over L, inter ring of a 1/L shard over H at the shard's
    share of the host's link; the leader variant moves the whole message between hosts."""
    size, h, per = 64 * MIB, 4, 8
    intra = ring_allreduce_time(size, per, NVLINK.alpha_s, NVLINK.bandwidth_Bps)
    inter = ring_allreduce_time(size / per, h, ETH.alpha_s, ETH.bandwidth_Bps / per)
    assert scaling.hierarchical_allreduce_time(size, h, per, NVLINK, ETH) == \
        pytest.approx(intra + inter)
    own_nics = ring_allreduce_time(size / per, h, ETH.alpha_s, ETH.bandwidth_Bps)
    assert scaling.hierarchical_allreduce_time(size, h, per, NVLINK, ETH, nics_per_host=per) == \
        pytest.approx(intra + own_nics)
    leader = ring_allreduce_time(size, h, ETH.alpha_s, ETH.bandwidth_Bps)
    assert scaling.hierarchical_allreduce_time(size, h, per, NVLINK, ETH,
                                               leader_max_bytes=size) == \
        pytest.approx(intra + leader)


def test_hierarchy_limits():
    # One host: only the intra ring; one rank per host: only the inter ring.
    assert scaling.hierarchical_allreduce_time(MIB, 1, 8, NVLINK, ETH) == \
        pytest.approx(ring_allreduce_time(MIB, 8, NVLINK.alpha_s, NVLINK.bandwidth_Bps))
    assert scaling.hierarchical_allreduce_time(MIB, 4, 1, NVLINK, ETH) == \
        pytest.approx(ring_allreduce_time(MIB, 4, ETH.alpha_s, ETH.bandwidth_Bps))
    assert scaling.hierarchical_allreduce_time(0, 4, 8, NVLINK, ETH) == 0.0
    with pytest.raises(ValueError):
        scaling.hierarchical_allreduce_time(MIB, 0, 8, NVLINK, ETH)


def test_hierarchy_beats_a_flat_ring_across_ethernet_and_grows_with_size():
    cluster = Cluster(32, 8, NVLINK, ETH)
    sizes = [64 << 10, MIB, 16 * MIB, 256 * MIB]
    rows = scaling.hierarchy_table(cluster, sizes)
    times = [hier for _, _, hier, _ in rows]
    assert times == sorted(times)  # more bytes never take less time
    for _, flat, hier, ratio in rows:
        assert hier < flat and ratio == pytest.approx(flat / hier)
    # Latency-bound: 2(N-1) ring steps against 2(L-1) + 2(H-1); bandwidth-bound: a flat
    # ring's 2(N-1)/N against the hosts' 2(H-1)/H over the shared NIC.
    assert rows[0][3] > rows[-1][3] > 1.0
    assert rows[-1][3] == pytest.approx((31 / 32) / (3 / 4), rel=0.05)


def test_hierarchical_calibration_recovers_its_links():
    intra = Interconnect("i", 5e-6, 10e9)
    inter = Interconnect("e", 200e-6, 0.5e9)
    rows = []
    for size in [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]:
        t_intra = ring_allreduce_time(size, 2, intra.alpha_s, intra.bandwidth_Bps)
        t_inter = ring_allreduce_time(size // 2, 2, inter.alpha_s, inter.bandwidth_Bps)
        hier = scaling.hierarchical_allreduce_time(size, 2, 2, intra, inter, nics_per_host=2,
                                                   leader_max_bytes=64 << 10)
        rows.append(dict(collective="all_reduce", size=size, count=size // 4, world_size=4,
                         hosts=2, intra_host_us=t_intra * 1e6, inter_host_us=t_inter * 1e6,
                         pycomm_hier_us=hier * 1e6))
    got_intra, got_inter, errors = scaling.calibrate_hierarchical(rows, lo=4 << 10)
    assert got_intra.alpha_s == pytest.approx(intra.alpha_s, rel=1e-6)
    assert got_inter.bandwidth_Bps == pytest.approx(inter.bandwidth_Bps, rel=1e-6)
    # Exact but for the leader sizes, which the model costs as whole-message rings.
    assert all(abs(e) < 1e-6 for size, _, _, e in errors if size > 64 << 10)
    with pytest.raises(ValueError):
        scaling.calibrate_hierarchical([dict(collective="all_reduce", size=8, world_size=4)])


def test_hierarchical_calibration_costs_the_leader_form_on_the_leaders_sweep():
    intra = Interconnect("i", 5e-6, 10e9)
    inter = Interconnect("e", 900e-6, 0.5e9)     # shards, every local index at once: slow
    leaders = Interconnect("l", 100e-6, 0.8e9)   # the leaders' ring alone
    rows = []
    for size in [4 << 10, 16 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20]:
        hier = scaling.hierarchical_allreduce_time(size, 2, 2, intra, inter, nics_per_host=2,
                                                   leader_max_bytes=64 << 10, leaders=leaders)
        rows.append(dict(
            collective="all_reduce", size=size, count=size // 4, world_size=4, hosts=2,
            intra_host_us=ring_allreduce_time(size, 2, intra.alpha_s, intra.bandwidth_Bps) * 1e6,
            inter_host_us=ring_allreduce_time(size // 2, 2, inter.alpha_s,
                                              inter.bandwidth_Bps) * 1e6,
            leaders_host_us=ring_allreduce_time(size, 2, leaders.alpha_s,
                                                leaders.bandwidth_Bps) * 1e6,
            pycomm_hier_us=hier * 1e6))
    _, _, errors = scaling.calibrate_hierarchical(rows, lo=4 << 10)
    # Every size, the leader ones included, is predicted exactly.
    assert all(abs(e) < 1e-6 for _, _, _, e in errors), errors
    rows = [{k: v for k, v in r.items() if k != "leaders_host_us"} for r in rows]
    _, _, errors = scaling.calibrate_hierarchical(rows, lo=4 << 10)
    # Without the sweep the leader sizes are costed on the shards' slower link.
    assert all(e > 0.5 for size, _, _, e in errors if size <= 64 << 10), errors


# --------------------------------------------------------------------------- the backend's route
# The model costs the form the backend's routing table picks (pycomm.routing), never its own
# rule. LEADERS differs from ETH so that the leader and rs-ar-ag forms never cost the same.

LEADERS = Interconnect("leaders", 30e-6, 2e9)


def hierarchical_forms(size, hosts, per, nics):
    """(one host's ring, the leader form, the rs-ar-ag form), costed here."""
    intra = ring_allreduce_time(size, per, NVLINK.alpha_s, NVLINK.bandwidth_Bps)
    leader = intra + ring_allreduce_time(size, hosts, LEADERS.alpha_s, LEADERS.bandwidth_Bps)
    share = ETH.bandwidth_Bps * min(nics, per) / per
    return intra, leader, intra + ring_allreduce_time(size / per, hosts, ETH.alpha_s, share)


@pytest.mark.parametrize("uniform", [True, False])
@pytest.mark.parametrize("per", [1, 2, 3, 8])
@pytest.mark.parametrize("hosts", [1, 2, 4])
def test_hierarchical_form_is_the_backends_route(hosts, per, uniform):
    for limit in (0, 64 << 10, None):          # None: the backend's setting
        for size in (4, 8, 28, 32, 4096, 64 << 10, (64 << 10) + 4, MIB, 64 * MIB):
            route = routing.all_reduce_route(hosts=hosts, local_size=per, nbytes=size,
                                             uniform=uniform, leader_max_bytes=limit)
            intra, leader, rs_ar_ag = hierarchical_forms(size, hosts, per, nics=2)
            if route.plan == "host":
                expected = intra
            else:
                assert leader != pytest.approx(rs_ar_ag, rel=1e-9)
                expected = {"leader": leader, "rs-ar-ag": rs_ar_ag}[route.algorithm]
            got = scaling.hierarchical_allreduce_time(size, hosts, per, NVLINK, ETH,
                                                      nics_per_host=2, leader_max_bytes=limit,
                                                      leaders=LEADERS, uniform=uniform)
            assert got == pytest.approx(expected, rel=1e-12), (limit, size, route)


def test_model_follows_the_backend_where_its_old_rule_did_not():
    # Above the leader threshold with fewer elements than ranks per host (4 floats, 8 ranks):
    # there is no 1/L shard to reduce, so the backend runs leader.
    assert routing.all_reduce_route(hosts=2, local_size=8, nbytes=16,
                                    leader_max_bytes=0).algorithm == "leader"
    _, leader, _ = hierarchical_forms(16, 2, 8, nics=1)
    assert scaling.hierarchical_allreduce_time(16, 2, 8, NVLINK, ETH, leader_max_bytes=0,
                                               leaders=LEADERS) == pytest.approx(leader)
    # Hosts with different rank counts: leader at every size.
    _, leader, rs_ar_ag = hierarchical_forms(64 * MIB, 4, 8, nics=8)
    assert scaling.hierarchical_allreduce_time(64 * MIB, 4, 8, NVLINK, ETH, nics_per_host=8,
                                               leaders=LEADERS, uniform=True) == \
        pytest.approx(rs_ar_ag)
    assert scaling.hierarchical_allreduce_time(64 * MIB, 4, 8, NVLINK, ETH, nics_per_host=8,
                                               leaders=LEADERS, uniform=False) == \
        pytest.approx(leader)


def test_hierarchy_table_routes_by_the_backends_threshold_and_layout(monkeypatch):
    monkeypatch.setenv("PYCOMM_HIER_LEADER_MAX_KB", "64")
    size = 64 << 10            # at the threshold: leader, whole messages between hosts
    [(_, _, hier, _)] = scaling.hierarchy_table(Cluster(32, 8, NVLINK, ETH), [size], 8)
    intra = ring_allreduce_time(size, 8, NVLINK.alpha_s, NVLINK.bandwidth_Bps)
    assert hier == pytest.approx(intra + ring_allreduce_time(size, 4, ETH.alpha_s,
                                                             ETH.bandwidth_Bps))
    monkeypatch.setenv("PYCOMM_HIER_LEADER_MAX_KB", "1")
    [(_, _, hier, _)] = scaling.hierarchy_table(Cluster(32, 8, NVLINK, ETH), [size], 8)
    assert hier == pytest.approx(intra + ring_allreduce_time(size / 8, 4, ETH.alpha_s,
                                                             ETH.bandwidth_Bps))
    # 30 ranks at 8 a host: the last host holds 6, so the backend runs leader.
    uneven = Cluster(30, 8, NVLINK, ETH)
    assert not uneven.uniform and uneven.hosts == 4
    [(_, _, hier, _)] = scaling.hierarchy_table(uneven, [size], 8)
    assert hier == pytest.approx(intra + ring_allreduce_time(size, 4, ETH.alpha_s,
                                                             ETH.bandwidth_Bps))
