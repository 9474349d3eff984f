"""A reduced run of tests/scripts/compare_with_gloo.py: every collective and
object collective, on a dtype of each kind and every shape and layout, on gloo
and on pycomm in one long-lived world, bit for bit against the right result.
pycomm never refuses what gloo serves and never gives another result.

The whole grid (every torch dtype, 2 and 3 ranks) is the script's:
    torchrun --nproc_per_node 2 tests/scripts/compare_with_gloo.py
"""
import pytest
import torch

from support.dtypes_under_test import ALL_DTYPES, COMPLEX, OPAQUE, QUANTIZED
from support.process_world import validating_on_gloo

pytestmark = pytest.mark.ranks

# One of each kind: float and half, the integers gloo has and has not, bool,
# complex (with gloo's complex32 gaps), float8, bits, a sub-byte shell type,
# a quantized type (refused by torch before any backend).
REDUCED_DTYPES = ("float32", "bfloat16", "int8", "int16", "uint32", "uint64", "bool", "complex64",
                  "complex32", "float8_e5m2", "bits16", "uint4", "quint8")


def comparison_case(dtypes):
    import torch.distributed as dist

    import compare_with_gloo as cw  # tests/scripts is on pytest's path (pyproject.toml)

    results = cw.compare(dtypes=dtypes)
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, results)
    combined = cw.combine(gathered)
    return cw.summary(combined, dist.get_world_size()), {
        cls: sorted(str(case) for case, (c, _) in combined.items() if c == cls)
        for cls in cw.CLASSES}


@pytest.mark.fast
def test_the_dtype_axis_is_every_torch_dtype():
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    assert set(ALL_DTYPES.values()) == found
    for name in ("bool", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
                 "complex64", "complex128", "complex32"):
        assert name in ALL_DTYPES
    assert {"complex32", "complex64", "complex128"} <= set(COMPLEX)
    assert "float8_e4m3fn" in OPAQUE and "qint8" in QUANTIZED
    assert set(REDUCED_DTYPES) <= set(ALL_DTYPES)


@pytest.mark.skipif(validating_on_gloo(), reason="compares pycomm with gloo")
def test_pycomm_serves_what_gloo_serves_with_the_right_result(backend_worlds):
    results = backend_worlds(2).run(comparison_case, REDUCED_DTYPES, timeout=900)
    text, by_class = results[0]
    print(text)
    assert results[1][1] == by_class, "the ranks combined different results"
    for cls in ("pycomm refuses", "differ", "unclear refusal"):
        assert not by_class[cls], f"{len(by_class[cls])} cases '{cls}':\n{text}"
    # The grid reaches every kind of outcome it is there to tell apart.
    for cls in ("agree", "gloo wrong", "gloo refuses", "both refuse"):
        assert by_class[cls], f"no case '{cls}': the grid lost its reach\n{text}"
