"""bench/gpu_check.sh --dry-run, as CI runs it on a machine without a GPU.

The GPU machine is lent for minutes, so the script must be right before it gets there: the
dry run walks every step, each checked as far as a CPU-only machine can (bench/dry_run.py
parses each Python driver's real arguments and imports what it needs, pytest collects the
selected tests, the native binaries' flags are looked up in their sources), and builds the
table from what it wrote. Two runs serve every check, started together: the whole dry run,
and a run of a few steps where one is handed a flag nothing accepts (GPU_CHECK_BREAK), which
must fail without stopping the next, and two sanitizer steps are made to exit as a
sanitizer would (GPU_CHECK_EXIT). The dry run needs every test id and native bench flag
that gpu_check.sh names to exist in the tree.
"""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_check.sh"
# The run's worst case (the sum of its steps' limits) must leave the GPU machine's
# 15 minutes room for its start and a rerun.
TOTAL_LIMIT_S = 570
# What the device machine brings back from $OUT.
MAX_FILES, MAX_DEPTH = 8, 2
# Every step, in the order a run takes them (those marked "later" only when --steps names
# them): no torch before the preflight's facts, the cheapest and most telling first, and
# last the 3-process IPC grid, which may not finish without MPS.
ORDER = ("preflight", "build", "torch_facts", "import", "nccl_build", "native_build", "native_tests",
         "cpu_threads", "threads_tiny", "threads_2", "threads_4", "threads_8", "memcheck",
         "initcheck", "synccheck", "ipc_smoke", "ipc_tests", "mps_start", "mps_procs_2",
         "mps_procs_3", "mps_procs_4", "mps_symm_2", "ddp_resnet50", "mps_stop", "ddp_grads",
         "ipc_grid_3", "cpu_teams", "cpu_numa", "cpu_collectives_4", "cpu_collectives_8",
         "cpu_collectives_16", "summary")
LATER = ("nccl_build", "cpu_threads", "mps_procs_3", "ipc_grid_3", "cpu_teams", "cpu_numa", "cpu_collectives_4",
         "cpu_collectives_8", "cpu_collectives_16")
BESIDE = ("torch_facts", "native_build")
GPU_STEPS = ("threads_tiny", "threads_2", "threads_4", "threads_8", "memcheck", "initcheck",
             "synccheck", "ipc_smoke", "ipc_tests", "mps_start", "mps_procs_2", "mps_procs_3",
             "mps_procs_4", "mps_symm_2", "ddp_resnet50", "ddp_grads", "ipc_grid_3")
BROKEN = "mps_procs_3"  # a Python driver, called through the same step function
AROUND_BROKEN = ("mps_procs_2", BROKEN, "mps_procs_4")
# A sanitizer's bench whose waits timed out (exit 3: the sanitizer ran the ranks one at a
# time) is a check not made; an error count (--error-exitcode 9) is a failure.
SANITIZER_EXITS = {"memcheck": 3, "initcheck": 9}


def _popen(out, *args, extra_env=None):
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_BREAK"}
    env.update(OUT=str(out), **(extra_env or {}))
    # Its own session, so that a hang is ended with everything it started.
    return subprocess.Popen(["bash", str(SCRIPT), "--dry-run", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _finish(proc, timeout=300):
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"gpu_check.sh --dry-run did not finish in {timeout} s:\n{stdout[-4000:]}")
    return proc.returncode, stdout


def _steps(out):
    with open(out / "steps.tsv") as f:
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    return {r[0]: dict(status=r[1], seconds=int(r[2]), limit=int(r[3])) for r in rows}


def _why_not_here():
    """Why the dry run cannot pass here, or None. Its steps import what the GPU machine has:
    pycomm built with its CUDA sources, and torchvision (CI's run on torch 2.13.0's CPU
    build has neither)."""
    import pycomm

    if not pycomm.cuda_built():
        return "pycomm was built without its CUDA sources: the GPU steps' imports would fail"
    try:
        import torchvision  # noqa: F401
    except Exception as e:  # noqa: BLE001 - a wheel that does not load counts as missing
        return f"torchvision does not import ({type(e).__name__}): the DDP steps need it"
    return None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    why = _why_not_here()
    if why:
        pytest.skip(why)
    whole, broken = tmp_path_factory.mktemp("whole"), tmp_path_factory.mktemp("broken")
    exits = ",".join(f"{name}:{rc}" for name, rc in SANITIZER_EXITS.items())
    procs = (_popen(whole),
             _popen(broken, "--steps", ",".join(AROUND_BROKEN + tuple(SANITIZER_EXITS)),
                    extra_env={"GPU_CHECK_BREAK": BROKEN, "GPU_CHECK_EXIT": exits}))
    (rc, stdout), (broken_rc, broken_stdout) = (_finish(p) for p in procs)
    return dict(out=whole, rc=rc, stdout=stdout, broken_out=broken, broken_rc=broken_rc,
                broken_stdout=broken_stdout)


def _planned(stdout):
    """The steps the script announces first: name -> (limit, "beside", "later" or "")."""
    line = r"^#   (\w+)\s+(\d+) s(?: \((beside) build\)| \((later): --steps \1\))?$"
    return {m.group(1): (int(m.group(2)), m.group(3) or m.group(4) or "")
            for m in re.finditer(line, stdout, re.M)}


def test_dry_run_passes(runs):
    assert runs["rc"] == 0, runs["stdout"][-4000:]


def test_the_steps_and_their_order(runs):
    planned = _planned(runs["stdout"])
    assert tuple(planned) == ORDER
    assert tuple(n for n, (_, mark) in planned.items() if mark == "later") == LATER
    assert tuple(n for n, (_, mark) in planned.items() if mark == "beside") == BESIDE


def test_every_step_is_in_the_table_ok_or_skipped(runs):
    planned = _planned(runs["stdout"])
    steps = _steps(runs["out"])
    assert list(steps) == list(planned)  # each once, in the planned order
    table = (runs["out"] / "table.txt").read_text()
    for name, s in steps.items():
        assert s["status"] == "ok" or s["status"].startswith("skipped: "), (name, s)
        assert re.search(rf"^{name}\s+(ok|skipped: )", table, re.M), name
    for name in GPU_STEPS:
        assert steps[name]["status"] == "skipped: no GPU (dry run)", name


def test_total_limit_is_printed_and_under_the_limit(runs):
    total = int(re.search(r"at most (\d+) s in all", runs["stdout"]).group(1))
    assert total < TOTAL_LIMIT_S
    planned = _planned(runs["stdout"])
    # A first run takes every step but those beside the build and those left for later.
    assert total == sum(limit for limit, mark in planned.values() if not mark)
    assert all(s["limit"] == planned[name][0] for name, s in _steps(runs["out"]).items())


def test_out_holds_few_files_none_deep(runs):
    out = runs["out"]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert 0 < len(files) <= MAX_FILES, files
    assert all(len(p.relative_to(out).parts) - 1 <= MAX_DEPTH for p in files), files
    assert {p.name for p in files} >= {"log.txt", "steps.tsv", "results.json", "table.txt"}


def test_the_table_is_built_from_what_the_dry_run_wrote(runs):
    table = (runs["out"] / "table.txt").read_text()
    assert "machine: " in table  # the preflight's facts
    assert re.search(r"^MPS: nvidia-cuda-mps-control is (NOT )?on the image", table, re.M)
    for name in ("mps_procs_2", "mps_symm_2", "ddp_grads", "ddp_resnet50", "cpu_collectives_4"):
        assert re.search(rf"^{name}: dry run: arguments parse, imports ok", table, re.M), name
    for name in ("ipc_smoke", "ipc_tests", "ipc_grid_3"):
        assert re.search(rf"^{name}: \d+ tests collected", table, re.M), name
    # What the dry run skipped, and why, in plain words.
    assert re.search(r"^# skipped: no GPU \(dry run\): threads_tiny, ", table, re.M)


def test_the_preflight_writes_the_facts_that_need_no_torch(runs):
    results = json.loads((runs["out"] / "results.json").read_text())
    machine = results["machine"]
    assert {"python", "python_headers_present", "cpus", "tools", "packages"} <= set(machine)
    assert "torch" not in machine and "unfinished" not in machine
    assert results["torch_facts"]["torch"]  # torch's, beside the build, in a file of its own
    # Which NCCL loads, and from which file (the carried one on the GPU machine).
    assert re.fullmatch(r"\d+\.\d+\.\d+ \(/\S+libnccl\.so\S*\)|none",
                        results["torch_facts"]["nccl"]), results["torch_facts"]["nccl"]
    # What a call carries, against its limit, before anything else.
    assert re.search(r"^carried: the tree [\d.]+ MiB .* of the 64 MiB a call takes$",
                     (runs["out"] / "log.txt").read_text(), re.M)
    # Whether a GPU answers is nvidia-smi's word, read by the script from the log.
    assert re.search(r"^nvidia-smi -L: rc \d+ after \d+ s$", (runs["out"] / "log.txt").read_text(),
                     re.M)


def test_the_facts_need_no_torch_and_survive_a_broken_one(tmp_path):
    """With a torch that does not import, the host's facts are whole and torch's say why."""
    fake = tmp_path / "fake" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('a stand-in that does not import')\n")
    env = dict(os.environ, PYTHONPATH=str(fake.parent))
    for what, path in (("host", tmp_path / "machine.json"), ("torch", tmp_path / "torch.json")):
        done = subprocess.run([sys.executable, "-m", "bench.gpu.facts", what, "--json", str(path)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    machine = json.loads((tmp_path / "machine.json").read_text())
    assert machine["packages"]["pytest"] is True and "unfinished" not in machine
    torch_facts = json.loads((tmp_path / "torch.json").read_text())
    assert torch_facts["torch"].startswith("not importable: ImportError: a stand-in")
    assert "unfinished" not in torch_facts


def test_a_failing_step_does_not_stop_the_next(runs):
    out, stdout = runs["broken_out"], runs["broken_stdout"]
    assert runs["broken_rc"] != 0, stdout[-4000:]
    steps = _steps(out)
    assert steps[BROKEN]["status"] == "FAILED rc=2 (dry run)", steps
    for name in AROUND_BROKEN:
        if name != BROKEN:
            assert steps[name]["status"] == "skipped: no GPU (dry run)", (name, steps)
    assert "unrecognized arguments: --gpu-check-broken-flag" in (out / "log.txt").read_text()
    # Steps left out by --steps still have their line, and the table names the failure.
    assert steps["build"]["status"] == "skipped: not selected"
    table = (out / "table.txt").read_text()
    assert re.search(rf"^{BROKEN}\s+FAILED rc=2", table, re.M)
    assert f"# {BROKEN} ended with:" in table


def test_a_sanitizer_exit_is_recorded_for_what_it_means(runs):
    steps = _steps(runs["broken_out"])
    assert steps["memcheck"]["status"] == "skipped: sanitizer serialized the ranks (dry run)"
    assert steps["initcheck"]["status"] == "FAILED rc=9 (dry run)"
    table = (runs["broken_out"] / "table.txt").read_text()
    assert re.search(r"^# skipped: sanitizer serialized the ranks \(dry run\): memcheck$", table,
                     re.M)


def test_an_unknown_step_is_refused_at_once(tmp_path):
    rc, stdout = _finish(_popen(tmp_path, "--steps", "no_such_step"), timeout=30)
    assert rc == 2 and "no step named no_such_step" in stdout
