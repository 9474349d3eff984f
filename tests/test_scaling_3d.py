"""The 3D model (pycomm/tools/scaling/three_d.py) against values worked out by hand, the
published parameter count of GPT-2, the limits of each dimension, and `pycomm predict --3d`."""
import json
import math
from dataclasses import asdict, replace

import pytest

from pycomm.tools import scaling
from pycomm.tools.cli import main
from pycomm.tools.scaling import Interconnect, Layout3D, Links3D, TransformerShape, predict_3d
from pycomm.tools.scaling import three_d

pytestmark = pytest.mark.fast

TP_LINK = Interconnect("t", 1e-6, 100e9)
PP_LINK = Interconnect("p", 10e-6, 10e9)
DP_LINK = Interconnect("d", 20e-6, 20e9)
LINKS = Links3D(dp=DP_LINK, tp=TP_LINK, pp=PP_LINK)

# The case worked by hand below: 8 layers of hidden 1024, 2 sequences of 512 a microbatch,
# 2 bytes an element, no vocabulary; dp 4 x tp 2 x pp 4, 8 microbatches, 1 ms of compute.
LAYOUT = Layout3D(dp=4, tp=2, pp=4, microbatches=8)
SHAPE = TransformerShape(layers=8, hidden=1024, seq=512, microbatch_size=2, bytes_per_element=2)


def test_hand_computed_case():
    p = predict_3d(LAYOUT, SHAPE, LINKS, compute_per_microbatch_s=1e-3)
    # P = 12·8·1024² + 13·8·1024 + 512·1024 = 100,663,296 + 106,496 + 524,288
    assert p.params == 101_294_080
    assert p.layers_per_stage == 2
    # dp: P·2 bytes / (tp·pp = 8) = 25,323,520 B a rank; the ring over 4 ranks sends 3/2 of it,
    # 2·3·20 us + 1.5 · 25,323,520 / 20e9 = 120 us + 1899.264 us
    assert p.dp.message_bytes == 25_323_520
    assert p.dp.messages == 1
    assert p.dp.sent_bytes_per_rank == pytest.approx(37_985_280)
    assert p.dp.seconds == pytest.approx(2019.264e-6, rel=1e-12)
    # tp: activations 2·512·1024·2 = 2,097,152 B; 4 all-reduces a layer x 2 layers x 8
    # microbatches = 64 a step, each 2·1 us + 2·(1/2) · 2,097,152 / 100e9 = 22.97152 us
    assert p.tp.message_bytes == 2_097_152
    assert p.tp.messages == 64
    assert p.tp.sent_bytes_per_rank == pytest.approx(64 * 2_097_152)
    assert p.tp_per_microbatch_s == pytest.approx(8 * 22.97152e-6, rel=1e-12)
    assert p.tp.seconds == pytest.approx(64 * 22.97152e-6, rel=1e-12)
    # pp: forward and backward message a microbatch, 10 us + 2,097,152 / 10e9 = 219.7152 us
    # each; a middle stage of 4 sends both ways: 2 x 8 x 2,097,152 B a step
    assert p.pp.messages == 16
    assert p.pp.sent_bytes_per_rank == pytest.approx(16 * 2_097_152)
    assert p.pp_per_microbatch_s == pytest.approx(439.4304e-6, rel=1e-12)
    # slot = 1000 + 183.77216 + 439.4304 us; (m+p-1) = 11 slots; the bubble 3 of them
    assert p.slot_s == pytest.approx(1623.20256e-6, rel=1e-12)
    assert p.pipeline_s == pytest.approx(11 * 1623.20256e-6, rel=1e-12)
    assert p.bubble_fraction == pytest.approx(3 / 11)
    assert p.bubble_s == pytest.approx(3 * 1623.20256e-6, rel=1e-12)
    assert p.step_s == pytest.approx(17855.22816e-6 + 2019.264e-6, rel=1e-12)
    # communication: 8 microbatches x (tp + pp) + dp
    comm = 8 * (183.77216e-6 + 439.4304e-6) + 2019.264e-6
    assert p.comm_fraction == pytest.approx(comm / 19874.49216e-6, rel=1e-12)
    assert p.in_flight_microbatches == 4


def test_the_step_is_its_parts():
    p = predict_3d(LAYOUT, SHAPE, LINKS, 1e-3, optimizer_s=5e-4)
    m = LAYOUT.microbatches
    parts = (m * p.compute_per_microbatch_s + m * (p.tp_per_microbatch_s + p.pp_per_microbatch_s)
             + p.bubble_s + p.dp.seconds + p.optimizer_s)
    assert p.step_s == pytest.approx(parts, rel=1e-12)


@pytest.mark.parametrize("pp", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 8, 32])
def test_bubble_is_narayanans(pp, m):
    # Narayanan et al. 2021 §2.2: the bubble is (p-1)/m of the ideal time m·(t_f + t_b),
    # so (p-1)/(m+p-1) of the pipeline's time; the same for GPipe and 1F1B.
    shape = replace(SHAPE, layers=8)
    ps = [predict_3d(Layout3D(1, 1, pp, m, schedule), shape, LINKS, 1e-3)
          for schedule in three_d.SCHEDULES]
    for p in ps:
        assert p.bubble_fraction == pytest.approx((pp - 1) / (m + pp - 1))
        assert p.bubble_s / (m * p.slot_s) == pytest.approx((pp - 1) / m)
        assert p.bubble_s / p.pipeline_s == pytest.approx(p.bubble_fraction)
    one_f_one_b, gpipe = ps
    assert one_f_one_b.step_s == gpipe.step_s
    # ... but not in memory: 1F1B's first stage holds at most p microbatches, GPipe all m
    assert one_f_one_b.in_flight_microbatches == min(m, pp)
    assert gpipe.in_flight_microbatches == m


def test_more_microbatches_shrink_the_bubble():
    fractions = [predict_3d(Layout3D(1, 1, 4, m), SHAPE, LINKS, 1e-3).bubble_fraction
                 for m in (1, 2, 4, 8, 16, 64)]
    assert fractions[0] == pytest.approx(3 / 4)
    assert fractions == sorted(fractions, reverse=True)


def test_megatron_tp_traffic():
    # Shoeybi et al. 2019: 2 all-reduces forward + 2 backward a layer, b·s·h elements each.
    for layers, pp, m in [(24, 1, 1), (24, 4, 8), (10, 3, 5)]:
        shape = replace(SHAPE, layers=layers)
        p = predict_3d(Layout3D(1, 8, pp, m), shape, LINKS)
        per_stage = math.ceil(layers / pp)
        assert p.layers_per_stage == per_stage
        assert p.tp.messages == 4 * per_stage * m
        assert p.tp.message_bytes == 2 * 512 * 1024 * 2
        one = scaling.ring_allreduce_time(p.tp.message_bytes, 8, TP_LINK.alpha_s,
                                          TP_LINK.bandwidth_Bps)
        assert p.tp.seconds == pytest.approx(4 * per_stage * m * one, rel=1e-12)
        assert p.tp.sent_bytes_per_rank == pytest.approx(p.tp.messages * 7 / 4 * 2_097_152)


def test_one_rank_a_dimension_moves_nothing_there():
    p = predict_3d(Layout3D(1, 1, 1, 4), SHAPE, LINKS, 1e-3)
    for d in (p.dp, p.tp, p.pp):
        assert d.messages == 0 and d.sent_bytes_per_rank == 0 and d.seconds == 0
    assert p.bubble_fraction == 0 and p.step_s == pytest.approx(4e-3)
    assert p.comm_fraction == 0
    # dp alone: the data-parallel ring of scaling.model on P·e bytes
    p = predict_3d(Layout3D(8, 1, 1, 1), SHAPE, LINKS, 1e-3)
    grads = SHAPE.param_count() * 2
    assert p.dp.seconds == pytest.approx(
        scaling.ring_allreduce_time(grads, 8, DP_LINK.alpha_s, DP_LINK.bandwidth_Bps))
    assert p.tp.seconds == p.pp.seconds == 0
    # two stages: each sends one way only, a message a microbatch
    p = predict_3d(Layout3D(1, 1, 2, 3), SHAPE, LINKS, 1e-3)
    assert p.pp.messages == 3
    assert p.pp.sent_bytes_per_rank == 3 * 2_097_152


def test_given_gradient_bytes_replace_the_even_split():
    p = predict_3d(LAYOUT, SHAPE, LINKS, grad_bytes_per_rank=1e6)
    assert p.dp.message_bytes == 1e6
    assert p.dp.seconds == pytest.approx(2 * 3 * 20e-6 + 1.5 * 1e6 / 20e9)


def test_parameter_count_is_gpt2s():
    # GPT-2 small and medium as released: 124,439,808 and 354,823,168 parameters, of which
    # the final layer norm's 2h is outside Narayanan's formula.
    small = TransformerShape(12, 768, 1024, 1, 2, vocab=50257)
    medium = TransformerShape(24, 1024, 1024, 1, 2, vocab=50257)
    assert small.param_count() + 2 * 768 == 124_439_808
    assert medium.param_count() + 2 * 1024 == 354_823_168
    assert replace(small, params=7).param_count() == 7


def test_flops_are_six_per_parameter_and_token_plus_attention():
    # 72·B·s·l·h²·(1 + s/(6h)) = 6 FLOPs x 12·l·h² parameters x B·s tokens, plus attention
    shape = TransformerShape(4, 1024, 2048, 2, 2, vocab=1000)
    tokens = 2 * 2048
    assert shape.microbatch_flops(4) == pytest.approx(6 * 12 * 4 * 1024**2 * tokens
                                                       * (1 + 2048 / (6 * 1024)))
    assert shape.logit_flops() == 6 * tokens * 1024 * 1000
    # The slowest stage: ceil(4/3) = 2 layers and the logits, split 2 ways, at 1 TFLOP/s
    layout = Layout3D(1, 2, 3, 1)
    expected = (shape.microbatch_flops(2) + shape.logit_flops()) / 2 / 1e12
    assert three_d.microbatch_compute_from_flops(shape, layout, 1e12) == pytest.approx(expected)
    with pytest.raises(ValueError, match="flops_per_s"):
        three_d.microbatch_compute_from_flops(shape, layout, 0)


def test_links_follow_the_hosts():
    nv, ib = Interconnect("nv", 2e-6, 300e9), Interconnect("ib", 5e-6, 25e9)
    layout = Layout3D(2, 2, 2, 1)    # ranks (dp, pp, tp) row-major: tp stride 1, pp 2, dp 4
    by_host = {per_host: Links3D.on_hosts(layout, per_host, nv, ib) for per_host in (1, 2, 4, 8)}
    assert by_host[8] == Links3D(dp=nv, tp=nv, pp=nv)
    assert by_host[4] == Links3D(dp=ib, tp=nv, pp=nv)
    assert by_host[2] == Links3D(dp=ib, tp=nv, pp=ib)
    assert by_host[1] == Links3D(dp=ib, tp=ib, pp=ib)
    # 4 tp ranks on hosts of 2: a ring across both, bound by its slowest hop
    mixed = Links3D.on_hosts(Layout3D(1, 4, 1, 1), 2, nv, ib).tp
    assert (mixed.alpha_s, mixed.bandwidth_Bps) == (5e-6, 25e9)


def test_point_to_point_fit_recovers_the_link():
    samples = [(size, 30e-6 + size / 2e9) for size in (8, 4096, 1 << 20, 16 << 20)]
    alpha, bandwidth, worst = three_d.fit_point_to_point(samples)
    assert alpha == pytest.approx(30e-6, rel=1e-9)
    assert bandwidth == pytest.approx(2e9, rel=1e-9)
    assert worst < 1e-9
    link = Interconnect("x", alpha, bandwidth)
    assert three_d.p2p_time(1 << 20, link) == pytest.approx(30e-6 + (1 << 20) / 2e9)
    assert three_d.p2p_time(0, link) == 0


def test_invalid_inputs():
    with pytest.raises(ValueError, match="tp"):
        Layout3D(1, 0, 1, 1)
    with pytest.raises(ValueError, match="microbatches"):
        Layout3D(1, 1, 1, 0)
    with pytest.raises(ValueError, match="schedule"):
        Layout3D(1, 1, 2, 4, "zero-bubble")
    with pytest.raises(ValueError, match="hidden"):
        TransformerShape(1, 0, 1, 1, 2)
    with pytest.raises(ValueError, match="compute"):
        predict_3d(LAYOUT, SHAPE, LINKS, compute_per_microbatch_s=-1)


# --------------------------------------------------------------------------- the command

def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


CASE = ["predict", "--3d", "--dp", "4", "--tp", "2", "--pp", "4", "--microbatches", "8",
        "--layers", "8", "--hidden", "1024", "--seq", "512", "--microbatch-size", "2",
        "--vocab", "0", "--microbatch-compute-s", "1e-3", "--gpus-per-host", "8",
        "--intra", "nvlink3", "--interconnect", "ib-hdr"]


def test_predict_3d_json_is_the_library_prediction(capsys):
    code, out, _ = run(capsys, *CASE, "--json")
    assert code == 0
    data = json.loads(out)
    nv, ib = scaling.get_interconnect("nvlink3"), scaling.get_interconnect("ib-hdr")
    links = Links3D.on_hosts(LAYOUT, 8, nv, ib)
    # 8 ranks a host: a tp pair and 4 stages of them (stride 2) fill one; dp crosses hosts
    assert links == Links3D(dp=ib, tp=nv, pp=nv)
    expected = predict_3d(LAYOUT, SHAPE, links, 1e-3)
    assert data["prediction"] == json.loads(json.dumps(asdict(expected)))


def test_predict_3d_prints_the_table(capsys):
    code, out, _ = run(capsys, *CASE)
    assert code == 0
    p = predict_3d(LAYOUT, SHAPE, Links3D.on_hosts(
        LAYOUT, 8, scaling.get_interconnect("nvlink3"), scaling.get_interconnect("ib-hdr")), 1e-3)
    assert "dp 4 x tp 2 x pp 4 = 32 ranks, 8 microbatches of 2 x 512 tokens" in out
    assert f"{p.params:,} parameters" in out
    assert "64 x 2 MiB all-reduce" in out                      # tp: 4 a layer x 2 x 8
    assert "(p-1)/(m+p-1) = 3/11 = 27.3%" in out
    assert f"= {p.step_s * 1e3:.3f} ms; communication {p.comm_fraction:.1%}" in out


def test_predict_3d_compute_from_tflops(capsys):
    code, out, _ = run(capsys, *CASE[:-8], "--tflops", "100", "--json")
    assert code == 0
    got = json.loads(out)["prediction"]["compute_per_microbatch_s"]
    assert got == pytest.approx(three_d.microbatch_compute_from_flops(SHAPE, LAYOUT, 100e12))


@pytest.mark.parametrize("extra,message", [
    (["--overlap", "0.5"], "--overlap"),
    (["--hierarchy"], "--hierarchy"),
    (["--gpus", "16"], "dp x tp x pp = 32"),
    (["--tflops", "100"], "not both"),
    (["--tp-link", "carrier-pigeon"], "interconnect"),
])
def test_predict_3d_errors(capsys, extra, message):
    code, _, err = run(capsys, *CASE, *extra)
    assert code == 2 and message in err, err
