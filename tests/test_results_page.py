"""docs/results.md and README's headline come from bench/results/*.json, through
scripts/results_page.py: the committed page must be what the script writes from the committed
files, and a table's numbers must be the file's. Standard library only (no torch), under a
second."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "results_page.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def _full_history():
    """The page dates a file without meta["date"] by its last commit: that needs git and this
    checkout's own full history (not a shallow clone, which dates every file by its one
    commit, nor a copy inside another checkout's folder, as scripts/torch_release_tests.sh
    makes)."""
    if shutil.which("git") is None:
        return False

    def git(*args):
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    return (top is not None and os.path.realpath(top) == os.path.realpath(ROOT)
            and git("rev-parse", "--is-shallow-repository") == "false")


@pytest.mark.skipif(not _full_history(), reason="needs git and this checkout's own full history")
def test_committed_page_and_readme_headline_are_current():
    proc = run("--check")
    assert proc.returncode == 0, (
        "docs/results.md or README's headline is not what scripts/results_page.py writes "
        f"from bench/results; run it and commit the result:\n{proc.stderr}")


def _peer(us, spread, wrong=0, size=65536, factor=1.0):
    algbw = size / us / 1e3
    return {"us": us, "algbw": algbw, "busbw": algbw * factor, "spread": spread,
            "rounds_us": [us, us, us], "wrong": wrong}


def _collective_row(size, pyc_us, gloo_us):
    row = {"collective": "all_reduce", "call": "all_reduce", "size": size, "count": size // 4,
           "dtype": "float32", "op": "sum", "world_size": 2, "busbw_factor": 1.0,
           "ceiling_us": 2.5, "frac_of_ceiling": 2.5 / pyc_us, "pycomm_peer": "pycomm_backend",
           "gloo_over_pycomm": gloo_us / pyc_us, "pycomm_over_mpi": 0.25}
    for peer, us, spread in (("pycomm_backend", pyc_us, 0.123), ("gloo", gloo_us, 0.5)):
        for field, value in _peer(us, spread, size=size).items():
            row[f"{peer}_{field}"] = value
    return row


def test_tables_and_headline_come_from_the_files(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    doc = {"meta": {"schema": 1, "command": "python3 bench/collectives_perf.py --json x.json",
                    "date": "2031-02-03T04:05:06+00:00", "world_size": 2, "dtype": "float32",
                    "peers": {"pycomm_backend": "pycomm = the backend",
                              "gloo": "gloo = the default group"},
                    "notes": ["a note the bench wrote"]},
           "rows": [_collective_row(65536, 6.25, 437.5), _collective_row(16 << 20, 800.0, 9040.0)],
           "summary": [{"collective": "all_reduce", "line": "all_reduce: a summary line"}]}
    (results / "collectives_2ranks.json").write_text(json.dumps(doc))
    # A training file without meta (no date, no command).
    steps = [0.30, 0.33, 0.36]
    train = [{"mode": "baseline", "world_size": 1, "step_time_s": 0.25, "images_per_s": 128.0,
              "model": "resnet50", "device": "cpu", "backend": "gloo", "image_size": 32,
              "batch_size": 32, "steps": 3, "warmup": 1, "threads": 1}]
    for mode, step in (("no-comm", 0.30), ("stock", 0.39), ("ring", 0.312), ("backend", 0.321)):
        train.append({"mode": mode, "world_size": 2, "available": True, "step_time_s": step,
                      "step_times_s": [s * step / 0.33 for s in steps], "images_per_s": 64 / step,
                      "speedup": 0.5 / step, "efficiency": 0.25 / step,
                      "over_no_comm": step / 0.30, "amdahl_f": 0.125})
    (results / "ddp_resnet50_2ranks.json").write_text(json.dumps({"rows": train}))
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- headline: written by scripts/results_page.py from "
                      "bench/results; do not edit -->\nold\n<!-- end of headline -->\n\ntail\n")
    page = tmp_path / "results.md"
    args = ("--results", str(results), "--out", str(page), "--readme", str(readme))

    assert run(*args, "--check").returncode == 1      # nothing written yet
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    assert run(*args, "--check").returncode == 0      # and now it is current

    text = page.read_text()
    assert "- Command: `python3 bench/collectives_perf.py --json x.json`" in text
    assert "- Made: 2031-02-03T04:05:06+00:00" in text
    assert "- a note the bench wrote" in text and "- all_reduce: a summary line" in text
    # size, count, type, redop; pycomm: time ±spread, algbw, busbw, #wrong; gloo the same;
    # gloo/pyc and pyc/mpi; the ceiling and the fraction of it.
    assert ("| 65536 | 16384 | float32 | sum | 6.25 ±12% | 10.49 | 10.49 | 0 | "
            "437.50 ±50% | 0.15 | 0.15 | 0 | 70.0 | 0.25 | 2.5 | 0.40 |") in text, text
    assert "| pycomm us | algbw | busbw | #wrong | gloo us |" in text
    # No meta: the date falls back to git (none here: not committed), no command.
    ddp = text[text.index("## ddp_resnet50_2ranks"):]
    assert "- Command: not recorded" in ddp
    assert "T1 = 250.0 ms per step, 128.0 images/s" in ddp
    assert "| stock | 2 | 390.0 | 18% | 1.300 |" in ddp, ddp

    text_of_readme = readme.read_text()
    assert text_of_readme.startswith("# x\n\n") and text_of_readme.endswith("\n\ntail\n")
    assert "old" not in text_of_readme
    head = " ".join(text_of_readme.split())  # the headline is wrapped
    # Judged against the ceiling measured beside it and gloo's rounds, each with their range;
    # no Open MPI or DeepSpeed column here, so no ratio to a peer.
    assert "at 64 KiB pycomm takes 6.2 µs (6.2-6.2)" in head, head
    assert "Open MPI" not in head
    assert ("the memory-copy ceiling beside it takes 0.40 (0.40-0.40) of pycomm's time "
            "at 64 KiB and 0.00 (0.00-0.00) at 16 MiB") in head, head
    assert "gloo 70.0x (70.0-70.0) at 64 KiB" in head, head
    # The files before the rounds kept no range: the ratio alone.
    assert ("a step takes 1.07x the step with no communication on the pycomm backend, 1.04x "
            "with `pycomm.ring_hook`, 1.30x on gloo") in head
    # Each line links its table, where the command and date that made it are written.
    assert "#all_reduce-collectives_2ranks)" in head and "#ddp_resnet50_2ranks)" in head, head

    # A number changed in the file changes the page: --check fails until it is rewritten.
    doc["rows"][0]["pycomm_backend_us"] = 7.0
    (results / "collectives_2ranks.json").write_text(json.dumps(doc))
    assert run(*args, "--check").returncode == 1


def test_headline_judges_against_the_fastest_peer_with_the_rounds_range(tmp_path):
    """With an Open MPI column, the headline gives pycomm's time over MPI's: the ratio of the
    medians and the widest range their rounds allow (MPI's rounds run in a launch of their
    own, so they pair with none of pycomm's)."""
    results = tmp_path / "results"
    results.mkdir()
    rows = [_collective_row(65536, 6.25, 437.5), _collective_row(16 << 20, 800.0, 9040.0)]
    for r, mpi in zip(rows, ([10.0, 12.5, 25.0], [1000.0, 1600.0, 2000.0])):
        r["pycomm_backend_rounds_us"] = [r["pycomm_backend_us"] * f for f in (0.9, 1.0, 1.2)]
        r.update(mpi_us=sorted(mpi)[1], mpi_rounds_us=mpi, mpi_busbw=1.0)
    doc = {"meta": {"command": "python3 bench/collectives_perf.py", "date": "2031-02-03"},
           "rows": rows, "summary": []}
    (results / "collectives_2ranks.json").write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text("<!-- headline: written by scripts/results_page.py from bench/results; "
                      "do not edit -->\n<!-- end of headline -->\n")
    proc = run("--results", str(results), "--out", str(tmp_path / "r.md"), "--readme", str(readme))
    assert proc.returncode == 0, proc.stderr
    head = " ".join(readme.read_text().split())
    # 6.25 / 12.5 = 0.50; 5.625 / 25 = 0.225 .. 7.5 / 10 = 0.75.
    assert "at 64 KiB pycomm takes 6.2 µs (5.6-7.5)" in head, head
    assert "0.50x (0.23-0.75) the time of Open MPI, the fastest peer measured" in head, head
    # 800 / 1600 = 0.50; 720 / 2000 = 0.36 .. 960 / 1000 = 0.96.
    assert "at 16 MiB 0.50x (0.36-0.96) Open MPI's" in head, head
