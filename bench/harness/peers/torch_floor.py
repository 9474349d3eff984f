"""torch's own per-call cost as a column: the same dist.* calls the pycomm column makes, on a
group whose backend completes every call at once and moves no byte (pycomm._C.
make_null_backend, csrc/torch/null_backend.h). What it takes is torch's share of a call (its
Python wrapper, the dispatcher, the Work handed back); pycomm's time minus it is the
backend's own. It is a floor, not a peer: no data moves, so it has no bandwidth and no
#wrong (its calls are not checked)."""
from __future__ import annotations

from ..verdicts import FLOOR as KEY  # the JSON prefix of its columns (torch_floor_us, ...)
from .peer import Peer

# The torch.distributed backend name the null backend is registered under.
BACKEND = "pycomm_null"
LABEL = "torch"  # its table label
# A row's derived columns: pycomm's time minus the floor's (the backend's own share), and
# that share over Open MPI's time (<= 1: pycomm within Open MPI's time plus torch's cost).
MINUS_US = "pycomm_minus_torch_us"
MINUS_OVER_MPI = "pycomm_minus_torch_over_mpi"
NOTE = (f"{LABEL} = dist.new_group(backend={BACKEND!r}) through the same dist.* calls as "
        f"pycomm: a backend that completes every call at once and moves nothing "
        f"(pycomm._C.make_null_backend), so torch's own per-call cost, a floor; "
        f"#wrong '-' (nothing moves, nothing is checked); pyc-torch = pycomm - {LABEL}")


def register(dist) -> None:
    """Registers the null backend with torch.distributed, once per process."""
    import pycomm

    if BACKEND in dist.Backend.backend_list:
        return
    make = pycomm._C.make_null_backend
    dist.Backend.register_backend(
        BACKEND, lambda opts, *_: make(opts.group_rank, opts.group_size), extended_api=True,
        devices=["cpu"])


def group(world):
    """(a group of the null backend over every rank, None) or (None, why not)."""
    import pycomm

    if not hasattr(pycomm._C, "make_null_backend"):
        return None, (f"{LABEL} column absent: this pycomm build has no "
                      f"_C.make_null_backend (rebuild the extension)")
    dist = world.dist

    def make():
        register(dist)
        g = dist.new_group(backend=BACKEND)
        dist.all_reduce(world.torch.ones(4), group=g)
        return g

    g, err = world.on_every_rank(make)
    if err:
        return None, f"{LABEL} column absent: a {BACKEND!r} group failed: {err}"
    return g, None


def peer(world, give_calls):
    """(the floor's column, None) or (None, why not); give_calls(peer, group) fills its calls
    as the pycomm column's are filled (harness.peers.peer.through_dist for collectives,
    harness.p2p.through_dist for point-to-point), then none of them is checked."""
    g, why = group(world)
    if g is None:
        return None, why
    p = give_calls(Peer(LABEL, KEY, NOTE), g)
    p.exact = {name: False for name in p.calls}
    return p, None


# The pycomm columns that go through the same dist.* calls as the floor: only their time
# less the floor's is the backend's own (the direct API never enters torch.distributed).
THROUGH_DIST = ("pycomm_backend", "pycomm_hier")


def derived(row: dict, primary_key) -> dict:
    """The floor's derived columns of a row: pycomm (the `primary_key` column, where it goes
    through dist.* as the floor does) minus the floor, and that over Open MPI's time; None
    where a column is missing."""
    prim = row.get(f"{primary_key}_us") if primary_key in THROUGH_DIST else None
    floor, mpi = row.get(f"{KEY}_us"), row.get("mpi_us")
    minus = prim - floor if prim and floor else None
    return {MINUS_US: minus, MINUS_OVER_MPI: minus / mpi if minus is not None and mpi else None}
