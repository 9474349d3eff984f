"""The scaling model's formulas: what synchronous data-parallel training costs on N GPUs.

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
pycomm's own hierarchical all-reduce (:func:`hierarchical_allreduce_time`) avoids that.

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
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from .links import Interconnect


MB = 10**6
MIB = 1 << 20
GB = 10**9


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


def _link_ring_time(size_bytes: float, world_size: int, link: Interconnect) -> float:
    return ring_allreduce_time(size_bytes, world_size, link.alpha_s, link.bandwidth_Bps)


def hierarchical_allreduce_time(size_bytes: float, hosts: int, per_host: int,
                                intra: Interconnect, inter: Interconnect,
                                nics_per_host: int = 1,
                                leader_max_bytes: Optional[float] = None,
                                leaders: Optional[Interconnect] = None, *,
                                itemsize: int = 4, uniform: bool = True) -> float:
    """Seconds for pycomm's hierarchical all-reduce over ``hosts`` x ``per_host`` ranks.

    Which form runs is the backend's own routing rule (pycomm.routing.all_reduce_route), so
    the model and the backend cannot disagree; ``leader_max_bytes`` None is the backend's
    setting (PYCOMM_HIER_LEADER_MAX_KB), ``uniform`` False says the hosts' rank counts differ.

    rs-ar-ag (csrc/torch/hierarchical_plan.h): a reduce-scatter and an all-gather inside each host,
    together a ring all-reduce of the whole message over the L = per_host ranks on the
    ``intra`` link, and a ring all-reduce of a 1/L shard over the hosts on the ``inter`` link,
    the L shards at once. Those L rings share the host's ``nics_per_host`` network links: each
    gets ``inter``'s bandwidth x min(nics, L)/L (a calibrated ``inter`` measured with all L
    shards at once is already that share: pass nics_per_host=per_host).

    leader: the host's reduce and broadcast, costed as an intra all-reduce, and the whole
    message between the hosts' leaders, one ring per host, on ``leaders`` (``inter`` when
    None: a calibrated ``inter`` measured with all L shards at once is slower than the
    leaders' ring alone).
    """
    if hosts < 1 or per_host < 1 or nics_per_host < 1:
        raise ValueError("hosts, per_host and nics_per_host: must be >= 1")
    # Here, not at the top: the routing table is pycomm._C's, and the `pycomm` command (its
    # doctor above all) must load where the extension cannot.
    from ...routing import all_reduce_route

    limit = None if leader_max_bytes is None else int(leader_max_bytes)
    route = all_reduce_route(hosts=hosts, local_size=per_host, nbytes=int(size_bytes),
                             itemsize=itemsize, uniform=uniform, leader_max_bytes=limit)
    t_intra = _link_ring_time(size_bytes, per_host, intra)
    if route.plan == "host":   # one host: its shared-memory all-reduce alone
        return t_intra
    if route.algorithm == "rs-ar-ag":
        share = inter.bandwidth_Bps * min(nics_per_host, per_host) / per_host
        return t_intra + ring_allreduce_time(size_bytes / per_host, hosts, inter.alpha_s, share)
    return t_intra + _link_ring_time(size_bytes, hosts, leaders or inter)


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

    @property
    def uniform(self) -> bool:
        """Whether every host holds gpus_per_host ranks (the last one is not short)."""
        return self.gpus % self.gpus_per_host == 0

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


def flat_ring_allreduce_time(size_bytes: float, cluster: Cluster) -> float:
    """Seconds for one flat ring over every rank of ``cluster``: its slowest hop bounds it."""
    return _link_ring_time(size_bytes, cluster.gpus, cluster.ring_link())


def hierarchy_table(cluster: Cluster, sizes: Sequence[float], nics_per_host: int = 1) -> list:
    """Rows (size, flat ring s, hierarchical s, flat/hier) for ``cluster``: when hierarchy
    beats a flat ring. Uneven hosts take the backend's form for them (leader), costed as
    if the last host were full."""
    rows = []
    for size in sizes:
        flat = flat_ring_allreduce_time(size, cluster)
        hier = hierarchical_allreduce_time(size, cluster.hosts, cluster.gpus_per_host,
                                           cluster.intra, cluster.inter, nics_per_host,
                                           uniform=cluster.uniform)
        rows.append((size, flat, hier, flat / hier if hier > 0 else math.inf))
    return rows


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
