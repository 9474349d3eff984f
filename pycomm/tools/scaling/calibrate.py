"""The model against measurements: alpha and B fitted to the bench's all-reduce rows
(``pycomm bench allreduce --json``, read through pycomm.tools.results_schema), the
hierarchical model fitted to a ``--hosts`` run, and a measured DDP step next to its prediction.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

from .. import results_schema
from .links import Interconnect
from .model import MIB, bucketed_allreduce_time, hierarchical_allreduce_time


Rows = Union[str, Path, Mapping[str, Any], Sequence[Mapping[str, Any]]]

# The backends calibrate() can fit: each is a peer whose time column the bench writes.
_BACKENDS = ("pycomm", "stock")


@dataclass(frozen=True)
class Calibration:
    """alpha and B fitted to measured all-reduce times."""
    alpha_s: float
    bandwidth_Bps: float
    backend: str
    rows: int
    max_relative_error: float   # worst |model - measured| / measured over the fitted rows
    source: str = ""

    def interconnect(self) -> Interconnect:
        where = f" from {self.source}" if self.source else ""
        return Interconnect(f"calibrated-{self.backend}", self.alpha_s, self.bandwidth_Bps,
                            f"fitted to {self.rows} all-reduce rows{where}")


def fit_alpha_beta(samples: Iterable[Tuple[float, int, float]],
                   relative_to: Optional[Sequence[float]] = None) -> Tuple[float, float, float]:
    """Fit alpha and B to (size_bytes, world_size, seconds) samples of single all-reduces.

    Each sample says t = a·alpha + b·(1/B) with a = 2(N-1), b = 2(N-1)/N · size: linear in
    (alpha, 1/B). We minimise the squared *relative* error, sum(((a·alpha + b/B) - t)/t)^2,
    so an 8-byte row (which pins alpha) counts as much as a 1 GB row (which pins B); plain
    least squares would let the large sizes decide alpha too. A negative alpha or 1/B
    (noise) is clamped to 0 and the other refitted alone.

    ``relative_to`` (one time per sample) measures the error against other times instead:
    a step of a composite collective is fitted relative to the whole's time, so that where
    the step is a small part of the whole its relative noise weighs little.

    Returns (alpha_s, bandwidth_Bps, max relative error); bandwidth is inf when the times do
    not grow with size.
    """
    xs, ys = [], []
    samples = list(samples)
    scales = list(relative_to) if relative_to is not None else [t for _, _, t in samples]
    if len(scales) != len(samples):
        raise ValueError("relative_to: one time per sample")
    targets = []
    for (size, n, t), w in zip(samples, scales):
        if n < 2 or t <= 0 or size <= 0 or w <= 0:
            continue  # one rank moves nothing: no information about the links
        xs.append(2 * (n - 1) / w)
        ys.append(2 * (n - 1) / n * size / w)
        targets.append(t / w)
    if len(xs) < 2:
        raise ValueError("calibrate: need at least two all-reduce rows with world_size >= 2 "
                         "and a positive time")
    # Columns scaled to about 1 keep the 2x2 normal equations well conditioned.
    sx, sy = max(xs), max(ys)
    u = [x / sx for x in xs]
    v = [y / sy for y in ys]
    suu = sum(p * p for p in u)
    svv = sum(q * q for q in v)
    suv = sum(p * q for p, q in zip(u, v))
    su = sum(p * z for p, z in zip(u, targets))
    sv = sum(q * z for q, z in zip(v, targets))
    det = suu * svv - suv * suv
    if det <= 1e-12 * suu * svv:
        raise ValueError("calibrate: the rows cannot separate alpha from B; "
                         "give rows of at least two different sizes")
    ca = (su * svv - sv * suv) / det
    cb = (sv * suu - su * suv) / det
    if ca < 0:
        ca, cb = 0.0, sv / svv
    if cb < 0:
        ca, cb = su / suu, 0.0
    alpha, inv_b = ca / sx, cb / sy
    worst = max(abs(alpha * x + inv_b * y - z) for x, y, z in zip(xs, ys, targets))
    return alpha, (math.inf if inv_b == 0 else 1.0 / inv_b), worst


def _seconds(row: Mapping[str, Any], peer: str) -> Optional[float]:
    """The peer's time in a bench row, in seconds (None where it was not measured)."""
    t_us = row.get(results_schema.column(peer, "us"))
    return None if t_us is None else float(t_us) * 1e-6


def calibrate(rows: Rows, backend: str = "pycomm") -> Calibration:
    """alpha and B from all-reduce benchmark rows (or the path of their JSON), for one backend.

    backend "pycomm" fits the ``pycomm_us`` column, "stock" the ``stock_us`` column. Rows
    with wrong results (``wrong`` > 0), no time, or a single rank are left out, and so are
    rows of another collective, which bench/collectives_perf.py writes into the same file
    when asked for several.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"backend: expected 'pycomm' or 'stock', got {backend!r}")
    source = str(rows) if isinstance(rows, (str, Path)) else ""
    samples = []
    for i, row in enumerate(results_schema.rows(rows, collective="all_reduce")):
        try:
            size, n = float(row["size"]), int(row["world_size"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"calibrate: row {i} lacks a numeric size/world_size ({e})") from None
        t = _seconds(row, backend)
        if row.get("wrong") or t is None or n < 2 or size <= 0:
            continue
        if not math.isfinite(t) or t <= 0:
            continue
        samples.append((size, n, t))
    if not samples:
        raise ValueError(f"calibrate: no usable rows with a "
                         f"{results_schema.column(backend, 'us')} time")
    alpha, bw, worst = fit_alpha_beta(samples)
    return Calibration(alpha, bw, backend, len(samples), worst, source)


def calibrate_hierarchical(rows: Rows, lo: float = 64 * 1024, hi: float = 64 * MIB):
    """The hierarchical model calibrated on a ``collectives_perf.py --hosts H --json`` run.

    Fits an intra link to the ``intra_host_us`` sweep (reduce-scatter and all-gather of the
    message over one host's L ranks: together a ring all-reduce) and an inter link to
    ``inter_host_us`` (all-reduce of a 1/L shard over H ranks, the L shards at once), then
    predicts ``pycomm_hier_us`` for each size in [lo, hi], each in the form the backend's
    routing picks at its leader threshold (PYCOMM_HIER_LEADER_MAX_KB, 64 KiB).
    Returns (intra, inter, [(size, measured s, predicted s, relative error)]).
    """
    rows = [r for r in results_schema.rows(rows, collective="all_reduce")
            if r.get("hosts", 1) > 1]
    if not rows:
        raise ValueError("calibrate_hierarchical: no all_reduce rows of a --hosts run")
    hosts, n = int(rows[0]["hosts"]), int(rows[0]["world_size"])
    per_host = n // hosts
    used = [r for r in rows if _seconds(r, "intra_host") and _seconds(r, "inter_host")
            and _seconds(r, "pycomm_hier") and lo <= r["size"] <= hi]
    # Each step's error counts against the hierarchical time it is part of.
    whole = [_seconds(r, "pycomm_hier") for r in used]
    intra_s = [(float(r["size"]), per_host, _seconds(r, "intra_host")) for r in used]
    # The inter sweep moved size / L bytes (at least one element) per rank.
    itemsize = float(rows[0]["size"]) / max(1, int(rows[0]["count"]))
    inter_s = [(max(itemsize, float(r["size"]) // per_host), hosts, _seconds(r, "inter_host"))
               for r in used]
    a1, b1, _ = fit_alpha_beta(intra_s, relative_to=whole)
    a2, b2, _ = fit_alpha_beta(inter_s, relative_to=whole)
    intra = Interconnect("calibrated-intra", a1, b1, "intra_host_us")
    inter = Interconnect("calibrated-inter", a2, b2, "inter_host_us, one shard's share")
    # The leader form's middle step: the whole message among the leaders alone
    # (bench/collectives_perf.py's leaders_host sweep, where the run has one).
    leaders = None
    lead = [r for r in used if _seconds(r, "leaders_host")]
    if len(lead) >= 2:
        a3, b3, _ = fit_alpha_beta([(float(r["size"]), hosts, _seconds(r, "leaders_host"))
                                    for r in lead],
                                   relative_to=[_seconds(r, "pycomm_hier") for r in lead])
        leaders = Interconnect("calibrated-leaders", a3, b3, "leaders_host_us")
    out = []
    for r in rows:
        size, meas = float(r["size"]), _seconds(r, "pycomm_hier")
        if not (lo <= size <= hi) or not meas:
            continue
        pred = hierarchical_allreduce_time(size, hosts, per_host, intra, inter,
                                           nics_per_host=per_host, leaders=leaders,
                                           itemsize=max(1, int(itemsize)))
        out.append((size, meas, pred, (pred - meas) / meas))
    return intra, inter, out


# --------------------------------------------------------------------------- measured runs

@dataclass(frozen=True)
class Comparison:
    """A measured step next to the model's prediction for it."""
    world_size: int
    buckets: int
    measured_step_s: float
    predicted_step_s: float
    relative_error: float       # (predicted - measured) / measured
    comm_s: float
    exposed_s: float
    no_overlap_step_s: float    # every byte exposed: an upper bound
    full_overlap_step_s: float  # as much hidden as backward allows: a lower bound


def compare_with_measurement(*, measured_step_s: float, step_compute_s: float,
                             bucket_bytes: Sequence[float], world_size: int,
                             calibration: Optional[Calibration] = None,
                             alpha_s: Optional[float] = None,
                             bandwidth_Bps: Optional[float] = None,
                             overlap: float = 0.0, backward_fraction: float = 2 / 3,
                             overhead_s: float = 0.0) -> Comparison:
    """Predict a measured DDP step and say how far off the prediction is.

    measured_step_s: the step time measured with ``world_size`` ranks. step_compute_s: the
    same step with no communication (one rank). bucket_bytes: the sizes of the buckets DDP
    all-reduced. alpha and B come from ``calibration`` (see :func:`calibrate`) or are given.
    The step is compute + overhead + exposed communication (scaling.model's doc); the bounds
    with no overlap and with full overlap are returned too.
    """
    if calibration is not None:
        alpha_s, bandwidth_Bps = calibration.alpha_s, calibration.bandwidth_Bps
    if alpha_s is None or bandwidth_Bps is None:
        raise ValueError("compare_with_measurement: give calibration= or both alpha_s and "
                         "bandwidth_Bps")
    if not measured_step_s > 0 or not step_compute_s > 0:
        raise ValueError("measured_step_s and step_compute_s: must be > 0")
    if not 0 <= overlap <= 1:
        raise ValueError(f"overlap: must be in [0, 1], got {overlap!r}")
    comm = bucketed_allreduce_time(bucket_bytes, world_size, alpha_s, bandwidth_Bps)
    backward = backward_fraction * step_compute_s
    extra = overhead_s if world_size > 1 else 0.0

    def step(fraction: float) -> float:
        return step_compute_s + extra + comm - min(fraction * comm, backward)

    predicted = step(overlap)
    return Comparison(
        world_size=world_size, buckets=len(bucket_bytes), measured_step_s=measured_step_s,
        predicted_step_s=predicted,
        relative_error=(predicted - measured_step_s) / measured_step_s,
        comm_s=comm, exposed_s=predicted - step_compute_s - extra,
        no_overlap_step_s=step(0.0), full_overlap_step_s=step(1.0),
    )
