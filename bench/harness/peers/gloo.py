"""The stock backend: the default group the bench starts (gloo on CPUs), through dist.*."""
from __future__ import annotations

from .peer import Peer, through_dist, torch_op


def peer(world, op_name: str) -> Peer:
    """The default group's column. An op it lacks (gloo has no premul_sum) times sum
    instead, which moves the same bytes, with no #wrong."""
    dist = world.dist
    backend = dist.get_backend()
    p = Peer(backend, "gloo", f"{backend} = the default group")
    op = torch_op(dist, op_name) if op_name != "premul_sum" else None
    if op is not None:
        _, err = world.on_every_rank(lambda: dist.all_reduce(world.torch.ones(1), op=op))
        if err:
            op = None
    if op is None:
        p.note += f" ({backend} has no {op_name}: it times sum, #wrong '-')"
        return through_dist(p, dist, None, dist.ReduceOp.SUM, exact=False)
    return through_dist(p, dist, None, op)
