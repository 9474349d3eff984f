"""The 3D view: what data, tensor and pipeline parallelism each move per step, and the step.

A layout is dp x tp x pp ranks, placed as ``init_device_mesh(..., (dp, pp, tp))`` places
them: tp innermost (tp ranks are neighbours, so they share a host first), then pp, then dp.
The model is a transformer of l layers, hidden size h, sequence length s, trained in m
microbatches of b sequences per data-parallel rank and step, e bytes per element.

Tensor parallel (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", §3 and Fig. 4). Each transformer layer splits its attention
by heads and its MLP by the columns of the first linear (rows of the second). That costs two
all-reduces in forward (the g operators after the attention's output projection and after
the MLP's second linear) and two in backward (the conjugate f operators before attention and
before the MLP), each of the layer's activations, b·s·h elements::

    per microbatch and stage: 4 · ceil(l/p) all-reduces of b·s·h·e bytes over the t tp ranks

They are on the critical path (each layer needs the sum before it goes on), so all of their
time is exposed.

Pipeline parallel (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", §2.2). Each stage boundary carries a microbatch's
activations, b·s·h elements, forward and their gradient backward. torch.distributed.pipelining
sends the whole tensor from each tp rank to its peer of the same tp index (Megatron's
scatter/gather optimisation, §4.1, would send 1/t of it and all-gather on the other side; it
is not modelled). GPipe and 1F1B both leave p-1 microbatch slots idle at the start and the
end of a step, the pipeline bubble::

    bubble fraction = (p-1) / (m+p-1)  of the pipeline's time

(the paper writes it (p-1)/m, relative to the ideal time m·(t_f+t_b)). The two schedules
differ in memory, not time: GPipe holds the activations of all m microbatches at once, 1F1B
at most p on its first stage (§2.2.1).

Data parallel. Each rank's gradients are its tp slice of its stage's parameters,
P/(t·p) elements, all-reduced over the d dp ranks once a step: a ring moves 2(d-1)/d of them
per rank (the ring of scaling.model). FSDP2 without resharding after forward moves the same
bytes as an all-gather before the first forward and a reduce-scatter after the last backward
(a ring all-reduce is those two halves). The model counts it as exposed after the pipeline.

Parameters and FLOPs (Narayanan et al. 2021, §5.1, with V the vocabulary)::

    P = 12·l·h² · (1 + 13/(12h) + (V+s)/(12·l·h))  =  12·l·h² + 13·l·h + (V+s)·h
    forward + backward of B sequences = 72·B·s·l·h² · (1 + s/(6h) + V/(12·l·h))  FLOPs

(the paper's 96 and V/(16·l·h) count activation recomputation, a second forward; 72 is
forward + backward alone: 2 FLOPs a multiply-add, backward twice the forward.)

The step
--------
A slot is one microbatch's forward and backward on one stage: the slowest stage's compute,
its tp all-reduces, and its two boundary messages (activations forward, gradient backward)::

    t_slot = t_compute + t_tp + t_pp
    t_step = (m + p - 1) · t_slot + t_dp + t_optimizer
           = m·t_compute + m·(t_tp + t_pp) + (p - 1)·t_slot + t_dp + t_optimizer
                compute       communication      the bubble

A point-to-point message of S bytes takes alpha + S/B on a link (one ring step of
scaling.model moves S/N bytes to a neighbour in alpha + (S/N)/B).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

from .calibrate import fit_alpha_beta
from .links import Interconnect
from .model import Cluster, ring_allreduce_time
from ...units import human_bytes

SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Layout3D:
    """dp x tp x pp ranks and the pipeline's schedule: m microbatches per step and rank."""
    dp: int
    tp: int
    pp: int
    microbatches: int
    schedule: str = "1f1b"

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "microbatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: expected one of {', '.join(SCHEDULES)}, "
                             f"got {self.schedule!r}")

    @property
    def world_size(self) -> int:
        return self.dp * self.tp * self.pp

    def stride(self, dim: str) -> int:
        """Rank distance between neighbours of a dimension: the mesh (dp, pp, tp) is row-major."""
        return {"tp": 1, "pp": self.tp, "dp": self.tp * self.pp}[dim]


@dataclass(frozen=True)
class TransformerShape:
    """The model and a microbatch: l layers of hidden size h, microbatches of b sequences of
    s tokens, e bytes per element, vocabulary V (0: leave the embedding out). ``params``
    None derives P from the shape (module doc)."""
    layers: int
    hidden: int
    seq: int
    microbatch_size: int
    bytes_per_element: int
    vocab: int = 0
    params: Optional[int] = None

    def __post_init__(self):
        for name in ("layers", "hidden", "seq", "microbatch_size", "bytes_per_element"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.vocab < 0:
            raise ValueError(f"vocab: must be >= 0, got {self.vocab}")
        if self.params is not None and self.params < 0:
            raise ValueError(f"params: must be >= 0, got {self.params}")

    def param_count(self) -> int:
        """P as given, or Narayanan et al. 2021 §5.1: 12·l·h² + 13·l·h + (V+s)·h."""
        if self.params is not None:
            return self.params
        l, h = self.layers, self.hidden
        return 12 * l * h * h + 13 * l * h + (self.vocab + self.seq) * h

    def activation_bytes(self) -> int:
        """One microbatch's activations at a layer boundary: b·s·h elements."""
        return self.microbatch_size * self.seq * self.hidden * self.bytes_per_element

    def microbatch_flops(self, layers: int) -> float:
        """Forward + backward FLOPs of one microbatch through ``layers`` whole layers, the
        logits not included: 72·b·s·layers·h²·(1 + s/(6h))."""
        b, s, h = self.microbatch_size, self.seq, self.hidden
        return 72.0 * b * s * layers * h * h * (1 + s / (6 * h))

    def logit_flops(self) -> float:
        """Forward + backward FLOPs of the output layer for one microbatch: 3 x 2·b·s·h·V."""
        return 6.0 * self.microbatch_size * self.seq * self.hidden * self.vocab


def layers_per_stage(shape: TransformerShape, layout: Layout3D) -> int:
    """The slowest stage's layers: the pipeline moves at its pace."""
    return -(-shape.layers // layout.pp)


def microbatch_compute_from_flops(shape: TransformerShape, layout: Layout3D,
                                  flops_per_s: float) -> float:
    """Seconds of one microbatch's forward + backward on the slowest stage's tp rank, at an
    achieved ``flops_per_s``: ceil(l/p) layers and the logits (the last stage holds them),
    all split t ways."""
    if not flops_per_s > 0:
        raise ValueError(f"flops_per_s: must be > 0, got {flops_per_s!r}")
    flops = shape.microbatch_flops(layers_per_stage(shape, layout)) + shape.logit_flops()
    return flops / layout.tp / flops_per_s


def p2p_time(size_bytes: float, link: Interconnect) -> float:
    """One point-to-point message: alpha + S/B (0 for an empty one)."""
    if size_bytes < 0:
        raise ValueError(f"size_bytes: must be >= 0, got {size_bytes}")
    return 0.0 if size_bytes == 0 else link.alpha_s + size_bytes / link.bandwidth_Bps


def fit_point_to_point(samples: Iterable[Tuple[float, float]]) -> Tuple[float, float, float]:
    """alpha and B of a link from (size_bytes, seconds) of single messages.

    A ring all-reduce of 2S bytes over 2 ranks takes 2·alpha + 2S/B, twice a message of S
    bytes, so scaling.fit_alpha_beta fits messages given as such all-reduces.
    Returns (alpha_s, bandwidth_Bps, max relative error).
    """
    return fit_alpha_beta([(2 * size, 2, 2 * t) for size, t in samples])


@dataclass(frozen=True)
class Links3D:
    """The link each dimension's traffic crosses."""
    dp: Interconnect
    tp: Interconnect
    pp: Interconnect

    @classmethod
    def on_hosts(cls, layout: Layout3D, gpus_per_host: int, intra: Interconnect,
                 inter: Interconnect) -> "Links3D":
        """Each dimension's link when ``gpus_per_host`` consecutive ranks share a host: a
        group of n ranks at stride k has min(n, gpus_per_host // k) of them on a host (at
        least one), and its slowest hop bounds it (scaling.model.Cluster.ring_link)."""
        if gpus_per_host < 1:
            raise ValueError(f"gpus_per_host: must be >= 1, got {gpus_per_host}")

        def link(dim: str) -> Interconnect:
            n = getattr(layout, dim)
            per_host = max(1, min(n, gpus_per_host // layout.stride(dim)))
            return Cluster(n, per_host, intra, inter).ring_link()

        return cls(dp=link("dp"), tp=link("tp"), pp=link("pp"))


@dataclass(frozen=True)
class DimTraffic:
    """What one dimension moves per step, and how long it takes.

    message_bytes: one collective's or message's payload. messages: the collectives a rank
    takes part in per step (dp, tp), or the messages the busiest stage sends (pp).
    sent_bytes_per_rank: what the busiest rank sends per step (a ring all-reduce sends
    2(n-1)/n of its payload). seconds: its time per step, all exposed.
    """
    dim: str
    ranks: int
    link: Interconnect
    operation: str
    message_bytes: float
    messages: int
    sent_bytes_per_rank: float
    seconds: float


@dataclass(frozen=True)
class Prediction3D:
    """The 3D model's answer for one layout (module doc). Times in seconds."""
    layout: Layout3D
    shape: TransformerShape
    params: int
    layers_per_stage: int
    dp: DimTraffic
    tp: DimTraffic
    pp: DimTraffic
    compute_per_microbatch_s: float
    tp_per_microbatch_s: float
    pp_per_microbatch_s: float
    slot_s: float                 # compute + tp + pp of one microbatch on one stage
    pipeline_s: float             # (m + p - 1) · slot
    bubble_fraction: float        # (p - 1) / (m + p - 1)
    bubble_s: float               # (p - 1) · slot
    in_flight_microbatches: int   # activations the first stage holds: GPipe m, 1F1B min(m, p)
    optimizer_s: float
    step_s: float                 # pipeline + dp + optimizer
    comm_fraction: float          # m·(tp + pp) + dp: what a rank spends communicating


def predict_3d(layout: Layout3D, shape: TransformerShape, links: Links3D,
               compute_per_microbatch_s: float = 0.0, optimizer_s: float = 0.0,
               grad_bytes_per_rank: Optional[float] = None) -> Prediction3D:
    """Bytes and times of each dimension, the bubble and the step (formulas: module doc).

    compute_per_microbatch_s: forward + backward of one microbatch on the slowest stage's tp
    rank, no communication (microbatch_compute_from_flops estimates it). grad_bytes_per_rank
    None is P·e/(t·p), the shape's parameters split evenly; a model whose embedding or norms
    are not split gives its largest rank's bytes.
    """
    if compute_per_microbatch_s < 0 or optimizer_s < 0:
        raise ValueError("compute_per_microbatch_s and optimizer_s: must be >= 0")
    d, t, p, m = layout.dp, layout.tp, layout.pp, layout.microbatches
    params = shape.param_count()
    stage_layers = layers_per_stage(shape, layout)
    act = shape.activation_bytes()

    if grad_bytes_per_rank is None:
        grad_bytes_per_rank = params * shape.bytes_per_element / (t * p)
    if grad_bytes_per_rank < 0:
        raise ValueError(f"grad_bytes_per_rank: must be >= 0, got {grad_bytes_per_rank}")
    dp_s = ring_allreduce_time(grad_bytes_per_rank, d, links.dp.alpha_s, links.dp.bandwidth_Bps)
    dp = DimTraffic("dp", d, links.dp, "all-reduce of the gradients",
                    grad_bytes_per_rank, 1 if d > 1 else 0,
                    2 * (d - 1) / d * grad_bytes_per_rank, dp_s)

    # Megatron: 2 all-reduces forward + 2 backward per layer (Shoeybi et al. 2019, §3).
    tp_count = 4 * stage_layers if t > 1 else 0
    tp_mb = tp_count * ring_allreduce_time(act, t, links.tp.alpha_s, links.tp.bandwidth_Bps)
    tp = DimTraffic("tp", t, links.tp, "all-reduce of the activations", act, m * tp_count,
                    m * tp_count * 2 * (t - 1) / t * act, m * tp_mb)

    # A middle stage receives and sends both ways; the first and the last send one way only.
    sends = 0 if p == 1 else (1 if p == 2 else 2)
    pp_mb = 2 * p2p_time(act, links.pp) if p > 1 else 0.0
    pp = DimTraffic("pp", p, links.pp, "send/recv of activations and their gradients", act,
                    m * sends, m * sends * act, m * pp_mb)

    slot = compute_per_microbatch_s + tp_mb + pp_mb
    pipeline = (m + p - 1) * slot
    step = pipeline + dp_s + optimizer_s
    comm = m * (tp_mb + pp_mb) + dp_s
    return Prediction3D(
        layout=layout, shape=shape, params=params, layers_per_stage=stage_layers,
        dp=dp, tp=tp, pp=pp, compute_per_microbatch_s=compute_per_microbatch_s,
        tp_per_microbatch_s=tp_mb, pp_per_microbatch_s=pp_mb, slot_s=slot,
        pipeline_s=pipeline, bubble_fraction=(p - 1) / (m + p - 1), bubble_s=(p - 1) * slot,
        in_flight_microbatches=m if layout.schedule == "gpipe" else min(m, p),
        optimizer_s=optimizer_s, step_s=step,
        comm_fraction=comm / step if step > 0 else 0.0,
    )


def format_prediction_3d(pred: Prediction3D) -> str:
    """The prediction as a table: one row per dimension, then the step from its parts."""
    lay, sh = pred.layout, pred.shape
    ms = lambda seconds: f"{seconds * 1e3:.3f} ms"  # noqa: E731
    lines = [
        f"  layout   dp {lay.dp} x tp {lay.tp} x pp {lay.pp} = {lay.world_size} ranks, "
        f"{lay.microbatches} microbatches of {sh.microbatch_size} x {sh.seq} tokens a step, "
        f"{lay.schedule}",
        f"  model    {sh.layers} layers ({pred.layers_per_stage} on the slowest stage), hidden "
        f"{sh.hidden}, {sh.bytes_per_element} bytes an element, {pred.params:,} parameters",
        f"  {'dim':4} {'ranks':>5}  {'link: alpha, B':34} {'per step':28} {'sent/rank':>10} "
        f"{'time':>12}",
    ]
    for d in (pred.dp, pred.tp, pred.pp):
        link = (f"{d.link.name} {d.link.alpha_s * 1e6:.1f} us, "
                f"{d.link.bandwidth_Bps / 1e9:.3g} GB/s")
        what = f"{d.messages} x {human_bytes(d.message_bytes)} {d.operation.split(' of ')[0]}"
        lines.append(f"  {d.dim:4} {d.ranks:>5}  {link:34} {what:28} "
                     f"{human_bytes(d.sent_bytes_per_rank):>10} {ms(d.seconds):>12}")
    m = lay.microbatches
    lines += [
        f"  slot     one microbatch on one stage: {ms(pred.compute_per_microbatch_s)} compute + "
        f"{ms(pred.tp_per_microbatch_s)} tp + {ms(pred.pp_per_microbatch_s)} pp = "
        f"{ms(pred.slot_s)}",
        f"  bubble   (p-1)/(m+p-1) = {lay.pp - 1}/{m + lay.pp - 1} = {pred.bubble_fraction:.1%} "
        f"of the pipeline ({ms(pred.bubble_s)}); activations in flight on the first stage: "
        f"{pred.in_flight_microbatches} microbatches ({lay.schedule})",
        f"  step     (m+p-1) x slot = {m + lay.pp - 1} x {ms(pred.slot_s)} = "
        f"{ms(pred.pipeline_s)} + dp {ms(pred.dp.seconds)} + optimizer {ms(pred.optimizer_s)}"
        f" = {ms(pred.step_s)}; communication {pred.comm_fraction:.1%} of it",
    ]
    return "\n".join(lines)
