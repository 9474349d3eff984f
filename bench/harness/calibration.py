"""The all-reduce sweep that calibrates pycomm.tools.scaling's alpha-beta model: the rows
bench/collectives_perf.py writes for all_reduce, at a few sizes, from the same sweep
(harness/sweep.py: the peers in turns, each call timed on its own, the slowest rank's median,
then each peer's exact check), with no ceiling. An 8-byte call pins alpha, the large ones B
(DDP's buckets are up to 25 MiB).

The model reads two columns of a row (pycomm.tools.scaling.calibrate): pycomm_us (the direct
API where it was measured, else the pycomm group) and stock_us (the default group: gloo on
CPUs, NCCL on GPUs). The pycomm group's own time is pycomm_backend_us."""
from __future__ import annotations

from pycomm.tools import results_schema as schema

from .collectives import COLLECTIVES
from .peers.peer import Peer, through_dist
from .sweep import Sweep, add_measurements, pycomm_wrong

SIZES = (8, 64 << 10, 1 << 20, 8 << 20, 32 << 20)
# Seconds of calls per size and peer: enough for a few 32 MiB calls on a small host.
MIN_TIME_S = 0.1
ALL_REDUCE = COLLECTIVES["all_reduce"]


def calibrated_columns(row: dict, stock_backend: str) -> dict:
    """Adds the columns the model fits to an all_reduce row (see the module doc)."""
    direct = row.get(schema.column(schema.PYCOMM_DIRECT, "us"))
    primary = row.get(schema.column(row.get(schema.PYCOMM_PEER) or "", "us"))
    row.update({schema.PYCOMM_US: direct if direct is not None else primary,
                schema.STOCK_US: row.get(schema.column(schema.GLOO, "us")),
                schema.STOCK_BACKEND: stock_backend,
                schema.STOCK_WRONG: row.get(schema.column(schema.GLOO, "wrong"))})
    return row


def _peers(world, with_direct: bool, pycomm_group):
    """The stock default group, pycomm's direct API and the pycomm group, float32 sum; on a
    GPU each call waits for the device, as a training step waits for its buckets."""
    dist = world.dist
    peers = [through_dist(Peer(world.backend, schema.GLOO, f"{world.backend} = the default group"),
                          dist, None, dist.ReduceOp.SUM)]
    if with_direct:
        import pycomm

        direct = Peer("direct", schema.PYCOMM_DIRECT, "direct = pycomm.all_reduce")
        direct.calls = {"all_reduce": lambda i, o: pycomm.all_reduce(o)}
        peers.append(direct)
    if pycomm_group is not None:
        peers.append(through_dist(Peer("pycomm", schema.PYCOMM_BACKEND, "pycomm = the pycomm group"),
                                  dist, pycomm_group, dist.ReduceOp.SUM))
    for p in peers:
        p.calls = {"all_reduce": p.calls["all_reduce"]}
        if world.device.type == "cuda":
            call = p.calls["all_reduce"]
            p.calls["all_reduce"] = lambda i, o, call=call: (call(i, o), world.clock.sync())
    return peers


def rows(world, with_direct: bool, pycomm_group=None) -> list:
    """collectives_perf.py's all_reduce rows at SIZES, on this world's device."""
    peers = _peers(world, with_direct, pycomm_group)
    primary = next((p for key in (schema.PYCOMM_BACKEND, schema.PYCOMM_DIRECT) for p in peers
                    if p.key == key), None)
    sweep = Sweep(world, "float32", "sum", rounds=1, min_time=MIN_TIME_S, min_iters=3,
                  max_iters=20, warmup=1, barrier=None, device=world.device)
    out = []
    for size in SIZES:
        lay, times, t_ceiling, wrong = sweep.measure(ALL_REDUCE, size, peers)
        row = dict(collective=ALL_REDUCE.name, size=lay["size"], count=lay["count"],
                   dtype="float32", op="sum", world_size=world.size,
                   busbw_factor=ALL_REDUCE.busbw_factor(world.size))
        add_measurements(row, ALL_REDUCE.name, times, t_ceiling, wrong, peers, primary)
        row[schema.WRONG] = pycomm_wrong(row)
        out.append(calibrated_columns(row, world.backend))
    return out


def calibrations(world, path, with_direct: bool, pycomm_group=None) -> dict:
    """{"stock": Calibration or why not, "pycomm": ..., "backend": ...}: alpha and B of the
    stock backend, pycomm's direct API and the pycomm group (the last two where measured),
    from `path` (a collectives_perf.py --json file, whose pycomm column serves both) or a
    sweep here."""
    from pycomm.tools import scaling

    if world.size < 2:
        return {}
    if path:
        source = backend_source = path
    else:
        source = rows(world, with_direct, pycomm_group)
        backend_source = [dict(r, pycomm_us=r.get(schema.column(schema.PYCOMM_BACKEND, "us")))
                          for r in source]
    out = {}
    for name, src, column in (("stock", source, "stock"), ("pycomm", source, "pycomm"),
                              ("backend", backend_source, "pycomm")):
        if (name == "pycomm" and not with_direct) or (name == "backend" and pycomm_group is None):
            continue
        try:
            out[name] = scaling.calibrate(src, backend=column)
        except (ValueError, OSError) as e:
            out[name] = f"no calibration: {e}"
    return out
