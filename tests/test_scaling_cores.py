"""The many-core model (pycomm.tools.scaling.cores): a ring all-reduce's bytes per rank, the
bounds of cores, sockets and the socket link, and its calibration from thread_scaling."""
import pytest

from pycomm.tools.scaling import cores

pytestmark = pytest.mark.fast

# thread_scaling's output as the GPU machine's host printed it (2026-12-04), two launches.
OUTPUT = """\
vector path: avx2+f16c; 64 MiB a buffer; 16 core(s) in this process's affinity
loop                             threads         GB/s         (range) x 1 thread
memcpy                                 1         9.66  ( 9.27-10.10)      1.00
memcpy                                16       115.58  (64.15-123.73)     11.96
reduce float32 sum, 2 sources          1        10.00  ( 9.04-11.23)      1.00
reduce float32 sum, 2 sources         16        86.03  (79.91-113.39)      8.60
vector path: avx2+f16c; 16 MiB a buffer; 16 core(s) in this process's affinity
loop                             threads         GB/s         (range) x 1 thread
memcpy                                 1        23.86  (10.56-25.20)      1.00
memcpy                                 8        86.84  (57.68-95.50)      3.64
reduce float32 sum, 2 sources          1        21.26  (15.60-23.31)      1.00
reduce float32 sum, 2 sources          8        73.41  (56.55-81.01)      3.45
"""
MIB = 1 << 20


def test_a_ring_rank_moves_six_r_minus_four_over_r_tensors():
    assert cores.ring_bytes_per_rank(2, 16 * MIB) == 4 * 16 * MIB
    assert cores.ring_bytes_per_rank(8, 8 * MIB) == 44 * MIB
    assert cores.ring_bytes_per_rank(1, MIB) == 2 * MIB


def test_each_bound_sets_the_time_where_it_is_the_tightest():
    host = cores.CpuHost("h", 1, 16, 10e9, 40e9, 40e9)
    one, four, eight = (cores.all_reduce_time(host, 2, t, 16 * MIB) for t in (1, 4, 8))
    assert one.bound == "cores" and one.per_rank_Bps == 10e9
    assert four.bound == "socket" and four.per_rank_Bps == 20e9  # two ranks share 40 GB/s
    assert eight.seconds == four.seconds  # past the socket's ceiling threads add nothing
    assert one.seconds > 1.9 * four.seconds
    narrow = cores.CpuHost("n", 2, 16, 10e9, 40e9, 1e9)
    assert cores.all_reduce_time(narrow, 8, 1, 16 * MIB).bound == "link"
    # Threads beyond a socket's cores over its ranks only take turns.
    assert (cores.all_reduce_time(host, 8, 8, MIB).per_rank_Bps
            == cores.all_reduce_time(host, 8, 2, MIB).per_rank_Bps)
    with pytest.raises(ValueError, match="ranks and threads"):
        cores.all_reduce_time(host, 0, 1, MIB)


def test_the_two_level_form_moves_as_the_routing_rule_says_and_crosses_half_as_much():
    # 2 domains of L ranks: 5 + 4/L tensors a rank against the ring's 6 - 2/L; equal at L = 6.
    assert cores.two_level_bytes_per_rank(4, 2, MIB) == 7 * MIB
    assert cores.two_level_bytes_per_rank(12, 2, MIB) == pytest.approx(cores.ring_bytes_per_rank(12, MIB))
    assert cores.two_level_bytes_per_rank(4, 1, MIB) == 5.25 * MIB  # one domain: no exchange
    # Where the link binds, the ring's 2(R-1)/R tensors across it each way against one.
    narrow = cores.CpuHost("n", 2, 16, 10e9, 40e9, 1e9)
    ring, two = cores.all_reduce_time(narrow, 8, 1, 16 * MIB), cores.two_level_time(narrow, 8, 1, 16 * MIB)
    assert ring.bound == two.bound == "link"
    assert ring.seconds / two.seconds == pytest.approx(1.75, rel=0.05)
    # Where memory binds (the posed two-socket host), 4 ranks a socket: the ring's fewer bytes win.
    host = cores.TWO_SOCKETS
    assert cores.all_reduce_time(host, 8, 4, 16 * MIB).seconds < cores.two_level_time(host, 8, 4, 16 * MIB).seconds


def test_calibration_reads_one_launch_of_thread_scaling():
    host = cores.calibrate_cores(OUTPUT, mib=16)
    assert host.core_Bps == pytest.approx((23.86 + 21.26) / 2 * 1e9)
    assert host.socket_Bps == pytest.approx(86.84e9) and host.cores_per_socket == 16
    assert cores.calibrate_cores(OUTPUT).core_Bps == pytest.approx((9.66 + 10.00) / 2 * 1e9)
    with pytest.raises(ValueError, match="link_Bps"):
        cores.calibrate_cores(OUTPUT, sockets=2)
    with pytest.raises(ValueError, match="thread_scaling"):
        cores.calibrate_cores("nothing here")


def test_the_prediction_for_two_ranks_of_eight_threads_at_16_mib(capsys):
    # The stated prediction (docs/performance.md): 1.3-1.9x over one thread, socket-bound.
    p1 = cores.all_reduce_time(cores.H200_HOST, 2, 1, 16 * MIB)
    p8 = cores.all_reduce_time(cores.H200_HOST, 2, 8, 16 * MIB)
    assert p8.bound == "socket" and 1.3 <= p1.seconds / p8.seconds <= 1.9
    cores.main(["--ranks", "2", "--threads", "1,8", "--sizes-mib", "16"])
    out = capsys.readouterr().out
    assert "16 MiB" in out and "socket" in out
