"""The dtype axes of the test grids.

DTYPES: the element types pycomm has arithmetic for and the reduction grids
cover with exact references (bool, complex and the 16/32/64-bit unsigned types
have grids of their own).

ALL_DTYPES: every dtype this torch defines, found by looking, not listed, so a
dtype a later torch adds is in every grid that takes ALL_DTYPES the day torch
has it: float8 and float4, the bits and sub-byte types, uint16/32/64, complex32
(and bcomplex32 where torch has it), the quantized types.
"""
import torch

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
}


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _every_dtype():
    found = {v for v in vars(torch).values() if isinstance(v, torch.dtype)}
    return {dtype_name(d): d for d in sorted(found, key=dtype_name)}


ALL_DTYPES = _every_dtype()

QUANTIZED = {n: d for n, d in ALL_DTYPES.items() if n.startswith(("qint", "quint"))}
COMPLEX = {n: d for n, d in ALL_DTYPES.items() if d.is_complex}
# The integer types beyond DTYPES that pycomm reduces (gloo takes none of them).
MORE_INTEGERS = {n: ALL_DTYPES[n] for n in ("int16", "uint16", "uint32", "uint64") if n in ALL_DTYPES}
# What pycomm reduces: DTYPES, MORE_INTEGERS, bool, and complex as pairs of reals.
REDUCIBLE = {**DTYPES, **MORE_INTEGERS, "bool": torch.bool, **COMPLEX}
# Element types with no arithmetic anywhere here (float8, float4, bits, sub-byte
# integers): moved by their bytes, refused by every reduction.
OPAQUE = {n: d for n, d in ALL_DTYPES.items() if n not in REDUCIBLE and n not in QUANTIZED}

