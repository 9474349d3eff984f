"""The scaling model (pycomm/tools/scaling/): the ring formula, limits, monotonicity and the
presets. Its calibration: tests/test_scaling_calibration.py; its hierarchy and the backend's
route: tests/test_scaling_hierarchy.py."""
import math
from dataclasses import replace

import pytest

from pycomm.tools import scaling
from pycomm.tools.scaling import (MIB, Cluster, Interconnect, Sync, Workload,
                                  bucketed_allreduce_time, predict, ring_allreduce_time,
                                  split_buckets, steps_per_epoch)

pytestmark = pytest.mark.fast

NVLINK = scaling.get_interconnect("nvlink")
IB = scaling.get_interconnect("ib")
FREE = Interconnect("free", 0.0, math.inf)


def one_host(n, link=NVLINK):
    return Cluster(n, n, link, link)


# --------------------------------------------------------------------------- the presets
# The presets are fitted to published figures (a step of 0.85 s, 6.8x, 4.2x, ...), so a
# prediction repeats those figures by construction. These tests check what the model derives
# from a fit: the ring formula, the step from its parts, speedups and epochs, and the notes.

def expected_comm(sc):
    """The preset's all-reduce time from the alpha-beta ring formula, computed here."""
    w, c, s = sc.workload, sc.cluster, sc.sync
    n = c.gpus
    hosts = math.ceil(n / c.gpus_per_host)
    links = ([c.intra] if hosts == 1 else [c.inter] if c.gpus_per_host == 1
             else [c.intra, c.inter])
    alpha = max(link.alpha_s for link in links)      # every ring step waits for the slowest hop
    bw = min(link.bandwidth_Bps for link in links)
    n_buckets = math.ceil(w.grad_bytes / s.bucket_cap_bytes) if s.bucket_cap_bytes else 1
    return n_buckets, n_buckets * 2 * (n - 1) * alpha, 2 * (n - 1) / n * w.grad_bytes / bw


@pytest.mark.parametrize("name", sorted(scaling.PRESETS))
def test_preset_comm_is_the_ring_formula(name):
    sc = scaling.get_preset(name)
    p = sc.predict()
    n_buckets, latency, transfer = expected_comm(sc)
    assert p.buckets == n_buckets
    assert p.latency_s == pytest.approx(latency, rel=1e-12)
    assert p.transfer_s == pytest.approx(transfer, rel=1e-9)
    assert p.comm_s == pytest.approx(latency + transfer, rel=1e-12)


@pytest.mark.parametrize("name", sorted(scaling.PRESETS))
def test_preset_step_speedup_and_epochs_follow_from_the_parts(name):
    sc = scaling.get_preset(name)
    p = sc.predict()
    w, c, s = sc.workload, sc.cluster, sc.sync
    n, b, t1 = c.gpus, w.batch_per_gpu, w.step_compute_s
    assert 0 <= s.overlap <= 1 and s.overhead_s >= 0    # a fit must stay in the model's domain
    assert p.gpus == n and p.hosts == math.ceil(n / c.gpus_per_host)
    # overlap hides at most `overlap` of the all-reduce, and never more than backward lasts
    assert p.hidden_s == pytest.approx(min(s.overlap * p.comm_s, w.backward_fraction * t1))
    assert 0 <= p.hidden_s <= p.comm_s
    assert p.exposed_s == pytest.approx(p.comm_s - p.hidden_s)
    assert p.step_s == pytest.approx(t1 + s.overhead_s + p.exposed_s)
    assert p.compute_s == t1 and p.step_s >= t1
    assert p.speedup == pytest.approx(n * t1 / p.step_s)
    assert p.efficiency == pytest.approx(p.speedup / n)
    assert 0 < p.efficiency <= 1 and 0 < p.epoch_efficiency <= 1
    assert p.comm_fraction == pytest.approx(p.comm_s / p.step_s)
    assert p.exposed_fraction == pytest.approx(p.exposed_s / p.step_s)
    # an epoch counts its last, partial batch as a step
    assert p.steps_per_epoch == math.ceil(w.epoch_images / (n * b))
    assert p.one_gpu_steps_per_epoch == math.ceil(w.epoch_images / b)
    assert p.epoch_s == pytest.approx(p.steps_per_epoch * p.step_s)
    assert p.one_gpu_epoch_s == pytest.approx(p.one_gpu_steps_per_epoch * t1)
    assert p.epoch_speedup == pytest.approx(p.one_gpu_epoch_s / p.epoch_s)
    assert p.epoch_efficiency == pytest.approx(p.epoch_speedup / n)
    # weak scaling against the baseline run: (N/N0) * T0 / T_N
    n0 = sc.baseline_gpus
    t0 = t1 if sc.baseline_step_s is None else sc.baseline_step_s
    assert p.baseline_gpus == n0 and p.baseline_step_s == t0
    assert p.speedup_vs_baseline == pytest.approx(n / n0 * t0 / p.step_s)
    assert p.baseline_epoch_s == pytest.approx(math.ceil(w.epoch_images / (n0 * b)) * t0)
    assert p.epoch_speedup_vs_baseline == pytest.approx(p.baseline_epoch_s / p.epoch_s)


def test_steps_per_epoch_counts_the_partial_batch():
    for images, batch in [(800_000, 256), (800_000, 1024), (1, 7), (7, 7), (8, 7), (10**9, 3)]:
        steps = steps_per_epoch(images, batch)
        assert (steps - 1) * batch < images <= steps * batch
    with pytest.raises(ValueError, match="global_batch"):
        steps_per_epoch(10, 0)


def test_textbook_nvlink_explains_little_of_the_gap():
    p = scaling.get_preset("resnet50-4xa100").predict()
    gap = p.step_s - p.compute_s                # what 4 GPUs add to a step
    assert p.comm_s < 0.02 * gap                # a ring over NVLink3 is about 1% of it
    assert p.overhead_s > 0.9 * gap             # the rest is not the all-reduce
    # even with no overlap at all, and on PCIe 4.0 instead of NVLink3
    sc = scaling.get_preset("resnet50-4xa100")
    pcie = scaling.get_interconnect("pcie4")
    on_pcie = predict(sc.workload, one_host(4, pcie), replace(sc.sync, overlap=0.0))
    assert p.comm_s < on_pcie.comm_s < 0.2 * gap


# The figures each preset's notes must quote, from its prediction p and its sync s.
NOTE_FIGURES = {
    "resnet50-4xa100": lambda p, s: (
        f"{p.steps_per_epoch} steps", f"{p.epoch_s:.1f} s", f"{p.epoch_speedup:.3f}",
        f"{p.epoch_efficiency:.1%}", f"{p.transfer_s * 1e3:.3f} ms", f"{p.comm_s * 1e3:.3f} ms"),
    "resnet50-32gpu-nccl-ib": lambda p, s: (
        f"{p.step_s:.3f} s", f"{p.comm_s * 1e3:.1f} ms", f"{p.comm_fraction:.1%}",
        f"{p.exposed_s * 1e3:.1f} ms exposed", f"{p.overhead_s * 1e3:.0f} ms"),
    "resnet50-32gpu-gloo-ethernet": lambda p, s: (
        f"{p.step_s:.3f} s", f"{p.comm_s:.3f} s", f"{p.hidden_s:.3f}",
        f"{p.exposed_s:.3f} exposed", f"overlap {s.overlap:.0%}"),
}


@pytest.mark.parametrize("name", sorted(NOTE_FIGURES))
def test_preset_notes_quote_the_prediction(name):
    sc = scaling.get_preset(name)
    text = "\n".join(sc.notes)
    for figure in NOTE_FIGURES[name](sc.predict(), sc.sync):
        assert figure in text, figure


# --------------------------------------------------------------------------- the ring

def test_ring_formula():
    t = ring_allreduce_time(100e6, 4, 10e-6, 10e9)
    assert t == pytest.approx(6 * 10e-6 + 1.5 * 100e6 / 10e9)
    assert ring_allreduce_time(100e6, 1, 10e-6, 10e9) == 0.0
    assert ring_allreduce_time(0, 8, 10e-6, 10e9) == 0.0
    with pytest.raises(ValueError, match="world_size"):
        ring_allreduce_time(8, 0, 1e-6, 1e9)


@pytest.mark.parametrize("alpha,bw", [(0.0, 1e9), (5e-6, 25e9), (850e-6, 1.1e9)])
@pytest.mark.parametrize("size", [1, 8, 1000, 1 << 20, 1e9])
@pytest.mark.parametrize("n", [2, 3, 4, 8, 33])
def test_ring_time_is_alpha_beta(n, size, alpha, bw):
    t = ring_allreduce_time(size, n, alpha, bw)
    assert t == pytest.approx(2 * (n - 1) / n * size / bw + 2 * (n - 1) * alpha, rel=1e-12)
    # bandwidth-optimal: each rank moves 2(n-1)/n * S bytes, less than 2S however large n is
    assert t - 2 * (n - 1) * alpha < 2 * size / bw
    if alpha == 0:       # busbw = algbw * 2(n-1)/n recovers the link bandwidth (nccl-tests)
        assert size / t * 2 * (n - 1) / n == pytest.approx(bw, rel=1e-12)
    # one more rank never makes the ring faster
    assert ring_allreduce_time(size, n + 1, alpha, bw) >= t


def test_buckets_pay_latency_each():
    buckets = split_buckets(100, 30)
    assert buckets == [30, 30, 30, 10]
    assert split_buckets(100, 0) == [100]
    assert split_buckets(100, math.inf) == [100]
    assert split_buckets(0, 30) == []
    one = bucketed_allreduce_time([100e6], 8, 5e-6, 25e9)
    four = bucketed_allreduce_time(split_buckets(100e6, 25e6), 8, 5e-6, 25e9)
    assert four - one == pytest.approx(3 * 2 * 7 * 5e-6)


def test_slowest_link_bounds_the_ring():
    c = Cluster(32, 8, NVLINK, IB)
    assert c.hosts == 4
    ring = c.ring_link()
    assert ring.bandwidth_Bps == IB.bandwidth_Bps
    assert ring.alpha_s == max(NVLINK.alpha_s, IB.alpha_s)
    assert Cluster(8, 8, NVLINK, IB).ring_link() is NVLINK
    assert Cluster(4, 1, NVLINK, IB).ring_link() is IB


# --------------------------------------------------------------------------- limits

def test_one_gpu_is_speedup_one():
    w = scaling.RESNET50
    p = predict(w, one_host(1), Sync(overhead_s=0.3))
    assert p.comm_s == 0.0 and p.overhead_s == 0.0
    assert p.step_s == w.step_compute_s
    assert p.speedup == 1.0 and p.efficiency == 1.0 and p.epoch_speedup == 1.0


@pytest.mark.parametrize("n", [2, 3, 8, 64])
def test_free_links_give_linear_speedup(n):
    p = predict(scaling.RESNET50, one_host(n, FREE), Sync(overlap=0.0))
    assert p.comm_s == 0.0
    assert p.speedup == pytest.approx(n, rel=1e-12)
    assert p.efficiency == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 7, 32, 256])
@pytest.mark.parametrize("overlap", [0.0, 0.5, 1.0])
def test_efficiency_below_one_with_comm(n, overlap):
    link = Interconnect("slow", 20e-6, 1e9)
    p = predict(scaling.RESNET50, Cluster(n, 8, NVLINK, link), Sync(overlap=overlap))
    assert p.comm_s > 0
    assert 0 < p.efficiency <= 1 and 0 < p.epoch_efficiency <= 1
    assert p.speedup <= n
    if overlap < 1:                              # something exposed: strictly below linear
        assert p.exposed_s > 0
        assert p.efficiency < 1 and p.epoch_efficiency < 1 and p.speedup < n
    with_overhead = predict(scaling.RESNET50, Cluster(n, 8, NVLINK, link),
                            Sync(overlap=overlap, overhead_s=0.01))
    assert with_overhead.efficiency < 1


def test_zero_communication_gives_ideal_speedup():
    w = Workload("no-grads", 0.5, 0.0, 32, 1000)
    slow = Interconnect("slow", 1e-3, 1e6)
    for n in (2, 8, 64):
        p = predict(w, Cluster(n, 4, slow, slow), Sync(overlap=0.0))
        assert p.buckets == 0 and p.comm_s == 0.0 and p.exposed_s == 0.0
        assert p.step_s == w.step_compute_s
        assert p.speedup == n and p.efficiency == 1.0


SWEEP_CASES = [(n, per_host, overlap, cap) for n, per_host in ((2, 2), (8, 8), (32, 8), (16, 1))
               for overlap in (0.0, 0.75, 1.0) for cap in (0, 25 * MIB, MIB)]


def sweep(vary, values, n, per_host, overlap, cap):
    """Predictions of ResNet-50 with one input varied: bandwidth, alpha, overlap or grads."""
    out = []
    for v in values:
        bw, alpha, ov, w = 10e9, 5e-6, overlap, scaling.RESNET50
        if vary == "bandwidth":
            bw = v
        elif vary == "alpha":
            alpha = v
        elif vary == "overlap":
            ov = v
        else:
            w = replace(w, grad_bytes=v)
        link = Interconnect("l", alpha, bw)
        out.append(predict(w, Cluster(n, per_host, link, link), Sync(cap, ov)))
    return out


@pytest.mark.parametrize("n,per_host,overlap,cap", SWEEP_CASES)
def test_more_bandwidth_never_slows_a_step(n, per_host, overlap, cap):
    ps = sweep("bandwidth", (1e8, 1e9, 1e10, 1e11, math.inf), n, per_host, overlap, cap)
    for slow, fast in zip(ps, ps[1:]):
        assert fast.comm_s < slow.comm_s
        assert fast.latency_s == slow.latency_s       # bandwidth buys nothing per step
        assert fast.step_s <= slow.step_s
        assert fast.speedup >= slow.speedup and fast.epoch_speedup >= slow.epoch_speedup


@pytest.mark.parametrize("n,per_host,overlap,cap", SWEEP_CASES)
def test_more_latency_or_more_gradients_never_speed_a_step_up(n, per_host, overlap, cap):
    for vary, values in (("alpha", (0.0, 1e-6, 1e-4, 1e-2)),
                         ("grads", (0.0, 1e6, 1e8, 1e9))):
        ps = sweep(vary, values, n, per_host, overlap, cap)
        for small, large in zip(ps, ps[1:]):
            assert large.comm_s > small.comm_s, vary
            assert large.step_s >= small.step_s, vary
            assert large.efficiency <= small.efficiency, vary


@pytest.mark.parametrize("n,per_host,cap", sorted({(n, h, c) for n, h, _, c in SWEEP_CASES}))
def test_more_overlap_never_slows_a_step_and_hides_at_most_backward(n, per_host, cap):
    ps = sweep("overlap", (0.0, 0.25, 0.5, 0.75, 1.0), n, per_host, None, cap)
    backward = scaling.RESNET50.backward_fraction * scaling.RESNET50.step_compute_s
    assert len({p.comm_s for p in ps}) == 1            # overlap hides, it does not shorten
    for less, more in zip(ps, ps[1:]):
        assert more.step_s <= less.step_s
        assert more.hidden_s >= less.hidden_s
    for p in ps:
        assert 0 <= p.hidden_s <= min(p.comm_s, backward)
        # bounds of compare_with_measurement: no overlap above, full overlap below
        assert ps[-1].step_s <= p.step_s <= ps[0].step_s


def test_bucket_cap_changes_latency_only():
    w, n = scaling.RESNET50, 8
    link = Interconnect("l", 5e-6, 25e9)
    for cap in (0, 1 * MIB, 25 * MIB, 1 << 40):
        p = predict(w, one_host(n, link), Sync(cap))
        n_buckets = math.ceil(w.grad_bytes / cap) if cap else 1
        assert p.buckets == n_buckets
        assert p.latency_s == pytest.approx(n_buckets * 2 * (n - 1) * link.alpha_s)
        assert p.transfer_s == pytest.approx(2 * (n - 1) / n * w.grad_bytes / link.bandwidth_Bps)


def test_overlap_hides_at_most_backward():
    w = Workload("w", 1.0, 1e9, 32, 1000, backward_fraction=0.5)
    link = Interconnect("slow", 0.0, 1e8)       # 1.75 x 1e9 / 1e8 = 17.5 s of comm on 8 GPUs
    p = predict(w, one_host(8, link), Sync(bucket_cap_bytes=0, overlap=1.0))
    assert p.comm_s == pytest.approx(17.5)
    assert p.hidden_s == pytest.approx(0.5)
    assert p.step_s == pytest.approx(1.0 + 17.0)
    q = predict(w, one_host(8, link), Sync(bucket_cap_bytes=0, overlap=0.0))
    assert q.step_s == pytest.approx(18.5)


def test_invalid_inputs():
    with pytest.raises(ValueError, match="overlap"):
        Sync(overlap=1.5)
    with pytest.raises(ValueError, match="gpus"):
        Cluster(0, 1, NVLINK, IB)
    with pytest.raises(ValueError, match="bandwidth"):
        Interconnect("x", 1e-6, 0)
    with pytest.raises(ValueError, match="interconnect"):
        scaling.get_interconnect("carrier-pigeon")
    with pytest.raises(ValueError, match="preset"):
        scaling.get_preset("nope")


# --------------------------------------------------------------------------- 32-GPU presets

def test_32gpu_presets_share_the_cluster_and_its_overhead():
    nccl = scaling.get_preset("resnet50-32gpu-nccl-ib")
    gloo = scaling.get_preset("resnet50-32gpu-gloo-ethernet")
    for sc in (nccl, gloo):
        assert sc.cluster.gpus == 32 and sc.cluster.gpus_per_host == 8
        assert sc.workload == scaling.RESNET50
    # the same 4 hosts and input pipeline: the non-comm overhead is fitted once
    assert nccl.predict().overhead_s == gloo.predict().overhead_s
    # NCCL's ring crosses hosts over IB HDR, which bounds it
    assert nccl.predict().ring.bandwidth_Bps == IB.bandwidth_Bps


def test_32gpu_gloo_fit_is_physical():
    sc = scaling.get_preset("resnet50-32gpu-gloo-ethernet")
    p = sc.predict()
    line = scaling.get_interconnect("10gbe")
    # a fitted link can be slower than the wire, never faster
    assert 0 < p.ring.bandwidth_Bps < line.bandwidth_Bps
    assert p.ring.alpha_s == line.alpha_s
    # with gloo's link at the 10 GbE line rate, or NCCL's IB ring, a step is never longer
    at_line = predict(sc.workload, replace(sc.cluster, inter=line), sc.sync,
                      sc.baseline_gpus, sc.baseline_step_s)
    on_ib = predict(sc.workload, Cluster(32, 8, NVLINK, IB), sc.sync,
                    sc.baseline_gpus, sc.baseline_step_s)
    assert on_ib.comm_s < at_line.comm_s < p.comm_s
    assert on_ib.step_s <= at_line.step_s <= p.step_s
    assert on_ib.speedup_vs_baseline >= at_line.speedup_vs_baseline >= p.speedup_vs_baseline
