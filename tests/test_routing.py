"""The routing and settings tables (csrc/core/routing.h, settings.h) as Python
reads them through pycomm._C, against what the backend runs."""
import pytest

from pycomm import _C, config, routing


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
    with pytest.raises(ValueError, match="PYCOMM_HIER_PIECE_KB: expected a number of 0 or more"):
        config.communicator_config(2, 1.0)
    with pytest.raises(ValueError, match="name: unknown setting 'spin'"):
        config.setting("spin")


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
