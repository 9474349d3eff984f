"""One rank of PyTorch's distributed suite, kept alive across its tests.

PyTorch runs each test of `distributed_test.py` in freshly spawned ranks;
importing torch and the suite costs seconds of CPU per rank, which makes the
whole suite about half an hour on a 2-core machine. This process imports them
once and then runs, in step with its peers, every test the coordinator
(runner.py) names: the same steps as the suite's own `TestDistBackend._run`
(init the default group from the test's file, the suite's file barrier, the
test, the barrier, destroy), with the process's environment put back after
each test. A test that leaves the process unusable (it hangs, or exits it) is
the coordinator's to handle: it restarts all the ranks.

The suite reads BACKEND when it is imported and opens its gates by that name
(`BACKEND == "gloo"`, `DistTestCases.backend_feature`). It is imported here
with BACKEND=gloo, so every gate and every branch a test takes is gloo's. For
`--backend pycomm`, the default group the suite creates with "gloo" (here, and
when a test re-creates it) is pycomm's instead: `dist.init_process_group` is
wrapped so. Groups a test asks for by name, `new_group(backend="gloo")` (the
monitored-barrier tests do), stay gloo, as the test asked.

Protocol: one JSON object per line on the command pipe (fd given on the
command line) in, one per line on the result pipe out.
"""
import argparse
import json
import os
import sys
import traceback
import unittest
from datetime import timedelta

SUITE_NAME = "gloo"  # what the suite is told it runs on; see above


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--backend", choices=["gloo", "pycomm"], required=True)
    p.add_argument("--commands", type=int, required=True, help="fd to read commands from")
    p.add_argument("--results", type=int, required=True, help="fd to write results to")
    return p.parse_args()


def main():
    args = parse()
    # The suite's module-level settings (runner.py created TEMP_DIR's folders).
    os.environ["BACKEND"] = SUITE_NAME
    os.environ["WORLD_SIZE"] = str(args.world)
    commands = os.fdopen(args.commands, "r")
    results = os.fdopen(args.results, "w", buffering=1)

    import torch.distributed as dist
    from torch.testing._internal import common_utils
    from torch.testing._internal.common_distributed import TEST_SKIPS
    from torch.testing._internal.distributed import distributed_test as suite

    backend = SUITE_NAME
    if args.backend == "pycomm":
        import pycomm  # noqa: F401  (registers the backend)

        backend = "cpu:pycomm"
        stock_init = dist.init_process_group

        def init_process_group(*a, backend=None, **kw):
            if backend in (None, SUITE_NAME):
                backend = "cpu:pycomm"
            return stock_init(*a, backend=backend, **kw)

        dist.init_process_group = init_process_group

    class Case(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
        pass

    skip_codes = {s.exit_code: s.message for s in TEST_SKIPS.values()}
    if args.rank == 0:
        names = sorted(n for n in dir(Case) if n.startswith("test"))
        results.write(json.dumps({"tests": names}) + "\n")

    for line in commands:
        cmd = json.loads(line)
        name = cmd["test"]
        env = dict(os.environ)
        status, detail = "pass", ""
        try:
            case = Case(name)
            case.rank = args.rank
            case.file_name = cmd["file"]
            suite.Barrier.barrier_id = 0
            os.environ["TORCH_SHOW_CPP_STACKTRACES"] = "1"
            common_utils.set_rng_seed()
            method = getattr(case, name)
            # A test skipped by its decorators needs no group.
            if getattr(method, "__unittest_skip__", False):
                raise unittest.SkipTest(getattr(method, "__unittest_skip_why__", ""))
            seconds = suite.CUSTOM_PG_TIMEOUT.get(name, suite.default_pg_timeout)
            dist.init_process_group(init_method=case.init_method, backend=backend,
                                    world_size=args.world, rank=args.rank,
                                    timeout=timedelta(seconds=seconds))
            if args.backend == "pycomm" and "pycomm" not in dist.get_backend():
                raise RuntimeError(f"the default group is {dist.get_backend()}, not pycomm")
            case._barrier()
            method()
            case._barrier()
        except unittest.SkipTest as e:
            status, detail = "skip", str(e)
        except SystemExit as e:
            # The suite's in-rank skips (skip_if_lt_x_gpu, ...) exit with a code.
            if e.code in skip_codes:
                status, detail = "skip", skip_codes[e.code]
            else:
                status, detail = "fail", f"SystemExit({e.code!r})"
        except BaseException:
            status, detail = "fail", traceback.format_exc()
        finally:
            try:
                if dist.is_initialized():
                    dist.destroy_process_group()
            except BaseException:
                status = "fail" if status == "pass" else status
                detail += "\ndestroy_process_group: " + traceback.format_exc()
            os.environ.clear()
            os.environ.update(env)
        results.write(json.dumps({"rank": args.rank, "test": name, "status": status,
                                  "detail": detail}) + "\n")


if __name__ == "__main__":
    sys.exit(main())
