"""DDP's gradients through pycomm's ring hook against DDP's own all-reduce, on ResNet-50
with CUDA ranks: the check bench/gpu_check.sh runs beside the ResNet-50 timings.

    python3 bench/ddp_hook_check.py --nproc 2 --json check.json

The ranks' default group is gloo, so the reference is DDP's built-in all-reduce over gloo
on the same GPU(s) (NCCL before 2.30 refuses two ranks on one GPU:
bench/harness/peers/nccl.py).
From the same weights and the same per-rank batch, one backward pass each of
    reference  DDP with no hook: its C++ reducer (bucket / N, all-reduce SUM) over gloo
    fp32       DDP + pycomm.ring_hook, RingState()
    bf16       DDP + pycomm.ring_hook, RingState(compression="bf16")
and every parameter's gradient is compared with the reference's. cuDNN runs its
deterministic algorithms, so the local gradients are the same bits in every model and
only the all-reduce differs. The measure, per parameter tensor: max|ours - ref| / max|ref|.
Exit status 1 when a check exceeds its tolerance (below); the JSON (pycomm.tools.
results_schema: a row per check, the run's facts in meta) names each check's worst tensor.
"""
from __future__ import annotations

import argparse
import copy
import sys

from harness.launch import launch
from harness.world import World
from pycomm.tools import results_schema as schema

MODELS = ("resnet18", "resnet50")
# fp32: with N = 2 the sum is the same in either order and the 1/2 is exact, so the
# gradients match bit for bit; with more ranks the order of the sum and the place of
# the 1/N may differ by a few ulps. 1e-6 is about 16 float32 ulps of the tensor's
# largest gradient.
FP32_TOLERANCE = 1e-6
# bf16 keeps 8 significant bits: each rank's scaled gradient and the sum are rounded to
# it, each by at most 2^-9 of its magnitude; 2^-6 of the tensor's largest averaged
# gradient leaves room for per-rank gradients about 2.5x larger than their average.
BF16_TOLERANCE = 2.0 ** -6
CHECKS = (("fp32", None, FP32_TOLERANCE), ("bf16", "bf16", BF16_TOLERANCE))


def run(args):
    import torch
    import torch.nn.functional as F
    import torchvision
    from torch.nn.parallel import DistributedDataParallel as DDP

    import pycomm

    world = World("cuda")
    rank, dev = world.rank, world.device
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    pycomm.init()
    torch.manual_seed(0)  # the same weights on every rank and in every model
    model = getattr(torchvision.models, args.model)(weights=None, num_classes=10).to(dev)
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own batch
    x = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=g).to(dev)
    y = torch.randint(0, 10, (args.batch_size,), generator=g).to(dev)

    def gradients(state):
        ddp = DDP(copy.deepcopy(model), device_ids=[dev.index])
        if state is not None:
            ddp.register_comm_hook(state, pycomm.ring_hook)
        F.cross_entropy(ddp(x), y).backward()
        torch.cuda.synchronize()
        return {n: p.grad.detach().clone() for n, p in ddp.module.named_parameters()}

    reference = gradients(None)
    checks = []
    for name, compression, tolerance in CHECKS:
        ours = gradients(pycomm.RingState(compression=compression))
        worst, where = 0.0, None
        for param, ref in reference.items():
            scale = ref.abs().max().item()
            err = (ours[param] - ref).abs().max().item()
            ratio = err / scale if scale > 0 else err
            if ratio > worst or where is None:
                worst, where = ratio, param
        worst = world.max_over_ranks([worst])[0]  # the worst rank's
        checks.append(dict(hook=name, worst=worst, tensor=where, tolerance=tolerance,
                           ok=worst <= tolerance))
    if rank != 0:
        return None
    facts = dict(model=args.model, image_size=args.image_size, batch_size=args.batch_size,
                 world=world.size, gpus=torch.cuda.device_count(),
                 reference=f"DDP's own all-reduce over {world.backend}",
                 measure="max|ours - ref| / max|ref| per parameter tensor, worst tensor")
    return dict(meta=facts, rows=checks)


def report(result):
    facts = result["meta"]
    print(f"# {facts['model']} DDP gradients, {facts['world']} ranks on {facts['gpus']} GPU(s), "
          f"{facts['image_size']}px batch {facts['batch_size']} per rank: pycomm.ring_hook vs "
          f"{facts['reference']}; {facts['measure']}")
    for c in result["rows"]:
        print(f"{c['hook']:<5} {c['worst']:>10.3e}  tolerance {c['tolerance']:.3e}  "
              f"{'ok' if c['ok'] else 'FAILED'}  (worst: {c['tensor']})")
    sys.stdout.flush()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="rank processes (ignored under torchrun)")
    p.add_argument("--model", choices=MODELS, default="resnet50", help="torchvision model")
    p.add_argument("--image-size", type=int, default=112, metavar="PIXELS",
                   help="side of the random square images (default 112)")
    p.add_argument("--batch-size", type=int, default=8, metavar="IMAGES",
                   help="images per rank (default 8)")
    p.add_argument("--json", metavar="PATH", help="write the result here")
    args = p.parse_args(argv)
    for name in ("nproc", "image_size", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be >= 1")
    return args


# What a run imports beyond torch and pycomm (bench/dry_run.py checks it).
DRY_RUN_NEEDS = ("torchvision", "torch.nn.parallel")


def plan(args):
    """What a run would do (bench/dry_run.py prints it)."""
    return dict(ranks=args.nproc, model=f"{args.model}, {args.image_size}px, batch {args.batch_size}",
                reference="DDP's own all-reduce over gloo",
                tolerances=", ".join(f"{name} {tol:.3g}" for name, _, tol in CHECKS))


def main(argv=None) -> int:
    args = parse_args(argv)
    result = launch(run, args, args.nproc)  # under torchrun: each rank's, rank 0's has it all
    if result is None:
        return 0
    report(result)
    if args.json:
        schema.write(args.json, result["rows"], result["meta"])
    return 0 if all(c["ok"] for c in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
