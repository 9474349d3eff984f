#!/usr/bin/env python
"""Collective sweep in the style of nccl-tests: pycomm beside gloo and Open MPI.

    python bench/collectives_perf.py -b 8 -e 256M -f 4 --nproc 2 --json out.json
    python bench/collectives_perf.py --collective all_reduce,all_gather -b 64K -e 16M
    torchrun --nproc-per-node 2 bench/collectives_perf.py --collective broadcast

Collectives (--collective, default all of them): all_reduce, broadcast (root 0), reduce
(root 0), all_gather (dist.all_gather_into_tensor), reduce_scatter
(dist.reduce_scatter_tensor) and all_to_all (dist.all_to_all_single, even splits).

Peers, measured side by side in one run, in turns:
  pycomm     pycomm as a torch.distributed backend: a dist.new_group(backend="pycomm")
             group, called through dist.* (absent, with a line saying why, when
             `import pycomm` has not registered the backend)
  gloo       the default group, which the bench starts with gloo
  direct     all_reduce only: pycomm.all_reduce, pycomm's direct API (it runs inline in
             the caller when the communicator is idle)
  norestore  all_reduce only: the direct API without its restore-on-failure copy, to show
             what that guarantee costs
  mpi        Open MPI through mpi4py on numpy buffers (bench/mpi_collectives.py: Allreduce,
             Bcast, Reduce, Allgather, Reduce_scatter_block, Alltoall), when `mpirun` and
             mpi4py are present. MPI is timed in its own `mpirun` launch, before the other
             peers start, not interleaved with them: its rounds are its own.
  deepspeed  all_reduce only (sum, float32 or bfloat16): DeepSpeed's shared-memory
             all-reduce (inference_all_reduce), when deepspeed is importable (never installed
             by this script)

--hosts H (all_reduce, all_gather, reduce_scatter, broadcast, ...): the ranks pose as H
hosts of N/H ranks each, ranks 0..N/H-1 on the first (PYCOMM_HOST_ID while the groups are
made), and the peers become:
  hier       the pycomm backend over the fake hosts: shared memory inside each host, gloo
             between them (csrc/torch/hierarchical.h); the ratios are against this one
  gloo       flat gloo over all N ranks (the default group)
  flat-pyc   the pycomm backend over all N ranks as one host: one shared-memory ring, which
             only exists because the "hosts" share this machine
  intra      all_reduce only: pycomm reduce_scatter of the whole message among one host's
             ranks, then all_gather back, every host at once (the first and last steps of the
             hierarchical all-reduce)
  inter      all_reduce only: gloo all_reduce of a 1/L shard (L = N/H) among the ranks with
             one local index, every index at once (its middle step)
intra and inter calibrate pycomm.tools.scaling's hierarchical model (`pycomm predict
--hier-calibrate FILE.json` compares its prediction with hier's times); #wrong is '-' there.

Size and count, as nccl-tests prints them. size is the bytes of the larger of a rank's
input and output: the tensor for all_reduce, broadcast and reduce; the output (N chunks)
for all_gather; the input (N chunks) for reduce_scatter; the input (which is as large as
the output) for all_to_all. -b/-e/-f give the sizes; a size that is not a whole number of
elements (or of N chunks) is rounded down, to one element (chunk) at least, and the row
shows the bytes actually moved. count is nccl-tests' count: the tensor's elements for
all_reduce, broadcast and reduce, one chunk's (size / N) for the other three. The sweep
always includes 64 KiB and 16 MiB when -b..-e covers them: the issue's targets are there.

Bandwidth, by nccl-tests' convention. algbw = size / time. busbw = algbw x a factor that
makes it comparable with the bandwidth of a link, whatever the collective (N ranks):
  all_reduce                            2(N-1)/N
  all_gather, reduce_scatter, all_to_all  (N-1)/N
  broadcast, reduce                     1
(with one rank, the factor is 1). GB/s are 1e9 bytes per second.

Time. Each call is timed on its own; a rank's time is the median of its calls (their
number set by rank 0's first estimate and shared, so that every rank makes the same
calls), and the time of a round is the slowest rank's median. The peers are measured in
turns, round-robin for each size, --rounds times; the time reported is the median of the
rounds and the spread (the `+-` column, in %) is (slowest - fastest round) / median. A
shared machine's slow spells then touch every peer alike, and show in the spread.

#wrong. A separate check, after the timing: each peer runs the collective once on
integer-valued data (small integers, exact in every dtype) and every rank counts the
elements that differ from an exact reference computed here; the column is the sum over
the ranks (for reduce, the root's). With op avg the last rank's values are chosen so the
sum divides by N: the average is an integer in every dtype. premul_sum multiplies by 2.
A peer that lacks the op (gloo has no premul_sum) times sum instead, and shows `-`.

Ceiling: a memory-bandwidth ceiling measured in the same run, in the same turns: every
rank at once memcpys twice the collective's bus bytes (size x the busbw factor: the bytes
a rank must move at least, by the convention above; twice, because a transport through a
shared staging buffer copies each byte in and out). `of_ceil` is ceiling time / pycomm
time (1.0: as fast as those plain copies). For all_reduce with 2 ranks it is the old
allreduce_perf.py ceiling: two copies of the tensor.

Ratios: `gloo/pyc` = gloo time / pycomm time; `pyc/mpi` = pycomm time / MPI time (all
collectives; the all_reduce target is <= 1 at every size). "pycomm" in the ratios is the
backend group, or for all_reduce the direct API when the backend is absent. The closing
summary gives, per collective, the pycomm/gloo speedup at 64 KiB and 16 MiB against the
issue's targets (>= 20x and >= 4x).

--json writes {"meta": ..., "rows": [...], "summary": [...]}. A row has the common
fields (collective, size, count, dtype, op, world_size, busbw_factor, ceiling_us, ...) and
per peer <peer>_us, _algbw, _busbw, _wrong, _spread, _rounds_us, with the peers named
pycomm_backend, gloo, pycomm_direct, pycomm_norestore, mpi, deepspeed. The all_reduce rows
also carry the fields that pycomm.tools.scaling.calibrate fits (ddp_resnet50.py
--calibration, pycomm predict --calibrate): pycomm_us (the direct API), stock_us (gloo),
wrong; other collectives lack pycomm_us, so a calibration leaves them out.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_launch import launch  # noqa: E402  (also puts the repository root on sys.path)

# This module's top level imports neither torch nor numpy: bench/mpi_collectives.py imports
# its data pattern and reference under mpirun.

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")
OPS = ("sum", "avg", "max", "min", "product", "premul_sum")
COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
ROOTED = ("broadcast", "reduce")
# The calls behind each name, for the header.
CALLS = {"all_reduce": "all_reduce", "broadcast": "broadcast", "reduce": "reduce",
         "all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor",
         "all_to_all": "all_to_all_single"}
ROOT = 0
PREMUL_FACTOR = 2.0
# The targets: pycomm/gloo speedup at these sizes, for every collective.
TARGETS = ((64 << 10, 20.0), (16 << 20, 4.0))
# --hosts: the hierarchical all-reduce against flat gloo over all ranks (issue 10).
HIER_TARGETS = ((16 << 20, 2.0),)
# Elements per block when filling and checking data: bounds the check's extra memory.
CHECK_BLOCK = 1 << 22
MPI_HINT = ("apt-get install -y openmpi-bin libopenmpi-dev && pip install mpi4py")


# --------------------------------------------------------------------------- sizes

def parse_size(text: str) -> int:
    """Bytes from '8', '64K', '1M', '1.5G' (K, M, G: powers of 1024; a trailing B is fine)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 8, 64K, 1M or 1G, "
                                         f"got {text!r}") from None


def sweep_sizes(begin: int, end: int, factor: float):
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = int(s * factor) if factor > 1 else s + 1
    out += [t for t, _ in TARGETS if begin <= t <= end]
    return sorted(set(out))


def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def busbw_factor(collective: str, n: int) -> float:
    if n < 2:
        return 1.0
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def layout(collective: str, size: int, esize: int, n: int) -> dict:
    """Element counts of one rank's input and output for a requested size (nccl-tests)."""
    if collective in ("all_reduce", "broadcast", "reduce"):
        count = max(size // esize, 1)
        return dict(count=count, in_numel=count, out_numel=count, size=count * esize)
    chunk = max(size // esize // n, 1)
    full = chunk * n
    ins = {"all_gather": chunk, "reduce_scatter": full, "all_to_all": full}[collective]
    outs = {"all_gather": full, "reduce_scatter": chunk, "all_to_all": full}[collective]
    return dict(count=chunk, in_numel=ins, out_numel=outs, size=full * esize)


# --------------------------------------------------------------------------- data and reference
# Plain arithmetic on index arrays, so that torch tensors and numpy arrays both work; `xp`
# is torch or numpy where a function is needed.

def values(rank, idx, n: int, op: str):
    """Rank `rank`'s integer-valued input at element indices `idx` (rank may be an array)."""
    if op == "product":
        return (idx + rank) % 2 + 1  # 1s and 2s: every product is an exact power of two
    v = (idx * 7 + rank * 13) % 5
    if op == "avg" and isinstance(rank, int) and rank == n - 1:
        # Top the last rank up so that the sum is a multiple of n: an exact average.
        total = v
        for q in range(n - 1):
            total = total + (idx * 7 + q * 13) % 5
        v = v + (-total) % n
    return v


def reduced(idx, n: int, op: str, xp):
    """The exact reduction over the n ranks' values at `idx`."""
    out = values(0, idx, n, op)
    for r in range(1, n):
        v = values(r, idx, n, op)
        if op in ("sum", "avg", "premul_sum"):
            out = out + v
        elif op == "product":
            out = out * v
        elif op == "max":
            out = xp.maximum(out, v)
        elif op == "min":
            out = xp.minimum(out, v)
        else:
            raise ValueError(f"op: unknown {op!r}")
    if op == "avg":
        out = out // n
    elif op == "premul_sum":
        out = out * int(PREMUL_FACTOR)
    return out


def input_values(collective: str, rank: int, idx, n: int, op: str):
    """What rank `rank` puts in its input at `idx` for the check (broadcast: the root's
    values; the other ranks' inputs are overwritten with a sentinel by the caller)."""
    return values(rank, idx, n, op if collective in REDUCING else "sum")


def expected(collective: str, rank: int, idx, n: int, chunk: int, op: str, xp):
    """The exact output of rank `rank` at output indices `idx`."""
    if collective == "all_reduce" or collective == "reduce":
        return reduced(idx, n, op, xp)
    if collective == "broadcast":
        return values(ROOT, idx, n, "sum")
    if collective == "all_gather":
        return values(idx // chunk, idx % chunk, n, "sum")
    if collective == "reduce_scatter":
        return reduced(idx + rank * chunk, n, op, xp)
    if collective == "all_to_all":
        return values(idx // chunk, rank * chunk + idx % chunk, n, "sum")
    raise ValueError(f"collective: unknown {collective!r}")


SENTINEL = 7  # outside the values' range 0..4 (a non-root's broadcast input)


# --------------------------------------------------------------------------- timing

class Timer:
    """Times a callable over the ranks of the default group (see the module doc)."""

    def __init__(self, args, rounds: int):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.min_time_s = args.min_time / max(rounds, 1)
        self.min_iters, self.max_iters, self.warmup = args.min_iters, args.max_iters, args.warmup

    def max_over_ranks(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return t.tolist()

    def sum_over_ranks(self, values):
        t = self.torch.tensor(values, dtype=self.torch.float64)
        self.dist.all_reduce(t)
        return t.tolist()

    def calls(self, fn) -> float:
        """Seconds per call: this rank's median, then the slowest rank's."""
        for _ in range(self.warmup):
            fn()
        clock = time.perf_counter
        t0 = clock()
        fn()
        first = clock() - t0
        n = self.torch.tensor([min(self.max_iters,
                                   max(self.min_iters, int(self.min_time_s / max(first, 1e-7))))])
        self.dist.broadcast(n, 0)
        samples = []
        for _ in range(int(n.item())):
            t0 = clock()
            fn()
            samples.append(clock() - t0)
        return self.max_over_ranks([statistics.median(samples)])[0]


def summarize(rounds_s):
    """(median seconds, spread): the rounds' median and (max - min) / median."""
    med = statistics.median(rounds_s)
    return med, (max(rounds_s) - min(rounds_s)) / med if med > 0 else 0.0


# --------------------------------------------------------------------------- the peers

class Peer:
    """One column group: a label, a JSON key and, per collective, the call on (input,
    output) tensors (None: not offered), and the op it really runs."""

    def __init__(self, label, key, note):
        self.label, self.key, self.note = label, key, note
        self.calls = {}       # collective -> fn(inp, out)
        self.exact = {}       # collective -> False when it times another op (no #wrong)
        self.failed = {}      # collective -> the error that dropped it

    def offers(self, collective):
        return collective in self.calls and collective not in self.failed


def dist_calls(dist, group, op):
    """fn(inp, out) per collective through torch.distributed, on `group`."""
    from pycomm.torch_compat import all_gather_single as all_gather
    from pycomm.torch_compat import reduce_scatter_single as reduce_scatter

    return {
        "all_reduce": lambda i, o: dist.all_reduce(o, op=op, group=group),
        "broadcast": lambda i, o: dist.broadcast(o, src=ROOT, group=group),
        "reduce": lambda i, o: dist.reduce(o, dst=ROOT, op=op, group=group),
        "all_gather": lambda i, o: all_gather(o, i, group=group),
        "reduce_scatter": lambda i, o: reduce_scatter(o, i, op=op, group=group),
        "all_to_all": lambda i, o: dist.all_to_all_single(o, i, group=group),
    }


def reduce_op(dist, name):
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}[name]


def probe(fn) -> str | None:
    """None when fn() runs on every rank, else the first rank's error. fn must fail (or
    not) alike on every rank, before any communication, as argument checks do."""
    import torch.distributed as dist

    try:
        fn()
        err = None
    except Exception as e:  # noqa: BLE001 - any failure drops the peer, with its text
        err = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
    errs = [None] * dist.get_world_size()
    dist.all_gather_object(errs, err)
    return next((e for e in errs if e), None)


def pycomm_backend_peer(args, world, op_name):
    """The pycomm group, or (None, why not)."""
    import torch
    import torch.distributed as dist

    import pycomm  # noqa: F401  (registers the backend, once it exists)

    name = args.pycomm_backend
    if name not in dist.Backend.backend_list:
        return None, (f"'{name}' is not a registered torch.distributed backend "
                      f"(Backend.backend_list = {list(dist.Backend.backend_list)}) after "
                      f"`import pycomm`")
    group_box = []
    err = probe(lambda: group_box.append(dist.new_group(backend=name)))
    if err:
        return None, f"dist.new_group(backend={name!r}) failed: {err}"
    group = group_box[0]
    peer = Peer("pycomm", "pycomm_backend",
                f"pycomm = dist.new_group(backend={name!r}) through dist.*")
    err = probe(lambda: dist.all_reduce(torch.ones(1), group=group))
    if err:
        return None, f"a 1-element all_reduce on the {name!r} group failed: {err}"
    # An op or dtype it refuses drops it from a collective later, with the error.
    peer.calls = dist_calls(dist, group, reduce_op(dist, op_name))
    peer.exact = {c: True for c in COLLECTIVES}
    peer.group = group
    return peer, None


def gloo_peer(args, world, op_name):
    import torch
    import torch.distributed as dist

    backend = dist.get_backend()
    peer = Peer(backend, "gloo", f"{backend} = the default group")
    op = reduce_op(dist, op_name) if op_name != "premul_sum" else None
    exact = True
    if op is not None:
        err = probe(lambda: dist.all_reduce(torch.ones(1), op=op))
        if err:
            op = None
    if op is None:
        # No such op in this backend: time sum, which moves the same bytes.
        op, exact = dist.ReduceOp.SUM, False
        peer.note += f" ({backend} has no {op_name}: it times sum, #wrong '-')"
    peer.calls = dist_calls(dist, None, op)
    peer.exact = {c: exact or c not in REDUCING for c in COLLECTIVES}
    return peer


def direct_peers(args, world, op_name):
    """pycomm.all_reduce with and without restore-on-failure: ([peers], [notes], closers)."""
    import torch

    import pycomm

    notes, closers = [], []
    try:
        if hasattr(pycomm, "init"):
            pycomm.init()
    except Exception as e:  # noqa: BLE001
        return [], [f"direct API absent: pycomm.init() failed: {type(e).__name__}: {e}"], []
    algo = args.algorithm
    op = op_name if op_name != "premul_sum" else reduce_op(world.dist, op_name)
    extra = {} if algo == "auto" else {"algorithm": algo}

    def direct(i, o):
        pycomm.all_reduce(o, op=op, **extra)

    err = probe(lambda: direct(None, torch.ones(1)))
    if err:
        return [], [f"direct API absent for op {op_name}: {err}"], []
    peers = [Peer("direct", "pycomm_direct", "direct = pycomm.all_reduce, the direct API")]
    peers[0].calls = {"all_reduce": direct}
    peers[0].exact = {"all_reduce": True}

    # The same without the restore-on-failure copy: a keyword where the API takes one,
    # else a communicator made with PYCOMM_RESTORE_ON_FAILURE=0.
    try:
        params = inspect.signature(pycomm.all_reduce).parameters
    except (TypeError, ValueError):
        params = {}
    fast = None
    if "restore_on_failure" in params:
        def norestore(i, o):
            pycomm.all_reduce(o, op=op, restore_on_failure=False, **extra)
        how = "restore_on_failure=False"
    elif hasattr(pycomm, "Communicator"):
        os.environ["PYCOMM_RESTORE_ON_FAILURE"] = "0"
        try:
            fast = pycomm.Communicator()
        finally:
            del os.environ["PYCOMM_RESTORE_ON_FAILURE"]
        closers.append(fast.close)

        def norestore(i, o):
            fast.all_reduce(o, op=op, **extra)
        how = "a communicator made with PYCOMM_RESTORE_ON_FAILURE=0"
    else:
        notes.append("norestore absent: pycomm.all_reduce takes no restore_on_failure")
        return peers, notes, closers
    err = probe(lambda: norestore(None, torch.ones(1)))
    if err:
        notes.append(f"norestore absent: {err}")
        return peers, notes, closers
    p = Peer("norestore", "pycomm_norestore", f"norestore = the direct API with {how}")
    p.calls = {"all_reduce": norestore}
    p.exact = {"all_reduce": True}
    peers.append(p)
    return peers, notes, closers


def deepspeed_peer(args, world, op_name):
    """DeepSpeed's shared-memory all-reduce, or (None, why not)."""
    if args.no_deepspeed:
        return None, None
    if importlib.util.find_spec("deepspeed") is None:
        return None, "deepspeed column absent: deepspeed is not importable (not installed)"
    if op_name != "sum" or args.dtype not in ("float32", "bfloat16"):
        return None, "deepspeed column absent: its shm all-reduce does sum on float32/bfloat16 only"
    import torch

    os.environ.setdefault("LOCAL_SIZE", str(world.size))  # all ranks on this host
    box = []

    def load():
        try:
            from deepspeed.accelerator import get_accelerator

            builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
        except Exception:  # noqa: BLE001 - older layouts
            from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

            builder = ShareMemCommBuilder()
        shm = builder.load()
        shm.initialize(world.size, world.rank)
        from deepspeed.comm import ReduceOp

        box.append((shm, ReduceOp.SUM))
        if shm.inference_all_reduce(torch.ones(4, dtype=getattr(torch, args.dtype)),
                                    ReduceOp.SUM) != 0:
            raise RuntimeError("inference_all_reduce fell back (returned -1)")

    err = probe(load)
    if err:
        return None, f"deepspeed column absent: {err}"
    shm, op = box[0]
    p = Peer("deepspeed", "deepspeed", "deepspeed = DeepSpeed's shm inference_all_reduce")
    p.calls = {"all_reduce": lambda i, o: shm.inference_all_reduce(o, op)}
    p.exact = {"all_reduce": True}
    return p, None


# --------------------------------------------------------------------------- Open MPI

def mpi_status(args):
    """(mpirun path, None) or (None, why the MPI column is absent)."""
    if args.no_mpi:
        return None, "Open MPI column absent: --no-mpi"
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None, f"Open MPI column absent: no mpirun on PATH (to add it: {MPI_HINT})"
    if importlib.util.find_spec("mpi4py") is None:
        return None, f"Open MPI column absent: mpi4py is not importable (to add it: {MPI_HINT})"
    return mpirun, None


def run_mpi(args, mpirun, world_size, plan_items):
    """Runs bench/mpi_collectives.py under mpirun; ({(collective, size): result}, meta)
    or ({}, why not)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_collectives.py")
    with tempfile.TemporaryDirectory(prefix="collectives_perf-mpi-") as tmp:
        plan_path, out_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "out.json")
        plan = dict(dtype=args.dtype, op=args.op, rounds=args.rounds, min_time=args.min_time,
                    min_iters=args.min_iters, max_iters=args.max_iters, warmup=args.warmup,
                    root=ROOT, premul_factor=PREMUL_FACTOR, items=plan_items)
        with open(plan_path, "w") as f:
            json.dump(plan, f)
        # Not bound to cores, like the torch ranks; torch's rendezvous variables stay out.
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
        cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "-np", str(world_size), sys.executable, script, "--plan", plan_path,
               "--out", out_path]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                  timeout=args.mpi_timeout)
        except subprocess.TimeoutExpired:
            return {}, f"Open MPI column absent: mpirun did not finish in {args.mpi_timeout} s"
        if proc.returncode != 0 or not os.path.exists(out_path):
            tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
            return {}, (f"Open MPI column absent: mpirun exited with {proc.returncode}: "
                        + " | ".join(tail))
        with open(out_path) as f:
            out = json.load(f)
    results = {(r["collective"], r["size"]): r for r in out["rows"]}
    return results, out.get("meta", {})


# --------------------------------------------------------------------------- one rank

class World:
    def __init__(self):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()


def fill(t, fn):
    """t[j] = fn(indices j) block by block, in t's dtype (bfloat16 via float32)."""
    import torch

    n = t.numel()
    for start in range(0, n, CHECK_BLOCK):
        stop = min(n, start + CHECK_BLOCK)
        idx = torch.arange(start, stop, dtype=torch.int64)
        t[start:stop].copy_(fn(idx).to(torch.float64))


def count_wrong(t, fn) -> int:
    import torch

    n, wrong = t.numel(), 0
    for start in range(0, n, CHECK_BLOCK):
        stop = min(n, start + CHECK_BLOCK)
        idx = torch.arange(start, stop, dtype=torch.int64)
        want = fn(idx).to(torch.float64)
        wrong += int((t[start:stop].to(torch.float64) != want).sum().item())
    return wrong


def check(peer, collective, inp, out, world, op_name, chunk) -> int:
    """This rank's wrong elements after one call of the peer on the check pattern."""
    import torch

    n, rank = world.size, world.rank
    if collective in ("all_reduce", "broadcast", "reduce"):
        if collective == "broadcast" and rank != ROOT:
            out.fill_(SENTINEL)
        else:
            fill(out, lambda idx: input_values(collective, rank, idx, n, op_name))
    else:
        fill(inp, lambda idx: input_values(collective, rank, idx, n, op_name))
        out.fill_(SENTINEL)
    peer.calls[collective](inp, out)
    if collective == "reduce" and rank != ROOT:
        return 0  # only the root's result is defined
    return count_wrong(out, lambda idx: expected(collective, rank, idx, n, chunk, op_name, torch))


def mpi_column(args, world, sizes, esize):
    """Rank 0 runs Open MPI's launch, alone: the torch ranks wait in a gloo barrier (a
    sleeping wait) meanwhile. ({(collective, size): result}, meta, the header's line)."""
    rows, meta, note = {}, {}, None
    if world.rank == 0:
        mpirun, note = mpi_status(args)
        if mpirun:
            items = [dict(collective=c, **layout(c, s, esize, world.size))
                     for c in args.collectives for s in sizes]
            t0 = time.perf_counter()
            rows, meta = run_mpi(args, mpirun, world.size, items)
            if isinstance(meta, str):
                note, meta = meta, {}
            else:
                note = (f"mpi = Open MPI {meta.get('version', '?')} via mpi4py "
                        f"{meta.get('mpi4py', '?')} on numpy buffers, timed in its own mpirun "
                        f"launch ({time.perf_counter() - t0:.0f} s) before the others, not "
                        f"interleaved" + "".join(f"; {x}" for x in meta.get("notes", [])))
    world.dist.barrier()
    return rows, meta, note


def fake_host_peers(args, world):
    """--hosts: the hierarchical backend, flat gloo, the flat pycomm ring, and the intra- and
    inter-host sweeps that calibrate the model. ([peers], [lines], [closers])."""
    dist = world.dist
    hosts, per_host = args.hosts, world.size // args.hosts
    host, local = world.rank // per_host, world.rank % per_host
    lines = []
    flat, why = pycomm_backend_peer(args, world, args.op)  # no PYCOMM_HOST_ID: one host
    os.environ["PYCOMM_HOST_ID"] = f"bench-host-{host}"
    try:
        hier, why_hier = pycomm_backend_peer(args, world, args.op)
    finally:
        del os.environ["PYCOMM_HOST_ID"]
    peers = []
    if hier is None:
        lines.append(f"hierarchical pycomm backend absent: {why_hier}")
    else:
        hier.label, hier.key = "hier", "pycomm_hier"
        hier.note = (f"hier = pycomm backend over {hosts} fake hosts x {per_host} ranks "
                     f"(PYCOMM_HOST_ID): shared memory inside each, gloo between")
        peers.append(hier)
    peers.append(gloo_peer(args, world, args.op))
    if flat is None:
        lines.append(f"flat pycomm backend absent: {why}")
    else:
        flat.label = "flat-pyc"
        flat.note = (f"flat-pyc = pycomm backend over all {world.size} ranks as one host "
                     f"(one shared-memory ring)")
        peers.append(flat)
    # Every rank makes every group, in the same order.
    intra_groups = [dist.new_group([h * per_host + l for l in range(per_host)], backend="pycomm")
                    for h in range(hosts)]
    inter_groups = [dist.new_group([h * per_host + l for h in range(hosts)], backend="gloo")
                    for l in range(per_host)]
    intra = Peer("intra", "intra_host",
                 f"intra = pycomm reduce_scatter of the whole message among one host's "
                 f"{per_host} ranks, then all_gather back, every host at once (the model's first "
                 f"and last steps, as the hierarchical all-reduce runs them)")
    rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

    def intra_steps(i, o):
        n = o.numel() // per_host * per_host
        if n == 0:
            return dist.all_reduce(o, group=intra_groups[host])
        shard = o.new_empty(n // per_host)
        rs(shard, o[:n], group=intra_groups[host])
        ag(o[:n], shard, group=intra_groups[host])

    intra.calls = {"all_reduce": intra_steps}
    inter = Peer("inter", "inter_host",
                 f"inter = gloo all_reduce of a 1/{per_host} shard among the {hosts} ranks with "
                 f"one local index, every index at once (the model's middle step)")
    inter.calls = {"all_reduce": lambda i, o: dist.all_reduce(
        o[:max(1, o.numel() // per_host)], group=inter_groups[local])}
    leaders = Peer("leaders", "leaders_host",
                   f"leaders = gloo all_reduce of the whole message among the {hosts} hosts' "
                   f"first ranks alone (the middle step of the leader form, for small messages)")
    leaders.calls = {"all_reduce": lambda i, o: dist.all_reduce(o, group=inter_groups[0])
                     if local == 0 else None}
    for p in (intra, inter, leaders):
        p.exact = {"all_reduce": False}
    if "all_reduce" in args.collectives:
        peers += [intra, inter, leaders]
    return peers, lines, []


def set_up_peers(args, world):
    """([peers], [header lines about absent peers], [closers])."""
    if args.hosts > 1:
        return fake_host_peers(args, world)
    peers, lines, closers = [], [], []
    backend, why = pycomm_backend_peer(args, world, args.op)
    if backend is not None:
        peers.append(backend)
    else:
        lines.append(f"pycomm backend absent: {why}")
    if args.no_stock:
        lines.append(f"{world.dist.get_backend()} not measured (--no-stock): no gloo/pyc ratio")
    else:
        peers.append(gloo_peer(args, world, args.op))
    if "all_reduce" in args.collectives:
        if not args.no_direct:
            direct, notes, closers = direct_peers(args, world, args.op)
            peers += direct
            lines += notes
        ds, why = deepspeed_peer(args, world, args.op)
        if ds is not None:
            peers.append(ds)
        elif why:
            lines.append(why)
    return peers, lines, closers


def measure(args, world, timer, collective, size, active, barrier):
    """Times the active peers on one size in turns, then checks them; returns (layout,
    {peer key: [seconds per round]}, [ceiling seconds per round], {peer key: #wrong})."""
    torch = world.torch
    dtype = getattr(torch, args.dtype)
    lay = layout(collective, size, torch.empty((), dtype=dtype).element_size(), world.size)
    inp = torch.zeros(lay["in_numel"], dtype=dtype)
    out = inp if collective in ("all_reduce", "broadcast", "reduce") else \
        torch.zeros(lay["out_numel"], dtype=dtype)
    ceil_bytes = int(2 * lay["size"] * busbw_factor(collective, world.size))
    src = torch.ones(max(ceil_bytes // 2, 1), dtype=torch.uint8)
    dst = torch.empty_like(src)

    def two_copies():
        barrier()
        t0 = time.perf_counter()
        dst.copy_(src)
        src.copy_(dst)
        return time.perf_counter() - t0

    def ceiling():
        for _ in range(args.warmup):
            two_copies()
        local = statistics.median(two_copies() for _ in range(max(args.min_iters, 20)))
        return timer.max_over_ranks([local])[0]

    # In turns, `rounds` times. A peer that fails on any rank is dropped for the rest of
    # this collective, with its error.
    times = {p.key: [] for p in active}
    t_ceiling = []
    for _ in range(args.rounds):
        for p in active:
            if not p.offers(collective):
                continue
            box = []
            err = probe(lambda: box.append(timer.calls(lambda: p.calls[collective](inp, out))))
            if err:
                p.failed[collective] = f"{human(lay['size'])}: {err}"
                times[p.key] = []
            else:
                times[p.key].append(box[0])
        t_ceiling.append(ceiling())
    # The check, apart from the timing.
    wrong = {}
    for p in active:
        if not p.offers(collective) or not p.exact.get(collective, True):
            continue
        box = []
        err = probe(lambda: box.append(check(p, collective, inp, out, world, args.op,
                                             lay["count"])))
        if err:
            p.failed[collective] = f"check at {human(lay['size'])}: {err}"
            times[p.key] = []
            continue
        wrong[p.key] = int(timer.sum_over_ranks([box[0]])[0])
    return lay, times, t_ceiling, wrong


def make_row(args, world, collective, lay, times, t_ceiling, wrong, peers, primary, mpi_rows):
    n, nbytes = world.size, lay["size"]
    factor = busbw_factor(collective, n)
    row = dict(collective=collective, call=CALLS[collective], size=nbytes, count=lay["count"],
               dtype=args.dtype, op=args.op if collective in REDUCING else "none", world_size=n,
               root=ROOT if collective in ROOTED else None, in_count=lay["in_numel"],
               out_count=lay["out_numel"], busbw_factor=factor,
               ceiling_bytes=int(2 * nbytes * factor))
    for p in peers:
        if collective in p.calls:
            put_peer(row, p.key, times.get(p.key) or [], nbytes, factor, wrong.get(p.key),
                     p.failed.get(collective))
    if mpi_rows:
        m = mpi_rows.get((collective, nbytes)) or {}
        put_peer(row, "mpi", [x * 1e-6 for x in m.get("rounds_us") or []], nbytes, factor,
                 m.get("wrong"), m.get("note"))
    t_ceil = statistics.median(t_ceiling)
    row["ceiling_us"] = t_ceil * 1e6
    prim = row.get(f"{primary.key}_us") if primary else None
    row["pycomm_peer"] = primary.key if primary else None
    row["frac_of_ceiling"] = t_ceil * 1e6 / prim if prim else None
    g, mu = row.get("gloo_us"), row.get("mpi_us")
    row["gloo_over_pycomm"] = g / prim if g and prim else None
    row["pycomm_over_mpi"] = prim / mu if prim and mu else None
    if primary is not None and primary.key == "pycomm_hier":
        f = row.get("pycomm_backend_us")
        row["flat_over_hier"] = f / prim if f and prim else None
        row["hosts"] = args.hosts
    if collective == "all_reduce":
        d = row.get("pycomm_direct_us")
        row["direct_over_mpi"] = d / mu if d and mu else None
        # What pycomm.tools.scaling.calibrate fits (see the module doc).
        row.update(pycomm_us=d if d is not None else prim, stock_us=g,
                   stock_backend=world.dist.get_backend(), stock_wrong=row.get("gloo_wrong"))
    row["wrong"] = sum(row.get(f"{k}_wrong") or 0
                       for k in ("pycomm_backend", "pycomm_direct", "pycomm_norestore",
                                 "pycomm_hier"))
    return row


def print_header(args, world, peers, lines):
    print(f"# pycomm collectives vs {world.dist.get_backend()}: {world.size} ranks, "
          f"{args.dtype}, op={args.op}, algorithm={args.algorithm}, {args.rounds} rounds, "
          f"{world.torch.get_num_threads()} thread(s) per rank")
    print("# time: us, median of rounds of the slowest rank's per-call median; +-: spread "
          "across rounds, %; algbw, busbw: GB/s (nccl-tests); #wrong: exact check, "
          "summed over ranks")
    for p in peers:
        print(f"# {p.note}")
    for line in lines:
        print(f"# {line}")
    print("# ceiling: every rank at once memcpys 2 x its bus bytes (size x busbw factor); "
          "of_ceil = ceiling time / pycomm time")
    sys.stdout.flush()


def run(args):
    import torch

    world = World()
    dtype = getattr(torch, args.dtype)
    sizes = sweep_sizes(args.minbytes, args.maxbytes, args.stepfactor)
    mpi_rows, mpi_meta, mpi_note = mpi_column(args, world, sizes,
                                              torch.empty((), dtype=dtype).element_size())
    peers, lines, closers = set_up_peers(args, world)
    if mpi_note:
        lines.append(mpi_note)
    if world.rank == 0:
        print_header(args, world, peers, lines)

    import pycomm

    barrier = world.dist.barrier
    if any(p.key == "pycomm_direct" for p in peers) and hasattr(pycomm, "barrier"):
        barrier = pycomm.barrier  # aligns the ceiling's copies more tightly than gloo's
    # Warm every path up once (page faults, lazy initialisation, CPU clocks) so that the
    # first row is not charged for it.
    warm = torch.zeros(256, dtype=dtype)
    for p in peers:
        if "all_reduce" in p.calls:
            err = probe(lambda: [p.calls["all_reduce"](warm, warm) for _ in range(200)])
            if err:
                p.failed["all_reduce"] = f"warm-up: {err}"

    timer = Timer(args, args.rounds)
    rows, summary = [], []
    for collective in args.collectives:
        active = [p for p in peers if collective in p.calls]
        primary = next((p for p in active if p.key == "pycomm_hier"), None) or \
            next((p for p in active if p.key == "pycomm_backend"), None) or \
            next((p for p in active if p.key == "pycomm_direct"), None)
        table = Table(collective, active, primary, bool(mpi_rows), world.size)
        if world.rank == 0:
            table.header()
        mine = []
        for size in sizes:
            measured = measure(args, world, timer, collective, size, active, barrier)
            mine.append(make_row(args, world, collective, *measured, peers, primary, mpi_rows))
            if world.rank == 0:
                table.row(mine[-1])
        rows += mine
        summary.append(collective_summary(collective, mine, primary, bool(mpi_rows)))
        if world.rank == 0:
            for p in active:
                if collective in p.failed:
                    print(f"# {p.label} dropped for {collective}: {p.failed[collective]}")
            print(f"# {summary[-1]['line']}\n", flush=True)
    for close in closers:
        close()
    if world.rank == 0:
        report(args, world, rows, summary, peers, lines, mpi_meta)


def report(args, world, rows, summary, peers, lines, mpi_meta):
    total = sum(r["wrong"] for r in rows)
    targets = HIER_TARGETS if args.hosts > 1 else TARGETS
    print(f"# summary: pycomm/gloo speedup (targets: "
          + ", ".join(f">= {x:g}x at {human(size)}" for size, x in targets) + "; "
          f"pycomm #wrong total: {total}")
    for s in summary:
        print(f"#   {s['line']}")
    if args.json:
        meta = dict(world_size=world.size, dtype=args.dtype, op=args.op,
                    algorithm=args.algorithm, rounds=args.rounds, collectives=args.collectives,
                    hosts=args.hosts,
                    stock_backend=world.dist.get_backend(), peers={p.key: p.note for p in peers},
                    notes=lines, mpi=mpi_meta or None, threads=world.torch.get_num_threads(),
                    busbw="nccl-tests: all_reduce 2(n-1)/n; all_gather, reduce_scatter, "
                          "all_to_all (n-1)/n; broadcast, reduce 1",
                    size="bytes of the larger of a rank's input and output",
                    ceiling="every rank at once memcpys 2 x size x busbw_factor bytes")
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, rows=rows, summary=summary), fh, indent=1)
        print(f"# wrote {args.json}")
    sys.stdout.flush()


def put_peer(row, key, rounds_s, nbytes, factor, wrong, failed):
    if rounds_s:
        t, spread = summarize(rounds_s)
        algbw = nbytes / t / 1e9
        row.update({f"{key}_us": t * 1e6, f"{key}_algbw": algbw, f"{key}_busbw": algbw * factor,
                    f"{key}_spread": spread, f"{key}_rounds_us": [x * 1e6 for x in rounds_s]})
    else:
        row.update({f"{key}_us": None, f"{key}_algbw": None, f"{key}_busbw": None,
                    f"{key}_spread": None, f"{key}_rounds_us": []})
    row[f"{key}_wrong"] = wrong
    if failed:
        row[f"{key}_error"] = failed


def collective_summary(collective, rows, primary, has_mpi):
    who = {None: "", "pycomm_backend": "", "pycomm_hier": " (hierarchical)"}.get(
        primary.key if primary else None, " (direct API)")
    parts, met = [], []
    targets = TARGETS
    if primary is not None and primary.key == "pycomm_hier":
        targets = HIER_TARGETS if collective == "all_reduce" else \
            tuple((size, None) for size, _ in TARGETS)  # no target: the speedups only
    for size, target in targets:
        r = next((r for r in rows if r["size"] == size), None)
        s = r and r.get("gloo_over_pycomm")
        if s is None:
            parts.append(f"{human(size)}: {'not in this sweep' if r is None else '-'}")
            met.append(None)
        elif target is None:
            parts.append(f"{s:.1f}x at {human(size)}")
            met.append(None)
        else:
            ok = s >= target
            parts.append(f"{s:.1f}x at {human(size)} ({'met' if ok else 'MISSED'}, >= {target:g}x)")
            met.append(ok)
    if primary is None:
        line = f"{collective}: no pycomm column, no speedup"
    else:
        line = f"{collective}{who}: pycomm/gloo " + ", ".join(parts)
    out = dict(collective=collective, pycomm_peer=primary.key if primary else None,
               speedups={str(size): next((r.get("gloo_over_pycomm") for r in rows
                                          if r["size"] == size), None) for size, _ in TARGETS},
               targets_met=met)
    if has_mpi and collective == "all_reduce":
        for key, label in (("pycomm_over_mpi", "pycomm"), ("direct_over_mpi", "direct")):
            ratios = [(r["size"], r.get(key)) for r in rows if r.get(key) is not None]
            if not ratios:
                continue
            at_or_below = sum(1 for _, x in ratios if x <= 1.0)
            worst = max(ratios, key=lambda sx: sx[1])
            line += (f"; {label}/MPI <= 1 at {at_or_below}/{len(ratios)} sizes (target: all), "
                     f"worst {worst[1]:.2f}x at {human(worst[0])}")
            out[f"{key}_at_or_below"] = [at_or_below, len(ratios)]
    elif has_mpi:
        ratios = [r.get("pycomm_over_mpi") for r in rows if r.get("pycomm_over_mpi")]
        if ratios:
            line += f"; pycomm/MPI median {statistics.median(ratios):.2f}x"
    out["line"] = line
    return out


class Table:
    """Rank 0's text table for one collective: the columns of the peers it has."""

    def __init__(self, collective, peers, primary, has_mpi, n):
        self.collective, self.peers, self.primary, self.has_mpi, self.n = \
            collective, peers, primary, has_mpi, n
        cols = [("size", 11, lambda r: str(r["size"])), ("count", 10, lambda r: str(r["count"])),
                ("type", 8, lambda r: r["dtype"]), ("redop", 10, lambda r: r["op"]), None]
        keys = [(p.label, p.key) for p in peers] + ([("mpi", "mpi")] if has_mpi else [])
        for label, key in keys:
            cols += [(f"{label} us", max(10, len(label) + 3), _f(f"{key}_us", ".2f")),
                     ("+-%", 4, _f(f"{key}_spread", ".0f", 100)),
                     ("algbw", 7, _f(f"{key}_algbw", ".2f")),
                     ("busbw", 7, _f(f"{key}_busbw", ".2f")),
                     ("#wrong", 6, _f(f"{key}_wrong", "d")), None]
        cols += [("gloo/pyc", 8, _f("gloo_over_pycomm", ".1f"))]
        if primary is not None and primary.key == "pycomm_hier":
            cols += [("flat/hier", 9, _f("flat_over_hier", ".2f"))]
        if has_mpi:
            cols += [("pyc/mpi", 7, _f("pycomm_over_mpi", ".2f"))]
            if collective == "all_reduce" and any(p.key == "pycomm_direct" for p in peers):
                cols += [("dir/mpi", 7, _f("direct_over_mpi", ".2f"))]
        cols += [None, ("ceil us", 10, _f("ceiling_us", ".1f")),
                 ("of_ceil", 7, _f("frac_of_ceiling", ".2f"))]
        self.cols = cols

    def header(self):
        n = self.n
        factor = {"all_reduce": "2(n-1)/n", "broadcast": "1", "reduce": "1"}.get(
            self.collective, "(n-1)/n")
        sized = {"all_gather": "size = output, count = per-rank chunk",
                 "reduce_scatter": "size = input, count = per-rank chunk",
                 "all_to_all": "size = input = output, count = per-peer chunk"}.get(
            self.collective, "size = the tensor")
        root = f", root {ROOT}" if self.collective in ROOTED else ""
        print(f"## {self.collective} (dist.{CALLS[self.collective]}{root}): busbw = algbw x "
              f"{factor} = x{busbw_factor(self.collective, n):.3g}; {sized}")
        print(self._line([(c[0], c[1]) if c else None for c in self.cols]))
        sys.stdout.flush()

    def row(self, r):
        print(self._line([(c[2](r), c[1]) if c else None for c in self.cols]), flush=True)

    @staticmethod
    def _line(cells):
        return " ".join("|" if c is None else format(c[0], f">{c[1]}") for c in cells)


def _f(key, spec, scale=1.0):
    def get(r):
        v = r.get(key)
        if v is None:
            return "-"
        return format(v * scale if scale != 1.0 else v, spec)
    return get


# --------------------------------------------------------------------------- the command

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-b", "--minbytes", type=parse_size, default="8", metavar="SIZE",
                   help="smallest message, in bytes: a size such as 8, 64K or 1M "
                        "(K, M, G: powers of 1024)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default="256M", metavar="SIZE",
                   help="largest message, in bytes: a size such as 8, 64K or 1M")
    p.add_argument("-f", "--stepfactor", type=float, default=4.0, metavar="FACTOR",
                   help="multiply the size by this from one row to the next (<= 1: add 1 byte); "
                        "64K and 16M are added when within -b..-e")
    p.add_argument("--nproc", "--ranks", type=int, default=2, metavar="RANKS",
                   help="ranks to spawn (ignored under torchrun)")
    p.add_argument("--hosts", type=int, default=1, metavar="HOSTS",
                   help="pose the ranks as this many hosts (PYCOMM_HOST_ID): the hierarchical "
                        "backend against flat gloo and the flat pycomm ring")
    p.add_argument("--collective", default="all", metavar="NAME[,NAME...]",
                   help=f"collectives to sweep, of {', '.join(COLLECTIVES)}; all: every one")
    p.add_argument("-d", "--dtype", choices=DTYPES, default="float32", metavar="DTYPE",
                   help=f"element type, of {', '.join(DTYPES)}")
    p.add_argument("-o", "--op", choices=OPS, default="sum", metavar="OP",
                   help=f"reduction of all_reduce, reduce and reduce_scatter, of {', '.join(OPS)} "
                        f"(premul_sum: x{PREMUL_FACTOR:g})")
    p.add_argument("--algorithm", default="auto", metavar="NAME",
                   help="auto | ring | direct: the direct API's algorithm")
    p.add_argument("--min-time", type=float, default=0.3, metavar="SECONDS",
                   help="seconds of calls per size and peer, over all rounds")
    p.add_argument("--rounds", type=int, default=3, metavar="N",
                   help="times each peer is measured per size, in turns")
    p.add_argument("--min-iters", type=int, default=5, metavar="CALLS",
                   help="calls per measurement, at least")
    p.add_argument("--max-iters", type=int, default=20000, metavar="CALLS",
                   help="calls per measurement, at most")
    p.add_argument("-w", "--warmup", type=int, default=5, metavar="CALLS",
                   help="untimed calls before each measurement")
    p.add_argument("--no-stock", action="store_true",
                   help="skip the stock backend (gloo): no gloo columns or ratio")
    p.add_argument("--no-direct", action="store_true", help="skip pycomm.all_reduce's columns")
    p.add_argument("--no-mpi", action="store_true", help="skip the Open MPI column")
    p.add_argument("--no-deepspeed", action="store_true", help="skip the DeepSpeed column")
    p.add_argument("--mpi-timeout", type=float, default=3600, metavar="SECONDS",
                   help="seconds the mpirun launch may take")
    p.add_argument("--pycomm-backend", default="pycomm", help=argparse.SUPPRESS)  # development
    p.add_argument("--json", metavar="PATH", help="write the rows (and a summary) to this file")
    args = p.parse_args(argv)
    if args.minbytes < 1 or args.minbytes > args.maxbytes:
        p.error("-b must be >= 1 and must not exceed -e")
    names = [c.strip() for c in args.collective.split(",") if c.strip()]
    if names == ["all"]:
        names = list(COLLECTIVES)
    bad = [c for c in names if c not in COLLECTIVES]
    if bad or not names:
        p.error(f"--collective: unknown {', '.join(bad) or '(none)'}; choose from "
                f"{', '.join(COLLECTIVES)}")
    args.collectives = list(dict.fromkeys(names))
    if args.hosts < 1 or (args.hosts > 1 and args.nproc % args.hosts):
        p.error(f"--hosts: {args.hosts} does not divide the {args.nproc} ranks")
    if args.rounds < 1 or args.min_iters < 1:
        p.error("--rounds and --min-iters must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    launch(run, args, args.nproc)


if __name__ == "__main__":
    main()
