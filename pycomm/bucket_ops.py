"""Gradient bucketing: pack a list of tensors into one flat bucket, and back.

    grads = [p.grad for p in params]
    flat = bucket_ops.flatten(grads, dtype=torch.bfloat16, scale=1 / world_size)
    ...  # all-reduce flat
    bucket_ops.unflatten(flat, grads)  # in place, cast back to the grads' dtype

Each call is a single pass over the bytes (one kernel launch on CUDA, one thread
on the CPU) with the scale and the dtype cast fused in. The bucket holds the
tensors one after another in list order, ``tensors[i]`` at elements
``[offset_i, offset_i + numel_i)``, ``offset_i`` being the sum of the numels
before it (no padding).

Arithmetic: in float64 if the source or destination is float64, else in float32;
the multiply is skipped when ``scale == 1`` (an exact copy or cast); narrowing
rounds to nearest even. The result equals ``(t.to(c) * scale).to(dtype)`` in
torch bit for bit, ``c`` being that compute dtype.

Requirements, checked before anything is written (a failed call leaves its
outputs as they were): every tensor dense, contiguous and on the bucket's
device; the tensors of one list share one dtype; dtypes are float32, float64,
float16 or bfloat16; the bucket is 1-D, contiguous, at least the total numel
long, and shares no memory with the tensors. Bad dtypes or layouts raise
TypeError, the rest ValueError, naming the argument.

The ops behind these functions are ``torch.ops.pycomm.flatten``,
``flatten_into`` and ``unflatten``; they work under FakeTensor and torch.compile.
"""
from typing import Iterable, Optional, Sequence

import torch

from . import _C  # noqa: F401  (loading the extension registers torch.ops.pycomm.*)

__all__ = ["flatten", "unflatten"]


def _as_list(tensors: Iterable[torch.Tensor]) -> Sequence[torch.Tensor]:
    return tensors if isinstance(tensors, (list, tuple)) else list(tensors)


def _raise_for_layout(op: str, name: str, tensors: Sequence[torch.Tensor]) -> None:
    # A sparse tensor never reaches the C++ checks (the dispatcher finds no
    # kernel for its backend), so name it here, on the error path only.
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.layout != torch.strided:
            raise TypeError(f"{op}: {name}[{i}] must be a dense (strided) tensor, got {t.layout}")


def flatten(
    tensors: Iterable[torch.Tensor],
    dtype: Optional[torch.dtype] = None,
    scale: float = 1.0,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Packs ``tensors`` into one 1-D bucket: ``bucket[offset_i + j] = tensors[i][j] * scale``.

    Args:
        tensors: contiguous tensors of one dtype on one device (list, tuple or iterable).
        dtype: the bucket's dtype; default the tensors' dtype (the default dtype for
            an empty list). Must match ``out.dtype`` when ``out`` is given.
        scale: multiplied in before the cast, e.g. ``1 / world_size``.
        out: an existing 1-D contiguous bucket with at least the total numel; only
            its first ``sum(t.numel())`` elements are written.

    Returns:
        The new bucket, or ``out``.
    """
    tensors = _as_list(tensors)
    try:
        if out is None:
            return torch.ops.pycomm.flatten(tensors, dtype, float(scale))
        if dtype is not None and dtype != out.dtype:
            raise TypeError(f"flatten: dtype={dtype} differs from out.dtype={out.dtype}")
        torch.ops.pycomm.flatten_into(tensors, out, float(scale))
        return out
    except NotImplementedError:
        _raise_for_layout("flatten", "tensors", tensors)
        if out is not None:
            _raise_for_layout("flatten", "out", [out])
        raise


def unflatten(flat: torch.Tensor, tensors: Iterable[torch.Tensor], scale: float = 1.0) -> None:
    """Scatters ``flat`` into ``tensors`` in place: ``tensors[i][j] = flat[offset_i + j] * scale``.

    The values are cast to the tensors' dtype. ``flat`` may be longer than the
    total numel; the rest of it is not read.

    Args:
        flat: the 1-D contiguous bucket, as ``flatten`` made it.
        tensors: contiguous tensors of one dtype on ``flat``'s device, written in place.
        scale: multiplied in before the cast, e.g. ``1 / world_size``.
    """
    tensors = _as_list(tensors)
    try:
        torch.ops.pycomm.unflatten(flat, tensors, float(scale))
    except NotImplementedError:
        _raise_for_layout("unflatten", "flat", [flat])
        _raise_for_layout("unflatten", "tensors", tensors)
        raise

