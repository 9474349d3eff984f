"""Hypothesis over shapes, strides, dtypes, devices and ops on one rank: every
call either works correctly or raises TypeError / ValueError; the process
never crashes (a crash would fail the run with "rank 0 died")."""
import pytest
import torch
import torch.distributed as dist
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pycomm

pytestmark = pytest.mark.ranks

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.int16, torch.bool, torch.complex64]
OPS = ["sum", "avg", "max", "min", "product", "mean", "", "SUM", "prod\x00", dist.ReduceOp.SUM,
       dist.ReduceOp.AVG, dist.ReduceOp.BAND, dist.ReduceOp.PREMUL_SUM if hasattr(dist.ReduceOp, "PREMUL_SUM") else "x",
       3, None]
ALGORITHMS = ["auto", "ring", "direct", "tree", "", None, 1.5]


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(st.lists(st.integers(0, 6), min_size=0, max_size=3))
    device = draw(st.sampled_from(["cpu", "cpu", "cpu", "meta"]))
    t = (torch.arange(int(torch.tensor(shape).prod().item()) if shape else 1) % 5)
    t = t.reshape(shape).to(dtype=dtype, device=device)
    view = draw(st.sampled_from(["plain", "transpose", "step", "expand", "offset", "sparse"]))
    if view == "transpose" and t.dim() >= 2:
        t = t.transpose(0, 1)
    elif view == "step" and t.dim() >= 1:
        t = t[::2]
    elif view == "expand" and t.dim() >= 1 and t.shape[0] == 1:
        t = t.expand(3, *t.shape[1:])
    elif view == "offset" and t.numel() > 1:
        t = t.flatten()[1:]
    elif view == "sparse" and device == "cpu" and t.dim() >= 1 and dtype != torch.bool:
        t = t.to_sparse()
    return t


def fuzz_case(max_examples):
    outcomes = {"ok": 0, "TypeError": 0, "ValueError": 0}
    failures = []

    @settings(max_examples=max_examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(t=tensors(), op=st.sampled_from(OPS), algorithm=st.sampled_from(ALGORITHMS),
           async_op=st.booleans())
    def check(t, op, algorithm, async_op):
        before = t.clone() if t.device.type == "cpu" and not t.is_sparse else None
        try:
            work = pycomm.all_reduce(t, op=op, algorithm=algorithm, async_op=async_op)
            if async_op:
                work.wait()
        except (TypeError, ValueError) as e:
            outcomes[type(e).__name__] += 1
            if before is not None and not torch.equal(t, before):
                failures.append(f"{type(e).__name__} but the tensor changed: {e}")
            return
        except Exception as e:  # noqa: BLE001
            failures.append(f"{type(e).__name__}: {e} for dtype={t.dtype} shape={tuple(t.shape)} "
                            f"op={op!r} algorithm={algorithm!r}")
            return
        outcomes["ok"] += 1
        # One rank: every op leaves the values as they were.
        if before is not None and not torch.equal(t, before):
            failures.append(f"wrong result for dtype={t.dtype} op={op!r}")

    check()
    return outcomes, failures


def test_argument_checks_never_crash(worlds):
    [(outcomes, failures)] = worlds(1).run(fuzz_case, 400)
    assert not failures, failures[:5]
    # The strategy reaches every outcome, so the test can tell them apart.
    assert all(n > 0 for n in outcomes.values()), outcomes
