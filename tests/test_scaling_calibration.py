"""The scaling model's calibration: alpha and bandwidth fitted from measured rows, the
comparison with a measured run, and the CPU links, which are the fits of the committed
results."""
import json
from pathlib import Path

import pytest

from pycomm.tools import scaling
from pycomm.tools.scaling import (MIB, Cluster, Workload, bucketed_allreduce_time, calibrate,
                                  compare_with_measurement, fit_alpha_beta, predict,
                                  ring_allreduce_time, split_buckets)

pytestmark = pytest.mark.fast


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
    path.write_text(json.dumps({"rows": rows}))
    c = calibrate(path)
    assert c.rows == len(rows) - 3
    assert c.alpha_s == pytest.approx(10e-6, rel=1e-9)
    assert c.bandwidth_Bps == pytest.approx(4e9, rel=1e-9)
    assert c.interconnect().bandwidth_Bps == c.bandwidth_Bps


def test_calibration_skips_other_collectives():
    rows = [dict(r, collective="all_reduce") for r in synthetic_rows(10e-6, 4e9)]
    other = [dict(r, collective="broadcast", pycomm_us=r["pycomm_us"] / 2) for r in rows]
    c = calibrate(rows + other)
    assert c.rows == len(rows)
    assert c.alpha_s == pytest.approx(10e-6, rel=1e-9)
    assert c.bandwidth_Bps == pytest.approx(4e9, rel=1e-9)
    with pytest.raises(ValueError, match="no usable rows"):
        calibrate(other)


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


# --------------------------------------------------------------------------- CPU links

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name, path, column", [
    ("shm", scaling.links.CPU_RESULTS, "pycomm"),
    ("gloo-loopback", scaling.links.CPU_RESULTS, "stock"),
])
def test_cpu_links_are_the_fits_of_the_committed_results(name, path, column):
    """Each CPU link's figures are what the model's own fit gives for the rows its source
    names (rounded to 3 digits), so they move with the results, not by hand."""
    link = scaling.get_interconnect(name)
    fit = calibrate(REPO / path, backend=column)
    assert link.alpha_s == pytest.approx(fit.alpha_s, rel=0.01)
    assert link.bandwidth_Bps == pytest.approx(fit.bandwidth_Bps, rel=0.01)
    assert path in link.source


def test_cpu_links_between_hosts_are_gloos_fit_capped_by_the_wire():
    from pycomm.tools import results_schema

    rows = results_schema.rows(REPO / scaling.links.HOSTS_RESULTS, collective="all_reduce")
    alpha, bandwidth, _ = fit_alpha_beta(
        [(r["size"], 2, r["leaders_host_us"] * 1e-6) for r in rows])
    lines = {"eth-10g": 1.25e9, "eth-25g": 3.125e9, "eth-100g": 12.5e9, "ib-hdr": 25e9}
    for wire, line in lines.items():
        link = scaling.get_interconnect(f"gloo-{wire}")
        assert link.alpha_s == pytest.approx(alpha, rel=0.01)
        assert link.bandwidth_Bps == pytest.approx(min(line, bandwidth), rel=0.01)
        assert scaling.links.HOSTS_RESULTS in link.source
    assert scaling.get_interconnect("shared-memory").name == "shm"
    assert scaling.get_interconnect("loopback").name == "gloo-loopback"


def test_a_cpu_cluster_predicts():
    """8 CPU hosts x 4 ranks: shared memory inside, gloo over 10 GbE between. pycomm's
    shared memory beats gloo's loopback inside a host, and the hierarchy beats a flat ring."""
    shm, gloo, eth = (scaling.get_interconnect(n) for n in ("shm", "gloo-loopback",
                                                             "gloo-eth-10g"))
    work = Workload("cpu-mlp", step_compute_s=0.5, grad_bytes=40e6, batch_per_gpu=64,
                    epoch_images=100_000)
    on_shm = predict(work, Cluster(32, 4, shm, eth))
    on_gloo = predict(work, Cluster(32, 4, gloo, eth))
    assert 0 < on_shm.efficiency < 1 and on_shm.step_s <= on_gloo.step_s
    one_host_shm = predict(work, Cluster(4, 4, shm, shm))
    one_host_gloo = predict(work, Cluster(4, 4, gloo, gloo))
    assert one_host_shm.comm_s * 5 < one_host_gloo.comm_s
    for size in (64 * 1024, 25 * MIB):
        flat = scaling.flat_ring_allreduce_time(size, Cluster(32, 4, shm, eth))
        hier = scaling.hierarchical_allreduce_time(size, 8, 4, shm, eth)
        assert hier < flat
