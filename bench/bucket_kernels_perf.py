"""Gradient-bucketing kernels on the CPU: pycomm flatten / unflatten against a
plain copy of the same bytes and against what torch offers.

    python bench/bucket_kernels_perf.py [--iters 15] [--json out.json]

One thread (torch.set_num_threads(1)): a rank packs its own gradients. Two
gradient lists: ResNet-50's parameters (161 tensors, 25.6 M floats) and many
small tensors. Every row is the median of --iters timed runs after a warm-up;
the rows of one list are timed in turns, so that a busy neighbour on a shared
machine slows them alike and no row finds the caches warmed by its own last run.

Columns: time (µs); GB/s = (bytes of the tensors read + bytes of the result
written) / time, the same count for every way of computing one result; vs memcpy =
that bandwidth over the bandwidth of `out.copy_(src)` on one tensor of the
list's total size in the same run (the memory-bandwidth ceiling). #wrong counts
elements that differ from torch's result (the bit patterns, NaN aside).
--json writes {"meta": {"threads", "iters", ...}, "rows": [...]} (pycomm.tools.results_schema).
"""
import argparse
import ctypes
import statistics

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

# harness first: it puts this checkout (built in place) ahead of an installed pycomm.
from harness.checks import bitwise_wrong as wrong
from harness.driver import write_json
from harness.table import Column, Table
from harness.timing import in_turns
from pycomm import bucket_ops


def resnet50_shapes():
    try:
        import torchvision
    except ImportError:
        raise SystemExit("bench/bucket_kernels_perf.py needs torchvision (pip install .[bench])")
    return [tuple(p.shape) for p in torchvision.models.resnet50().parameters()]


def small_shapes(count):
    # Biases, norm scales and small heads: 1 to 4096 elements, odd sizes included.
    sizes = [1, 7, 64, 128, 256, 513, 1000, 2048, 4096]
    return [(sizes[i % len(sizes)],) for i in range(count)]


def run_workload(label, shapes, iters):
    gen = torch.Generator().manual_seed(0)
    ts = [torch.randn(s, generator=gen) for s in shapes]
    total = sum(t.numel() for t in ts)
    f32, bf16 = 4, 2
    big = torch.randn(total, generator=gen)
    out = torch.empty(total)
    out_bf16 = torch.empty(total, dtype=torch.bfloat16)
    grads = [torch.empty_like(t) for t in ts]
    cases = []

    def row(name, fn, bytes_moved, check=None):
        cases.append({"op": name, "fn": fn, "bytes": bytes_moved, "check": check})

    # The ceiling: one contiguous copy of the same bytes, torch's and libc's.
    row("memcpy: out.copy_(src)", lambda: out.copy_(big), 2 * total * f32)
    row("memcpy: libc memmove", lambda: ctypes.memmove(out.data_ptr(), big.data_ptr(), total * f32),
        2 * total * f32)

    want = torch.cat([t.reshape(-1) for t in ts])
    # Pack, fp32 -> fp32.
    row("flatten: torch.cat", lambda: torch.cat([t.reshape(-1) for t in ts]), 2 * total * f32)
    row("flatten: _flatten_dense_tensors", lambda: _flatten_dense_tensors(ts), 2 * total * f32)
    row("flatten: torch.cat(out=)", lambda: torch.cat([t.view(-1) for t in ts], out=out),
        2 * total * f32)
    row("flatten: pycomm (allocates)", lambda: bucket_ops.flatten(ts), 2 * total * f32,
        lambda: wrong(bucket_ops.flatten(ts), want))
    row("flatten: pycomm (out=)", lambda: bucket_ops.flatten(ts, out=out), 2 * total * f32,
        lambda: wrong(bucket_ops.flatten(ts, out=out), want))

    # Unpack into existing tensors (DDP's grads), fp32 -> fp32.
    flat = want

    def torch_unflatten_copy():
        for g, v in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(v)

    def check_unflatten(fn):
        def check():
            for g in grads:
                g.zero_()
            fn()
            return sum(wrong(g, t) for g, t in zip(grads, ts))
        return check

    row("unflatten: _unflatten_dense_tensors + copy_", torch_unflatten_copy, 2 * total * f32,
        check_unflatten(torch_unflatten_copy))
    row("unflatten: _foreach_copy_",
        lambda: torch._foreach_copy_(grads, _unflatten_dense_tensors(flat, grads)), 2 * total * f32)
    row("unflatten: pycomm", lambda: bucket_ops.unflatten(flat, grads), 2 * total * f32,
        check_unflatten(lambda: bucket_ops.unflatten(flat, grads)))

    # Fused scale (average over 4 ranks), fp32.
    s = 0.25
    want_s = want * s
    row("flatten f32*s: torch.cat(out=).mul_",
        lambda: torch.cat([t.view(-1) for t in ts], out=out).mul_(s), 2 * total * f32)
    row("flatten f32*s: pycomm (out=)", lambda: bucket_ops.flatten(ts, scale=s, out=out),
        2 * total * f32, lambda: wrong(bucket_ops.flatten(ts, scale=s, out=out), want_s))

    # Fused scale and cast: the bf16-compressed all-reduce's pack and unpack.
    want16 = (want * s).to(torch.bfloat16)
    row("flatten bf16*s: torch cat, mul, to",
        lambda: torch.cat([t.view(-1) for t in ts], out=out).mul_(s).to(torch.bfloat16),
        total * (f32 + bf16))
    row("flatten bf16*s: pycomm (out=)",
        lambda: bucket_ops.flatten(ts, scale=s, out=out_bf16), total * (f32 + bf16),
        lambda: wrong(bucket_ops.flatten(ts, scale=s, out=out_bf16), want16))
    flat16 = want16
    back = _unflatten_dense_tensors(flat16.float() * (1 / s), grads)

    def torch_unflatten_cast():
        torch._foreach_copy_(grads, _unflatten_dense_tensors(flat16, grads))
        torch._foreach_mul_(grads, 1 / s)

    def check_cast():
        for g in grads:
            g.zero_()
        bucket_ops.unflatten(flat16, grads, scale=1 / s)
        return sum(wrong(g, b) for g, b in zip(grads, back))

    row("unflatten bf16/s: _foreach_copy_ + _foreach_mul_", torch_unflatten_cast,
        total * (f32 + bf16))
    row("unflatten bf16/s: pycomm", lambda: bucket_ops.unflatten(flat16, grads, scale=1 / s),
        total * (f32 + bf16), check_cast)

    rows = []
    for case, samples in zip(cases, in_turns([c["fn"] for c in cases], iters)):
        us = statistics.median(samples) * 1e6
        rows.append({"workload": label, "tensors": len(ts), "elements": total, "op": case["op"],
                     "time_us": us, "gbps": case["bytes"] / us / 1e3,
                     "wrong": case["check"]() if case["check"] else 0})
    return rows


TABLE = Table([Column("workload", 22, lambda r: f"{r['workload']} ({r['tensors']})", align="<"),
               Column("op", 50, "op", align="<"), Column("time (us)", 12, "time_us", ".0f"),
               Column("GB/s", 9, "gbps", ".2f"), Column("vs memcpy", 11, "vs_memcpy", ".2f"),
               Column("#wrong", 8, "wrong", "d")], sep="")


def print_table(rows):
    ceiling = {}
    for r in rows:
        if r["op"] == "memcpy: out.copy_(src)":
            ceiling[r["workload"]] = r["gbps"]
    for r in rows:
        r["vs_memcpy"] = r["gbps"] / ceiling[r["workload"]]
    header = TABLE.header()
    print(header)
    print("-" * len(header))
    last = None
    for r in rows:
        if last is not None and r["workload"] != last:
            print()
        last = r["workload"]
        print(TABLE.row(r))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=15, help="timed runs per row (median)")
    ap.add_argument("--small-count", type=int, default=10000, help="tensors in the small list")
    ap.add_argument("--json", metavar="PATH", help="write the rows as JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)

    rows = run_workload("resnet50", resnet50_shapes(), args.iters)
    rows += run_workload("small tensors", small_shapes(args.small_count), args.iters)
    print_table(rows)
    write_json(args.json, rows, dict(threads=1, iters=args.iters))


if __name__ == "__main__":
    main()
