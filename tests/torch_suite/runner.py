"""Runs PyTorch's distributed suite (`torch/testing/_internal/distributed/
distributed_test.py`, the tests PyTorch runs against gloo, NCCL and UCC) on
gloo or on pycomm, in ranks that live across tests (rank.py says how and why).

    python3 tests/torch_suite/runner.py --backend pycomm            # every test
    python3 tests/torch_suite/runner.py --backend gloo -k barrier   # a part
    python3 tests/torch_suite/runner.py --backend both --json out.json
        # both, then pycomm's outcomes against gloo's; exit 1 on a difference
        # differences.py does not list (--world 8 adds the group tests)

Each test runs in all ranks at once and passes when every rank passes; it is
skipped when a rank skips it (the suite skips by rank 0's exit code), fails
otherwise. A rank that does not answer within the test's deadline, or dies,
fails the test. After any failure the coordinator starts fresh ranks (those
that answered exit on their own, the others are killed), so no test inherits a
group left out of step. No test is skipped or expected to fail here: the skips
are the suite's own (GPUs, other backends, world sizes; --skips counts them),
and differences.py lists where pycomm's outcome may differ from gloo's.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 3  # as PyTorch's own CI runs the suite on gloo without GPUs
# (its group tests skip below 8 ranks: --world 8 runs them too)
# The suite's group timeout is 60 s (300 s for one DDP test); a rank that has
# not answered well after that is stuck.
DEADLINE_S = 150.0
LONG_DEADLINE_S = {"test_ddp_uneven_inputs": 400.0}
START_DEADLINE_S = 180.0  # importing torch and the suite, 3 ranks on 2 cores


@dataclass
class Outcome:
    test: str
    status: str  # pass, skip, fail
    detail: str = ""
    seconds: float = 0.0


class RankError(RuntimeError):
    pass


class Ranks:
    """WORLD rank processes (rank.py) and their pipes."""

    def __init__(self, backend: str, temp: str, world: int):
        self.backend, self.temp, self.world = backend, temp, world
        self.procs, self.commands, self.results, self.buffers = [], [], [], []
        self.tests: list[str] = []
        self.logs = [os.path.join(temp, f"rank{r}.log") for r in range(world)]
        env = dict(os.environ)
        env.update(TEMP_DIR=temp, INIT_METHOD="file://" + os.path.join(temp, "init_dir", "shared_init_file"))
        for r in range(world):
            cmd_r, cmd_w = os.pipe()
            res_r, res_w = os.pipe()
            with open(self.logs[r], "a") as log:
                p = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "rank.py"), "--rank", str(r), "--world",
                     str(world), "--backend", backend, "--commands", str(cmd_r), "--results", str(res_w)],
                    pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=env, start_new_session=True)
            os.close(cmd_r)
            os.close(res_w)
            self.procs.append(p)
            self.commands.append(os.fdopen(cmd_w, "w", buffering=1))
            self.results.append(res_r)
            self.buffers.append(b"")
        self.tests = self._read(0, START_DEADLINE_S)["tests"]

    def _read(self, r: int, deadline_s: float) -> dict:
        end = time.monotonic() + deadline_s
        while b"\n" not in self.buffers[r]:
            left = end - time.monotonic()
            if left <= 0:
                raise RankError(f"rank {r} did not answer within {deadline_s:.0f} s")
            ready, _, _ = select.select([self.results[r]], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.results[r], 1 << 16)
                if not chunk:
                    raise RankError(f"rank {r} exited (code {self.procs[r].wait()})")
                self.buffers[r] += chunk
        line, _, self.buffers[r] = self.buffers[r].partition(b"\n")
        return json.loads(line)

    def run(self, test: str, file_name: str) -> list[dict]:
        for c in self.commands:
            c.write(json.dumps({"test": test, "file": file_name}) + "\n")
        deadline = LONG_DEADLINE_S.get(test, DEADLINE_S)
        start = time.monotonic()
        return [self._read(r, max(1.0, deadline - (time.monotonic() - start)))
                for r in range(self.world)]

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for r, path in enumerate(self.logs):
            with open(path, errors="replace") as f:
                text = f.read()
            if text.strip():
                out.append(f"--- rank {r} output (last {chars} chars)\n{text[-chars:]}")
        return "\n".join(out)

    def close(self):
        """Ends the ranks' loops (their commands end), waits a bounded time for them to
        exit, and kills what is left."""
        for c in self.commands:
            try:
                c.close()
            except OSError:
                pass
        end = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait()
        for fd in self.results:
            try:
                os.close(fd)
            except OSError:
                pass
        self.results = []


def _fresh(temp: str):
    """The suite's folders, emptied between tests as its setUp does."""
    for sub in ("barrier", "test_dir", "init_dir"):
        path = os.path.join(temp, sub)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)


def run_suite(backend: str, select_tests=None, progress=None, world: int = WORLD) -> list[Outcome]:
    """Runs the suite's tests (all, or those `select_tests(name)` keeps) on
    `backend` ("gloo" or "pycomm") and returns one Outcome per test."""
    temp = tempfile.mkdtemp(prefix=f"pycomm-torch-suite-{backend}-")
    outcomes: list[Outcome] = []
    ranks = None
    try:
        _fresh(temp)
        ranks = Ranks(backend, temp, world)
        tests = [t for t in ranks.tests if select_tests is None or select_tests(t)]
        for i, test in enumerate(tests):
            if ranks is None:
                _fresh(temp)
                ranks = Ranks(backend, temp, world)
            _fresh(temp)
            file_name = os.path.join(temp, f"store-{i}")
            open(file_name, "w").close()
            start = time.monotonic()
            try:
                answers = ranks.run(test, file_name)
                statuses = [a["status"] for a in answers]
                if all(s == "pass" for s in statuses):
                    out = Outcome(test, "pass")
                elif "fail" not in statuses:
                    out = Outcome(test, "skip", next(a["detail"] for a in answers if a["status"] == "skip"))
                else:
                    out = Outcome(test, "fail", "\n".join(
                        f"rank {a['rank']}: {a['detail']}" for a in answers if a["status"] == "fail"))
            except RankError as e:
                out = Outcome(test, "fail", f"{e}\n{ranks.log_tail()}")
                ranks.kill()
            out.seconds = time.monotonic() - start
            if out.status == "fail":
                # Fresh ranks for the next test: a rank that answered leaves its
                # loop and closes its groups (shared memory included); one that
                # did not is killed.
                ranks.close()
                ranks = None
            outcomes.append(out)
            if progress:
                progress(i + 1, len(tests), out)
    finally:
        if ranks is not None:
            ranks.close()
        shutil.rmtree(temp, ignore_errors=True)
    return outcomes


def compare(gloo: list[Outcome], pycomm: list[Outcome], differences: dict,
            world: int = WORLD) -> tuple[str, list[str]]:
    """pycomm's outcomes against gloo's from the same run: the one-line summary
    README quotes, and every test that ends otherwise on pycomm than on gloo (but
    for those gloo fails) and is not listed in `differences`, or is listed but no
    longer fails as listed."""
    on_gloo = {o.test: o for o in gloo}
    problems, listed = [], []
    for o in pycomm:
        g = on_gloo.get(o.test)
        if g is None:
            problems.append(f"{o.test}: ran on pycomm only")
            continue
        d = differences.get(o.test)
        if d is None:
            # A test gloo fails too holds nothing against pycomm (on a loaded host it may
            # be gloo's flake); every other outcome must be gloo's.
            if o.status != g.status and g.status != "fail":
                problems.append(f"{o.test}: {o.status} on pycomm, {g.status} on gloo\n{o.detail}")
        elif o.status != "fail" or not re.search(d.failure, o.detail):
            problems.append(f"{o.test}: listed as failing on pycomm with /{d.failure}/, but it "
                            f"ended {o.status} (on gloo: {g.status})\n{o.detail}")
        else:
            listed.append(o.test)
    ran = [o.test for o in gloo if o.status != "skip"]
    passed_gloo = {o.test for o in gloo if o.status == "pass"}
    both = [o.test for o in pycomm if o.status == "pass" and o.test in passed_gloo]
    failed_gloo = len(ran) - len(passed_gloo)
    line = (f"{len(both)} of the {len(passed_gloo)} CPU tests of PyTorch's distributed suite that "
            f"pass on gloo (world size {world}) pass on pycomm"
            + (f"; {len(listed)} differ because of torch, not pycomm: {', '.join(listed)}"
               if listed else "")
            + (f"; gloo fails {failed_gloo}, which pycomm is not held to: "
               f"{', '.join(t for t in ran if t not in passed_gloo)}" if failed_gloo else "")
            + f" ({len(gloo) - len(ran)} of the suite's {len(gloo)} tests skip on both: GPUs, "
              "other backends, larger worlds)")
    return line, problems


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=["gloo", "pycomm", "both"], default="pycomm")
    p.add_argument("--world", type=int, default=WORLD, help="ranks (default %(default)s)")
    p.add_argument("-k", default=None, help="run only the tests whose name matches this regex")
    p.add_argument("--json", default=None, help="write every outcome here")
    p.add_argument("-v", action="store_true", help="print each failure's detail")
    p.add_argument("--skips", action="store_true", help="count the suite's reasons for its skips")
    a = p.parse_args(argv)
    keep = (lambda t: re.search(a.k, t) is not None) if a.k else None
    backends = ["gloo", "pycomm"] if a.backend == "both" else [a.backend]
    report = {}
    for b in backends:
        def progress(i, n, out, b=b):
            print(f"[{b} {i}/{n}] {out.status:4} {out.seconds:6.1f}s {out.test}", flush=True)
            if out.status == "fail" and a.v:
                print(out.detail, flush=True)
        start = time.monotonic()
        outs = run_suite(b, keep, progress, a.world)
        report[b] = {"seconds": round(time.monotonic() - start, 1),
                     "outcomes": [dict(o.__dict__) for o in outs]}
    for b, r in report.items():
        counts = {s: sum(o["status"] == s for o in r["outcomes"]) for s in ("pass", "skip", "fail")}
        print(f"{b}: {counts['pass']} passed, {counts['skip']} skipped, {counts['fail']} failed "
              f"in {r['seconds']:.0f} s")
        if a.skips:
            reasons = Counter(o["detail"].splitlines()[0] if o["detail"] else "(no reason given)"
                              for o in r["outcomes"] if o["status"] == "skip")
            for reason, n in reasons.most_common():
                print(f"  {n:4d} skipped: {reason}")
    rc = 0
    if len(report) == 2 and a.k is None:
        import torch
        from differences import differences_for

        line, problems = compare(*[[Outcome(**o) for o in report[b]["outcomes"]] for b in backends],
                                 differences_for(torch.__version__), a.world)
        print(line)
        for p in problems:
            print("DIFFERS:", p.splitlines()[0])
        rc = 1 if problems else 0
        report["summary"] = line
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main())
