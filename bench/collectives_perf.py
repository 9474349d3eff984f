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
  torch      torch's own per-call cost, a floor: the same dist.* calls on a group of a
             backend that completes every call at once and moves nothing
             (pycomm._C.make_null_backend, registered as "pycomm_null"); no bandwidth, and
             no #wrong ('-': nothing moves, so nothing is checked)
  gloo       the default group, which the bench starts with gloo
  direct     all_reduce only: pycomm.all_reduce, pycomm's direct API (it runs inline in
             the caller when the communicator is idle)
  norestore  all_reduce only: the direct API without its restore-on-failure copy, to show
             what that guarantee costs
  mpi        Open MPI through mpi4py (Allreduce, Bcast, Reduce, Allgather,
             Reduce_scatter_block, Alltoall), when `mpirun` and mpi4py are present. The bench
             then starts its ranks with `mpirun --allow-run-as-root --oversubscribe --bind-to
             none -np N` (not spawned): each rank is an MPI rank and a torch rank at once, and
             MPI is one more peer, called on numpy views of the same tensors, timed in the
             same turns and checked by the same check. Where that launch is not possible
             (under torchrun, or mpirun failing to start the ranks) MPI is timed in its own
             `mpirun` launch (bench/mpi_worker.py) before the other peers start, its rounds
             its own. The header line says which.
  deepspeed  all_reduce only (sum; float32, bfloat16 or float16): DeepSpeed's shared-memory
             all-reduce, the op torch.ops.deepspeed.inference_all_reduce_ that its
             ShareMemCommBuilder compiles at first use (harness/peers/deepspeed.py), when
             deepspeed is importable (never installed by this script); else a header line
             says why it is absent

--hosts H (all_reduce, all_gather, reduce_scatter, broadcast, ...): the ranks pose as H
hosts of N/H ranks each, ranks 0..N/H-1 on the first (PYCOMM_HOST_ID while the groups are
made), and the peers become:
  hier       the pycomm backend over the fake hosts: shared memory inside each host, gloo
             between them (csrc/torch/hierarchical_plan.h); the ratios are against this one
  torch      the floor, as above (pyc-torch is hier - torch)
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
always includes 64 KiB and 16 MiB when -b..-e covers them: the summary judges there.

Where the time goes. After the tables, for 64 KiB, 1 MiB and 16 MiB (those the sweep
measured), pycomm's columns run a pass of their own with pycomm.tools.profile on, and a
table gives rank 0's time per call part by part: torch's floor, pycomm's front-end
(checks, routing, staging, the hand-off), its waits on peers, copies, reductions, copies
straight out of a peer's memory and the restore copy (harness/breakdown.py); the JSON's
meta holds it as "breakdown".

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
collectives; the all_reduce target is <= 1 at every size); `pyc-torch us` = pycomm time -
torch time, the backend's own share of a call, and `(pyc-torch)/mpi` that share over MPI's
time (<= 1: pycomm within Open MPI's time plus torch's own per-call cost). "pycomm" in the
ratios is the backend group, or for all_reduce the direct API when the backend is absent
(then no pyc-torch: the direct API does not enter torch.distributed). The closing summary
judges, per collective at 64 KiB and 16 MiB, pycomm's time against the best peer measured
in the run (the faster of Open MPI and DeepSpeed; target: at most its time) and the ceiling,
and at 64 KiB pycomm - torch against Open MPI (target: at most 1.25x its time, i.e. pycomm
<= 1.25 x mpi + torch), each with the rounds' range (bench/harness/verdicts.py; round by
round where the columns were timed in the same turns); gloo/pyc is printed beside them and
judges nothing, its time swinging too much between runs. With --hosts the target is the
hierarchical backend's: flat gloo takes at least 2x its time at 16 MiB.

--json writes {"meta": ..., "rows": [...], "summary": [...]} (pycomm.tools.results_schema:
meta also names the schema, the command and the date). A row has the common
fields (collective, size, count, dtype, op, world_size, busbw_factor, ceiling_us, ...) and
per peer <peer>_us, _algbw, _busbw, _wrong, _spread, _rounds_us, with the peers named
pycomm_backend, torch_floor, gloo, pycomm_direct, pycomm_norestore, mpi, deepspeed; and
pycomm_minus_torch_us, pycomm_minus_torch_over_mpi, and mpi_in_turns (whether MPI's rounds
were taken in the same turns); meta.mpi.in_turns says the same for the run. The all_reduce rows
also carry the fields that pycomm.tools.scaling.calibrate fits (ddp_resnet50.py
--calibration, pycomm predict --calibrate): pycomm_us (the direct API), stock_us (gloo),
wrong; other collectives lack pycomm_us, so a calibration leaves them out.
"""
from __future__ import annotations

import argparse
import statistics

from harness import breakdown, calibration, driver, verdicts  # (harness puts pycomm on sys.path)
from harness.ceilings import ceiling_bytes
from harness.collectives import COLLECTIVES, NAMES, ROOT
from harness.patterns import DTYPES, OPS, PREMUL_FACTOR
from harness.peers import deepspeed, fake_hosts, gloo, mpi, torch_floor
from harness.peers import pycomm as pycomm_peers
from harness.peers.peer import through_dist, torch_op
from harness.sizes import add_size_options, check_size_options, human, sweep
from harness.sweep import (Sweep, add_measurements, floor_table_columns, peer_table_columns,
                           pycomm_wrong)
from harness.table import Column, Table
from harness.world import World
from pycomm.tools import results_schema as schema

# The sizes the summary judges, for every collective: latency-bound and bandwidth-bound.
JUDGED_SIZES = (64 << 10, 16 << 20)
# pycomm's time at most this times the best peer's, over the rounds.
BEST_PEER_TARGET = 1.0
# pycomm's time less torch's own per-call cost (the torch floor, measured in the same run) at
# most this times Open MPI's, by size: the issue's "at 64 KiB at most 1.25x Open MPI's time,
# torch's own per-call cost included", i.e. pycomm <= 1.25 x mpi + torch.
NET_MPI_TARGETS = {64 << 10: 1.25}
# --hosts: flat gloo over all ranks takes at least this times the hierarchical all-reduce's
# time at this size: gloo is the transport between hosts there, so it is the peer to beat.
HIER_TARGET = (16 << 20, 2.0)
# Which pycomm column the ratios call "pycomm", by preference.
PRIMARY = (schema.PYCOMM_HIER, schema.PYCOMM_BACKEND, schema.PYCOMM_DIRECT)


# --------------------------------------------------------------------------- the peers

def set_up_peers(args, world):
    """([peers], [header lines about absent peers]): pycomm's columns and the peers, with the
    torch floor beside the pycomm column that goes through dist.*."""
    peers, lines = pycomm_and_peers(args, world)
    floor, why = torch_floor.peer(world, lambda p, g: through_dist(
        p, world.dist, g, torch_op(world.dist, args.op)))
    if floor is None:
        lines.append(why)
    else:
        at = 1 if peers and peers[0].key in torch_floor.THROUGH_DIST else 0
        peers.insert(at, floor)
    return peers, lines


def pycomm_and_peers(args, world):
    if args.hosts > 1:
        return fake_hosts.peers(world, args.op, args.hosts, args.collectives,
                                args.pycomm_backend)
    peers, lines = [], []
    backend, why = pycomm_peers.backend_peer(world, args.op, args.pycomm_backend)
    if backend is not None:
        peers.append(backend)
    else:
        lines.append(f"pycomm backend absent: {why}")
    if args.no_stock:
        lines.append(f"{world.backend} not measured (--no-stock): no gloo/pyc ratio")
    else:
        peers.append(gloo.peer(world, args.op))
    if "all_reduce" in args.collectives:
        if not args.no_direct:
            direct, notes = pycomm_peers.direct_peers(world, args.op, args.algorithm)
            peers += direct
            lines += notes
        if not args.no_deepspeed:
            ds, why = deepspeed.peer(world, args.op, args.dtype)
            if ds is not None:
                peers.append(ds)
            else:
                lines.append(why)
    return peers, lines


def mpi_plan(args, sizes, esize, world_size):
    """What Open MPI's launch measures: the same collectives, sizes and budget."""
    items = [dict(collective=c, **COLLECTIVES[c].layout(s, esize, world_size))
             for c in args.collectives for s in sizes]
    return mpi.plan("collectives", args, items, op=args.op, root=ROOT,
                    premul_factor=PREMUL_FACTOR)


# --------------------------------------------------------------------------- rows

def make_row(args, world, coll, measured, peers, primary, mpi_rows):
    lay, times, t_ceiling, wrong = measured
    n, nbytes = world.size, lay["size"]
    factor = coll.busbw_factor(n)
    row = dict(collective=coll.name, call=coll.call, size=nbytes, count=lay["count"],
               dtype=args.dtype, op=args.op if coll.reduces else "none", world_size=n,
               root=ROOT if coll.rooted else None, in_count=lay["in_numel"],
               out_count=lay["out_numel"], busbw_factor=factor,
               ceiling_bytes=ceiling_bytes(nbytes, factor))
    add_measurements(row, coll.name, times, t_ceiling, wrong, peers, primary,
                     (mpi_rows.get((coll.name, nbytes)) or {}) if mpi_rows else None)
    if primary is not None and primary.key == schema.PYCOMM_HIER:
        f, prim = row.get("pycomm_backend_us"), row.get("pycomm_hier_us")
        row["flat_over_hier"] = f / prim if f and prim else None
        row["hosts"] = args.hosts
    if coll.name == "all_reduce":
        d, mu = row.get("pycomm_direct_us"), row.get("mpi_us")
        row["direct_over_mpi"] = d / mu if d and mu else None
        calibration.calibrated_columns(row, world.backend)  # what the scaling model fits
    row["wrong"] = pycomm_wrong(row)
    return row


def judged_at(row, primary):
    """One judged size's words and verdicts (against the best peer; against Open MPI with
    torch's own cost taken out, where NET_MPI_TARGETS has a target): pycomm's time and its
    rounds, its ratio to the best peer, torch's floor, pycomm - torch and (pycomm - torch) /
    mpi, of_ceil, and gloo/pyc (which judges nothing)."""
    j = verdicts.judge(row, primary.key, BEST_PEER_TARGET)
    net = floor_text(row, j)
    text = f"{human(row['size'])}: pycomm {verdicts.show(j['pycomm'], 1, ' us')}"
    of_ceil = f", of_ceil {verdicts.show(j['of_ceil'])}"
    if primary.key == schema.PYCOMM_HIER:
        judged = (j["gloo"] and row["collective"] == "all_reduce"
                  and row["size"] == HIER_TARGET[0])
        met = verdicts.verdict(j["gloo"], at_least=HIER_TARGET[1]) if judged else None
        text += f", flat gloo/hier {verdicts.show(j['gloo'], 1, 'x')}" + (
            f" ({verdicts.verdict_text(j['gloo'], at_least=HIER_TARGET[1])}, "
            f">= {HIER_TARGET[1]:g}x)" if judged else "")
        return text + net[0] + of_ceil, met, net[1]
    if j["best"] is None:
        text += ", no Open MPI or DeepSpeed column: no verdict"
        met = None
    else:
        name, best, met = j["best"]
        text += (f", {verdicts.show(best, 2, 'x')} {name}'s time "
                 f"({verdicts.verdict_text(best, BEST_PEER_TARGET)})")
    return text + net[0] + of_ceil + f"; gloo/pyc {verdicts.show(j['gloo'], 1, 'x')}", met, net[1]


def floor_text(row, j):
    """(words, verdict) of the torch floor at a judged size: torch's time, pycomm - torch
    and (pycomm - torch) / mpi with its rounds' range, judged against NET_MPI_TARGETS where
    it has a target for this size (verdict None otherwise, or where the rounds straddle
    it)."""
    if j["floor"] is None:
        return "", None
    minus = row.get(torch_floor.MINUS_US)
    text = (f", torch {verdicts.show(j['floor'], 1, ' us')}, pyc-torch "
            + ("-" if minus is None else f"{minus:.1f} us"))
    if j["net_mpi"] is None:
        return text, None
    text += f", (pyc-torch)/mpi {verdicts.show(j['net_mpi'], 2, 'x')}"
    target = NET_MPI_TARGETS.get(row["size"])
    if target is None:
        return text, None
    return (text + f" ({verdicts.verdict_text(j['net_mpi'], target)}, pycomm <= {target:g} x "
            f"mpi + torch)"), verdicts.verdict(j["net_mpi"], target)


def collective_summary(collective, rows, primary, has_mpi):
    who = {None: "", "pycomm_backend": "", "pycomm_hier": " (hierarchical)"}.get(
        primary.key if primary else None, " (direct API)")
    parts, met, net_met = [], [], []
    for size in JUDGED_SIZES:
        r = next((r for r in rows if r["size"] == size), None)
        if r is None or primary is None or not r.get(schema.column(primary.key, "rounds_us")):
            parts.append(f"{human(size)}: {'not in this sweep' if r is None else '-'}")
            met.append(None)
            net_met.append(None)
            continue
        text, ok, net_ok = judged_at(r, primary)
        parts.append(text)
        met.append(ok)
        net_met.append(net_ok)
    if primary is None:
        line = f"{collective}: no pycomm column, no verdict"
    else:
        line = f"{collective}{who}: " + "; ".join(parts)
    out = dict(collective=collective, pycomm_peer=primary.key if primary else None,
               speedups={str(size): next((r.get("gloo_over_pycomm") for r in rows
                                          if r["size"] == size), None) for size in JUDGED_SIZES},
               targets_met=met, net_mpi_targets_met=net_met)
    if has_mpi and collective == "all_reduce":
        for key, label in (("pycomm_over_mpi", "pycomm"), (torch_floor.MINUS_OVER_MPI,
                                                           "(pycomm-torch)"),
                           ("direct_over_mpi", "direct")):
            ratios = [(r["size"], r.get(key)) for r in rows if r.get(key) is not None]
            if not ratios:
                continue
            at_or_below = sum(1 for _, x in ratios if x <= 1.0)
            worst = max(ratios, key=lambda sx: sx[1])
            line += (f"; {label}/MPI <= 1 at {at_or_below}/{len(ratios)} sizes (target: all), "
                     f"worst {worst[1]:.2f}x at {human(worst[0])}")
            out[f"{key}_at_or_below"] = [at_or_below, len(ratios)]
    elif has_mpi:
        for key, label in (("pycomm_over_mpi", "pycomm"),
                           (torch_floor.MINUS_OVER_MPI, "(pycomm-torch)")):
            ratios = [r.get(key) for r in rows if r.get(key) is not None]
            if ratios:
                line += f"; {label}/MPI median {statistics.median(ratios):.2f}x"
    out["line"] = line
    return out


# --------------------------------------------------------------------------- the text

def table_of(coll, peers, primary, mpi_side):
    """Rank 0's table for one collective: the columns of the peers it has (Open MPI's among
    them where it runs in turns, else last, from its own launch)."""
    cols = [Column("size", 11, "size", "d"), Column("count", 10, "count", "d"),
            Column("type", 8, "dtype"), Column("redop", 10, "op"), None]
    separate = bool(mpi_side.rows)
    has_mpi = separate or any(p.key == schema.MPI for p in peers)
    keys = [(p.label, p.key) for p in peers] + ([("mpi", schema.MPI)] if separate else [])
    cols += peer_table_columns(keys, (("algbw", "algbw", ".2f"), ("busbw", "busbw", ".2f")))
    cols.append(Column("gloo/pyc", 8, "gloo_over_pycomm", ".1f"))
    if primary is not None and primary.key == schema.PYCOMM_HIER:
        cols.append(Column("flat/hier", 9, "flat_over_hier", ".2f"))
    if has_mpi:
        cols.append(Column("pyc/mpi", 7, "pycomm_over_mpi", ".2f"))
        if coll.name == "all_reduce" and any(p.key == schema.PYCOMM_DIRECT for p in peers):
            cols.append(Column("dir/mpi", 7, "direct_over_mpi", ".2f"))
    if any(p.key == torch_floor.KEY for p in peers):
        cols += floor_table_columns(has_mpi)
    cols += [None, Column("ceil us", 10, "ceiling_us", ".1f"),
             Column("of_ceil", 7, "frac_of_ceiling", ".2f")]
    return Table(cols)


def table_title(coll, n):
    root = f", root {ROOT}" if coll.rooted else ""
    return (f"## {coll.name} (dist.{coll.call}{root}): busbw = algbw x {coll.factor_text} = "
            f"x{coll.busbw_factor(n):.3g}; {coll.sized}")


def header_lines(args, world, peers, lines):
    return [f"pycomm collectives vs {world.backend}: {world.size} ranks, {args.dtype}, "
            f"op={args.op}, algorithm={args.algorithm}, {args.rounds} rounds, "
            f"{world.torch.get_num_threads()} thread(s) per rank",
            "time: us, median of rounds of the slowest rank's per-call median; +-: spread "
            "across rounds, %; algbw, busbw: GB/s (nccl-tests); #wrong: exact check, "
            "summed over ranks",
            *(p.note for p in peers), *lines,
            "ceiling: every rank at once memcpys 2 x its bus bytes (size x busbw factor); "
            "of_ceil = ceiling time / pycomm time"]


def summary_head(args, rows) -> str:
    total = sum(r["wrong"] for r in rows)
    if args.hosts > 1:
        size, times = HIER_TARGET
        target = f"flat gloo takes >= {times:g}x the hierarchical all-reduce's time at {human(size)}"
    else:
        target = (f"pycomm's time at most {BEST_PEER_TARGET:g}x the best peer's (Open MPI, "
                  f"DeepSpeed) at {' and '.join(human(s) for s in JUDGED_SIZES)}, and "
                  + ", ".join(f"pycomm - torch at most {x:g}x Open MPI's time at {human(s)}"
                              for s, x in NET_MPI_TARGETS.items())
                  + " (torch: its own per-call cost, the null backend's time in these turns)")
    return (f"summary, median (range over the rounds); target: {target}; gloo/pyc judges "
            f"nothing; pycomm #wrong total: {total}")


def meta_of(args, world, peers, lines, mpi_meta) -> dict:
    """The JSON's meta: the run's settings, the peers' notes and Open MPI's facts (its
    `in_turns`: whether it was timed in these ranks)."""
    return dict(world_size=world.size, dtype=args.dtype, op=args.op, algorithm=args.algorithm,
                rounds=args.rounds, collectives=args.collectives, hosts=args.hosts,
                stock_backend=world.backend, peers={p.key: p.note for p in peers}, notes=lines,
                mpi=mpi_meta or None, threads=world.torch.get_num_threads(),
                busbw="nccl-tests: all_reduce 2(n-1)/n; all_gather, reduce_scatter, "
                      "all_to_all (n-1)/n; broadcast, reduce 1",
                size="bytes of the larger of a rank's input and output",
                ceiling="every rank at once memcpys 2 x size x busbw_factor bytes")


# --------------------------------------------------------------------------- one rank

def warm_up(world, peers, dtype):
    """Every all-reduce path once over (page faults, lazy initialisation, CPU clocks), so that
    the first row is not charged for it; a peer that fails drops all_reduce."""
    warm = world.torch.zeros(256, dtype=dtype)
    for p in peers:
        if "all_reduce" in p.calls:
            _, err = world.on_every_rank(
                lambda: [p.calls["all_reduce"](warm, warm) for _ in range(200)])
            if err:
                p.failed["all_reduce"] = f"warm-up: {err}"


def run(args):
    world = World()
    sizes = sweep(args.minbytes, args.maxbytes, args.stepfactor, include=JUDGED_SIZES)
    dtype = getattr(world.torch, args.dtype)
    esize = world.torch.empty((), dtype=dtype).element_size()
    mpi_side = mpi.side(world, args.no_mpi, lambda: mpi_plan(args, sizes, esize, world.size),
                        lambda w, comm: mpi.collectives_peer(w, comm, args.dtype, args.op),
                        args.mpi_timeout)
    peers, lines = set_up_peers(args, world)
    mpi_side.join(peers, lines)
    if world.rank == 0:
        driver.print_header(header_lines(args, world, peers, lines))

    barrier = world.dist.barrier
    if any(p.key == schema.PYCOMM_DIRECT for p in peers):
        import pycomm

        barrier = pycomm.barrier  # aligns the ceiling's copies more tightly than gloo's
    warm_up(world, peers, dtype)
    measure = Sweep(world, args.dtype, args.op, args.rounds, args.min_time, args.min_iters,
                    args.max_iters, args.warmup, barrier)

    def active(name):
        return [p for p in peers if name in p.calls]

    def primary(name):
        return next((p for key in PRIMARY for p in active(name) if p.key == key), None)

    rows, summary = driver.sweep_tables(
        world, args.collectives, sizes, peers=peers,
        measure=lambda name, size: measure.measure(COLLECTIVES[name], size, active(name)),
        table_of=lambda name: table_of(COLLECTIVES[name], active(name), primary(name),
                                       mpi_side),
        title_of=lambda name: table_title(COLLECTIVES[name], world.size),
        row_of=lambda name, measured: make_row(args, world, COLLECTIVES[name], measured,
                                               peers, primary(name), mpi_side.rows),
        summary_of=lambda name, mine: collective_summary(name, mine, primary(name),
                                                         mpi_side.present))
    parts = where_time_goes(world, args, rows, peers, measure)
    if world.rank == 0:
        if parts:
            print(breakdown.table(parts) + "\n", flush=True)
        meta = meta_of(args, world, peers, lines, mpi_side.meta)
        meta["breakdown"] = parts
        driver.report(args, summary_head(args, rows), summary, rows, meta)


def where_time_goes(world, args, rows, peers, measure) -> list:
    """pycomm's parts per call (harness/breakdown.py) at the judged sizes the sweep measured,
    for the backend's column and the direct API's: rank 0's rows."""
    out = []
    if not breakdown.available():
        return out
    for row in rows:
        name, size = row[schema.COLLECTIVE], row[schema.SIZE]
        if size not in breakdown.SIZES:
            continue
        coll = COLLECTIVES[name]
        lay = coll.layout(size, measure.esize, world.size)
        inp = world.torch.zeros(lay["in_numel"], dtype=measure.dtype)
        out_t = inp if coll.in_place else world.torch.zeros(lay["out_numel"], dtype=measure.dtype)
        for p in peers:
            if p.key not in schema.PYCOMM_PEERS or not p.offers(name):
                continue
            t = row.get(schema.column(p.key, "us"))
            if t is None:
                continue
            call = p.calls[name]
            parts, err = world.on_every_rank(
                lambda: breakdown.parts_per_call(world, lambda: call(inp, out_t), t * 1e-6))
            if not err:
                out.append(breakdown.row(name, size, p.key, p.label, parts, row))
    return out


# --------------------------------------------------------------------------- the command

def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_size_options(p, " (<= 1: add 1 byte); 64K and 16M are added when within -b..-e")
    p.add_argument("--nproc", "--ranks", type=int, default=2, metavar="RANKS",
                   help="ranks to spawn (ignored under torchrun)")
    p.add_argument("--hosts", type=int, default=1, metavar="HOSTS",
                   help="pose the ranks as this many hosts (PYCOMM_HOST_ID): the hierarchical "
                        "backend against flat gloo and the flat pycomm ring")
    p.add_argument("--collective", default="all", metavar="NAME[,NAME...]",
                   help=f"collectives to sweep, of {', '.join(NAMES)}; all: every one")
    p.add_argument("-d", "--dtype", choices=DTYPES, default="float32", metavar="DTYPE",
                   help=f"element type, of {', '.join(DTYPES)}")
    p.add_argument("-o", "--op", choices=OPS, default="sum", metavar="OP",
                   help=f"reduction of all_reduce, reduce and reduce_scatter, of {', '.join(OPS)} "
                        f"(premul_sum: x{PREMUL_FACTOR:g})")
    p.add_argument("--algorithm", default="auto", metavar="NAME",
                   help="auto | ring | direct: the direct API's algorithm")
    driver.add_sweep_options(p, "size and peer")
    p.add_argument("--no-stock", action="store_true",
                   help="skip the stock backend (gloo): no gloo columns or ratio")
    p.add_argument("--no-direct", action="store_true", help="skip pycomm.all_reduce's columns")
    p.add_argument("--no-deepspeed", action="store_true", help="skip the DeepSpeed column")
    p.add_argument("--pycomm-backend", default="pycomm", help=argparse.SUPPRESS)  # development
    args = p.parse_args(argv)
    check_size_options(p, args)
    args.collectives = driver.chosen_names(p, "collective", args.collective, NAMES)
    if args.hosts < 1 or (args.hosts > 1 and args.nproc % args.hosts):
        p.error(f"--hosts: {args.hosts} does not divide the {args.nproc} ranks")
    driver.check_sweep_options(p, args)
    return args


if __name__ == "__main__":
    driver.main(parse_args, run, mpi_in_turns=True)
