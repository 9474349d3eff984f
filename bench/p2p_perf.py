#!/usr/bin/env python
"""Point-to-point benchmark in the shape of the OSU micro-benchmarks: pycomm beside gloo,
Open MPI and a copy ceiling.

    python bench/p2p_perf.py -b 8 -e 64M -f 4 --nproc 2 --json out.json
    python bench/p2p_perf.py --pattern latency,bibw -b 64K -e 16M --window 16
    torchrun --nproc-per-node 2 bench/p2p_perf.py --pattern bw

Patterns (--pattern, default all; bench/harness/p2p.py describes each once). Ranks pair up,
2k with 2k+1; the even one of a pair is its sender. size is one message's bytes.
  latency  dist.send / dist.recv ping-pong; time = half the round trip (osu_latency)
  bw       a window of --window dist.isend from the sender and as many dist.irecv on its
           peer, a wait for all, then a one-element ack back (osu_bw); time = window time /
           window, so GB/s = size x window / window time. A window never holds more than
           --window-bytes (fewer messages at large sizes, or one call of gloo would take
           seconds); the bw table shows the window used
  bibw     both ranks at once post an isend to and an irecv from each other through
           dist.batch_isend_irecv and wait: the steady state of a 1F1B pipeline (osu_bibw
           with a window of 1); time = one exchange, GB/s = 2 x size / time (both ways)

Peers, measured side by side in one run, in turns:
  pycomm   a dist.new_group(backend="pycomm") group through dist.* (absent, with a line
           saying why, when `import pycomm` has not registered the backend): its native
           point-to-point (csrc/core/p2p/), every message copied in by its sender and
           out by its receiver through the shared-memory channels, in frames, so that
           the two copies of a large message overlap
  torch    torch's own per-call cost, a floor: the same dist.* calls (every pattern) on a
           group of a backend that completes every call at once and moves nothing
           (pycomm._C.make_null_backend, registered as "pycomm_null"); no bandwidth, no
           #wrong ('-': nothing moves, so nothing is checked)
  pyc-c10d the same group's backend object called directly (Backend.send/recv(...).wait()),
           latency only: pycomm without torch's Python wrapper and ProcessGroup dispatch.
           pycomm - pyc-c10d was the estimate of torch's own per-call cost before the torch
           column measured it; the latency summary prints it beside the measured floor
  gloo     the default group, which the bench starts with gloo
  mpi      Open MPI through mpi4py (Send/Recv ping-pong; Isend window, Irecv window,
           Waitall, Send ack; Irecv + Isend, Waitall), when `mpirun` and mpi4py are
           present. The bench then starts its ranks with `mpirun --allow-run-as-root
           --oversubscribe --bind-to none -np N` (not spawned): each rank is an MPI rank and
           a torch rank at once, and MPI is one more peer, called on numpy views of the same
           buffers, timed in the same turns and checked by the same check. Where that launch
           is not possible (under torchrun, or mpirun failing to start the ranks) MPI is
           timed in its own `mpirun` launch (bench/mpi_worker.py) before the other peers
           start, its rounds its own. The header line says which
  ceiling  a memcpy ceiling in the same turns: a one-way message through a shared staging
           buffer is two copies, in (sender) and out (receiver), which a streaming
           transport overlaps; so both ranks copy size x busbw_factor bytes at once (bibw:
           each its outgoing message in and its incoming one out), contending for memory as
           the transfer's copies do. A transport that copies once (MPI's CMA) can beat it,
           and below a few KiB it is the cost of two torch copy_ calls, not of memory

Time. Each call is timed on its own; a rank's time is the median of its calls (their number
set by rank 0's first estimate and shared, so that every rank makes the same calls), and the
time of a round is the slowest rank's median, divided by the units of a call (2 one-way
trips, `window` messages, 1 exchange). The peers are measured in turns, round-robin for each
size, --rounds times; the time reported is the median of the rounds and the spread (the `+-`
column, in %) is (slowest - fastest round) / median. GB/s are 1e9 bytes per second.

#wrong. After the timing, each peer runs each pattern once on distinct buffers per message,
each message holding its own integer-valued pattern and each receive buffer a sentinel
first; the receivers count the elements that differ, summed over the ranks.

Ratios: `gloo/pyc` = gloo time / pycomm time; `pyc/mpi` = pycomm time / MPI time;
`pyc-torch us` = pycomm time - torch time, the backend's own share of a call;
`(pyc-torch)/mpi` = that share / MPI time; `of_ceil` = ceiling time / pycomm time = pycomm
GB/s / ceiling GB/s. The summary judges per pattern the target "from 8 B to 32 KiB at most
Open MPI's time plus torch's own per-call cost measured in the same run", pycomm <= mpi +
torch, i.e. (pyc-torch)/mpi <= 1, at every size in that range, each with its rounds' range
(bench/harness/verdicts.py): met where every size meets it, missed where one misses it.

--json writes pycomm.tools.results_schema's layout: a row per pattern and size, with
collective = p2p_latency, p2p_bw or p2p_bibw, size, count, dtype, window, busbw_factor (2 for
bibw), ceiling_us, frac_of_ceiling, gloo_over_pycomm, pycomm_over_mpi, wrong (pycomm's), and
per peer <peer>_us, _algbw (size / time), _busbw (x busbw_factor: what the table prints),
_spread, _rounds_us, _wrong, with the peers named pycomm_backend, torch_floor, pycomm_c10d
(latency rows), gloo, mpi; pycomm_minus_torch_us, pycomm_minus_torch_over_mpi, and
mpi_in_turns (whether MPI's rounds were taken in the same turns; meta.mpi.in_turns for the
run). A summary entry carries net_mpi_target_met (True, False, or None: no verdict).
"""
from __future__ import annotations

import argparse

from harness import driver  # (harness puts pycomm on sys.path)
from harness.p2p import NAMES, PATTERNS, buffers, layout, through_backend, through_dist
from harness.p2p_sweep import P2PSweep
from harness import verdicts
from harness.peers import mpi, mpi_p2p, torch_floor
from harness.peers import pycomm as pycomm_peers
from harness.peers.peer import Peer
from harness.sizes import add_size_options, check_size_options, human, parse_size, sweep
from harness.sweep import (add_measurements, floor_table_columns, peer_table_columns,
                           pycomm_wrong)
from harness.table import Column, Table
from harness.world import World
from pycomm.tools import results_schema as schema

DTYPES = ("float32", "uint8")
# The target: from 8 B to 32 KiB, pycomm's time at most Open MPI's plus torch's own
# per-call cost measured in the same run, i.e. (pycomm - torch) / mpi <= 1, in every pattern.
NET_MPI_TARGET = (8, 32 << 10, 1.0)


def set_up_peers(world):
    """([peers], [header lines about absent ones], the pycomm group or None)."""
    dist, peers, lines = world.dist, [], []
    group, why = pycomm_peers.backend_group(world)
    if group is None:
        lines.append(f"pycomm backend absent: {why}")
    else:
        note = (f"pycomm = dist.new_group(backend={pycomm_peers.BACKEND!r}) through dist.* "
                f"(native point-to-point: the shared-memory channels, csrc/core/p2p/)")
        peers.append(through_dist(Peer("pycomm", schema.PYCOMM_BACKEND, note), dist, group,
                                  world.rank))
    floor, why = torch_floor.peer(world, lambda p, g: through_dist(p, dist, g, world.rank))
    if floor is None:
        lines.append(why)
    else:
        peers.append(floor)
        if group is not None and _coalesces(group, world) != _coalesces(floor.group, world):
            lines.append(f"{torch_floor.LABEL}: its backend and pycomm's take different "
                         f"batch_isend_irecv roads (supports_coalescing differs): the bibw "
                         f"floor is not pycomm's")
    if group is not None:
        note = ("pyc-c10d = the same group's backend called directly, send/recv(...).wait() "
                "(latency only): pycomm without torch's Python wrapper and dispatch; "
                "pycomm - pyc-c10d estimates torch's own per-call cost, which the torch "
                "column measures")
        peers.append(through_backend(Peer("pyc-c10d", schema.PYCOMM_C10D, note), world.torch,
                                     group, world.rank))
    peers.append(through_dist(Peer(world.backend, schema.GLOO,
                                   f"{world.backend} = the default group"), dist, None,
                              world.rank))
    return peers, lines, group


def _coalesces(group, world) -> bool:
    """Whether dist.batch_isend_irecv coalesces on this group's CPU backend."""
    return bool(getattr(group._get_backend(world.torch.device("cpu")), "supports_coalescing",
                        False))


def warm_up(world, measure, peers, patterns):
    """A few calls of every pattern on every peer (page faults, lazy connections) so that
    the first row is not charged for them; a peer that fails drops the pattern."""
    for p in peers:
        for name in (n for n in patterns if p.offers(n)):
            b = buffers(PATTERNS[name], measure.zeros, 256, world.rank, 4, distinct=False)
            _, err = world.on_every_rank(lambda: [p.calls[name](b) for _ in range(20)])
            if err:
                p.failed[name] = f"warm-up: {err}"


def mpi_plan(args, sizes, esize):
    items = [dict(pattern=name, **layout(PATTERNS[name], s, esize, args.window,
                                         args.window_bytes))
             for name in args.patterns for s in sizes]
    return mpi.plan("p2p", args, items)


def make_row(args, world, pattern, measured, peers, primary, mpi_rows):
    lay, times, t_ceiling, wrong = measured
    nbytes, factor = lay["size"], pattern.busbw_factor
    row = dict(collective=pattern.collective, call=pattern.call, size=nbytes,
               count=lay["count"], dtype=args.dtype, op="none", world_size=world.size,
               window=lay["window"], busbw_factor=factor, ceiling_bytes=nbytes * factor)
    add_measurements(row, pattern.name, times, t_ceiling, wrong, peers, primary,
                     (mpi_rows.get((pattern.collective, nbytes)) or {}) if mpi_rows else None)
    row["wrong"] = pycomm_wrong(row)
    return row


def pattern_summary(pattern, rows, primary):
    """One pattern's closing line: the ratios' spans over the sizes, the torch floor and the
    target pycomm <= mpi + torch from 8 B to 32 KiB (NET_MPI_TARGET) judged size by size
    with the rounds' range, of_ceil at the largest size, and at the smallest latency row
    the old estimate of torch's cost (pycomm - pyc-c10d) beside the measured floor."""
    def span(key, unit="x"):
        xs = [r[key] for r in rows if r.get(key) is not None]
        return f"{min(xs):.2f}{unit}..{max(xs):.2f}{unit}" if xs else "-"

    last = rows[-1] if rows else {}
    of_ceil = last.get("frac_of_ceiling")
    out = dict(collective=pattern.collective, pycomm_peer=primary.key if primary else None)
    if primary is None:
        out["line"] = f"{pattern.name}: no pycomm column"
        return out
    line = (f"{pattern.name}: gloo/pyc {span('gloo_over_pycomm')}, pyc/mpi "
            f"{span('pycomm_over_mpi')}, torch {span(torch_floor.KEY + '_us', ' us')}, "
            f"pyc-torch {span(torch_floor.MINUS_US, ' us')}, (pyc-torch)/mpi "
            f"{span(torch_floor.MINUS_OVER_MPI)}")
    text, met = net_target_text(rows, primary)
    line += text + (f"; of_ceil at {human(last.get('size', 0))} "
                    + ("-" if of_ceil is None else f"{of_ceil:.3g}"))
    out["net_mpi_target_met"] = met
    first = rows[0] if rows else {}
    direct = first.get(schema.column(schema.PYCOMM_C10D, "us"))
    prim = first.get(schema.column(primary.key, "us"))
    floor = first.get(schema.column(torch_floor.KEY, "us"))
    if pattern.name == "latency" and direct and prim:
        line += (f"; at {human(first['size'])}: torch's per-call cost measured "
                 + ("-" if floor is None else f"{floor:.2f} us")
                 + f" (estimate pycomm - pyc-c10d: {prim - direct:.2f} us)")
    out["line"] = line
    return out


def net_target_text(rows, primary):
    """(words, verdict) of the target pycomm <= mpi + torch over the rows within
    NET_MPI_TARGET's sizes, each judged with its rounds' range (verdicts.net_ratio): met
    where every size's range meets it, missed where any size's range misses it, else None."""
    lo, hi, at_most = NET_MPI_TARGET
    head = f"; pycomm <= mpi + torch at {human(lo)}..{human(hi)}: "
    within = [r for r in rows if lo <= r["size"] <= hi]
    judged = [(r["size"], verdicts.net_ratio(r, primary.key)) for r in within]
    judged = [(size, j) for size, j in judged if j is not None]
    if not judged:
        return head + ("no torch or mpi column" if within else "no size in this sweep"), None
    verdict_of = {size: verdicts.verdict(j, at_most) for size, j in judged}
    missed = [human(size) for size, v in verdict_of.items() if v is False]
    unsure = [human(size) for size, v in verdict_of.items() if v is None]
    met = False if missed else (None if unsure else True)
    worst = max(judged, key=lambda sj: sj[1][0])
    words = {True: "met", False: "MISSED", None: "within the rounds' spread"}[met]
    return (head + f"{words} ({len(judged) - len(missed) - len(unsure)}/{len(judged)} sizes met"
            + (f", missed at {', '.join(missed)}" if missed else "")
            + (f", within the spread at {', '.join(unsure)}" if unsure else "")
            + f"; worst (pyc-torch)/mpi {verdicts.show(worst[1], 2, 'x')} at "
              f"{human(worst[0])})"), met


def table_of(pattern, peers, mpi_side):
    peers = [p for p in peers if pattern.name in p.calls]
    cols = [Column("size", 11, "size", "d"), Column("count", 10, "count", "d"),
            Column("type", 8, "dtype")]
    if pattern.windowed:
        cols.append(Column("window", 6, "window", "d"))
    cols.append(None)
    separate = bool(mpi_side.rows)
    has_mpi = separate or any(p.key == schema.MPI for p in peers)
    keys = [(p.label, p.key) for p in peers] + ([("mpi", schema.MPI)] if separate else [])
    cols += peer_table_columns(keys, (("GB/s", "busbw", ".3f"),))
    cols.append(Column("gloo/pyc", 8, "gloo_over_pycomm", ".2f"))
    if has_mpi:
        cols.append(Column("pyc/mpi", 7, "pycomm_over_mpi", ".2f"))
    if any(p.key == torch_floor.KEY for p in peers):
        cols += floor_table_columns(has_mpi)
    cols += [None, Column("ceil us", 10, "ceiling_us", ".2f"),
             Column("ceil GB/s", 9,
                    lambda r: r["ceiling_bytes"] / r["ceiling_us"] / 1e3 if r["ceiling_us"]
                    else None, ".2f"),
             Column("of_ceil", 7, "frac_of_ceiling", ".3f")]
    return Table(cols)


def table_title(pattern):
    time = {"latency": "half the round trip", "bw": "window time / window",
            "bibw": "one exchange"}[pattern.name]
    gbs = "2 x size / time (both ways)" if pattern.busbw_factor == 2 else "size / time"
    return f"## {pattern.name} ({pattern.calls}; {pattern.osu}): us = {time}, GB/s = {gbs}"


def header_lines(args, world, peers, lines):
    return [f"pycomm point-to-point vs {world.backend}: {world.size} ranks in pairs "
            f"(2k sends to 2k+1), {args.dtype}, {args.rounds} rounds, window {args.window} "
            f"(at most {human(args.window_bytes)}), {world.torch.get_num_threads()} thread(s) "
            f"per rank",
            "time: us, median of rounds of the slowest rank's per-call median, per unit; +-: "
            "spread across rounds, %; #wrong: exact check, summed over ranks",
            *(p.note for p in peers), *lines,
            "ceiling: both ranks at once memcpy size x busbw_factor bytes (a staged transfer's "
            "copy in and copy out, overlapped); of_ceil = ceiling time / pycomm time"]


def meta_of(args, world, peers, lines, mpi_meta) -> dict:
    return dict(world_size=world.size, dtype=args.dtype, rounds=args.rounds,
                window=args.window, window_bytes=args.window_bytes,
                patterns=args.patterns, stock_backend=world.backend,
                peers={p.key: p.note for p in peers}, notes=lines, mpi=mpi_meta or None,
                threads=world.torch.get_num_threads(),
                time="per unit: latency half a round trip, bw one message of the window, "
                     "bibw one exchange",
                size="bytes of one message",
                ceiling="both ranks at once memcpy size x busbw_factor bytes")


def run(args):
    world = World()
    if world.size % 2:
        raise SystemExit(f"p2p_perf.py: ranks pair up; {world.size} ranks is odd")
    sizes = sweep(args.minbytes, args.maxbytes, args.stepfactor)
    measure_settings = (args.rounds, args.min_time, args.min_iters, args.max_iters, args.warmup)
    esize = 4 if args.dtype == "float32" else 1
    mpi_side = mpi.side(world, args.no_mpi, lambda: mpi_plan(args, sizes, esize), mpi_p2p.peer,
                        args.mpi_timeout)
    peers, lines, group = set_up_peers(world)
    mpi_side.join(peers, lines)
    if world.rank == 0:
        driver.print_header(header_lines(args, world, peers, lines))
    # The pycomm group's barrier, where there is one, aligns the ceiling's copies more
    # tightly than gloo's.
    barrier = (lambda: world.dist.barrier(group=group)) if group is not None else world.barrier
    measure = P2PSweep(world, args.dtype, *measure_settings, barrier, args.window,
                       args.window_bytes)
    warm_up(world, measure, peers, args.patterns)
    primary = next((p for p in peers if p.key == schema.PYCOMM_BACKEND), None)
    rows, summary = driver.sweep_tables(
        world, args.patterns, sizes, peers=peers,
        measure=lambda name, size: measure.measure(PATTERNS[name], size, peers),
        table_of=lambda name: table_of(PATTERNS[name], peers, mpi_side),
        title_of=lambda name: table_title(PATTERNS[name]),
        row_of=lambda name, measured: make_row(args, world, PATTERNS[name], measured, peers,
                                               primary, mpi_side.rows),
        summary_of=lambda name, mine: pattern_summary(PATTERNS[name], mine, primary))
    if world.rank == 0:
        total = sum(r["wrong"] for r in rows)
        lo, hi, _ = NET_MPI_TARGET
        driver.report(args, f"summary (pycomm #wrong total: {total}); target: pycomm <= mpi + "
                            f"torch from {human(lo)} to {human(hi)} in every pattern (torch: "
                            f"its own per-call cost, the null backend's time in these turns; "
                            f"each size judged with its rounds' range):", summary, rows,
                      meta_of(args, world, peers, lines, mpi_side.meta))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_size_options(p, " (<= 1: add 1 byte)")
    p.set_defaults(maxbytes="64M")
    p.add_argument("--nproc", "--ranks", type=int, default=2, metavar="RANKS",
                   help="ranks to spawn, an even number (ignored under torchrun)")
    p.add_argument("--pattern", default="all", metavar="NAME[,NAME...]",
                   help=f"patterns to sweep, of {', '.join(NAMES)}; all: every one")
    p.add_argument("-d", "--dtype", choices=DTYPES, default="float32",
                   help="element type (uint8: any size in bytes)")
    p.add_argument("--window", type=int, default=64, metavar="MESSAGES",
                   help="bw: messages in flight per call (osu_bw's window)")
    p.add_argument("--window-bytes", type=parse_size, default="256M", metavar="SIZE",
                   help="bw: a window holds at most this many bytes (one message at least)")
    driver.add_sweep_options(p, "pattern, size and peer")
    args = p.parse_args(argv)
    check_size_options(p, args)
    args.patterns = driver.chosen_names(p, "pattern", args.pattern, NAMES)
    if args.nproc < 2 or args.nproc % 2:
        p.error(f"--nproc: ranks pair up, so an even number >= 2, got {args.nproc}")
    if args.window < 1 or args.rounds < 1 or args.min_iters < 1:
        p.error("--window, --rounds and --min-iters must be >= 1")
    return args


if __name__ == "__main__":
    driver.main(parse_args, run, mpi_in_turns=True)
