"""The scaling model: what synchronous data-parallel training costs on N GPUs, and why.

Pure Python and ``math``; nothing here imports torch, so the model runs anywhere.

The all-reduce (alpha-beta model of a ring)
-------------------------------------------
A ring all-reduce of S bytes over N ranks is a reduce-scatter then an all-gather:
2(N-1) steps, and in each step every rank sends S/N bytes to its neighbour. With a per-step
latency alpha (s) and a per-direction link bandwidth B (bytes/s)::

    t_ring(S, N) = 2(N-1)·alpha + 2(N-1)/N · S/B

The second term is why a ring is bandwidth-optimal: each rank moves 2(N-1)/N·S bytes, less
than 2S however large N grows. It is also where nccl-tests' busbw comes from
(busbw = algbw · 2(N-1)/N, so busbw estimates B).

Bucketing. DDP does not all-reduce the gradients as one tensor: it packs them into buckets of
``bucket_cap`` bytes (25 MiB by default) and all-reduces each bucket as soon as backward has
filled it. Every bucket pays the latency term; the bandwidth terms add up to that of S::

    t_comm = n_buckets · 2(N-1)·alpha + 2(N-1)/N · S/B,   n_buckets = ceil(S / bucket_cap)

Hierarchy. On H hosts of G GPUs each, the ring runs over intra-host links (NVLink, PCIe)
and crosses hosts over inter-host links (InfiniBand, Ethernet). Every ring step waits for
its slowest hop, so the ring's alpha is the largest and its B the smallest of the links
it uses: a ring over 4 hosts of NVLink-connected GPUs runs at the speed of the network.

The step
--------
Backward overlaps with the all-reduce of the buckets it has already filled. A fraction
``overlap`` of the communication hides behind backward (never more than the backward time
itself, ``backward_fraction`` · compute); the rest is exposed and adds to the step::

    hidden  = min(overlap · t_comm, backward_fraction · t_compute)
    exposed = t_comm - hidden
    T_N     = t_compute + overhead + exposed          (T_1 = t_compute)

``overhead`` is every per-step cost of synchronous training that is not the all-reduce:
waiting for the slowest rank (stragglers), synchronisation, an input pipeline that cannot
keep up. The alpha-beta model does not predict it; the presets calibrate it from the
figures they reproduce, and show how large it must be.

Speedup, efficiency, epochs
---------------------------
Weak scaling: every GPU keeps its batch b, so one step of N GPUs processes N·b images::

    speedup    S = N · T_1 / T_N        (throughput ratio, images/s)
    efficiency E = S / N = T_1 / T_N    (< 1 whenever t_comm + overhead > 0)

An epoch of D images takes ceil(D / (N·b)) steps: the last, partial batch is still a step
(DataLoader's drop_last=False; DistributedSampler pads every rank to the same count). The
epoch speedup is epoch_1 / epoch_N.

The textbook case (preset ``resnet50-4xa100``). One A100 takes 0.8 s per 256-image step;
an epoch of 800,000 images is 800,000/256 = 3125 steps = 2500 s. Four A100s take 0.85 s a
step with 1024 images a step: 800,000/1024 = 781.25, so 782 steps (each rank's 200,000
images are 781.25 batches of 256, and the partial one still runs), 782 × 0.85 = 664.7 s,
which the textbook quotes as 665 s. (781.25 × 0.85 = 664.06 s would round to 664 s: the
quoted 665 s counts whole steps.) S = 2500/664.7 = 3.761 (2500/665 = 3.759), so S = 3.76 and
E = 3.76/4 = 94%; the throughput definition agrees: 4 × 0.8/0.85 = 3.765, E = 94.1%.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "INTERCONNECTS",
    "PRESETS",
    "RESNET50",
    "Calibration",
    "Cluster",
    "Comparison",
    "Interconnect",
    "Prediction",
    "Scenario",
    "Sync",
    "Workload",
    "bucketed_allreduce_time",
    "calibrate",
    "compare_with_measurement",
    "epoch_seconds",
    "fit_alpha_beta",
    "get_interconnect",
    "get_preset",
    "load_allreduce_rows",
    "predict",
    "ring_allreduce_time",
    "split_buckets",
    "steps_per_epoch",
]

MB = 10**6
MIB = 1 << 20
GB = 10**9


# --------------------------------------------------------------------------- the links

@dataclass(frozen=True)
class Interconnect:
    """One kind of link as a ring all-reduce sees it.

    alpha_s: the cost of one ring step independent of its size (launch, handshake, wire
    latency). bandwidth_Bps: bytes per second in one direction, since a ring rank sends to
    one neighbour while it receives from the other.
    """
    name: str
    alpha_s: float
    bandwidth_Bps: float
    source: str = ""

    def __post_init__(self):
        if not self.alpha_s >= 0:
            raise ValueError(f"{self.name}: alpha_s must be >= 0, got {self.alpha_s!r}")
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"{self.name}: bandwidth_Bps must be > 0, got {self.bandwidth_Bps!r}")


# Bandwidths are datasheet line rates per direction. The alphas are order-of-magnitude
# estimates of one ring step (no datasheet gives them): calibrate from
# `pycomm bench allreduce --json` (pycomm predict --calibrate) for a machine you have.
INTERCONNECTS: dict = {
    link.name: link for link in (
        Interconnect("nvlink3", 2e-6, 300e9,
                     "A100 SXM4: 12 NVLink3 links x 25 GB/s = 300 GB/s per direction "
                     "(600 GB/s total), NVIDIA A100 datasheet"),
        Interconnect("nvlink4", 2e-6, 450e9,
                     "H100 SXM5: 18 NVLink4 links x 25 GB/s = 450 GB/s per direction "
                     "(900 GB/s total), NVIDIA H100 datasheet"),
        Interconnect("pcie4", 5e-6, 31.5e9,
                     "PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 / 8 = 31.5 GB/s per direction"),
        Interconnect("pcie3", 5e-6, 15.75e9,
                     "PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 / 8 = 15.75 GB/s per direction"),
        Interconnect("ib-hdr", 5e-6, 25e9,
                     "InfiniBand HDR: 200 Gb/s = 25 GB/s per direction, one NIC on the ring"),
        Interconnect("ib-ndr", 5e-6, 50e9,
                     "InfiniBand NDR: 400 Gb/s = 50 GB/s per direction, one NIC on the ring"),
        Interconnect("eth-10g", 50e-6, 1.25e9,
                     "10 GbE: 10 Gb/s = 1.25 GB/s per direction; alpha: TCP through two kernels"),
        Interconnect("eth-100g", 25e-6, 12.5e9,
                     "100 GbE: 100 Gb/s = 12.5 GB/s per direction"),
    )
}

_INTERCONNECT_ALIASES = {
    "nvlink": "nvlink3", "pcie": "pcie4", "ib": "ib-hdr", "infiniband": "ib-hdr",
    "hdr": "ib-hdr", "ndr": "ib-ndr", "10gbe": "eth-10g", "ethernet": "eth-10g",
    "eth": "eth-10g", "100gbe": "eth-100g",
}


def get_interconnect(name: str) -> Interconnect:
    """The preset link called ``name`` (or one of its aliases: nvlink, pcie, ib, 10gbe, ...)."""
    key = name.strip().lower()
    key = _INTERCONNECT_ALIASES.get(key, key)
    try:
        return INTERCONNECTS[key]
    except KeyError:
        known = sorted(set(INTERCONNECTS) | set(_INTERCONNECT_ALIASES))
        raise ValueError(f"interconnect: unknown {name!r}; known: {', '.join(known)}") from None


# --------------------------------------------------------------------------- the all-reduce

def ring_allreduce_time(size_bytes: float, world_size: int, alpha_s: float,
                        bandwidth_Bps: float) -> float:
    """Seconds for one ring all-reduce: 2(N-1)·alpha + 2(N-1)/N · size/B (0 for N=1 or size 0)."""
    if world_size < 1:
        raise ValueError(f"world_size: must be >= 1, got {world_size}")
    if size_bytes < 0:
        raise ValueError(f"size_bytes: must be >= 0, got {size_bytes}")
    if world_size == 1 or size_bytes == 0:
        return 0.0
    steps = 2 * (world_size - 1)
    transfer = 0.0 if math.isinf(bandwidth_Bps) else steps / world_size * size_bytes / bandwidth_Bps
    return steps * alpha_s + transfer


def hierarchical_allreduce_time(size_bytes: float, hosts: int, per_host: int,
                                intra: Interconnect, inter: Interconnect,
                                nics_per_host: int = 1, leader_max_bytes: float = 0.0,
                                leaders: Optional[Interconnect] = None) -> float:
    """Seconds for pycomm's hierarchical all-reduce over ``hosts`` x ``per_host`` ranks.

    Above ``leader_max_bytes`` (csrc/torch/hierarchical.h's rs-ar-ag): a reduce-scatter and
    an all-gather inside each host, together a ring all-reduce of the whole message over the
    L = per_host ranks on the ``intra`` link, and a ring all-reduce of a 1/L shard over the
    hosts on the ``inter`` link, the L shards at once. Those L rings share the host's
    ``nics_per_host`` network links: each gets ``inter``'s bandwidth x min(nics, L)/L (a
    calibrated ``inter`` measured with all L shards at once is already that share: pass
    nics_per_host=per_host). Up to ``leader_max_bytes`` (the leader variant): the host's
    reduce and broadcast, costed as an intra all-reduce, and the whole message between the
    hosts' leaders, one ring per host, on ``leaders`` (``inter`` when None: a calibrated
    ``inter`` measured with all L shards at once is slower than the leaders' ring alone).
    """
    if hosts < 1 or per_host < 1 or nics_per_host < 1:
        raise ValueError("hosts, per_host and nics_per_host: must be >= 1")
    t_intra = ring_allreduce_time(size_bytes, per_host, intra.alpha_s, intra.bandwidth_Bps)
    if size_bytes <= leader_max_bytes or per_host == 1:
        link = leaders or inter
        return t_intra + ring_allreduce_time(size_bytes, hosts, link.alpha_s, link.bandwidth_Bps)
    share = inter.bandwidth_Bps * min(nics_per_host, per_host) / per_host
    return t_intra + ring_allreduce_time(size_bytes / per_host, hosts, inter.alpha_s, share)


def flat_ring_allreduce_time(size_bytes: float, cluster: "Cluster") -> float:
    """Seconds for one flat ring over every rank of ``cluster``: its slowest hop bounds it."""
    link = cluster.ring_link()
    return ring_allreduce_time(size_bytes, cluster.gpus, link.alpha_s, link.bandwidth_Bps)


def hierarchy_table(cluster: "Cluster", sizes: Sequence[float], nics_per_host: int = 1) -> list:
    """Rows (size, flat ring s, hierarchical s, flat/hier) for ``cluster``: when hierarchy
    beats a flat ring. Uneven hosts are not modelled (the last host is taken as full)."""
    rows = []
    for size in sizes:
        flat = flat_ring_allreduce_time(size, cluster)
        hier = hierarchical_allreduce_time(size, cluster.hosts, cluster.gpus_per_host,
                                           cluster.intra, cluster.inter, nics_per_host)
        rows.append((size, flat, hier, flat / hier if hier > 0 else math.inf))
    return rows


def calibrate_hierarchical(rows: Union[str, Path, Sequence[Mapping[str, Any]]],
                           lo: float = 64 * 1024, hi: float = 64 * MIB):
    """The hierarchical model calibrated on a ``collectives_perf.py --hosts H --json`` run.

    Fits an intra link to the ``intra_host_us`` sweep (reduce-scatter and all-gather of the
    message over one host's L ranks: together a ring all-reduce) and an inter link to ``inter_host_us`` (all-reduce of a 1/L shard over
    H ranks, the L shards at once), then predicts ``pycomm_hier_us`` for each size in
    [lo, hi]. The leader threshold is the backend's (PYCOMM_HIER_LEADER_MAX_KB, 64 KiB).
    Returns (intra, inter, [(size, measured s, predicted s, relative error)]).
    """
    if isinstance(rows, (str, Path)):
        rows = load_allreduce_rows(rows)
    rows = [r for r in rows if str(r.get("collective", "all_reduce")) in _ALL_REDUCE
            and r.get("hosts", 1) > 1]
    if not rows:
        raise ValueError("calibrate_hierarchical: no all_reduce rows of a --hosts run")
    hosts, n = int(rows[0]["hosts"]), int(rows[0]["world_size"])
    per_host = n // hosts
    used = [r for r in rows if r.get("intra_host_us") and r.get("inter_host_us")
            and r.get("pycomm_hier_us") and lo <= r["size"] <= hi]
    intra_s = [(float(r["size"]), per_host, r["intra_host_us"] * 1e-6) for r in used]
    # The inter sweep moved size / L bytes (at least one element) per rank.
    esize = float(rows[0]["size"]) / max(1, int(rows[0]["count"]))
    inter_s = [(max(esize, float(r["size"]) // per_host), hosts, r["inter_host_us"] * 1e-6)
               for r in used]
    # Each step's error counts against the hierarchical time it is part of.
    whole = [r["pycomm_hier_us"] * 1e-6 for r in used]
    a1, b1, _ = fit_alpha_beta(intra_s, relative_to=whole)
    a2, b2, _ = fit_alpha_beta(inter_s, relative_to=whole)
    intra = Interconnect("calibrated-intra", a1, b1, "intra_host_us")
    inter = Interconnect("calibrated-inter", a2, b2, "inter_host_us, one shard's share")
    # The leader form's middle step: the whole message among the leaders alone
    # (bench/collectives_perf.py's leaders_host sweep, where the run has one).
    leaders = None
    lead = [r for r in used if r.get("leaders_host_us")]
    if len(lead) >= 2:
        a3, b3, _ = fit_alpha_beta([(float(r["size"]), hosts, r["leaders_host_us"] * 1e-6)
                                    for r in lead], relative_to=[r["pycomm_hier_us"] * 1e-6
                                                                 for r in lead])
        leaders = Interconnect("calibrated-leaders", a3, b3, "leaders_host_us")
    from ..topology import leader_max_bytes_setting
    leader = leader_max_bytes_setting()
    out = []
    for r in rows:
        size = float(r["size"])
        if not (lo <= size <= hi) or not r.get("pycomm_hier_us"):
            continue
        pred = hierarchical_allreduce_time(size, hosts, per_host, intra, inter,
                                           nics_per_host=per_host, leader_max_bytes=leader,
                                           leaders=leaders)
        meas = r["pycomm_hier_us"] * 1e-6
        out.append((size, meas, pred, (pred - meas) / meas))
    return intra, inter, out


def split_buckets(total_bytes: float, bucket_cap_bytes: float) -> list:
    """Bucket sizes of ``total_bytes`` cut into buckets of at most ``bucket_cap_bytes``.

    A cap of 0 or infinity means one bucket (no bucketing).
    """
    if total_bytes < 0:
        raise ValueError(f"total_bytes: must be >= 0, got {total_bytes}")
    if total_bytes == 0:
        return []
    if not bucket_cap_bytes or math.isinf(bucket_cap_bytes) or bucket_cap_bytes >= total_bytes:
        return [total_bytes]
    if bucket_cap_bytes < 0:
        raise ValueError(f"bucket_cap_bytes: must be >= 0, got {bucket_cap_bytes}")
    full = int(total_bytes // bucket_cap_bytes)
    rest = total_bytes - full * bucket_cap_bytes
    return [bucket_cap_bytes] * full + ([rest] if rest > 0 else [])


def bucketed_allreduce_time(bucket_bytes: Sequence[float], world_size: int, alpha_s: float,
                            bandwidth_Bps: float) -> float:
    """Seconds to all-reduce each bucket in turn: every bucket pays the latency term."""
    return sum(ring_allreduce_time(b, world_size, alpha_s, bandwidth_Bps) for b in bucket_bytes)


# --------------------------------------------------------------------------- the inputs

@dataclass(frozen=True)
class Workload:
    """What one GPU does per step, and how many images make an epoch.

    step_compute_s: forward + backward + optimizer for one per-GPU batch on one GPU, with no
    communication (T_1). backward_fraction: the part of it that is backward, the only time
    the all-reduce can hide behind (backward costs about twice the forward, hence 2/3).
    """
    name: str
    step_compute_s: float
    grad_bytes: float
    batch_per_gpu: int
    epoch_images: int
    backward_fraction: float = 2 / 3

    def __post_init__(self):
        if not self.step_compute_s > 0:
            raise ValueError(f"step_compute_s: must be > 0, got {self.step_compute_s!r}")
        if not self.grad_bytes >= 0:
            raise ValueError(f"grad_bytes: must be >= 0, got {self.grad_bytes!r}")
        if self.batch_per_gpu < 1 or self.epoch_images < 1:
            raise ValueError("batch_per_gpu and epoch_images: must be >= 1")
        if not 0 <= self.backward_fraction <= 1:
            raise ValueError("backward_fraction: must be in [0, 1], got "
                             f"{self.backward_fraction!r}")


@dataclass(frozen=True)
class Cluster:
    """N GPUs, ``gpus_per_host`` to a host; ``intra`` links inside a host, ``inter`` between."""
    gpus: int
    gpus_per_host: int
    intra: Interconnect
    inter: Interconnect

    def __post_init__(self):
        if self.gpus < 1:
            raise ValueError(f"gpus: must be >= 1, got {self.gpus}")
        if self.gpus_per_host < 1:
            raise ValueError(f"gpus_per_host: must be >= 1, got {self.gpus_per_host}")

    @property
    def hosts(self) -> int:
        return -(-self.gpus // self.gpus_per_host)

    def ring_link(self) -> Interconnect:
        """The link that bounds the ring: every ring step waits for its slowest hop."""
        if self.hosts == 1:
            return self.intra
        if self.gpus_per_host == 1:
            return self.inter
        a, b = self.intra, self.inter
        return Interconnect(f"{a.name}+{b.name}", max(a.alpha_s, b.alpha_s),
                            min(a.bandwidth_Bps, b.bandwidth_Bps),
                            "slowest hop of the ring bounds it")


# DDP overlaps a bucket's all-reduce with the rest of backward. The last bucket (the first
# layers' gradients) fills only when backward ends; with ResNet-50's four 25 MiB buckets
# about three quarters of the traffic can overlap.
DEFAULT_OVERLAP = 0.75
DDP_BUCKET_CAP = 25 * MIB


@dataclass(frozen=True)
class Sync:
    """How the gradients are synchronised each step.

    bucket_cap_bytes: DDP's bucket_cap_mb (25 MiB by default). overlap: the fraction of the
    all-reduce hidden behind backward. overhead_s: the per-step cost of synchronous training
    that is not the all-reduce (stragglers, sync, input pipeline), paid when N > 1.
    """
    bucket_cap_bytes: float = DDP_BUCKET_CAP
    overlap: float = DEFAULT_OVERLAP
    overhead_s: float = 0.0

    def __post_init__(self):
        if not 0 <= self.overlap <= 1:
            raise ValueError(f"overlap: must be in [0, 1], got {self.overlap!r}")
        if not self.overhead_s >= 0:
            raise ValueError(f"overhead_s: must be >= 0, got {self.overhead_s!r}")
        if not self.bucket_cap_bytes >= 0:
            raise ValueError(f"bucket_cap_bytes: must be >= 0, got {self.bucket_cap_bytes!r}")


# --------------------------------------------------------------------------- the prediction

def steps_per_epoch(epoch_images: int, global_batch: int) -> int:
    """ceil(D / global batch): the last, partial batch is still a step."""
    if global_batch < 1:
        raise ValueError(f"global_batch: must be >= 1, got {global_batch}")
    return -(-epoch_images // global_batch)


def epoch_seconds(epoch_images: int, global_batch: int, step_s: float) -> float:
    return steps_per_epoch(epoch_images, global_batch) * step_s


@dataclass(frozen=True)
class Prediction:
    """What the model says about one configuration. Times in seconds."""
    gpus: int
    hosts: int
    ring: Interconnect
    buckets: int
    latency_s: float          # n_buckets · 2(N-1)·alpha
    transfer_s: float         # 2(N-1)/N · S/B
    comm_s: float             # latency_s + transfer_s
    hidden_s: float
    exposed_s: float
    overhead_s: float
    compute_s: float          # T_1
    step_s: float             # T_N
    steps_per_epoch: int
    epoch_s: float
    one_gpu_steps_per_epoch: int
    one_gpu_epoch_s: float
    speedup: float            # N · T_1 / T_N
    efficiency: float         # T_1 / T_N
    epoch_speedup: float      # epoch_1 / epoch_N
    epoch_efficiency: float
    comm_fraction: float      # comm_s / step_s (hidden or not)
    exposed_fraction: float   # exposed_s / step_s
    baseline_gpus: int
    baseline_step_s: float
    baseline_epoch_s: float
    speedup_vs_baseline: float        # (N/N0) · T0 / T_N
    epoch_speedup_vs_baseline: float  # epoch_0 / epoch_N


def predict(workload: Workload, cluster: Cluster, sync: Sync = Sync(),
            baseline_gpus: int = 1, baseline_step_s: Optional[float] = None) -> Prediction:
    """Step time, speedup and efficiency of ``workload`` on ``cluster`` (formulas: module doc).

    The baseline is what speedup_vs_baseline compares with: ``baseline_gpus`` GPUs taking
    ``baseline_step_s`` per step (default: one GPU at the workload's compute time).
    """
    n = cluster.gpus
    ring = cluster.ring_link()
    buckets = split_buckets(workload.grad_bytes, sync.bucket_cap_bytes) if n > 1 else []
    latency = len(buckets) * 2 * (n - 1) * ring.alpha_s
    comm = bucketed_allreduce_time(buckets, n, ring.alpha_s, ring.bandwidth_Bps)
    transfer = max(comm - latency, 0.0)
    t1 = workload.step_compute_s
    hidden = min(sync.overlap * comm, workload.backward_fraction * t1)
    exposed = comm - hidden
    overhead = sync.overhead_s if n > 1 else 0.0
    step = t1 + overhead + exposed

    b = workload.batch_per_gpu
    steps_n = steps_per_epoch(workload.epoch_images, n * b)
    steps_1 = steps_per_epoch(workload.epoch_images, b)
    epoch_n, epoch_1 = steps_n * step, steps_1 * t1

    if baseline_gpus < 1:
        raise ValueError(f"baseline_gpus: must be >= 1, got {baseline_gpus}")
    t0 = t1 if baseline_step_s is None else baseline_step_s
    epoch_0 = epoch_seconds(workload.epoch_images, baseline_gpus * b, t0)
    return Prediction(
        gpus=n, hosts=cluster.hosts, ring=ring, buckets=len(buckets),
        latency_s=latency, transfer_s=transfer, comm_s=comm, hidden_s=hidden,
        exposed_s=exposed, overhead_s=overhead, compute_s=t1, step_s=step,
        steps_per_epoch=steps_n, epoch_s=epoch_n,
        one_gpu_steps_per_epoch=steps_1, one_gpu_epoch_s=epoch_1,
        speedup=n * t1 / step, efficiency=t1 / step,
        epoch_speedup=epoch_1 / epoch_n, epoch_efficiency=epoch_1 / epoch_n / n,
        comm_fraction=comm / step, exposed_fraction=exposed / step,
        baseline_gpus=baseline_gpus, baseline_step_s=t0, baseline_epoch_s=epoch_0,
        speedup_vs_baseline=(n / baseline_gpus) * t0 / step,
        epoch_speedup_vs_baseline=epoch_0 / epoch_n,
    )


# --------------------------------------------------------------------------- calibration

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


_TIME_COLUMNS = {"pycomm": "pycomm_us", "stock": "stock_us"}
_ALL_REDUCE = ("all_reduce", "allreduce")  # the benchmark's collective column


def load_allreduce_rows(path: Union[str, Path]) -> list:
    """The rows of a ``pycomm bench allreduce --json`` file (a list, or {"rows": [...]})."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, Mapping):
        data = data.get("rows")
    if not isinstance(data, list) or not all(isinstance(r, Mapping) for r in data):
        raise ValueError(f"{path}: expected a JSON list of all-reduce rows")
    return data


def calibrate(rows: Union[str, Path, Sequence[Mapping[str, Any]]],
              backend: str = "pycomm") -> Calibration:
    """alpha and B from all-reduce benchmark rows (or the path of their JSON), for one backend.

    backend "pycomm" fits the ``pycomm_us`` column, "stock" the ``stock_us`` column. Rows
    with wrong results (``wrong`` > 0), no time, or a single rank are left out, and so are
    rows of another collective (``collective`` other than all_reduce), which
    bench/collectives_perf.py writes into the same file when asked for several.
    """
    source = ""
    if isinstance(rows, (str, Path)):
        source = str(rows)
        rows = load_allreduce_rows(rows)
    column = _TIME_COLUMNS.get(backend)
    if column is None:
        raise ValueError(f"backend: expected 'pycomm' or 'stock', got {backend!r}")
    samples = []
    for i, row in enumerate(rows):
        try:
            size, n = float(row["size"]), int(row["world_size"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"calibrate: row {i} lacks a numeric size/world_size ({e})") from None
        t_us = row.get(column)
        if str(row.get("collective", "all_reduce")).replace("-", "_") not in _ALL_REDUCE:
            continue
        if row.get("wrong") or t_us is None or n < 2 or size <= 0:
            continue
        t_us = float(t_us)
        if not math.isfinite(t_us) or t_us <= 0:
            continue
        samples.append((size, n, t_us * 1e-6))
    if not samples:
        raise ValueError(f"calibrate: no usable rows with a {column} time")
    alpha, bw, worst = fit_alpha_beta(samples)
    return Calibration(alpha, bw, backend, len(samples), worst, source)


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
    The step is compute + overhead + exposed communication (module doc); the bounds with no
    overlap and with full overlap are returned too.
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


# --------------------------------------------------------------------------- the presets

@dataclass(frozen=True)
class Scenario:
    """A named configuration with the figures it was calibrated to reproduce."""
    name: str
    title: str
    workload: Workload
    cluster: Cluster
    sync: Sync
    baseline_gpus: int = 1
    baseline_step_s: Optional[float] = None
    notes: Tuple[str, ...] = field(default=(), compare=False)

    def predict(self) -> Prediction:
        return predict(self.workload, self.cluster, self.sync, self.baseline_gpus,
                       self.baseline_step_s)


# torchvision's resnet50 has 25,557,032 parameters: 102.2 MB of fp32 gradients.
RESNET50_PARAMS = 25_557_032
RESNET50 = Workload("resnet50", step_compute_s=0.8, grad_bytes=RESNET50_PARAMS * 4,
                    batch_per_gpu=256, epoch_images=800_000)


def _residual_overhead(workload: Workload, cluster: Cluster, sync: Sync,
                       measured_step_s: float) -> float:
    """The overhead that makes the model's step equal a measured one: what comm cannot explain."""
    p = predict(workload, cluster, replace(sync, overhead_s=0.0))
    rest = measured_step_s - p.step_s
    if rest < 0:
        raise ValueError(f"measured step {measured_step_s} s is faster than compute plus "
                         f"exposed all-reduce ({p.step_s} s)")
    return rest


def _textbook() -> Scenario:
    nvlink = INTERCONNECTS["nvlink3"]
    cluster = Cluster(4, 4, nvlink, INTERCONNECTS["ib-hdr"])
    sync = Sync(DDP_BUCKET_CAP, DEFAULT_OVERLAP)
    measured = 0.85
    sync = replace(sync, overhead_s=_residual_overhead(RESNET50, cluster, sync, measured))
    p = predict(RESNET50, cluster, sync)
    gap = measured - RESNET50.step_compute_s
    pcie = predict(RESNET50, Cluster(4, 4, INTERCONNECTS["pcie4"], nvlink), sync)
    notes = (
        f"1 GPU: 800,000 / 256 = {p.one_gpu_steps_per_epoch} steps x 0.8 s = "
        f"{p.one_gpu_epoch_s:.0f} s.  4 GPUs: 800,000 / 1024 = 781.25 -> "
        f"{p.steps_per_epoch} steps x 0.85 s = {p.epoch_s:.1f} s (quoted 665 s).",
        f"S = {p.one_gpu_epoch_s:.0f} / {p.epoch_s:.1f} = {p.epoch_speedup:.3f} "
        f"(2500 / 665 = {2500 / 665:.3f}) -> 3.76; efficiency S/4 = {p.epoch_efficiency:.1%}.",
        f"The gap 0.85 - 0.80 s = {gap * 1e3:.0f} ms. Ring all-reduce of "
        f"{RESNET50.grad_bytes / MB:.1f} MB over NVLink3 (300 GB/s): "
        f"2(N-1)/N*S/B = 1.5 x {RESNET50.grad_bytes / MB:.1f} MB / 300 GB/s = "
        f"{p.transfer_s * 1e3:.3f} ms + latency {p.latency_s * 1e3:.3f} ms = "
        f"{p.comm_s * 1e3:.3f} ms, {p.comm_s / gap:.1%} of the gap even with no overlap "
        f"({p.exposed_s * 1e3:.3f} ms exposed at {sync.overlap:.0%} overlap).",
        f"Bandwidth cannot explain the other {(gap - p.comm_s) * 1e3:.1f} ms "
        f"({1 - p.comm_s / gap:.0%}): kernel launch and NCCL latency beyond the ring model, "
        f"stragglers (every step waits for the slowest GPU), the DDP synchronisation itself, "
        f"and an input pipeline feeding 4x the images.",
        f"Were the four A100s PCIe 4.0 cards (31.5 GB/s), the all-reduce would take "
        f"{pcie.comm_s * 1e3:.1f} ms: still only {pcie.comm_s / gap:.0%} of the gap.",
    )
    return Scenario("resnet50-4xa100", "ResNet-50 on 4 x A100 in one host (NVLink3), "
                    "the textbook case", RESNET50, cluster, sync, notes=notes)


# The 32-GPU report: 4 hosts x 8 GPUs. Over gloo on Ethernet it reached about 4.2x over the
# 4-GPU run with gradients taking 45% of the step; NCCL over InfiniBand reached about 6.8x.
# Weak scaling, so speedup over 4 GPUs = (32/4) · T4 / T32 = 8 · 0.85 / T32:
#   NCCL/IB : T32 = 8 · 0.85 / 6.8 = 1.000 s
#   gloo/Eth: T32 = 8 · 0.85 / 4.2 = 1.619 s, all-reduce 0.45 · 1.619 = 0.729 s
# Calibration (exact, done below): the NCCL run fixes the non-comm overhead of this
# cluster (the same 4 hosts and input pipeline in both runs); the gloo run then fixes gloo's
# effective link bandwidth (from its 0.729 s all-reduce) and its overlap (from what is left
# of its step once compute and that overhead are taken out).
_REPORT_BASELINE_GPUS = 4
_REPORT_BASELINE_STEP_S = 0.85
_REPORT_NCCL_SPEEDUP = 6.8
_REPORT_GLOO_SPEEDUP = 4.2
_REPORT_GLOO_COMM_SHARE = 0.45


def _report_step(speedup: float) -> float:
    return (32 / _REPORT_BASELINE_GPUS) * _REPORT_BASELINE_STEP_S / speedup


def _nccl_ib(one_host_overhead_s: float) -> Scenario:
    cluster = Cluster(32, 8, INTERCONNECTS["nvlink3"], INTERCONNECTS["ib-hdr"])
    sync = Sync(DDP_BUCKET_CAP, DEFAULT_OVERLAP)
    measured = _report_step(_REPORT_NCCL_SPEEDUP)
    sync = replace(sync, overhead_s=_residual_overhead(RESNET50, cluster, sync, measured))
    p = predict(RESNET50, cluster, sync, _REPORT_BASELINE_GPUS, _REPORT_BASELINE_STEP_S)
    notes = (
        f"Reported ~6.8x over 4 GPUs: T32 = 8 x 0.85 / 6.8 = {p.step_s:.3f} s.",
        f"NCCL over InfiniBand HDR: the ring (NVLink inside a host, 25 GB/s between hosts) is "
        f"bound by IB: 2(31)/32 x {RESNET50.grad_bytes / MB:.1f} MB / 25 GB/s = "
        f"{p.transfer_s * 1e3:.1f} ms + latency {p.latency_s * 1e3:.1f} ms = "
        f"{p.comm_s * 1e3:.1f} ms, {p.comm_fraction:.1%} of the step; "
        f"{p.exposed_s * 1e3:.1f} ms exposed.",
        f"What keeps it from 8x is not the interconnect: {p.overhead_s * 1e3:.0f} ms a step of "
        f"non-comm overhead at 4 hosts ({one_host_overhead_s * 1e3:.1f} ms at 4 GPUs): "
        f"stragglers among 32 GPUs, sync, "
        f"the input pipeline. Calibrated here, it is shared by the gloo preset.",
    )
    return Scenario("resnet50-32gpu-nccl-ib", "ResNet-50 on 32 GPUs (4 hosts x 8), NCCL over "
                    "InfiniBand HDR", RESNET50, cluster, sync, _REPORT_BASELINE_GPUS,
                    _REPORT_BASELINE_STEP_S, notes)


def _gloo_ethernet(nccl: Scenario) -> Scenario:
    w, n = RESNET50, 32
    overhead = nccl.sync.overhead_s
    step = _report_step(_REPORT_GLOO_SPEEDUP)
    comm = _REPORT_GLOO_COMM_SHARE * step
    exposed = step - w.step_compute_s - overhead
    overlap = 1 - exposed / comm
    line = INTERCONNECTS["eth-10g"]
    buckets = split_buckets(w.grad_bytes, DDP_BUCKET_CAP)
    latency = len(buckets) * 2 * (n - 1) * line.alpha_s
    bandwidth = 2 * (n - 1) / n * w.grad_bytes / (comm - latency)
    link = Interconnect("eth-10g-gloo", line.alpha_s, bandwidth,
                        f"10 GbE as gloo used it: {bandwidth / GB:.3f} GB/s fitted to the report "
                        f"({bandwidth / line.bandwidth_Bps:.0%} of the 1.25 GB/s line rate)")
    # gloo copies CUDA tensors through host memory, so NVLink is not on its path.
    cluster = Cluster(n, 8, INTERCONNECTS["pcie4"], link)
    sync = Sync(DDP_BUCKET_CAP, overlap, overhead)
    p = predict(w, cluster, sync, _REPORT_BASELINE_GPUS, _REPORT_BASELINE_STEP_S)
    at_line = predict(w, replace(cluster, inter=line), sync, _REPORT_BASELINE_GPUS,
                      _REPORT_BASELINE_STEP_S)
    notes = (
        f"Reported ~4.2x over 4 GPUs with gradients 45% of the step: T32 = 8 x 0.85 / 4.2 = "
        f"{p.step_s:.3f} s, all-reduce 0.45 x {p.step_s:.3f} = {p.comm_s:.3f} s.",
        f"Had the rest of the step stayed the 4-GPU step (0.85 s), 45% of all-reduce would "
        f"give T32 = 0.85 / 0.55 and 8 x 0.55 = 4.4x; 4.2x says the rest grew to 0.55 x "
        f"{p.step_s:.3f} = {0.55 * p.step_s:.3f} s = 0.800 compute + {overhead:.3f} overhead "
        f"(the NCCL run's) - {p.hidden_s:.3f} all-reduce hidden behind backward.",
        f"Step = 0.800 compute + {overhead:.3f} overhead + {p.exposed_s:.3f} exposed "
        f"({p.hidden_s:.3f} s of the all-reduce hides behind backward: overlap "
        f"{overlap:.0%}, fitted) = {p.step_s:.3f} s.",
        f"The all-reduce moves 2(31)/32 x {w.grad_bytes / MB:.1f} MB = "
        f"{2 * (n - 1) / n * w.grad_bytes / MB:.0f} MB per GPU per step; {p.comm_s:.3f} s means "
        f"{bandwidth / GB:.3f} GB/s per ring link, {bandwidth / line.bandwidth_Bps:.0%} of "
        f"10 GbE (likely causes: TCP through the kernel, CUDA tensors staged through host "
        f"memory, CPU reductions on a host busy feeding 8 GPUs).",
        f"Even at the 1.25 GB/s line rate the model gives {at_line.comm_s:.3f} s of all-reduce "
        f"and {at_line.speedup_vs_baseline:.1f}x; NCCL over InfiniBand HDR (25 GB/s, on the "
        f"GPU) brings it to {nccl.predict().comm_s * 1e3:.1f} ms and "
        f"{nccl.predict().speedup_vs_baseline:.1f}x.",
    )
    return Scenario("resnet50-32gpu-gloo-ethernet", "ResNet-50 on 32 GPUs (4 hosts x 8), gloo "
                    "over 10 GbE", w, cluster, sync, _REPORT_BASELINE_GPUS,
                    _REPORT_BASELINE_STEP_S, notes)


_TEXTBOOK = _textbook()
_NCCL_IB = _nccl_ib(_TEXTBOOK.sync.overhead_s)
PRESETS: dict = {s.name: s for s in (_TEXTBOOK, _gloo_ethernet(_NCCL_IB), _NCCL_IB)}


def get_preset(name: str) -> Scenario:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"preset: unknown {name!r}; known: {', '.join(PRESETS)}") from None
