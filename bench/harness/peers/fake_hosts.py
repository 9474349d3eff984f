"""--hosts H: the ranks pose as H hosts of N/H ranks each (ranks 0..N/H-1 on the first;
PYCOMM_HOST_ID while the groups are made), and the columns become

    hier      the pycomm backend over the fake hosts: shared memory inside each host, gloo
              between them; the ratios are against this one
    gloo      flat gloo over all N ranks (the default group)
    flat-pyc  the pycomm backend over all N ranks as one host: one shared-memory ring,
              which only exists because the "hosts" share this machine
    intra, inter, leaders (all_reduce only): the steps of the hierarchical all-reduce run
              alone, which calibrate pycomm.tools.scaling's hierarchical model; no #wrong
"""
from __future__ import annotations

import os

from . import gloo
from .peer import Peer
from .pycomm import BACKEND, backend_peer


def peers(world, op_name: str, hosts: int, collectives, name: str = BACKEND):
    """([peers], [header lines about absent ones])."""
    from pycomm.torch_compat import all_gather_single, reduce_scatter_single

    dist = world.dist
    per_host = world.size // hosts
    host, local = world.rank // per_host, world.rank % per_host
    lines, out = [], []
    flat, why = backend_peer(world, op_name, name)  # no PYCOMM_HOST_ID: one host
    os.environ["PYCOMM_HOST_ID"] = f"bench-host-{host}"
    try:
        hier, why_hier = backend_peer(world, op_name, name)
    finally:
        del os.environ["PYCOMM_HOST_ID"]
    if hier is None:
        lines.append(f"hierarchical pycomm backend absent: {why_hier}")
    else:
        hier.label, hier.key = "hier", "pycomm_hier"
        hier.note = (f"hier = pycomm backend over {hosts} fake hosts x {per_host} ranks "
                     f"(PYCOMM_HOST_ID): shared memory inside each, gloo between")
        out.append(hier)
    out.append(gloo.peer(world, op_name))
    if flat is None:
        lines.append(f"flat pycomm backend absent: {why}")
    else:
        flat.label = "flat-pyc"
        flat.note = (f"flat-pyc = pycomm backend over all {world.size} ranks as one host "
                     f"(one shared-memory ring)")
        out.append(flat)
    # Every rank makes every group, in the same order.
    intra_groups = [dist.new_group([h * per_host + i for i in range(per_host)], backend=name)
                    for h in range(hosts)]
    inter_groups = [dist.new_group([h * per_host + i for h in range(hosts)], backend="gloo")
                    for i in range(per_host)]

    def intra_steps(i, o):
        n = o.numel() // per_host * per_host
        if n == 0:
            return dist.all_reduce(o, group=intra_groups[host])
        shard = o.new_empty(n // per_host)
        reduce_scatter_single(shard, o[:n], group=intra_groups[host])
        all_gather_single(o[:n], shard, group=intra_groups[host])

    steps = (
        ("intra", "intra_host", intra_steps,
         f"intra = pycomm reduce_scatter of the whole message among one host's {per_host} "
         f"ranks, then all_gather back, every host at once (the model's first and last steps, "
         f"as the hierarchical all-reduce runs them)"),
        ("inter", "inter_host",
         lambda i, o: dist.all_reduce(o[:max(1, o.numel() // per_host)],
                                      group=inter_groups[local]),
         f"inter = gloo all_reduce of a 1/{per_host} shard among the {hosts} ranks with one "
         f"local index, every index at once (the model's middle step)"),
        ("leaders", "leaders_host",
         lambda i, o: dist.all_reduce(o, group=inter_groups[0]) if local == 0 else None,
         f"leaders = gloo all_reduce of the whole message among the {hosts} hosts' first "
         f"ranks alone (the middle step of the leader form, for small messages)"),
    )
    if "all_reduce" in collectives:
        for label, key, call, note in steps:
            p = Peer(label, key, note)
            p.calls, p.exact = {"all_reduce": call}, {"all_reduce": False}
            out.append(p)
    return out, lines
