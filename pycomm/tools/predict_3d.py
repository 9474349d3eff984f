"""``pycomm predict --3d``: the options and printout of the 3D model (scaling/three_d.py), and
the link that predict's --alpha-us and --bandwidth-GBps make (given_link), which both models take.

    pycomm predict --3d --dp 8 --tp 8 --pp 4 --microbatches 16 --layers 48 --hidden 8192 \\
        --seq 2048 --gpus-per-host 8 --tflops 150
    pycomm predict --3d --dp 2 --tp 2 --pp 2 --microbatches 4 --json
"""
from __future__ import annotations

import argparse
from dataclasses import replace

from . import scaling
from .scaling import three_d

__all__ = ["add_arguments", "given_link", "prediction"]

# GPT-2 medium (Radford et al. 2019): 24 layers, hidden 1024, context 1024, vocabulary 50257.
# 12·l·h² + 13·l·h + (V+s)·h = 354,821,120 parameters: its checkpoint's 354,823,168 less the
# final layer norm's 2h.
_DEFAULT_SHAPE = dict(layers=24, hidden=1024, seq=1024, vocab=50257)

# (flag, dest, type, metavar, help); None defaults are resolved in run().
_OPTIONS = (
    ("--dp", "dp", int, "N", "data-parallel ranks (default 1)"),
    ("--tp", "tp", int, "N", "tensor-parallel ranks (default 1)"),
    ("--pp", "pp", int, "N", "pipeline stages (default 1)"),
    ("--microbatches", "microbatches", int, "M", "microbatches per step and dp rank (default 1)"),
    ("--schedule", "schedule", str, "NAME", "pipeline schedule: 1f1b or gpipe (default 1f1b)"),
    ("--layers", "layers", int, "L", f"transformer layers (default {_DEFAULT_SHAPE['layers']}, "
     "GPT-2 medium)"),
    ("--hidden", "hidden", int, "H", f"hidden size (default {_DEFAULT_SHAPE['hidden']})"),
    ("--seq", "seq", int, "S", f"sequence length (default {_DEFAULT_SHAPE['seq']})"),
    ("--vocab", "vocab", int, "V", f"vocabulary, for the parameter count and the logits "
     f"(default {_DEFAULT_SHAPE['vocab']}; 0 leaves them out)"),
    ("--microbatch-size", "microbatch_size", int, "B", "sequences a microbatch (default 1)"),
    ("--bytes-per-element", "bytes_per_element", int, "E",
     "bytes of an activation or gradient element (default 2, bf16)"),
    ("--params", "params", float, "P",
     "parameter count (default: 12·l·h² + 13·l·h + (V+s)·h, Narayanan et al. 2021)"),
    ("--microbatch-compute-s", "microbatch_compute_s", float, "SECONDS",
     "forward + backward of one microbatch on one stage's tp rank, no communication"),
    ("--tflops", "tflops", float, "TFLOPS",
     "achieved TFLOP/s per GPU, to derive --microbatch-compute-s from the FLOP count"),
    ("--optimizer-s", "optimizer_s", float, "SECONDS", "optimizer step per step (default 0)"),
    ("--tp-link", "tp_link", str, "NAME", "link of the tp groups (default: from the hosts)"),
    ("--pp-link", "pp_link", str, "NAME", "link between pipeline stages (default: from the hosts)"),
    ("--dp-link", "dp_link", str, "NAME", "link of the dp groups (default: from the hosts)"),
)

# predict's data-parallel options that mean nothing to the 3D model: refused, not ignored.
_NOT_3D = ("preset", "calibrate", "hier_calibrate", "step_compute_s", "grad_mb", "batch",
           "epoch_images", "bucket_mb", "overlap", "overhead_s", "backward_fraction",
           "baseline_gpus", "baseline_step_s", "hierarchy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "--3d", "data x tensor x pipeline parallel (pycomm/tools/scaling/three_d.py): each "
        "dimension's bytes and time per step, the pipeline bubble and the step. Ranks are laid "
        "out as init_device_mesh((dp, pp, tp)), tp innermost; --gpus-per-host, --intra and "
        "--interconnect place them on hosts, --alpha-us/--bandwidth-GBps override every link.")
    g.add_argument("--3d", dest="three_d", action="store_true", help="the 3D model")
    for flag, dest, typ, metavar, text in _OPTIONS:
        g.add_argument(flag, dest=dest, type=typ, default=None, metavar=metavar, help=text)


def _value(a, dest, default):
    v = getattr(a, dest)
    return default if v is None else v


def given_link(a: argparse.Namespace, link: scaling.Interconnect) -> scaling.Interconnect:
    """`link` with predict's --alpha-us and --bandwidth-GBps, where given, in place of its
    own alpha and B (the 3D model's links and the data-parallel model's ring alike)."""
    if a.alpha_us is None and a.bandwidth_gbps is None:
        return link
    return scaling.Interconnect(
        "given", link.alpha_s if a.alpha_us is None else a.alpha_us * 1e-6,
        link.bandwidth_Bps if a.bandwidth_gbps is None else a.bandwidth_gbps * 1e9,
        "given on the command line")


def _links(a, layout: three_d.Layout3D) -> three_d.Links3D:
    per_host = _value(a, "gpus_per_host", layout.world_size)
    intra = scaling.get_interconnect(a.intra or "nvlink3")
    inter = scaling.get_interconnect(a.interconnect or "ib-hdr")
    links = three_d.Links3D.on_hosts(layout, per_host, intra, inter)
    given = {dim: scaling.get_interconnect(getattr(a, f"{dim}_link"))
             for dim in ("dp", "tp", "pp") if getattr(a, f"{dim}_link")}
    links = replace(links, **given)
    return three_d.Links3D(dp=given_link(a, links.dp), tp=given_link(a, links.tp),
                           pp=given_link(a, links.pp))


def prediction(a: argparse.Namespace) -> tuple:
    """(Prediction3D, how its compute time was had) for predict's parsed options."""
    refused = [dest for dest in _NOT_3D if getattr(a, dest, None) not in (None, False)]
    if refused:
        raise ValueError("--3d: these options are for the data-parallel model: "
                         + ", ".join("--" + d.replace("_", "-") for d in refused))
    layout = three_d.Layout3D(_value(a, "dp", 1), _value(a, "tp", 1), _value(a, "pp", 1),
                              _value(a, "microbatches", 1), _value(a, "schedule", "1f1b"))
    if a.gpus is not None and a.gpus != layout.world_size:
        raise ValueError(f"--gpus {a.gpus}: the layout has dp x tp x pp = {layout.world_size}")
    shape = three_d.TransformerShape(
        **{k: _value(a, k, v) for k, v in _DEFAULT_SHAPE.items()},
        microbatch_size=_value(a, "microbatch_size", 1),
        bytes_per_element=_value(a, "bytes_per_element", 2),
        params=None if a.params is None else int(a.params))
    if a.microbatch_compute_s is not None and a.tflops is not None:
        raise ValueError("give --microbatch-compute-s or --tflops, not both")
    if a.tflops is not None:
        compute = three_d.microbatch_compute_from_flops(shape, layout, a.tflops * 1e12)
        compute_note = (f"compute from the FLOPs of the slowest stage, (72·b·s·h²·ceil(l/p)·"
                        f"(1 + s/(6h)) + 6·b·s·h·V) / t, at {a.tflops:g} TFLOP/s")
    elif a.microbatch_compute_s is not None:
        compute, compute_note = a.microbatch_compute_s, "compute given (--microbatch-compute-s)"
    else:
        compute, compute_note = 0.0, ("no compute given (--microbatch-compute-s or --tflops): "
                                      "the step below is communication alone")
    pred = three_d.predict_3d(layout, shape, _links(a, layout), compute,
                              _value(a, "optimizer_s", 0.0))
    return pred, compute_note
