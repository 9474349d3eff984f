"""The scaling model (pycomm/tools/scaling.py): textbook arithmetic, limits, presets, calibration."""
import json
import math

import pytest

from pycomm.tools import scaling
from pycomm.tools.scaling import (MIB, Cluster, Interconnect, Sync, Workload,
                                  bucketed_allreduce_time, calibrate, compare_with_measurement,
                                  fit_alpha_beta, predict, ring_allreduce_time, split_buckets,
                                  steps_per_epoch)

NVLINK = scaling.get_interconnect("nvlink")
IB = scaling.get_interconnect("ib")
FREE = Interconnect("free", 0.0, math.inf)


def one_host(n, link=NVLINK):
    return Cluster(n, n, link, link)


# --------------------------------------------------------------------------- textbook

def test_textbook_one_gpu_epoch():
    p = scaling.get_preset("resnet50-4xa100").predict()
    assert steps_per_epoch(800_000, 256) == 3125
    assert p.one_gpu_steps_per_epoch == 3125
    assert p.one_gpu_epoch_s == pytest.approx(2500.0, abs=1e-9)


def test_textbook_four_gpus():
    p = scaling.get_preset("resnet50-4xa100").predict()
    assert p.gpus == 4 and p.hosts == 1
    assert p.step_s == pytest.approx(0.85, abs=1e-12)
    # 800,000 / 1024 = 781.25: the partial batch is a step, 782 x 0.85 = 664.7 -> "665 s"
    assert p.steps_per_epoch == 782
    assert p.epoch_s == pytest.approx(664.7, abs=1e-9)
    assert round(p.epoch_s) == 665
    assert round(p.epoch_speedup, 2) == 3.76
    assert round(2500 / round(p.epoch_s), 2) == 3.76
    assert round(p.speedup, 2) == 3.76          # 4 x 0.8 / 0.85 = 3.765
    assert round(p.epoch_efficiency, 2) == 0.94
    assert round(p.efficiency, 2) == 0.94
    assert p.epoch_speedup == pytest.approx(2500 / 664.7)


def test_textbook_nvlink_explains_little_of_the_gap():
    p = scaling.get_preset("resnet50-4xa100").predict()
    # 2(N-1)/N * S/B = 1.5 x 102,228,128 B / 300 GB/s
    assert p.transfer_s == pytest.approx(1.5 * 102_228_128 / 300e9)
    assert p.buckets == 4                       # 102.2 MB in 25 MiB buckets
    assert p.latency_s == pytest.approx(4 * 6 * 2e-6)
    assert p.comm_s == pytest.approx(0.559e-3, abs=1e-6)
    gap = 0.85 - 0.80
    assert p.comm_s / gap < 0.02                # bandwidth: about 1% of the 50 ms gap
    assert p.overhead_s == pytest.approx(gap - p.exposed_s)
    assert p.overhead_s > 0.049


# --------------------------------------------------------------------------- the ring

def test_ring_formula():
    t = ring_allreduce_time(100e6, 4, 10e-6, 10e9)
    assert t == pytest.approx(6 * 10e-6 + 1.5 * 100e6 / 10e9)
    assert ring_allreduce_time(100e6, 1, 10e-6, 10e9) == 0.0
    assert ring_allreduce_time(0, 8, 10e-6, 10e9) == 0.0
    with pytest.raises(ValueError, match="world_size"):
        ring_allreduce_time(8, 0, 1e-6, 1e9)


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

def test_32gpu_gloo_ethernet():
    p = scaling.get_preset("resnet50-32gpu-gloo-ethernet").predict()
    assert p.gpus == 32 and p.hosts == 4 and p.baseline_gpus == 4
    assert round(p.speedup_vs_baseline, 1) == 4.2
    assert round(p.epoch_speedup_vs_baseline, 1) == 4.2
    assert p.comm_fraction == pytest.approx(0.45, abs=1e-9)
    assert p.step_s == pytest.approx(8 * 0.85 / 4.2)
    # gloo reached about a fifth of 10 GbE's 1.25 GB/s
    assert 0.2e9 < p.ring.bandwidth_Bps < 0.35e9


def test_32gpu_nccl_ib():
    nccl = scaling.get_preset("resnet50-32gpu-nccl-ib").predict()
    gloo = scaling.get_preset("resnet50-32gpu-gloo-ethernet").predict()
    assert round(nccl.speedup_vs_baseline, 1) == 6.8
    assert round(nccl.epoch_speedup_vs_baseline, 1) == 6.8
    assert nccl.step_s == pytest.approx(1.0)
    assert nccl.ring.bandwidth_Bps == 25e9         # IB HDR bounds the NVLink+IB ring
    assert nccl.comm_s < 0.012 and nccl.comm_fraction < 0.02
    # the same 4 hosts: the non-comm overhead is shared, the all-reduce is what changed
    assert nccl.overhead_s == gloo.overhead_s
    assert gloo.comm_s / nccl.comm_s > 50


def test_preset_notes_state_the_figures():
    text = "\n".join(scaling.get_preset("resnet50-4xa100").notes)
    assert "782 steps" in text and "664.7" in text and "3.76" in text and "94.0%" in text


# --------------------------------------------------------------------------- calibration

def synthetic_rows(alpha, bw, sizes=(8, 1024, 1 << 16, 1 << 20, 1 << 24, 1 << 27),
                   worlds=(2, 3, 4)):
    rows = []
    for n in worlds:
        for size in sizes:
            t = ring_allreduce_time(size, n, alpha, bw)
            rows.append({"size": size, "count": size // 4, "dtype": "float32", "op": "sum",
                         "world_size": n, "pycomm_us": t * 1e6, "stock_us": 3 * t * 1e6,
                         "stock_backend": "gloo", "ceiling_us": 1.0, "pycomm_busbw": 0.0,
                         "stock_busbw": 0.0, "wrong": 0})
    return rows


@pytest.mark.parametrize("alpha,bw", [(3e-6, 12e9), (850e-6, 1.1e9), (0.0, 5e9)])
def test_calibration_recovers_alpha_and_bandwidth(alpha, bw):
    c = calibrate(synthetic_rows(alpha, bw))
    assert c.alpha_s == pytest.approx(alpha, rel=1e-9, abs=1e-15)
    assert c.bandwidth_Bps == pytest.approx(bw, rel=1e-9)
    assert c.max_relative_error < 1e-9
    s = calibrate(synthetic_rows(alpha, bw), backend="stock")   # stock = 3x slower
    assert s.alpha_s == pytest.approx(3 * alpha, rel=1e-9, abs=1e-15)
    assert s.bandwidth_Bps == pytest.approx(bw / 3, rel=1e-9)


def test_calibration_from_file_skips_bad_rows(tmp_path):
    rows = synthetic_rows(10e-6, 4e9)
    rows.append(dict(rows[-1], pycomm_us=1e9, wrong=3))       # wrong results: ignored
    rows.append(dict(rows[-1], pycomm_us=None, wrong=0))      # not measured: ignored
    rows.append(dict(rows[0], world_size=1, pycomm_us=1.0))   # one rank: no information
    path = tmp_path / "allreduce.json"
    path.write_text(json.dumps(rows))
    c = calibrate(path)
    assert c.rows == len(rows) - 3
    assert c.alpha_s == pytest.approx(10e-6, rel=1e-9)
    assert c.bandwidth_Bps == pytest.approx(4e9, rel=1e-9)
    assert c.interconnect().bandwidth_Bps == c.bandwidth_Bps


def test_calibration_with_noise_is_close():
    rows = synthetic_rows(20e-6, 2e9)
    for i, r in enumerate(rows):
        r["pycomm_us"] *= 1 + (0.03 if i % 2 else -0.03)
    c = calibrate(rows)
    assert c.alpha_s == pytest.approx(20e-6, rel=0.1)
    assert c.bandwidth_Bps == pytest.approx(2e9, rel=0.1)


def test_calibration_errors():
    with pytest.raises(ValueError, match="backend"):
        calibrate(synthetic_rows(1e-6, 1e9), backend="mpi")
    with pytest.raises(ValueError, match="two different sizes"):
        calibrate(synthetic_rows(1e-6, 1e9, sizes=(1 << 20,), worlds=(4, 4)))
    with pytest.raises(ValueError, match="at least two"):
        calibrate(synthetic_rows(1e-6, 1e9, sizes=(1 << 20,), worlds=(4,)))
    with pytest.raises(ValueError):
        fit_alpha_beta([(8, 1, 1e-6)])


# --------------------------------------------------------------------------- measured runs

def test_compare_with_measurement():
    buckets = split_buckets(102_228_128, 25 * MIB)
    comm = bucketed_allreduce_time(buckets, 2, 100e-6, 1e9)
    measured = 0.5 + comm
    cmp = compare_with_measurement(measured_step_s=measured, step_compute_s=0.5,
                                   bucket_bytes=buckets, world_size=2, alpha_s=100e-6,
                                   bandwidth_Bps=1e9)
    assert cmp.predicted_step_s == pytest.approx(measured)
    assert cmp.relative_error == pytest.approx(0.0, abs=1e-12)
    assert cmp.no_overlap_step_s == pytest.approx(measured)
    assert cmp.full_overlap_step_s == pytest.approx(0.5 + comm - min(comm, 0.5 * 2 / 3))

    c = calibrate(synthetic_rows(100e-6, 1e9))
    off = compare_with_measurement(measured_step_s=2 * measured, step_compute_s=0.5,
                                   bucket_bytes=buckets, world_size=2, calibration=c)
    assert off.relative_error == pytest.approx(-0.5, rel=1e-6)
    with pytest.raises(ValueError, match="calibration"):
        compare_with_measurement(measured_step_s=1, step_compute_s=1, bucket_bytes=[1],
                                 world_size=2)
