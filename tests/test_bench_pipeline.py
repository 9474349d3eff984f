"""bench/pipeline_perf.py end to end, quickly: 3 CPU ranks (a first, a middle and a last
stage), two tiny widths, two rounds of two steps, through its command line; every column in
the JSON, the ratios as the columns make them, and the pycomm and gloo copies' weights equal.

One run serves every check (spawning ranks costs seconds on a 2-core host).
"""
import importlib.util
from pathlib import Path

import pytest
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the backend)
from pycomm.tools import results_schema as schema

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "pipeline_perf.py"
from support.bench_script import run_script  # noqa: E402  (puts bench/ on sys.path)

pytestmark = pytest.mark.bench

RANKS, HIDDEN, MICROBATCHES, ROWS, ROUNDS, STEPS = 3, [8, 24], 3, 2, 2, 2
PEERS = (schema.PYCOMM_BACKEND, schema.GLOO, "no_comm", "one_process")
HAS_BACKEND = "pycomm" in dist.Backend.backend_list


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipeline")
    stdout, _ = run_script("pipeline_perf.py", [
        "--nproc", RANKS, "--hidden", ",".join(map(str, HIDDEN)), "--microbatches",
        MICROBATCHES, "--microbatch-size", ROWS, "--rounds", ROUNDS, "--steps", STEPS,
        "--warmup", "1", "--json", out / "p.json"], out, 120)
    return schema.load(out / "p.json"), stdout


def test_rows(run):
    doc, _ = run
    rows = doc["rows"]
    assert [r["hidden"] for r in rows] == HIDDEN
    for r in rows:
        assert r["collective"] == "pipeline_1f1b" and r["schedule"] == "1F1B", r
        assert r["world_size"] == r["stages"] == RANKS and r["dtype"] == "float32"
        assert (r["microbatches"], r["microbatch_size"], r["steps"]) == (MICROBATCHES, ROWS, STEPS)
        assert r["count"] == ROWS * r["hidden"] and r["size"] == 4 * r["count"]
        # in + hidden, hidden + hidden (RANKS - 2 of them), hidden + out: weights and biases
        h = r["hidden"]
        assert r["params"] == (8 * h + h) + (RANKS - 2) * (h * h + h) + (h * 4 + 4)
        for peer in PEERS:
            us, rounds = r[schema.column(peer, "us")], r[schema.column(peer, "rounds_us")]
            assert us > 0 and len(rounds) == ROUNDS and min(rounds) > 0, (peer, r)
            assert min(rounds) <= us <= max(rounds), (peer, r)
            assert r[schema.column(peer, "spread")] == pytest.approx(
                (max(rounds) - min(rounds)) / us)
        assert r["ceiling_us"] == r["no_comm_us"]
        # A pipeline row must never be read as an all_reduce row (pycomm predict --calibrate).
    assert schema.rows(doc, "all_reduce") == []
    assert doc["meta"]["world_size"] == RANKS and doc["meta"]["schedule"] == "1F1B"


def test_pycomm_column(run):
    doc, stdout = run
    assert HAS_BACKEND, "`import pycomm` registers the 'pycomm' backend"
    assert "pycomm absent" not in stdout
    for r in doc["rows"]:
        pyc = r["pycomm_backend_us"]
        assert r["pycomm_peer"] == schema.PYCOMM_BACKEND
        assert r["gloo_over_pycomm"] == pytest.approx(r["gloo_us"] / pyc)
        assert r["frac_of_ceiling"] == pytest.approx(r["no_comm_us"] / pyc)
        assert r["speedup"] == pytest.approx(r["one_process_us"] / pyc)
        # The same steps on the same batch from the same weights: the same bits.
        assert r["wrong"] == 0, r
    assert "#wrong total 0" in stdout


def test_table(run):
    _, stdout = run
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("hidden"))
    for title in ("pycomm us", "gloo us", "no-comm us", "1-proc us", "gloo/pyc", "of_ceil",
                  "speedup", "#wrong"):
        assert title in lines[header], title
    body = lines[header + 1:header + 1 + len(HIDDEN)]
    assert [int(line.split()[0]) for line in body] == HIDDEN


@pytest.mark.parametrize("arg", [["--nproc", "1"], ["--microbatches", "3"],
                                 ["--hidden", "64,0"], ["--steps", "0"]])
def test_bad_arguments_refused(arg, capsys):
    # In this process (a subprocess each would import torch again): --microbatches 3 is
    # fewer than the default 4 ranks' stages.
    spec = importlib.util.spec_from_file_location("pipeline_perf", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with pytest.raises(SystemExit) as refused:
        bench.parse_args(arg)
    assert refused.value.code == 2 and arg[0] in capsys.readouterr().err
