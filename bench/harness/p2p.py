"""The point-to-point patterns of bench/p2p_perf.py, each described once in the shape of the
OSU micro-benchmarks: what one timed call does, the bytes it moves, the torch.distributed
calls on a group and the mpi4py calls on a communicator that do it, and its exact check.

    latency  osu_latency: a ping-pong of blocking send/recv; time = half the round trip
    bw       osu_bw: a window of non-blocking sends from one rank into as many receives on
             its peer, a wait for all, then a one-element ack back; time = window time /
             window (per message)
    bibw     osu_bibw, window 1: both ranks post a send to and a receive from each other at
             once (dist.batch_isend_irecv), the steady state of a 1F1B pipeline; time = one
             exchange, which moves the size both ways

Ranks pair up, 2k with 2k+1 (with 2 ranks, 0 with 1); the even rank of a pair is its sender
(it pings first; in bw it sends the window). size and count are one message's bytes and
elements; busbw = algbw x busbw_factor: 1 for latency and bw (one message one way), 2 for
bibw (the size both ways), so busbw is what OSU prints (bytes moved / time), in GB/s.

A call takes a Buffers: the messages this rank sends and the buffers it receives into, in
order. Timing uses one buffer repeated through a window, as OSU does, so that 64 messages
do not need 64 buffers; the check uses a distinct buffer per message, each holding its own
pattern, so that a message delivered into the wrong buffer, or out of order, counts as wrong.

bench/mpi_worker.py imports this under mpirun with numpy alone: no torch or numpy at the top.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from .checks import blocks
from .patterns import SENTINEL, values

# The check's distinct receive buffers of one bw call hold at most this many bytes.
CHECK_BYTES = 256 << 20


def pair(rank: int):
    """(this rank's peer, whether it is the pair's sender)."""
    return rank ^ 1, rank % 2 == 0


@dataclass
class Buffers:
    send: List   # what this rank sends in one call, in order
    recv: List   # what it receives into, in order
    ack: object  # one element: bw's acknowledgement


@dataclass(frozen=True)
class Pattern:
    name: str          # "latency", "bw", "bibw"
    osu: str           # the OSU benchmark whose convention it follows
    call: str          # the torch.distributed functions behind it (a row's `call`)
    calls: str         # what one call does with them, for headers
    mpi_calls: str     # the mpi4py calls, for headers
    busbw_factor: int  # directions the size moves in at once
    windowed: bool     # a call is a window of messages

    @property
    def collective(self) -> str:
        """The row's `collective` column (results_schema.P2P_*): rows of every bench share it,
        and a row without one would read as all_reduce."""
        return f"p2p_{self.name}"

    def window(self, window: int, nbytes: int, window_bytes: int) -> int:
        """Messages per call: --window, fewer where the window would exceed window_bytes (a
        window of 64 x 64 MiB over gloo would take seconds a call); 1 unless windowed."""
        if not self.windowed:
            return 1
        return max(1, min(window, window_bytes // max(nbytes, 1)))

    def per_call(self, window: int) -> int:
        """Units of the reported time in one call: 2 one-way trips in a ping-pong, `window`
        messages in bw, one exchange in bibw."""
        return 2 if self.name == "latency" else window if self.windowed else 1

    def messages(self, sender: bool, window: int):
        """(messages this rank sends, messages it receives) in one call."""
        if self.windowed:
            return (window, 0) if sender else (0, window)
        return 1, 1

    def torch_call(self, dist, group, rank: int):
        """fn(Buffers): one call through torch.distributed on `group` (None: the default)."""
        peer, sender = pair(rank)
        if self.name == "latency":
            def call(b):
                if sender:
                    dist.send(b.send[0], peer, group=group)
                    dist.recv(b.recv[0], peer, group=group)
                else:
                    dist.recv(b.recv[0], peer, group=group)
                    dist.send(b.send[0], peer, group=group)
        elif self.name == "bw":
            def call(b):
                post, bufs = (dist.isend, b.send) if sender else (dist.irecv, b.recv)
                for work in [post(t, peer, group=group) for t in bufs]:
                    work.wait()
                # The ack ends the window only once the receiver holds every message.
                (dist.recv if sender else dist.send)(b.ack, peer, group=group)
        else:
            def call(b):
                ops = [dist.P2POp(dist.isend, b.send[0], peer, group),
                       dist.P2POp(dist.irecv, b.recv[0], peer, group)]
                for work in dist.batch_isend_irecv(ops):
                    work.wait()
        return call

    def mpi_call(self, MPI, comm):
        """fn(Buffers): the same call with mpi4py on numpy buffers."""
        peer, sender = pair(comm.Get_rank())
        if self.name == "latency":
            def call(b):
                if sender:
                    comm.Send(b.send[0], dest=peer)
                    comm.Recv(b.recv[0], source=peer)
                else:
                    comm.Recv(b.recv[0], source=peer)
                    comm.Send(b.send[0], dest=peer)
        elif self.name == "bw":
            def call(b):
                if sender:
                    MPI.Request.Waitall([comm.Isend(t, dest=peer) for t in b.send])
                    comm.Recv(b.ack, source=peer)
                else:
                    MPI.Request.Waitall([comm.Irecv(t, source=peer) for t in b.recv])
                    comm.Send(b.ack, dest=peer)
        else:
            def call(b):
                # The receive first, as OSU's bibw posts them: no message arrives unexpected.
                MPI.Request.Waitall([comm.Irecv(b.recv[0], source=peer),
                                     comm.Isend(b.send[0], dest=peer)])
        return call


PATTERNS = {p.name: p for p in (
    Pattern("latency", "osu_latency", "send/recv", "dist.send/dist.recv ping-pong",
            "Send/Recv ping-pong", 1, False),
    Pattern("bw", "osu_bw", "isend/irecv",
            "a window of dist.isend -> dist.irecv, wait all, dist.send ack back",
            "a window of Isend -> Irecv, Waitall, Send ack back", 1, True),
    Pattern("bibw", "osu_bibw (window 1)", "batch_isend_irecv",
            "dist.batch_isend_irecv([isend, irecv]) on both ranks",
            "Irecv + Isend, Waitall, on both ranks", 2, False),
)}
NAMES = tuple(PATTERNS)


def layout(pattern: Pattern, size: int, esize: int, window: int, window_bytes: int) -> dict:
    """One row's shape for a requested size: count (elements of a message, one at least),
    size (its bytes), window (messages per timed call), check_window (per check call)."""
    count = max(size // esize, 1)
    nbytes = count * esize
    w = pattern.window(window, nbytes, window_bytes)
    return dict(count=count, size=nbytes, window=w,
                check_window=pattern.window(w, nbytes, CHECK_BYTES))


def buffers(pattern: Pattern, zeros, count: int, rank: int, window: int,
            distinct: bool) -> Buffers:
    """This rank's buffers of one call; zeros(n) makes a buffer (torch or numpy). distinct:
    a buffer per message (the check), else one repeated through the window (the timing)."""
    n_send, n_recv = pattern.messages(pair(rank)[1], window)

    def many(n):
        if distinct or n == 0:
            return [zeros(count) for _ in range(n)]
        return [zeros(count)] * n

    return Buffers(send=many(n_send), recv=many(n_recv), ack=zeros(1))


def message_id(rank: int, k: int) -> int:
    """Which pattern the k-th message from `rank` carries: distinct for the two ranks of a
    pair and for consecutive messages of a window."""
    return 2 * k + rank % 2


def fill_for_check(xp, b: Buffers, rank: int):
    """Each message this rank sends holds its own pattern; each receive buffer SENTINEL,
    which the message must overwrite. xp: torch or numpy."""
    for k, t in enumerate(b.send):
        for start, stop in blocks(len(t)):
            t[start:stop] = values(message_id(rank, k), xp.arange(start, stop, dtype=xp.int64),
                                   2, "sum")
    for t in b.recv:
        t[:] = SENTINEL


def count_wrong(xp, b: Buffers, rank: int) -> int:
    """Elements of this rank's receive buffers that differ from what its peer sent."""
    peer = pair(rank)[0]
    wrong = 0
    for k, t in enumerate(b.recv):
        for start, stop in blocks(len(t)):
            want = values(message_id(peer, k), xp.arange(start, stop, dtype=xp.int64), 2, "sum")
            wrong += int((t[start:stop] != want).sum())
    return wrong


def through_backend(peer, torch, group, rank: int):
    """Gives `peer` the latency pattern through the group's CPU backend object itself
    (Backend.send/recv().wait()): the same transport as through_dist, without torch's
    Python wrapper and ProcessGroup dispatch, so that the two columns' difference is
    torch's own per-call cost."""
    backend = group._get_backend(torch.device("cpu"))
    peer_rank, sender = pair(rank)

    def call(b):
        steps = [lambda: backend.send([b.send[0]], peer_rank, 0),
                 lambda: backend.recv([b.recv[0]], peer_rank, 0)]
        for start in steps if sender else steps[::-1]:
            start().wait()

    peer.calls = {"latency": call}
    peer.exact = {"latency": True}
    peer.group = group
    return peer


def through_dist(peer, dist, group, rank: int):
    """Gives `peer` (a peers.peer.Peer) every pattern through torch.distributed on `group`."""
    peer.calls = {name: p.torch_call(dist, group, rank) for name, p in PATTERNS.items()}
    peer.exact = {name: True for name in PATTERNS}
    peer.group = group
    return peer
