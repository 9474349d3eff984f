"""Runs a script under torchrun and returns each rank's output whole.

Ranks that share the launcher's stdout write into one pipe, and two ranks'
lines can land interleaved on one line (seen: "rank 1: ... 2 srank 0: ..."),
so a test that reads several ranks' lines from that pipe fails now and then.
Here torchrun sends each rank's stdout and stderr to files of its own
(--log-dir, --redirects 3), which the test reads rank by rank.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field


@dataclass
class TorchrunResult:
    returncode: int
    ranks: list[str] = field(default_factory=list)  # each rank's stdout, in rank order
    errors: list[str] = field(default_factory=list)  # each rank's stderr, in rank order
    launcher: str = ""  # torchrun's own stdout and stderr

    @property
    def stdout(self) -> str:
        """Every rank's stdout, rank 0 first, each whole."""
        return "".join(self.ranks)

    def report(self, tail: int = 6000) -> str:
        """What a failure message shows: each rank's output, then the launcher's."""
        parts = [f"--- rank {r} stdout:\n{o}\n--- rank {r} stderr:\n{e}"
                 for r, (o, e) in enumerate(zip(self.ranks, self.errors))]
        return ("\n".join(parts) + f"\n--- torchrun:\n{self.launcher}")[-tail:]


def torchrun(script: str, *args: str, ranks: int, timeout: float = 240.0,
             env: dict | None = None) -> TorchrunResult:
    """`python -m torch.distributed.run --standalone --nproc_per_node RANKS script args`.
    Raises subprocess.TimeoutExpired past `timeout`."""
    env = dict(os.environ if env is None else env)
    env.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="pycomm-torchrun-") as logs:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", str(ranks), "--log-dir", logs, "--redirects", "3",
               script, *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)

        def read(rank, name):
            found = glob.glob(os.path.join(logs, "*", "attempt_*", str(rank), name))
            if not found:
                return ""
            with open(sorted(found)[-1]) as f:
                return f.read()

        return TorchrunResult(proc.returncode, [read(r, "stdout.log") for r in range(ranks)],
                              [read(r, "stderr.log") for r in range(ranks)],
                              proc.stdout + proc.stderr)
