"""The ``pycomm`` command: predict scaling, run the benchmarks, check an environment or script.

    pycomm predict --preset resnet50-4xa100
    pycomm predict --gpus 32 --gpus-per-host 8 --interconnect ib --step-compute-s 0.8 --grad-mb 100
    pycomm predict --gpus 8 --calibrate allreduce.json --backend stock --json
    pycomm predict --3d --dp 8 --tp 8 --pp 4 --microbatches 16 --gpus-per-host 8 --tflops 150
    pycomm bench allreduce --json out.json  # runs bench/collectives_perf.py --collective all_reduce
    pycomm bench collectives --collective all_gather,broadcast  # runs bench/collectives_perf.py
    pycomm bench ddp ...                    # runs bench/ddp_resnet50.py
    pycomm doctor [SCRIPT.py ...]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

from . import predict_3d, scaling
from .scaling import MB, MIB, Cluster, Prediction, Scenario, Sync

__all__ = ["main"]


@dataclass(frozen=True)
class _Bench:
    script: str                   # file name in bench/
    fixed_args: Tuple[str, ...]   # given to the script before the user's arguments
    named: bool                   # run it as `pycomm bench NAME` (argparse's prog), not its path


# `pycomm bench NAME ARGS` runs bench/<script> <fixed_args> ARGS with this Python. The
# benchmarks are a checkout's bench/ folder, never installed with the package: they are found
# through --bench-dir, else this setting, else beside the package when it was imported from a
# checkout (in place, or installed editable).
BENCH_DIR_ENV = "PYCOMM_BENCH_DIR"
BENCHES = {
    "allreduce": _Bench("collectives_perf.py", ("--collective", "all_reduce"), named=True),
    "collectives": _Bench("collectives_perf.py", (), named=True),
    "ddp": _Bench("ddp_resnet50.py", (), named=True),
}

# `python -c _RUN_NAMED SCRIPT PROG ARGS...` runs SCRIPT with sys.argv = [PROG, ARGS...], so
# argparse's usage line says `pycomm bench NAME` and not the script's file name. Otherwise it
# is `python SCRIPT ARGS`: sys.path[0] is the script's folder, and __main__.__file__ the
# script, which is how multiprocessing's spawn finds __main__'s code in the ranks it starts.
# runpy.run_path cannot do this: it sets sys.argv[0] to the script's path.
_RUN_NAMED = """\
def _run(script, prog, *args):
    import os, sys
    sys.argv = [prog, *args]
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.path.dirname(script)
    g = sys.modules["__main__"].__dict__
    g["__file__"] = script
    with open(script, "rb") as f:
        code = compile(f.read(), script, "exec", dont_inherit=True)
    del g["_run"]
    exec(code, g)
_run(*__import__("sys").argv[1:])
"""

# Free-form options of `predict`, as (flag, dest, type, help). They default to None so that,
# with --preset, only the ones given override the preset.
_PREDICT_OPTIONS = (
    ("--gpus", "gpus", int, "N", "number of GPUs"),
    ("--gpus-per-host", "gpus_per_host", int, "N", "GPUs per host (default: all on one host)"),
    ("--interconnect", "interconnect", str, "NAME",
     "link between hosts: " + ", ".join(scaling.INTERCONNECTS) + " (default ib-hdr)"),
    ("--intra", "intra", str, "NAME", "link inside a host, of the same names (default nvlink3)"),
    ("--step-compute-s", "step_compute_s", float, "SECONDS",
     "one GPU's step with no communication, T_1, in seconds (default 0.8, ResNet-50 on an A100)"),
    ("--grad-mb", "grad_mb", float, "MB",
     "gradient bytes per step, in MB of 10^6 bytes (default 102.2, ResNet-50)"),
    ("--batch", "batch", int, "IMAGES", "batch per GPU, in images (default 256)"),
    ("--epoch-images", "epoch_images", int, "IMAGES", "images per epoch (default 800000)"),
    ("--bucket-mb", "bucket_mb", float, "MiB",
     "DDP's bucket_cap_mb, in MiB (default 25; 0: one bucket)"),
    ("--overlap", "overlap", float, "FRACTION",
     f"fraction of the all-reduce hidden behind backward, 0 to 1 "
     f"(default {scaling.DEFAULT_OVERLAP})"),
    ("--overhead-s", "overhead_s", float, "SECONDS",
     "per-step cost other than communication when N > 1 (stragglers, sync, input), in seconds "
     "(default 0)"),
    ("--backward-fraction", "backward_fraction", float, "FRACTION",
     "share of the compute step that is backward, 0 to 1 (default 2/3)"),
    ("--baseline-gpus", "baseline_gpus", int, "N", "GPUs of the run to compare with (default 1)"),
    ("--baseline-step-s", "baseline_step_s", float, "SECONDS",
     "step time of that run, in seconds (default: T_1 when the baseline is 1 GPU)"),
    ("--alpha-us", "alpha_us", float, "MICROSECONDS",
     "ring-step latency, in microseconds (overrides the links)"),
    ("--bandwidth-GBps", "bandwidth_gbps", float, "GB/s",
     "ring bandwidth, in GB/s of 10^9 bytes (overrides the links)"),
)


def _repo_root() -> Path:
    """The folder the package was imported from: a checkout's root, whose benchmarks are in
    <root>/bench, or site-packages, which has none."""
    return Path(__file__).resolve().parents[2]  # <root>/pycomm/tools/cli.py


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pycomm", description="pycomm: collectives for PyTorch, "
                                "and a model of how data-parallel training scales.")
    sub = p.add_subparsers(dest="command", metavar="{predict,bench,doctor}")
    sub.required = True

    pr = sub.add_parser("predict", help="predict step time, speedup and efficiency",
                        description="Alpha-beta model of ring all-reduce with bucketing and "
                        "overlap (see pycomm/tools/scaling/model.py). Give --preset, or the "
                        "free-form options (with --preset they override it).")
    pr.add_argument("--preset", choices=sorted(scaling.PRESETS), help="a calibrated case")
    pr.add_argument("--list", action="store_true", help="list presets and interconnects")
    for flag, dest, typ, metavar, text in _PREDICT_OPTIONS:
        pr.add_argument(flag, dest=dest, type=typ, default=None, metavar=metavar, help=text)
    pr.add_argument("--calibrate", metavar="PATH.json",
                    help="fit alpha and B to the rows of pycomm bench allreduce --json")
    pr.add_argument("--backend", choices=("pycomm", "stock"), default="pycomm",
                    help="which time column --calibrate fits (default pycomm)")
    pr.add_argument("--json", action="store_true", help="print JSON instead of text")
    pr.add_argument("--hierarchy", action="store_true",
                    help="compare a flat ring with pycomm's hierarchical all-reduce (intra-host "
                         "reduce-scatter/all-gather, inter-host all-reduce of a 1/L shard) on "
                         "the cluster, by message size")
    pr.add_argument("--nics-per-host", type=int, default=1,
                    help="network links per host that the L shards share (--hierarchy)")
    pr.add_argument("--hier-calibrate", metavar="PATH.json",
                    help="fit the hierarchical model to a collectives_perf.py --hosts --json run "
                         "and print its error against the measured hierarchical times")
    predict_3d.add_arguments(pr)

    be = sub.add_parser("bench", help="run bench/collectives_perf.py or bench/ddp_resnet50.py",
                        description="Runs a benchmark script of a pycomm checkout with this "
                        "Python; the arguments after its name go to the script (NAME --help "
                        "lists them). allreduce: bench/collectives_perf.py --collective "
                        "all_reduce; collectives: bench/collectives_perf.py (--collective "
                        "NAME[,NAME...] picks them); ddp: bench/ddp_resnet50.py. The "
                        "benchmarks are not installed with the package: they are found in "
                        f"--bench-dir, else ${BENCH_DIR_ENV}, else the checkout this pycomm "
                        "was imported from; they measure the pycomm of the checkout they are in.")
    be.add_argument("--bench-dir", help=f"a checkout's bench/ folder (default: ${BENCH_DIR_ENV}, "
                    "else the bench/ beside the package when it was imported from a checkout)")
    be.add_argument("which", choices=sorted(BENCHES))
    be.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")

    do = sub.add_parser("doctor", help="check the environment, or a training script",
                        description="Without a script: torch/CUDA/NCCL versions, backends, "
                        "/dev/shm, CPUs, GPUs and peer access, pycomm's CUDA build. With "
                        "scripts: common distributed-training mistakes found by reading them "
                        "(never running them); exit status 1 if any.")
    do.add_argument("scripts", nargs="*", metavar="SCRIPT.py")
    do.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


# --------------------------------------------------------------------------- predict

def _scenario_from_args(a: argparse.Namespace) -> tuple:
    """(Scenario, Calibration or None, list of overridden options) from predict's options."""
    given = [flag for flag, dest, *_ in _PREDICT_OPTIONS if getattr(a, dest) is not None]
    if a.calibrate:
        given.append("--calibrate")
    if a.preset:
        base = scaling.get_preset(a.preset)
    elif a.gpus is None:
        raise ValueError("give --preset NAME or --gpus N (pycomm predict --list shows presets)")
    else:
        w = scaling.RESNET50
        base = Scenario("custom", "free-form prediction", w,
                        Cluster(a.gpus, a.gpus, scaling.get_interconnect("nvlink3"),
                                scaling.get_interconnect("ib-hdr")), Sync())

    w, c, s = base.workload, base.cluster, base.sync
    w = replace(w, **{k: v for k, v in (
        ("step_compute_s", a.step_compute_s),
        ("grad_bytes", None if a.grad_mb is None else a.grad_mb * MB),
        ("batch_per_gpu", a.batch),
        ("epoch_images", a.epoch_images),
        ("backward_fraction", a.backward_fraction)) if v is not None})
    gpus = c.gpus if a.gpus is None else a.gpus
    per_host = a.gpus_per_host if a.gpus_per_host is not None else (
        c.gpus_per_host if a.preset else gpus)
    intra = scaling.get_interconnect(a.intra) if a.intra else c.intra
    inter = scaling.get_interconnect(a.interconnect) if a.interconnect else c.inter
    calibration = None
    if a.calibrate:
        calibration = scaling.calibrate(a.calibrate, backend=a.backend)
        intra = inter = calibration.interconnect()
    if a.alpha_us is not None or a.bandwidth_gbps is not None:
        intra = inter = predict_3d.given_link(a, Cluster(gpus, per_host, intra, inter).ring_link())
    c = Cluster(gpus, per_host, intra, inter)
    s = replace(s, **{k: v for k, v in (
        ("bucket_cap_bytes", None if a.bucket_mb is None else a.bucket_mb * MIB),
        ("overlap", a.overlap),
        ("overhead_s", a.overhead_s)) if v is not None})
    baseline_gpus = base.baseline_gpus if a.baseline_gpus is None else a.baseline_gpus
    baseline_step = base.baseline_step_s if a.baseline_step_s is None else a.baseline_step_s
    if a.baseline_gpus is not None and a.baseline_step_s is None and a.baseline_gpus != 1:
        raise ValueError("--baseline-gpus: give --baseline-step-s too (the step time of that run)")
    name = base.name if not (a.preset and given) else f"{base.name} (modified: {' '.join(given)})"
    title = base.title if not (a.preset and given) else f"based on: {base.title}"
    scenario = Scenario(name, title, w, c, s, baseline_gpus, baseline_step,
                        base.notes if not given else ())
    return scenario, calibration, given


def _in_unit_of(total: float):
    """A formatter of seconds in one unit for every term of a sum: ms when the total is
    under a second (3 decimals), else s (4 decimals)."""
    if total < 1:
        return lambda seconds: f"{seconds * 1e3:.3f} ms"
    return lambda seconds: f"{seconds:.4f} s"


def _format_prediction(sc: Scenario, p: Prediction, calibration) -> str:
    w, c, s = sc.workload, sc.cluster, sc.sync
    ring = p.ring
    bw = "inf" if math.isinf(ring.bandwidth_Bps) else f"{ring.bandwidth_Bps / 1e9:.3f} GB/s"
    lines = [
        f"{sc.name}: {sc.title}",
        f"  workload    {w.name}: T_1 = {w.step_compute_s:.3f} s per {w.batch_per_gpu}-image "
        f"step, {w.grad_bytes / MB:.1f} MB of gradients, epoch {w.epoch_images:,} images",
        f"  cluster     {p.gpus} GPU{'s' if p.gpus > 1 else ''} on {p.hosts} host"
        f"{'s' if p.hosts > 1 else ''} ({c.gpus_per_host} per host); ring bound by "
        f"{ring.name}: alpha {ring.alpha_s * 1e6:.1f} us, B {bw}",
    ]
    if calibration is not None:
        lines.append(f"  calibrated  {calibration.backend} times from {calibration.source}: "
                     f"{calibration.rows} rows, worst error {calibration.max_relative_error:.1%}")
    if p.gpus > 1:
        cap = "one bucket" if p.buckets == 1 else f"{s.bucket_cap_bytes / MIB:g} MiB cap"
        t = _in_unit_of(p.comm_s)
        lines += [
            f"  all-reduce  {p.buckets} bucket{'s' if p.buckets != 1 else ''} ({cap}): "
            f"latency n_b*2(N-1)*alpha = {t(p.latency_s)} + bandwidth 2(N-1)/N*S/B = "
            f"{t(p.transfer_s)} = {t(p.comm_s)} ({p.comm_fraction:.1%} of the step)",
            f"  overlap     {s.overlap:.0%}: {t(p.hidden_s)} hidden behind backward + "
            f"{t(p.exposed_s)} exposed",
        ]
    t = _in_unit_of(p.step_s)
    lines += [
        f"  step        T_N = {t(p.compute_s)} compute + {t(p.overhead_s)} overhead + "
        f"{t(p.exposed_s)} exposed = {t(p.step_s)}",
        f"  epoch       1 GPU: {p.one_gpu_steps_per_epoch} steps x {p.compute_s:.3f} s = "
        f"{p.one_gpu_epoch_s:.1f} s; {p.gpus} GPUs: {p.steps_per_epoch} steps x "
        f"{p.step_s:.4f} s = {p.epoch_s:.1f} s",
        f"  speedup     S = {p.epoch_speedup:.2f} (epoch), efficiency {p.epoch_efficiency:.1%}; "
        f"throughput N*T_1/T_N = {p.speedup:.2f}, efficiency {p.efficiency:.1%}",
    ]
    if p.baseline_gpus != 1:
        ideal = p.gpus / p.baseline_gpus
        lines.append(
            f"  vs {p.baseline_gpus} GPUs  {p.speedup_vs_baseline:.2f}x (ideal {ideal:g}x, "
            f"efficiency {p.speedup_vs_baseline / ideal:.1%}) = ({p.gpus}/{p.baseline_gpus}) x "
            f"{p.baseline_step_s:.3f} / {p.step_s:.4f}; epochs {p.baseline_epoch_s:.1f} s -> "
            f"{p.epoch_s:.1f} s = {p.epoch_speedup_vs_baseline:.2f}x")
    for note in sc.notes:
        lines.append(f"  - {note}")
    return "\n".join(lines)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def _hierarchy(sc, nics: int) -> int:
    c = sc.cluster
    print(f"{c.gpus} ranks = {c.hosts} hosts x {c.gpus_per_host}; intra {c.intra.name} "
          f"({c.intra.bandwidth_Bps / 1e9:.2f} GB/s, {c.intra.alpha_s * 1e6:.0f} us), inter "
          f"{c.inter.name} ({c.inter.bandwidth_Bps / 1e9:.3f} GB/s, {c.inter.alpha_s * 1e6:.0f} "
          f"us), {nics} NIC(s) per host")
    print(f"{'size':>10} {'flat ring ms':>13} {'hier ms':>10} {'flat/hier':>9}")
    sizes = [64 << 10, 1 << 20, 4 << 20, 25 * scaling.MIB, sc.workload.grad_bytes]
    for size, flat, hier, ratio in scaling.hierarchy_table(c, sizes, nics):
        print(f"{size / 1e6:>8.3f}MB {flat * 1e3:>13.2f} {hier * 1e3:>10.2f} {ratio:>8.2f}x")
    return 0


def _hier_calibrate(path: str) -> int:
    intra, inter, rows = scaling.calibrate_hierarchical(path)
    print(f"intra: alpha {intra.alpha_s * 1e6:.1f} us, {intra.bandwidth_Bps / 1e9:.2f} GB/s; "
          f"inter (one shard's share): alpha {inter.alpha_s * 1e6:.1f} us, "
          f"{inter.bandwidth_Bps / 1e9:.3f} GB/s")
    print(f"{'size':>10} {'measured us':>12} {'model us':>10} {'error':>7}")
    for size, meas, pred, err in rows:
        print(f"{int(size):>10} {meas * 1e6:>12.1f} {pred * 1e6:>10.1f} {err:>+7.1%}")
    worst = max(rows, key=lambda r: abs(r[3]))
    print(f"worst error {worst[3]:+.1%} at {int(worst[0])} B over {len(rows)} sizes")
    return 0


def _predict_3d(a: argparse.Namespace) -> int:
    pred, compute_note = predict_3d.prediction(a)
    if a.json:
        out = {"model": "3d", "compute": compute_note, "prediction": asdict(pred)}
        print(json.dumps(_jsonable(out), indent=2))
    else:
        print(f"3d: data x tensor x pipeline parallel; {compute_note}")
        print(scaling.three_d.format_prediction_3d(pred))
    return 0


def _predict(a: argparse.Namespace) -> int:
    if a.list:
        print("presets:")
        for sc in scaling.PRESETS.values():
            print(f"  {sc.name:32s} {sc.title}")
        print("interconnects (alpha per ring step, bandwidth per direction):")
        for link in scaling.INTERCONNECTS.values():
            print(f"  {link.name:10s} {link.alpha_s * 1e6:5.1f} us {link.bandwidth_Bps / 1e9:7.2f} "
                  f"GB/s  {link.source}")
        return 0
    if a.three_d:
        return _predict_3d(a)
    if a.hier_calibrate:
        return _hier_calibrate(a.hier_calibrate)
    sc, calibration, _ = _scenario_from_args(a)
    if a.hierarchy:
        return _hierarchy(sc, a.nics_per_host)
    p = sc.predict()
    if a.json:
        out = {
            "scenario": sc.name, "title": sc.title,
            "workload": asdict(sc.workload), "cluster": asdict(sc.cluster),
            "sync": asdict(sc.sync),
            "calibration": asdict(calibration) if calibration else None,
            "prediction": asdict(p), "notes": list(sc.notes),
        }
        print(json.dumps(_jsonable(out), indent=2))
    else:
        print(_format_prediction(sc, p, calibration))
    return 0


# --------------------------------------------------------------------------- bench

def _bench_dir(a: argparse.Namespace) -> Tuple[Path, str]:
    """The folder `pycomm bench` takes the scripts from, and what chose it."""
    if a.bench_dir:
        return Path(a.bench_dir), "--bench-dir"
    if os.environ.get(BENCH_DIR_ENV):
        return Path(os.environ[BENCH_DIR_ENV]), BENCH_DIR_ENV
    return _repo_root() / "bench", f"beside pycomm, imported from {_repo_root() / 'pycomm'}"


def _bench(a: argparse.Namespace) -> int:
    bench = BENCHES[a.which]
    name = f"pycomm bench {a.which}"
    bench_dir, chosen_by = _bench_dir(a)
    script = (bench_dir / bench.script).absolute()
    if not script.is_file():
        print(f"{name}: {script} not found (the folder looked in: {chosen_by}). The benchmarks "
              "are a pycomm checkout's bench/ folder and are not installed with the package: "
              f"give --bench-dir CHECKOUT/bench, or set {BENCH_DIR_ENV}.", file=sys.stderr)
        return 2
    args = list(a.args)
    if args[:1] == ["--"]:
        args = args[1:]
    fixed = [flag for flag in bench.fixed_args if flag.startswith("--")]
    for arg in args:
        if arg.split("=", 1)[0] in fixed:
            print(f"{name}: {arg.split('=', 1)[0]} is fixed here ({' '.join(bench.fixed_args)}); "
                  "use pycomm bench collectives to choose it.", file=sys.stderr)
            return 2
    args = [*bench.fixed_args, *args]
    if bench.named:
        command = [sys.executable, "-c", _RUN_NAMED, str(script), name, *args]
    else:
        command = [sys.executable, str(script), *args]
    try:
        return subprocess.call(command)
    except KeyboardInterrupt:
        return 130


# --------------------------------------------------------------------------- doctor

def _doctor(a: argparse.Namespace) -> int:
    from . import doctor

    if not a.scripts:
        info = doctor.environment()
        print(json.dumps(info, indent=2) if a.json else doctor.format_environment(info))
        return 0
    status, report, texts = 0, {}, []
    for path in a.scripts:
        try:
            findings = doctor.check_script(path)
        except OSError as e:
            print(f"pycomm doctor: cannot read {path}: {e.strerror or e}", file=sys.stderr)
            status = 2
            continue
        except SyntaxError as e:
            print(f"pycomm doctor: {path}:{e.lineno}: does not parse: {e.msg}", file=sys.stderr)
            status = 2
            continue
        if findings and status == 0:
            status = 1
        report[path] = doctor.findings_as_dicts(findings)
        texts.append(doctor.format_findings(path, findings))
    print(json.dumps(report, indent=2) if a.json else "\n".join(texts))
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``pycomm`` and ``python -m pycomm``; returns the exit status."""
    parser = _parser()
    try:
        a = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # --help, or a usage error argparse already printed
        return int(e.code or 0)
    handler = {"predict": _predict, "bench": _bench, "doctor": _doctor}[a.command]
    try:
        return handler(a)
    except (ValueError, OSError) as e:
        print(f"pycomm {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
