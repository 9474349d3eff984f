"""Fault-tolerant training on one host's CPU processes: torchft with pycomm's
process group (pycomm.torchft.ProcessGroupPycomm; `pip install torchft`).

    python3 examples/torchft_train.py                  # a lighthouse, 2 replicas, 20 steps
    python3 examples/torchft_train.py --kill-at 5      # replica 1: kill -9 after 5 steps, restarted
    python3 examples/torchft_train.py --hang-at 5      # replica 1: SIGSTOP after 5 steps
    python3 examples/torchft_train.py --pg gloo        # torchft's gloo group (or baby-gloo)

Each replica is a process of its own with a Manager: every step it joins the
quorum, averages its gradients with manager.allreduce and commits the step
if every replica of the quorum got through it. On a kill the survivor's
all-reduce fails at once (PeerDied naming the pid), the step is not
committed, and the survivor trains on alone in the next quorum; the replica
started again heals from it (torchft sends it the weights) and they train
together again, with equal weights. On a hang the survivor's all-reduce
fails at the group's timeout (--timeout), and the next quorum leaves the
stopped replica behind: torchft aborts the old group, whose blocked calls
pycomm wakes at once. docs/torchft.md says more.

The launcher prints one JSON line per event (a replica's step, a kill, a
hang), which bench/torchft_recovery.py and tests/test_torchft.py read.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import torch
from torch import nn

GROUPS = ("pycomm", "gloo", "baby-gloo")


def make_group(kind: str, timeout: timedelta):
    if kind == "pycomm":
        from pycomm.torchft import ProcessGroupPycomm

        return ProcessGroupPycomm(timeout=timeout)
    from torchft.process_group import ProcessGroupBabyGloo, ProcessGroupGloo

    return (ProcessGroupGloo if kind == "gloo" else ProcessGroupBabyGloo)(timeout=timeout)


def replica(args) -> None:
    """One replica group of one rank: trains until --steps, or until the step
    written in --stop-file, and saves its weights to --out."""
    from torchft import Manager

    store = torch.distributed.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    torch.manual_seed(0)  # the same initial weights on every replica
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    params = list(model.parameters())
    manager = Manager(
        pg=make_group(args.pg, timedelta(seconds=args.timeout)), min_replica_size=1,
        load_state_dict=lambda sd: (model.load_state_dict(sd["model"]), optimizer.load_state_dict(sd["optim"])),
        state_dict=lambda: {"model": model.state_dict(), "optim": optimizer.state_dict()},
        replica_id=str(args.replica_id), store_addr="localhost", store_port=store.port, rank=0,
        world_size=1, lighthouse_addr=args.lighthouse, timeout=timedelta(seconds=30),
        quorum_timeout=timedelta(seconds=30))
    stop_at = args.steps
    together = 0  # steps committed with the other replica
    while manager.current_step() < stop_at:
        started = time.monotonic()
        manager.start_quorum()
        optimizer.zero_grad()
        # Each replica its own data, by step: a restarted one sees what it would have.
        g = torch.Generator().manual_seed(1000 * args.replica_id + manager.current_step())
        x, y = torch.randn(16, 32, generator=g), torch.randint(4, (16,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if args.fault and together >= args.fault_at and manager.num_participants() == 2:
            # Mid-step, in a quorum with the other replica, which is on its way into the all-reduce.
            print(json.dumps({"event": args.fault, "t": time.monotonic()}), flush=True)
            os.kill(os.getpid(), signal.SIGKILL if args.fault == "kill" else signal.SIGSTOP)
        # manager.allreduce, not torchft's DDP: see docs/torchft.md's known issues.
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        manager.allreduce(flat).wait()
        torch.nn.utils.vector_to_parameters(flat, [p.grad for p in params])
        committed = manager.should_commit()
        if committed:
            optimizer.step()
            together += manager.num_participants() == 2
        print(json.dumps({"replica": args.replica_id, "step": manager.current_step(), "committed": committed,
                          "participants": manager.num_participants(), "loss": repr(loss.item()),
                          "t": time.monotonic(), "step_s": time.monotonic() - started}), flush=True)
        if args.stop_file and os.path.exists(args.stop_file):
            with open(args.stop_file) as f:
                stop_at = min(stop_at, int(f.read() or stop_at))
    if args.out:
        torch.save(model.state_dict(), args.out)
    manager.shutdown(wait=False)


class Launcher:
    """A lighthouse here and the replicas as child processes, whose lines a
    thread each reads into one queue (a replica never waits on a full pipe)."""

    def __init__(self, args):
        from torchft._torchft import LighthouseServer

        self.args = args
        # The survivor's next quorum waits for a silent replica this long at most.
        self.lighthouse = LighthouseServer(bind="[::]:0", min_replicas=args.min_replicas,
                                           join_timeout_ms=500, heartbeat_timeout_ms=1000)
        self.stop_file = os.path.join(args.out_dir, "stop")
        self.procs = {}
        self.killed = set()  # by the launcher: their end is no failure
        self.lines = queue.Queue()

    def start(self, replica_id: int, steps: int, fault: str = ""):
        cmd = [sys.executable, os.path.abspath(__file__), "--lighthouse", self.lighthouse.address(),
               "--replica-id", str(replica_id), "--steps", str(steps), "--pg", self.args.pg,
               "--timeout", str(self.args.timeout), "--stop-file", self.stop_file,
               "--out", os.path.join(self.args.out_dir, f"replica{replica_id}.pt")]
        if fault:
            cmd += ["--fault", fault, "--fault-at", str(self.args.kill_at or self.args.hang_at)]
        proc = self.procs[replica_id] = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)

        def read():
            for text in proc.stdout:
                self.lines.put((proc, json.loads(text)))
            self.lines.put((proc, None))  # its end

        threading.Thread(target=read, daemon=True).start()

    def until(self, done) -> dict:
        """Echoes the replicas' lines until done(line) holds; returns that line."""
        while True:
            proc, rec = self.lines.get(timeout=600)
            if rec is None:
                if proc.wait() != 0 and proc not in self.killed:
                    raise RuntimeError(f"a replica failed (exit {proc.returncode})")
                continue
            emit(rec)
            if done(rec):
                return rec

    def stop_together(self, at: int):
        """The replicas left stop at one step some steps ahead (they commit in lockstep)."""
        with open(self.stop_file, "w") as f:
            f.write(str(at))
        self.drain()

    def drain(self):
        running = set(self.procs.values())
        while running:
            proc, rec = self.lines.get(timeout=600)
            if rec is not None:
                emit(rec)
            elif proc in running:
                running.discard(proc)
                if proc.wait() != 0:
                    raise RuntimeError(f"a replica failed (exit {proc.returncode})")

    def run(self):
        a = self.args
        fault = "kill" if a.kill_at else "hang" if a.hang_at else ""
        steps = 10**6 if fault else a.steps
        self.start(0, steps)
        self.start(1, steps, fault)  # replica 1 kills or stops itself mid-step
        if not fault:
            return self.drain()
        victim = self.procs[1]
        t_fault = self.until(lambda rec: rec.get("event") == fault)["t"]
        self.killed.add(victim)
        # The survivor goes on alone.
        self.until(lambda rec: rec.get("replica") == 0 and rec["committed"] and rec["participants"] == 1
                   and rec["t"] > t_fault)
        victim.kill()  # a stopped one is left behind: ended now
        victim.wait()
        del self.procs[1]
        if fault == "hang":
            rec = self.until(lambda rec: rec.get("replica") == 0 and rec["committed"])
            return self.stop_together(rec["step"] + 2)
        emit({"event": "restart", "t": time.monotonic()})
        self.start(1, steps)
        # Healed from the survivor, in step with it.
        rec = self.until(lambda rec: rec.get("replica") == 1 and rec["committed"] and rec["participants"] == 2)
        self.stop_together(rec["step"] + 3)


def emit(rec: dict):
    print(json.dumps(rec), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pg", choices=GROUPS, default="pycomm")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--timeout", type=float, default=10.0, help="the process group's, seconds")
    p.add_argument("--kill-at", type=int, default=0,
                   help="replica 1 kills itself (SIGKILL) mid-step after this many steps with replica 0; "
                        "it is started again")
    p.add_argument("--hang-at", type=int, default=0,
                   help="replica 1 stops itself (SIGSTOP) mid-step after this many steps with replica 0")
    p.add_argument("--min-replicas", type=int, default=None,
                   help="the lighthouse's (default: 2 without a fault, for a run that repeats "
                        "bitwise; 1 with one, so the survivor trains on)")
    p.add_argument("--out-dir", default=None, help="where the replicas save their weights")
    # A replica's own (the launcher passes them).
    p.add_argument("--lighthouse", help=argparse.SUPPRESS)
    p.add_argument("--replica-id", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--stop-file", help=argparse.SUPPRESS)
    p.add_argument("--fault", choices=("kill", "hang"), help=argparse.SUPPRESS)
    p.add_argument("--fault-at", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.lighthouse:
        return replica(args)
    if args.min_replicas is None:
        args.min_replicas = 1 if (args.kill_at or args.hang_at) else 2
    if args.out_dir is None:
        import tempfile

        args.out_dir = tempfile.mkdtemp(prefix="torchft_train-")
    os.makedirs(args.out_dir, exist_ok=True)
    launcher = Launcher(args)
    try:
        launcher.run()
    finally:
        for proc in launcher.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        launcher.lighthouse.shutdown()
    weights = [os.path.join(args.out_dir, f"replica{r}.pt") for r in sorted(launcher.procs)]
    states = [torch.load(w) for w in weights]
    same = all(all(torch.equal(s[k], states[0][k]) for k in s) for s in states)
    emit({"event": "done", "weights": weights, "weights_equal": same})


if __name__ == "__main__":
    main()
