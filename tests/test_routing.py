"""The routing and settings tables (csrc/core/routing.h, settings.h) as Python
reads them through pycomm._C, against what the backend runs."""
import pytest

from pycomm import _C, config, routing

pytestmark = pytest.mark.fast


def test_the_table_names_every_collective_plan_and_algorithm():
    assert routing.COLLECTIVES[:7] == ("all_reduce", "broadcast", "reduce", "all_gather",
                                       "reduce_scatter", "all_to_all", "barrier")
    assert set(routing.PLANS) == {"host", "hierarchical", "cuda", "fallback"}
    # Every algorithm has a description for doctor's plan, and nothing else does.
    assert set(routing.DESCRIPTIONS) == set(routing.ALGORITHMS)


@pytest.mark.parametrize("world,nbytes,expected", [
    (2, 64, "direct"), (2, 68, "ring"), (4, 64 << 10, "direct"), (4, (64 << 10) + 4, "ring"),
    (1, 1 << 30, "direct"),  # one rank: nothing to pipeline
])
def test_one_host_takes_direct_up_to_direct_max_bytes(world, nbytes, expected):
    r = routing.all_reduce_route(hosts=1, local_size=world, nbytes=nbytes)
    assert r == routing.Route("host", expected)
    assert routing.route("all_gather", local_size=world, count=nbytes // 4).algorithm == expected


def test_across_hosts_the_shard_form_needs_size_equal_hosts_and_an_element_per_rank():
    def algo(**kw):
        return routing.all_reduce_route(hosts=2, local_size=4, leader_max_bytes=1024, **kw).algorithm
    assert algo(nbytes=1024) == "leader"
    assert algo(nbytes=1028) == "rs-ar-ag"
    assert algo(nbytes=1 << 20, uniform=False) == "leader"
    assert routing.all_reduce_route(hosts=2, local_size=4, nbytes=12, leader_max_bytes=0).algorithm == "leader"
    assert routing.all_reduce_route(hosts=2, local_size=4, nbytes=16, leader_max_bytes=0).algorithm == "rs-ar-ag"
    assert routing.route("all_gather", hosts=2, local_size=2, uniform=False).algorithm == "gloo"
    assert routing.route("all_gather", hosts=2, local_size=2) == ("hierarchical", "local-index")


def test_what_pycomm_does_not_run_goes_to_the_fallback():
    for c, algorithm in (("gather", "direct"), ("scatter", "direct"), ("send", "channels"),
                         ("recv", "channels")):  # pycomm's on one host, gloo's across hosts
        assert routing.route(c) == ("host", algorithm)
        assert routing.route(c, hosts=2, local_size=2) == ("fallback", "gloo")
        assert routing.route(c, cuda=True) == ("fallback", "gloo")
    for c in ("all_reduce", "reduce", "reduce_scatter"):  # an op pycomm does not know
        assert routing.route(c, native_op=False) == ("fallback", "gloo")
    assert routing.route("broadcast", native_op=False).plan == "host"  # no reduction: op unused
    assert routing.route("all_reduce", cuda=True) == ("cuda", "direct")
    assert routing.route("all_reduce", cuda=True, hosts=2, local_size=1) == ("fallback", "gloo")
    assert routing.route("all_gather", cuda=True) == ("fallback", "gloo")
    for c in ("all_reduce", "broadcast", "all_gather"):  # sparse tensors: gloo's
        assert routing.route(c, sparse=True) == ("fallback", "gloo")


def test_every_dtype_and_op_is_pycomms_on_the_cpu():
    # dtype and layout decide nothing on CPU tensors: every dtype is moved, reduced
    # where it has arithmetic (refused, as gloo refuses, where not), every layout staged.
    for dtype in ("bool", "int16", "uint16", "uint32", "uint64", "float32", "opaque"):
        for op in ("sum", "max", "band", "bxor"):
            for c in ("all_reduce", "reduce", "reduce_scatter", "all_gather", "broadcast"):
                assert routing.route(c, dtype=dtype, op=op, contiguous=False).plan == "host"
                assert routing.route(c, dtype=dtype, op=op, hosts=2, local_size=2).plan == "hierarchical"
    for c in ("gather", "scatter", "send", "recv"):
        assert routing.route(c, dtype="bool").plan == "host"


def test_cuda_all_reduce_takes_what_its_kernels_take():
    # The CUDA kernels' dtypes and arithmetic ops (csrc/cuda/all_reduce_dispatch.h,
    # held to the table by the native test_cuda_protocol); the rest is gloo's.
    for dtype in ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"):
        for op in ("sum", "max", "min", "product"):
            assert routing.route("all_reduce", cuda=True, dtype=dtype, op=op) == ("cuda", "direct")
    assert routing.route("all_reduce", cuda=True, dtype="float16", op="avg").plan == "cuda"
    assert routing.route("all_reduce", cuda=True, dtype="int32", op="avg").plan == "fallback"
    for dtype in ("bool", "int16", "uint16", "uint32", "uint64", "opaque"):
        assert routing.route("all_reduce", cuda=True, dtype=dtype) == ("fallback", "gloo")
    for op in ("band", "bor", "bxor"):
        assert routing.route("all_reduce", cuda=True, dtype="int32", op=op) == ("fallback", "gloo")
    assert routing.route("all_reduce", cuda=True, contiguous=False) == ("fallback", "gloo")


@pytest.mark.parametrize("world,nbytes,expected", [
    (2, 64 << 20, "direct"),  # two ranks: one shot reads no more than the others
    (4, 256 << 10, "direct"), (4, (256 << 10) + 4, "two_shot"),
    (4, 8 << 20, "two_shot"), (4, (8 << 20) + 4, "ring"),
])
def test_the_table_picks_the_cuda_kernel_by_size(world, nbytes, expected):
    assert routing.route("all_reduce", cuda=True, local_size=world, count=nbytes // 4) == ("cuda", expected)


def test_a_symmetric_tensor_the_ring_would_take_goes_two_shot_in_place():
    big = dict(local_size=4, count=1 << 20, direct_max_bytes=64 << 10)
    assert routing.route("all_reduce", **big) == ("host", "ring")
    assert routing.route("all_reduce", symmetric=True, **big) == ("host", "two_shot")
    assert routing.route("all_reduce", symmetric=True, local_size=4, count=16,
                         direct_max_bytes=64 << 10) == ("host", "direct")
    assert routing.route("all_reduce", symmetric=True, hosts=2, **big).plan == "hierarchical"
    assert routing.route("all_gather", symmetric=True, **big) == ("host", "ring")


def test_route_rejects_what_it_does_not_know():
    with pytest.raises(ValueError, match="collective: unknown collective 'allreduce'"):
        _C.route("allreduce")
    with pytest.raises(ValueError, match="hosts, local_size"):
        _C.route("all_reduce", hosts=0)
    with pytest.raises(ValueError, match="count: expected a size of 0 or more, got -1"):
        _C.route("all_reduce", count=-1)
    with pytest.raises(ValueError, match="dtype: unknown dtype 'float8'"):
        _C.route("all_reduce", dtype="float8")
    with pytest.raises(ValueError, match="op: unknown op 'mean'; expected one of sum, avg"):
        _C.route("all_reduce", op="mean")
    with pytest.raises(OverflowError):
        _C.route("all_reduce", bytes=1 << 64)


def test_the_settings_table_is_what_the_communicator_takes():
    import pycomm

    names = [s.name for s in config.SETTINGS]
    assert len(set(names)) == len(names) and len({s.env for s in config.SETTINGS}) == len(names)
    assert all(s.env.startswith("PYCOMM_") and s.why for s in config.SETTINGS)
    # The C++ dict conversion is made from the same table: it takes every name, and only those.
    cfg = config.communicator_config(1, 5.0)
    assert list(cfg) == names
    _C = pycomm._C
    place = lambda: f"memfd:{_C.new_group_id()}"  # noqa: E731
    c = _C.Communicator(0, 1, place(), True, cfg)
    try:
        assert c.config == cfg
    finally:
        c.unlink_name()
        c.close()
    with pytest.raises(ValueError, match="config: unknown setting 'nope'"):
        _C.Communicator(0, 1, place(), True, {"nope": 1})
    # Every setting, or none of them defaults behind Python's back (its cores are Python's).
    partial = dict(cfg)
    del partial[names[-1]]
    with pytest.raises(ValueError, match=f"config: missing setting '{names[-1]}'"):
        _C.Communicator(0, 1, place(), True, partial)
    with pytest.raises(ValueError, match="place: expected 'posix:<name>' or 'memfd:"):
        _C.Communicator(0, 1, "somewhere", True, cfg)


def test_environment_variables_override_in_their_units(monkeypatch):
    monkeypatch.setenv("PYCOMM_HIER_LEADER_MAX_KB", "2.5")
    monkeypatch.setenv("PYCOMM_RESTORE_ON_FAILURE", "0")
    monkeypatch.setenv("PYCOMM_CUDA_BUFFER_MB", "1")
    assert config.setting("hier_leader_max_bytes") == 2560
    assert config.setting("restore_on_failure") is False
    cfg = config.communicator_config(2, 1.0)
    assert cfg["cuda_buffer_bytes"] == 1 << 20 and cfg["hier_leader_max_bytes"] == 2560
    # The routing rule reads the overridden threshold.
    assert routing.all_reduce_route(hosts=2, local_size=2, nbytes=2560).algorithm == "leader"
    assert routing.all_reduce_route(hosts=2, local_size=2, nbytes=2564).algorithm == "rs-ar-ag"
    monkeypatch.setenv("PYCOMM_SPIN_US", "fast")
    with pytest.raises(ValueError, match="PYCOMM_SPIN_US: expected a number, got 'fast'"):
        config.communicator_config(2, 1.0)
    monkeypatch.setenv("PYCOMM_SPIN_US", "0")
    monkeypatch.setenv("PYCOMM_HIER_PIECE_KB", "-4")
    with pytest.raises(ValueError, match=r"^PYCOMM_HIER_PIECE_KB: expected 0 to 4194304 KiB, got -4 KiB$"):
        config.communicator_config(2, 1.0)
    with pytest.raises(ValueError, match="name: unknown setting 'spin'"):
        config.setting("spin")


def _number(v: float) -> str:
    """A bound as the errors write it (settings_check.cpp): whole numbers in full."""
    return str(int(v)) if v == int(v) else repr(v)


def _range(s) -> str:
    """What the error says setting `s` may be, in its variable's unit."""
    unit = "" if s.unit in ("count", "0/1") else f" {s.unit}"
    return f"expected {_number(s.lo / s.factor)} to {_number(s.hi / s.factor)}{unit}"


NUMERIC = [s for s in config.SETTINGS if s.type != "choice"]


@pytest.mark.parametrize("s", NUMERIC, ids=lambda s: s.env)
def test_every_setting_refuses_what_is_past_its_bounds_naming_its_variable(monkeypatch, s):
    """nan, infinities, negatives and values past the top, set in the variable's unit, are
    refused before a communicator's settings exist; the bounds themselves are taken."""
    import re

    top = s.hi / s.factor
    for raw in ("nan", "inf", "-inf", "-1", repr(top * 2)):
        monkeypatch.setenv(s.env, raw)
        with pytest.raises(ValueError, match=f"^{re.escape(s.env)}: {re.escape(_range(s))}, got "):
            config.communicator_config(2, 1.0)
        with pytest.raises(ValueError, match=f"^{re.escape(s.env)}: "):
            config.setting(s.name)
    cast = {"int": int, "float": float, "bool": bool}[s.type]
    for bound in (s.lo, s.hi):
        monkeypatch.setenv(s.env, repr(bound / s.factor))
        assert config.setting(s.name) == cast(bound)


def test_a_huge_ring_buffer_is_refused_naming_the_variable_and_its_range(monkeypatch):
    """2^52 KiB: each ring buffer 2^62 bytes, four of them wrapped a rank's part of the segment
    to 0, and a 256 KiB all-reduce wrote past the end of a segment made too small."""
    monkeypatch.setenv("PYCOMM_RING_BUFFER_KB", "4503599627370496")
    with pytest.raises(ValueError, match=r"^PYCOMM_RING_BUFFER_KB: expected 0\.0625 to 4194304 KiB, "
                                         r"got 4503599627370496 KiB$"):
        config.communicator_config(2, 1.0)
    monkeypatch.setenv("PYCOMM_RING_BUFFER_KB", "4194304")  # the largest: 4 GiB
    assert config.communicator_config(2, 1.0)["link_bytes"] == 4 << 30


def test_every_default_lies_within_its_bounds():
    for world in (1, 2, 3, 64):
        for cores in (1, 2, 256, 8192):
            defaults = _C.default_config(world, cores)
            for s in NUMERIC:
                assert s.lo <= defaults[s.name] <= s.hi, (s.name, world, cores, defaults[s.name])
            defaults["timeout_s"] = 1.0
            _C.shared_memory_cost(world, defaults)  # the C++ side takes them as they are


def test_a_config_dict_past_the_bounds_is_refused_naming_the_key_and_its_variable():
    """pycomm._C takes a config dict from anyone who calls it: each value is checked as the
    variable's would be, and nothing is made from a bad one."""
    import os

    cfg = config.communicator_config(2, 1.0)
    cases = [
        ("link_bytes", 1 << 62, r"^config 'link_bytes' \(PYCOMM_RING_BUFFER_KB\): expected 0\.0625 to "
                                r"4194304 KiB, got 4503599627370496 KiB$"),
        ("timeout_s", float("nan"), r"^config 'timeout_s' \(PYCOMM_TIMEOUT\): expected 0\.001 to "
                                    r"1000000000 s, got nan s$"),
        ("timeout_s", float("inf"), r"^config 'timeout_s' \(PYCOMM_TIMEOUT\): .* got inf s$"),
        ("timeout_s", 0.0, r"^config 'timeout_s' \(PYCOMM_TIMEOUT\): .* got 0 s$"),
        ("link_buffers", 1, r"^config 'link_buffers' \(PYCOMM_RING_BUFFERS\): expected 2 to 1024, got 1$"),
        ("spin_us", 1e300, r"^config 'spin_us' \(PYCOMM_SPIN_US\): expected 0 to 1000000 us, got 1e\+300 us$"),
        ("p2p_frames", -1, r"^config 'p2p_frames' \(PYCOMM_P2P_FRAMES\): expected an integer of 0 or "
                           r"more, within 64 bits, got -1$"),
        ("slot_bytes", 1 << 64, r"^config 'slot_bytes' \(PYCOMM_DIRECT_KB\): expected an integer of 0 "
                                r"or more, within 64 bits, got 18446744073709551616$"),
    ]
    for key, value, pattern in cases:
        bad = dict(cfg, **{key: value})
        with pytest.raises(ValueError, match=pattern):
            _C.shared_memory_cost(2, bad)
        name = _C.new_segment_name("bounds")
        with pytest.raises(ValueError, match=pattern):
            _C.Communicator(0, 2, f"posix:{name}", True, bad)
        assert not os.path.exists(os.path.join(_C.shm_dir(), name)), f"{key}: a segment was made"


def test_a_group_whose_size_would_not_fit_in_64_bits_is_refused():
    """Within the bounds every size a group derives is far below overflow for any real group;
    past them (a native caller, or an absurd world) the arithmetic is checked, never wrapped."""
    big = dict(config.communicator_config(2, 1.0), slot_bytes=4 << 30, link_bytes=4 << 30,
               link_buffers=1024)
    # Derived, not mapped: two ranks of 4 TiB of ring link each.
    assert _C.shared_memory_cost(2, big)["session_bytes"] > 8 << 40
    with pytest.raises(ValueError, match=r"^the shared-memory data path \(PYCOMM_DIRECT_KB, "
                                         r"PYCOMM_RING_BUFFER_KB, PYCOMM_RING_BUFFERS and the ranks\): "
                                         r"\d+ [*+] \d+ does not fit in 64 bits$"):
        _C.shared_memory_cost(2**31 - 1, big)


def test_without_the_runtime_pycomm_imports_and_the_rest_says_why():
    import subprocess
    import sys

    code = """
import sys
sys.modules["torch"] = None  # as on a machine without torch: pycomm._C cannot load
import pycomm
assert not hasattr(pycomm, "all_reduce")
try:
    pycomm.init
except AttributeError as e:
    assert "needs pycomm's runtime" in str(e) and "torch" in str(e), e
else:
    raise AssertionError("pycomm.init without its runtime")
for name in ("config", "routing"):
    try:
        __import__("pycomm." + name)
    except ImportError as e:  # routing imports config first: either names the reason
        assert "reads its tables from pycomm's runtime, which did not load" in str(e), e
        assert "torch" in str(e), e
    else:
        raise AssertionError(f"pycomm.{name} without its runtime")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_spins_are_zero_only_when_ranks_outnumber_cores(monkeypatch):
    for var in ("PYCOMM_SPIN_US", "PYCOMM_STREAM_SPIN_US"):
        monkeypatch.delenv(var, raising=False)
    # A ring stream's wait spins about the time the peer takes to fill a 256 KiB buffer.
    assert _C.default_config(2, 2)["stream_spin_us"] == 64
    assert _C.default_config(2, 2)["spin_us"] == 20
    for name in ("spin_us", "stream_spin_us"):
        assert _C.default_config(3, 2)[name] == 0
    monkeypatch.setenv("PYCOMM_STREAM_SPIN_US", "5")
    assert config.communicator_config(2, 1.0)["stream_spin_us"] == 5
