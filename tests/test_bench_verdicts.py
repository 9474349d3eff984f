"""How the collectives and point-to-point benches judge pycomm against Open MPI with torch's
own per-call cost (the torch floor column) taken out, and when Open MPI's rounds pair with
pycomm's: on made-up rows, no ranks started."""
import pytest

from support.bench_script import BENCH  # noqa: F401  (puts bench/ on sys.path)
import collectives_perf  # noqa: E402
import p2p_perf  # noqa: E402
from harness import verdicts  # noqa: E402
from harness.peers import torch_floor  # noqa: E402
from harness.peers.peer import Peer  # noqa: E402
from harness.sweep import MPI_IN_TURNS, add_measurements  # noqa: E402

pytestmark = pytest.mark.bench


def row(size=64 << 10, pyc=(10.0, 12.0, 11.0), floor=(3.0, 4.0, 3.0), mpi=(8.0, 10.0, 9.0),
        in_turns=True):
    r = {"size": size, "pycomm_backend_rounds_us": list(pyc), "pycomm_backend_us": pyc[2],
         "torch_floor_rounds_us": list(floor), "torch_floor_us": min(floor, default=None),
         "mpi_rounds_us": list(mpi), "mpi_us": mpi[2], "ceiling_us": 2.0}
    if in_turns is not None:
        r["mpi_in_turns"] = in_turns
    return r


def test_net_ratio_takes_the_floor_out_round_by_round():
    # In turns: (10-3)/8, (12-4)/10, (11-3)/9 round by round.
    r = verdicts.net_ratio(row(), "pycomm_backend")
    assert r == pytest.approx((7 / 8, 0.8, 8 / 9))
    # MPI in a launch of its own: pycomm - floor is still paired, MPI's rounds are not.
    r = verdicts.net_ratio(row(in_turns=False), "pycomm_backend")
    assert r == pytest.approx((8 / 9, 7 / 10, 8 / 8))
    assert verdicts.net_ratio(row(floor=()), "pycomm_backend") is None
    no_mpi = row()
    del no_mpi["mpi_us"]
    assert verdicts.net_ratio(no_mpi, "pycomm_backend") is None


def test_judge_pairs_open_mpi_only_where_it_ran_in_turns():
    paired = verdicts.judge(row(), "pycomm_backend")
    assert paired["best"][0] == "Open MPI"
    assert paired["best"][1] == pytest.approx((11 / 9, 1.2, 10 / 8))
    # An older file, or MPI's own launch: the widest range the rounds allow.
    for r in (row(in_turns=False), row(in_turns=None)):
        assert verdicts.judge(r, "pycomm_backend")["best"][1] == pytest.approx(
            (11 / 9, 10 / 10, 12 / 8))
    j = verdicts.judge(row(), "pycomm_backend")
    assert j["floor"] == (3.0, 3.0, 4.0) and j["net_mpi"] == pytest.approx((7 / 8, 0.8, 8 / 9))


def test_derived_columns_only_for_a_column_through_dist():
    r = {"pycomm_backend_us": 10.0, "pycomm_direct_us": 2.0, "torch_floor_us": 3.0,
         "mpi_us": 5.0}
    assert torch_floor.derived(r, "pycomm_backend") == {
        "pycomm_minus_torch_us": 7.0, "pycomm_minus_torch_over_mpi": 1.4}
    # The direct API never enters torch.distributed: the floor is not its share.
    assert torch_floor.derived(r, "pycomm_direct") == {
        "pycomm_minus_torch_us": None, "pycomm_minus_torch_over_mpi": None}
    del r["mpi_us"]
    assert torch_floor.derived(r, "pycomm_backend")["pycomm_minus_torch_over_mpi"] is None


def test_add_measurements_marks_whether_mpi_ran_in_turns():
    def peer(label, key):
        p = Peer(label, key, "")
        p.calls = {"all_reduce": None}
        return p

    pyc, floor, mpi = peer("pycomm", "pycomm_backend"), peer("torch", "torch_floor"), \
        peer("mpi", "mpi")
    times = {"pycomm_backend": [10e-6], "torch_floor": [3e-6], "mpi": [5e-6]}
    base = dict(size=1024, busbw_factor=1.0)
    r = add_measurements(dict(base), "all_reduce", times, [1e-6], {"pycomm_backend": 0},
                         [pyc, floor, mpi], pyc, {})
    assert r[MPI_IN_TURNS] is True and r["mpi_rounds_us"] == pytest.approx([5.0])
    assert r["pycomm_minus_torch_us"] == pytest.approx(7.0)
    assert r["pycomm_minus_torch_over_mpi"] == pytest.approx(1.4)
    assert r["torch_floor_wrong"] is None
    # Open MPI's own launch: its row's rounds, not paired.
    r = add_measurements(dict(base), "all_reduce", times, [1e-6], {}, [pyc, floor], pyc,
                         {"rounds_us": [4.0], "wrong": 0})
    assert r[MPI_IN_TURNS] is False and r["mpi_us"] == pytest.approx(4.0)
    # No MPI column at all: no flag.
    r = add_measurements(dict(base), "all_reduce", times, [1e-6], {}, [pyc, floor], pyc, None)
    assert MPI_IN_TURNS not in r and r["pycomm_minus_torch_over_mpi"] is None


def test_collectives_judge_pycomm_within_1_25x_mpi_plus_torch_at_64k():
    primary = Peer("pycomm", "pycomm_backend", "")
    r = row()
    r.update(torch_floor.derived(r, "pycomm_backend"))
    text, met, net_met = collectives_perf.judged_at(r, primary)
    assert net_met is True  # (pyc - torch) / mpi <= 0.89 < 1.25 in every round
    assert "(pyc-torch)/mpi 0.88x (0.80-0.89) (met, pycomm <= 1.25 x mpi + torch)" in text
    assert "torch 3.0 us (3.0-4.0), pyc-torch 8.0 us" in text
    # pycomm - torch at 1.5x MPI's time in every round: missed.
    r = row(pyc=(15.0, 19.0, 16.5))
    assert collectives_perf.judged_at(r, primary)[2] is False
    # At 16 MiB there is no such target: the ratio is shown, nothing judged.
    r = row(size=16 << 20)
    text, _, net_met = collectives_perf.judged_at(r, primary)
    assert net_met is None and "(pyc-torch)/mpi 0.88x" in text and "pycomm <= " not in text


def test_p2p_judges_every_size_from_8_bytes_to_32_kib():
    primary = Peer("pycomm", "pycomm_backend", "")
    met = [row(size=s, pyc=(10.0, 12.0, 11.0)) for s in (8, 1024, 32 << 10)]
    text, ok = p2p_perf.net_target_text(met + [row(size=1 << 20, pyc=(99.0,) * 3)], primary)
    assert ok is True, text  # 1 MiB is outside the target's sizes
    assert "pycomm <= mpi + torch at 8 B..32 KiB: met (3/3 sizes met; worst" in text
    missed = met + [row(size=4096, pyc=(20.0, 20.0, 20.0))]
    text, ok = p2p_perf.net_target_text(missed, primary)
    assert ok is False and "MISSED (3/4 sizes met, missed at 4 KiB" in text, text
    straddles = met + [row(size=4096, pyc=(10.0, 14.5, 12.0))]
    text, ok = p2p_perf.net_target_text(straddles, primary)
    assert ok is None and "within the spread at 4 KiB" in text, text
    text, ok = p2p_perf.net_target_text([row(size=1 << 20)], primary)
    assert ok is None and "no size in this sweep" in text
    no_mpi = row(size=8)
    del no_mpi["mpi_us"]
    text, ok = p2p_perf.net_target_text([no_mpi], primary)
    assert ok is None and "no torch or mpi column" in text
