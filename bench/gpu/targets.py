"""Issue 48's targets, judged from a GPU check's results (bench/gpu/summary.py prints these
lines under its table): between 2 processes under MPS on one GPU, pycomm's CUDA all-reduce
beside NCCL and beside PyTorch's symmetric memory, and ResNet-50's ring_hook step beside
DDP over NCCL. Each line says met or missed with the worst ratio and where, or why the
target could not be judged. Times are the benches' medians, taken in turns. pycomm's time is
its default route's ("pycomm auto", what a user's call takes), not the best of the
algorithms named by hand. The documents
come read and checked by summary.py (pycomm.tools.results_schema's shape)."""
from __future__ import annotations

SMALL_MAX = 1 << 20        # pycomm at most NCCL's time from 8 B to here
LARGE = 256 << 20          # and at least this share of NCCL's bus bandwidth here
LARGE_SHARE = 0.9
SYMM_MAX = 64 << 10        # and at most symmetric memory's one-shot time up to here


def _times(doc, prefix):
    """{bytes: the fastest median of the rows whose name starts with prefix}."""
    best = {}
    for r in doc["rows"]:
        if r["name"].startswith(prefix) and "us" in r:
            best[r["bytes"]] = min(best.get(r["bytes"], float("inf")), r["us"])
    return best


def _why_not(doc, prefix):
    return next((r.get("why") for r in doc["rows"] if r["name"].startswith(prefix)
                 and "us" not in r), None) or "no rows"


def _worst(ours, theirs, sizes):
    """(the largest ratio of our time to theirs over sizes, its size) or None."""
    ratios = [(ours[s] / theirs[s], s) for s in sizes if s in ours and s in theirs]
    return max(ratios) if ratios else None


def _verdict(text, worst, limit):
    if worst is None:
        return f"target: {text}: not judged (no size with both)"
    ratio, size = worst
    return (f"target: {text}: {'met' if ratio <= limit else 'MISSED'} "
            f"(worst {ratio:.2f}x at {size} B)")


def all_reduce_lines(procs, symm=None):
    """procs: mps_procs_2's document (pycomm and nccl columns); symm: mps_symm_2's."""
    ours = _times(procs, "pycomm auto")
    nccl = _times(procs, "nccl")
    lines = []
    if not nccl:
        lines.append(f"target: pycomm vs NCCL: not judged: NCCL did not run "
                     f"({_why_not(procs, 'nccl')})")
    else:
        small = [s for s in nccl if s <= SMALL_MAX]
        lines.append(_verdict("pycomm's all-reduce at most NCCL's time, 8 B to 1 MiB",
                              _worst(ours, nccl, small), 1.0))
        lines.append(_verdict(f"pycomm's bus bandwidth at least {LARGE_SHARE} of NCCL's at 256 MiB "
                              f"(time at most {1 / LARGE_SHARE:.2f}x)",
                              _worst(ours, nccl, [LARGE]), 1 / LARGE_SHARE))
    one_shot = _times(symm, "symm one_shot") if symm else {}
    if not one_shot:
        lines.append("target: pycomm vs symmetric memory's one-shot: not judged: "
                     + ("no mps_symm_2 result" if not symm else _why_not(symm, "symm one_shot")))
    else:
        lines.append(_verdict("pycomm's all-reduce at most symmetric memory's one-shot time, "
                              "8 B to 64 KiB", _worst(ours, one_shot,
                                                      [s for s in one_shot if s <= SYMM_MAX]), 1.0))
    return lines


def ddp_lines(doc):
    """ddp_resnet50's document: the ring_hook step at most DDP-over-NCCL's."""
    records, meta = doc["rows"], doc.get("meta", {})
    step = {r["mode"]: r["step_time_s"] for r in records if r.get("available")}
    if meta.get("stock_backend") != "nccl" or "stock" not in step:
        return [f"target: ResNet-50's ring_hook step at most DDP over NCCL's: not judged: the "
                f"stock all-reduce ran over {meta.get('stock_backend', '?')} "
                f"({meta.get('stock_reason') or 'its step did not run'})"]
    if "ring" not in step:
        return ["target: ResNet-50's ring_hook step at most DDP over NCCL's: not judged: "
                "the ring mode did not run"]
    ratio = step["ring"] / step["stock"]
    nccl = next((r["nccl"] for r in records if r.get("nccl")), "?")
    return [f"target: ResNet-50's ring_hook step at most DDP over NCCL's ({nccl}): "
            f"{'met' if ratio <= 1.0 else 'MISSED'} ({step['ring'] * 1e3:.1f} vs "
            f"{step['stock'] * 1e3:.1f} ms, {ratio:.2f}x)"]


def lines(results):
    """The targets' lines from a results.json's documents, where the steps left any."""
    def measured(name):  # a dry run's entry is its plan, not a result
        doc = results.get(name)
        return doc if isinstance(doc, dict) and isinstance(doc.get("rows"), list) else None

    out = []
    if measured("mps_procs_2"):
        out += all_reduce_lines(measured("mps_procs_2"), measured("mps_symm_2"))
    if measured("ddp_resnet50"):
        out += ddp_lines(measured("ddp_resnet50"))
    return out
