"""A CPU host's cores and sockets as pycomm's shared-memory ring all-reduce sees them: how
long a large all-reduce takes with R ranks of T threads each (a rank's thread team,
docs/settings.md), and why; and the same for the two-level all-reduce of ranks pinned to
sockets (two_level_time), whose bytes against the ring's are the routing table's rule. Three numbers describe the host, all bytes read plus written a
second (as csrc/core/bench/thread_scaling reports them):

    core_Bps    what one thread's copy and reduction loops move
    socket_Bps  what all of one socket's cores move at once (its memory's ceiling)
    link_Bps    what crosses between two sockets, each way

A ring step moves its slice through a link buffer: the first send reads the local slice and
writes the buffer (2 slice-bytes), a reduce step reads the buffer and the local slice and
writes the next buffer (3), the last reduction also writes the output (4), a forward reads
one buffer and writes the output and the next (3), the last copy reads and writes (2). Each
rank so moves (6R - 4) / R times the tensor's bytes. The ranks are spread evenly over the
sockets (as the OS or a launcher's binding spreads them), consecutive ranks together; the
ranks of a socket share its bandwidth, a rank's team gets at most T x core_Bps of it (T no
more than the socket's cores over its ranks: more threads only take turns), and where the
ring crosses between sockets (2 of its R hops on 2 sockets) the link carries every slice of
both halves, 2(R-1)/R of the tensor, each way. The slowest of those bounds is the time, plus
one synchronisation (alpha) per ring step and piece.

`calibrate_cores(text)` reads thread_scaling's output: core_Bps from one thread, socket_Bps
from the best of any team (one socket assumed). `python3 -m pycomm.tools.scaling.cores`
prints the prediction table of a host (--help).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

from .model import MIB

# The ring's pieces (PYCOMM_RING_BUFFER_KB's default) and one piece's synchronisation: a flag
# written and seen in another core's cache, a few hundred ns, plus waking the team.
PIECE_BYTES = 256 << 10
ALPHA_S = 1.5e-6


@dataclass(frozen=True)
class CpuHost:
    name: str
    sockets: int
    cores_per_socket: int
    core_Bps: float
    socket_Bps: float
    link_Bps: float
    source: str = ""

    def __post_init__(self):
        for field in ("sockets", "cores_per_socket"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field}: expected 1 or more, got {getattr(self, field)!r}")
        for field in ("core_Bps", "socket_Bps", "link_Bps"):
            if not getattr(self, field) > 0:
                raise ValueError(f"{field}: expected a bandwidth above 0, got {getattr(self, field)!r}")


@dataclass(frozen=True)
class TeamPrediction:
    seconds: float
    bound: str               # which bound set the time: "cores", "socket", "link"
    per_rank_Bps: float      # what each rank's team moves a second
    bytes_per_rank: float


def ring_bytes_per_rank(ranks: int, nbytes: float) -> float:
    """Bytes a rank reads plus writes in one ring all-reduce of `nbytes` (module doc)."""
    if ranks < 2:
        return 2.0 * nbytes  # one rank: in and out of its slot
    return (6 * ranks - 4) / ranks * nbytes


def two_level_bytes_per_rank(ranks: int, domains: int, nbytes: float) -> float:
    """Bytes a rank reads plus writes in one two-level all-reduce (collectives/two_level.h)
    over `domains` domains of ranks/domains ranks: its piece into its slot (2), its share
    reduced over its domain's L slots (1 + 1/L), over the domains' D partials (D/L + 1/L; not
    with one domain), every share copied out (2)."""
    per_domain = ranks / domains
    return (5 + ((domains + 2) if domains > 1 else 1) / per_domain) * nbytes


def _timed(host: CpuHost, ranks: int, threads: int, moved: float, crossing: float,
           syncs: float, alpha_s: float) -> TeamPrediction:
    """The slowest of the bounds (module doc) on `moved` bytes a rank and `crossing` bytes
    each way between two sockets, plus `syncs` synchronisations of alpha_s."""
    if ranks < 1 or threads < 1:
        raise ValueError(f"ranks and threads: expected 1 or more, got {ranks} and {threads}")
    sockets_used = min(host.sockets, ranks)
    on_fullest = -(-ranks // sockets_used)
    threads = min(threads, max(1, host.cores_per_socket // on_fullest))
    bounds = {"cores": threads * host.core_Bps, "socket": host.socket_Bps / on_fullest}
    per_rank = min(bounds.values())
    seconds = moved / per_rank
    bound = min(bounds, key=bounds.get)
    if sockets_used > 1 and ranks > 1 and crossing / host.link_Bps > seconds:
        seconds, bound = crossing / host.link_Bps, "link"
    return TeamPrediction(seconds + syncs * alpha_s, bound, per_rank, moved)


def all_reduce_time(host: CpuHost, ranks: int, threads: int, nbytes: float,
                    alpha_s: float = ALPHA_S) -> TeamPrediction:
    """The ring all-reduce of `nbytes` by `ranks` ranks of `threads` threads each, spread
    evenly over the host's sockets."""
    steps = 2 * (ranks - 1) if ranks > 1 else 1
    pieces = max(1.0, nbytes / max(ranks, 1) / PIECE_BYTES)
    return _timed(host, ranks, threads, ring_bytes_per_rank(ranks, nbytes),
                  2.0 * (ranks - 1) / max(ranks, 1) * nbytes, steps * pieces, alpha_s)


def two_level_time(host: CpuHost, ranks: int, threads: int, nbytes: float,
                   alpha_s: float = ALPHA_S) -> TeamPrediction:
    """The two-level all-reduce with each socket a domain of the ranks spread evenly over
    them: each domain's partials cross once (the tensor's bytes each way, with 2 sockets), in
    pieces of a slot (PIECE_BYTES) of three group-wide handshakes (two with one domain), each
    counted as two of the ring's neighbour synchronisations."""
    domains = max(1, min(host.sockets, ranks))
    pieces = max(1.0, nbytes / PIECE_BYTES)
    return _timed(host, ranks, threads, two_level_bytes_per_rank(ranks, domains, nbytes),
                  nbytes if domains > 1 else 0.0, pieces * (3 if domains > 1 else 2) * 2, alpha_s)


def team_table(host: CpuHost, ranks: int, teams: Iterable[int], sizes: Iterable[int]) -> List[str]:
    """Lines: each size's predicted time per team size and the speed-up over the first."""
    teams = list(teams)
    lines = [f"# {host.name}: {ranks} ranks, ring all-reduce, predicted ({host.source or 'no source'})",
             f"{'size':>10} " + " ".join(f"{'t=' + str(t) + ' us':>11} {'x':>5} {'bound':>6}"
                                         for t in teams)]
    for size in sizes:
        cells, first = [], None
        for t in teams:
            p = all_reduce_time(host, ranks, t, size)
            first = first or p.seconds
            cells.append(f"{p.seconds * 1e6:11.1f} {first / p.seconds:5.2f} {p.bound:>6}")
        lines.append(f"{size // MIB:>6} MiB " + " ".join(cells))
    return lines


_ROW = re.compile(r"^(memcpy|reduce .*?)\s+(\d+)\s+([\d.]+)\s+\(", re.M)
_HEAD = re.compile(r"(\d+) MiB a buffer; (\d+) core")
_LAUNCH = "vector path:"


def calibrate_cores(text: str, name: str = "calibrated", link_Bps: Optional[float] = None,
                    sockets: int = 1, mib: Optional[int] = None) -> CpuHost:
    """A host from csrc/core/bench/thread_scaling's output: of its launches, the one with
    buffers of `mib` MiB (default: the first). core_Bps is the mean of one thread's loops,
    socket_Bps the best any team reached (so the host's one socket, or `sockets` alike);
    link_Bps, which one process cannot measure, must be given for more than one socket."""
    launches = [_LAUNCH + part for part in text.split(_LAUNCH)[1:]]
    chosen = [t for t in launches if mib is None or f" {mib} MiB a buffer" in t]
    text = chosen[0] if chosen else ""
    head = _HEAD.search(text)
    rows: Dict[int, List[float]] = {}
    for _, threads, gbs in _ROW.findall(text):
        rows.setdefault(int(threads), []).append(float(gbs) * 1e9)
    if not head or 1 not in rows:
        raise ValueError("text: expected thread_scaling's output (its heading and a 1-thread row)")
    if sockets > 1 and link_Bps is None:
        raise ValueError("link_Bps: needed for more than one socket (one process cannot measure it)")
    core = sum(rows[1]) / len(rows[1])
    best = max(max(v) for v in rows.values())
    return CpuHost(name, sockets, int(head.group(2)) // sockets, core, best, link_Bps or best,
                   f"thread_scaling, {head.group(1)} MiB buffers, {head.group(2)} cores")


# The GPU machine's 16-core host (bench/gpu_check.sh, 2026-12-04, `thread_scaling 16 16`: one
# thread 23.9 GB/s memcpy and 21.3 GB/s sum, the best team 86.8 GB/s), and a 2-socket host of
# the kind the many-cores issue names, posed from it: each socket as that VM's, and a socket
# link of 60 GB/s each way (UPI-class: 3 links x 20 GB/s; an assumption, not a reading).
H200_HOST = CpuHost("gpu machine's host, 16 cores", 1, 16, 22.6e9, 86.8e9, 86.8e9,
                    "thread_scaling 16 16 on the GPU machine, 2026-12-04")
TWO_SOCKETS = CpuHost("2 sockets x 16 cores (posed)", 2, 16, 22.6e9, 86.8e9, 60e9,
                      "each socket as the GPU machine's host; link assumed 60 GB/s")


def main(argv=None):
    p = argparse.ArgumentParser(description="Predicted ring all-reduce times of R ranks with "
                                            "thread teams on a CPU host (pycomm's model).")
    p.add_argument("--host", choices=("h200-host", "two-sockets"), default="h200-host")
    p.add_argument("--calibrate", metavar="FILE", help="thread_scaling's output for the host")
    p.add_argument("--mib", type=int, help="of its launches, the one with buffers of this size")
    p.add_argument("--sockets", type=int, default=1)
    p.add_argument("--link-gbs", type=float, help="the socket link, GB/s each way")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", default="1,2,4,8")
    p.add_argument("--sizes-mib", default="1,4,16,64")
    args = p.parse_args(argv)
    if args.calibrate:
        with open(args.calibrate) as f:
            host = calibrate_cores(f.read(), args.calibrate, args.link_gbs and args.link_gbs * 1e9,
                                   args.sockets, args.mib)
    else:
        host = H200_HOST if args.host == "h200-host" else TWO_SOCKETS
    teams = [int(t) for t in args.threads.split(",")]
    sizes = [int(s) * MIB for s in args.sizes_mib.split(",")]
    print("\n".join(team_table(host, args.ranks, teams, sizes)))


if __name__ == "__main__":
    main()
