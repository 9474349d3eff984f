"""The dry run of a benchmark driver: its real command line parsed, what its run imports
imported, its plan printed; nothing is run. bench/gpu_check.sh --dry-run checks each of its
Python steps this way on a machine without a GPU, so that a wrong flag or a missing module
fails in CI and not in the GPU machine's few minutes.

    python3 bench/dry_run.py bench/cuda_allreduce_perf.py --nproc 4 -b 8 -e 256M --json out.json

The driver needs a parse_args(argv) that asks nothing of a GPU. It may define
    DRY_RUN_NEEDS  the modules its run imports beyond torch and pycomm ("torchvision", ...)
    plan(args)     a JSON-able dict of what the run would do
When its arguments name a --json file, the plan goes there as {"dry_run": true, ...}: the
file the real run would write, which bench/gpu/summary.py reads either way.
Exit status: 2 when argparse refuses the arguments, 1 when a needed module does not
import, else 0.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys


def load(path: str):
    """The driver as a module, without running its main. A driver of bench/, beside this
    file: Python put this folder on sys.path, where the driver finds harness."""
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    script, rest = argv[0], argv[1:]
    module = load(script)
    sys.argv[0] = script  # argparse names the driver in its messages
    args = module.parse_args(rest)
    needs = ["torch", "pycomm", *getattr(module, "DRY_RUN_NEEDS", ())]
    missing = []
    for name in needs:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - every missing module is named
            missing.append(f"{name} ({type(e).__name__}: {e})")
    plan = module.plan(args) if hasattr(module, "plan") else {}
    record = dict(dry_run=True, script=script, argv=rest, needs=needs, missing=missing,
                  args=vars(args), plan=plan)
    text = json.dumps(record, indent=1, default=str)
    print(f"dry run of {script}: arguments parsed, {', '.join(needs)} imported"
          + (f"; MISSING {'; '.join(missing)}" if missing else ""))
    for key, value in plan.items():
        print(f"  {key}: {value}")
    out = getattr(args, "json", None)
    if out:
        with open(out, "w") as f:
            f.write(text)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
