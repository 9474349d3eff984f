"""What one column group of a collective sweep is: a label for the table, a key for the
JSON (the <key>_us, <key>_busbw, ... columns of pycomm.tools.results_schema), and per
collective the call on (input, output) tensors."""
from __future__ import annotations

from ..patterns import PREMUL_FACTOR


class Peer:
    def __init__(self, label: str, key: str, note: str):
        self.label, self.key, self.note = label, key, note
        self.calls = {}   # collective name -> fn(inp, out)
        self.exact = {}   # collective name -> False when it times another op (no #wrong)
        self.failed = {}  # collective name -> the error that dropped it
        # Run on every rank after the peer's timed calls and after its check, before the
        # ranks agree through another library: Open MPI's, whose last messages may still
        # wait for its progress (a rendezvous's acknowledgement), which a rank that left
        # MPI for a gloo collective would never make.
        self.settle = None

    def offers(self, collective: str) -> bool:
        return collective in self.calls and collective not in self.failed


def torch_op(dist, name: str):
    """The torch.distributed reduction of an op name of patterns.OPS."""
    if name == "premul_sum":
        return dist._make_nccl_premul_sum(PREMUL_FACTOR)
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}[name]


def through_dist(peer: Peer, dist, group, op, exact: bool = True) -> Peer:
    """Gives `peer` every collective through torch.distributed on `group` with `op`; with
    exact False its reducing collectives time another op and skip the check."""
    from ..collectives import COLLECTIVES

    peer.calls = {name: c.torch_call(dist, group, op) for name, c in COLLECTIVES.items()}
    peer.exact = {name: exact or not c.reduces for name, c in COLLECTIVES.items()}
    return peer
