"""The pure pieces of bench/harness and pycomm.tools.results_schema, without ranks: size
parsing and sweeps, each collective's layout, bus-bandwidth factor and exact reference, the
table's format, the JSON schema's round trip and its refusal of other shapes, and the
helpers of the timing. Fast: no process group, no spawned ranks."""
import argparse
import sys
import types
from pathlib import Path

import pytest

from harness import collectives, patterns, sizes, timing, verdicts
from harness.table import Column, Table, cell
from pycomm.tools import results_schema as schema

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parent.parent

SCALAR = types.SimpleNamespace(maximum=max, minimum=min)  # xp for plain Python ints


# --------------------------------------------------------------------------- sizes

@pytest.mark.parametrize("text,want", [("8", 8), ("64K", 64 << 10), ("1M", 1 << 20),
                                       ("1.5G", 3 << 29), ("16MB", 16 << 20), (" 2k ", 2048),
                                       ("256M", 256 << 20)])
def test_parse_size(text, want):
    assert sizes.parse_size(text) == want


@pytest.mark.parametrize("bad", ["", "K", "abc", "1.2.3M", "8X"])
def test_parse_size_refuses_with_an_argparse_error(bad):
    with pytest.raises(argparse.ArgumentTypeError, match="expected a size like"):
        sizes.parse_size(bad)


def test_sweep_multiplies_and_adds_the_targets_within_range():
    assert sizes.sweep(8, 1024, 4) == [8, 32, 128, 512]
    assert sizes.sweep(8, 16 << 20, 256, include=[64 << 10, 16 << 20, 1 << 30]) == \
        [8, 2048, 64 << 10, 512 << 10, 16 << 20]
    assert sizes.sweep(8, 11, 1) == [8, 9, 10, 11]          # factor <= 1: one byte apart
    assert sizes.sweep(8, 20, 1, step=4) == [8, 12, 16, 20]  # the CUDA bench's step
    assert sizes.sweep(1, 4, 1.2) == [1, 2, 3, 4]            # never stuck below a whole step


def test_human():
    assert [sizes.human(b) for b in (8, 1024, 64 << 10, 16 << 20, 1 << 30, 1500)] == \
        ["8 B", "1 KiB", "64 KiB", "16 MiB", "1 GiB", "1500 B"]


def test_size_options_refuse_a_reversed_range():
    p = argparse.ArgumentParser()
    sizes.add_size_options(p)
    args = p.parse_args(["-b", "1M", "-e", "64K"])
    with pytest.raises(SystemExit):
        sizes.check_size_options(p, args)
    args = p.parse_args([])
    assert (args.minbytes, args.maxbytes, args.stepfactor) == (8, 256 << 20, 4.0)


# --------------------------------------------------------------------------- collectives

@pytest.mark.parametrize("n", [1, 2, 3, 4, 8])
def test_busbw_factors_are_nccl_tests(n):
    ring = 2 * (n - 1) / n if n > 1 else 1.0
    chunk = (n - 1) / n if n > 1 else 1.0
    want = {"all_reduce": ring, "broadcast": 1.0, "reduce": 1.0, "all_gather": chunk,
            "reduce_scatter": chunk, "all_to_all": chunk}
    assert {c: collectives.busbw_factor(c, n) for c in collectives.NAMES} == \
        pytest.approx(want)


def test_layout_size_is_the_larger_of_input_and_output():
    n, esize = 3, 4
    for name in collectives.NAMES:
        c = collectives.get(name)
        lay = c.layout(1000, esize, n)
        assert lay["size"] == esize * max(lay["in_numel"], lay["out_numel"]), name
        assert lay["size"] <= 1000
    ag = collectives.get("all_gather").layout(1000, 4, 3)
    assert (ag["count"], ag["in_numel"], ag["out_numel"]) == (83, 83, 249)
    rs = collectives.get("reduce_scatter").layout(1000, 4, 3)
    assert (rs["count"], rs["in_numel"], rs["out_numel"]) == (83, 249, 83)
    # Too small for a whole element (chunk): one at least.
    assert collectives.get("all_to_all").layout(1, 4, 4)["count"] == 1
    assert collectives.get("all_reduce").layout(3, 4, 2)["size"] == 4


def test_unknown_collective_is_named():
    with pytest.raises(ValueError, match="nope"):
        collectives.get("nope")


def _simulate(name, n, op, count):
    """Each rank's output of collective `name`, computed here from its definition."""
    c = collectives.get(name)
    lay = c.layout(count * 4 * (1 if c.in_place else n), 4, n)
    chunk, size_in = lay["count"], lay["in_numel"]
    inputs = [[c.input_values(r, i, n, op) for i in range(size_in)] for r in range(n)]

    def reduce(vals):
        out = vals[0]
        for v in vals[1:]:
            out = {"sum": out + v, "avg": out + v, "premul_sum": out + v, "product": out * v,
                   "max": max(out, v), "min": min(out, v)}[op]
        if op == "avg":
            assert out % n == 0  # the pattern makes the average exact
            out //= n
        if op == "premul_sum":
            out *= int(patterns.PREMUL_FACTOR)
        return out

    outs = []
    for r in range(n):
        if name in ("all_reduce", "reduce"):
            outs.append([reduce([inputs[q][i] for q in range(n)]) for i in range(size_in)])
        elif name == "broadcast":
            outs.append(list(inputs[collectives.ROOT]))
        elif name == "all_gather":
            outs.append([v for q in range(n) for v in inputs[q]])
        elif name == "reduce_scatter":
            outs.append([reduce([inputs[q][r * chunk + i] for q in range(n)])
                         for i in range(chunk)])
        else:  # all_to_all: rank r gets the r-th chunk of every rank
            outs.append([inputs[q][r * chunk + i] for q in range(n) for i in range(chunk)])
    return c, chunk, outs


@pytest.mark.parametrize("name", collectives.NAMES)
@pytest.mark.parametrize("op", patterns.OPS)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_expected_is_the_collective_of_the_inputs(name, op, n):
    c, chunk, outs = _simulate(name, n, op, 7)
    for r, out in enumerate(outs):
        if not c.checked_on(r):
            continue
        assert [c.expected(r, i, n, chunk, op, SCALAR) for i in range(len(out))] == out, r


def test_pattern_fits_every_dtype():
    # 0..4 and their sums over 8 ranks times 2 (premul), products of 1s and 2s: all exact
    # in int8 (<= 127) and bfloat16 (integers up to 256).
    n = 8
    top = max(patterns.reduced(i, n, op, SCALAR) for op in patterns.OPS for i in range(64))
    assert top <= 127
    assert patterns.SENTINEL not in {patterns.values(r, i, n, "sum")
                                     for r in range(n) for i in range(64)}


# --------------------------------------------------------------------------- table

def test_table_cells_align_and_dash_what_is_missing():
    t = Table([Column("size", 6, "size", "d"), Column("peer", 6, "name", align="<"), None,
               Column("us", 7, "us", ".2f"), Column("eff", 6, "eff", ".1%"),
               Column("err", 7, "err", "+.1%"), Column("ms", 5, "s", ".1f", 1e3)])
    assert t.header() == "  size peer   |      us    eff     err    ms"
    row = dict(size=8, name="gloo", us=1.5, eff=0.25, err=-0.05, s=0.0123)
    assert t.row(row) == "     8 gloo   |    1.50  25.0%   -5.0%  12.3"
    assert t.row(dict(size=8, name="nccl")) == "     8 nccl   |       -      -       -     -"
    assert t.row(dict(size=8, name="x"), upto=2, note="unavailable: why") == \
        "     8 x       unavailable: why"
    assert len(t.row(row)) == len(t.header())


def test_table_without_separator_and_cell():
    t = Table([Column("a", 4, "a", align="<"), Column("b", 5, "b", "d")], sep="")
    assert t.header() == "a       b"
    assert t.row({"a": "xy", "b": 3}) == "xy      3"
    assert cell(None, ">+7.1%") == "      -" and cell(2.0, ">6.2f", 0.5) == "  1.00"


# --------------------------------------------------------------------------- timing

def test_summarize_and_in_turns():
    med, spread = timing.summarize([1.0, 2.0, 4.0])
    assert med == 2.0 and spread == pytest.approx(1.5)
    assert timing.summarize([0.0, 0.0]) == (0.0, 0.0)
    calls = []
    samples = timing.in_turns([lambda: calls.append("a"), lambda: calls.append("b")], 3,
                              warmup=1)
    assert calls == ["a", "b"] * 4 and [len(s) for s in samples] == [3, 3]


def test_per_call_median_makes_the_agreed_calls():
    calls, agreed = [], []

    def agree(n):
        agreed.append(n)
        return 4  # what rank 0 said

    s = timing.per_call_median(lambda: calls.append(1), budget_s=1.0, min_iters=2,
                               max_iters=10, warmup=3, agree=agree, slowest=lambda x: x + 1)
    assert agreed == [10]           # a fast call: the most the budget allows
    assert len(calls) == 3 + 1 + 4  # warm-up, the estimate, the agreed count
    assert s >= 1


def test_cpu_clock_samples():
    clock = timing.Clock("cpu")
    out = timing.sample(lambda: None, 5, clock)
    assert len(out) == 5 and all(s >= 0 for s in out)


# --------------------------------------------------------------------------- verdicts

def test_ratio_paired_takes_the_rounds_ratios_unpaired_the_widest_range():
    # Measured in the same turns: round by round.
    assert verdicts.ratio([2.0, 3.0, 8.0], [1.0, 2.0, 2.0], paired=True) == (2.0, 1.5, 4.0)
    # Open MPI's rounds pair with none: the medians' ratio, fastest/slowest..slowest/fastest.
    assert verdicts.ratio([2.0, 3.0, 8.0], [1.0, 2.0, 4.0], paired=False) == \
        pytest.approx((1.5, 0.5, 8.0))
    assert verdicts.ratio([], [1.0], paired=True) is None
    assert verdicts.ratio([1.0], [None], paired=False) is None


def test_verdict_is_met_missed_or_within_the_spread():
    assert verdicts.verdict((0.9, 0.8, 1.0), at_most=1.0) is True
    assert verdicts.verdict((1.2, 1.1, 1.3), at_most=1.0) is False
    assert verdicts.verdict((0.9, 0.8, 1.1), at_most=1.0) is None
    assert verdicts.verdict((2.5, 2.1, 3.0), at_least=2.0) is True
    assert verdicts.verdict((1.5, 1.2, 1.9), at_least=2.0) is False
    assert verdicts.verdict((2.1, 1.9, 2.4), at_least=2.0) is None
    assert verdicts.verdict_text((0.9, 0.8, 1.1), at_most=1.0) == "within the rounds' spread"
    assert verdicts.show((0.861, 0.857, 0.87), 2, "x") == "0.86x (0.86-0.87)"
    assert verdicts.show(None) == "-"


def test_judge_picks_the_fastest_peer_and_never_gloo():
    row = {"pycomm_backend_rounds_us": [20.0, 21.0, 22.0], "ceiling_us": 6.3,
           "gloo_us": 400.0, "gloo_rounds_us": [400.0, 1260.0, 1100.0],
           "mpi_us": 24.0, "mpi_rounds_us": [24.0, 24.0, 25.0],
           "deepspeed_us": 30.0, "deepspeed_rounds_us": [30.0, 30.0, 30.0]}
    j = verdicts.judge(row, "pycomm_backend")
    assert j["pycomm"] == (21.0, 20.0, 22.0)
    name, r, met = j["best"]
    assert name == "Open MPI" and met is True
    assert r == pytest.approx((21.0 / 24.0, 20.0 / 25.0, 22.0 / 24.0))
    assert j["of_ceil"] == pytest.approx((0.3, 6.3 / 22.0, 6.3 / 20.0))
    assert j["gloo"] == pytest.approx((50.0, 20.0, 60.0))  # 400/20, 1260/21, 1100/22
    del row["mpi_us"]
    assert verdicts.judge(row, "pycomm_backend")["best"][0] == "DeepSpeed"  # same turns: paired
    del row["deepspeed_us"]
    assert verdicts.judge(row, "pycomm_backend")["best"] is None


# --------------------------------------------------------------------------- the schema

def test_column_names():
    assert schema.column("gloo", "us") == "gloo_us"
    assert schema.column(schema.PYCOMM_BACKEND, "rounds_us") == "pycomm_backend_rounds_us"
    for field in ("us", "algbw", "busbw", "spread", "rounds_us", "wrong"):
        assert schema.column("mpi", field) == f"mpi_{field}"
    with pytest.raises(ValueError, match="field"):
        schema.column("gloo", "time")
    assert (schema.SIZE, schema.COUNT, schema.DTYPE, schema.OP, schema.WORLD_SIZE,
            schema.WRONG, schema.PYCOMM_US, schema.STOCK_US) == \
        ("size", "count", "dtype", "op", "world_size", "wrong", "pycomm_us", "stock_us")


def test_write_then_load_round_trip(tmp_path):
    rows = [dict(collective="all_reduce", size=8, gloo_us=1.5),
            dict(collective="all_gather", size=8, gloo_us=2.5)]
    path = tmp_path / "r.json"
    doc = schema.write(path, rows, dict(world_size=2), [dict(line="ok")],
                       command="python3 bench/collectives_perf.py --json r.json")
    got = schema.load(path)
    assert got == doc
    assert got["rows"] == rows and got["summary"] == [dict(line="ok")]
    meta = got["meta"]
    assert meta["world_size"] == 2 and meta["schema"] == schema.SCHEMA_VERSION
    assert meta["command"] == "python3 bench/collectives_perf.py --json r.json"
    assert meta["date"].endswith("+00:00") and "T" in meta["date"]
    assert not list(tmp_path.glob("*.tmp*"))  # written in place of a temporary


def test_write_names_the_running_command(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "x.py"), "--json", "a b.json"])
    (tmp_path / "x.py").write_text("")
    meta = schema.write(tmp_path / "r.json", [])["meta"]
    assert meta["command"].endswith(f"{tmp_path / 'x.py'} --json 'a b.json'")
    monkeypatch.setattr(sys, "argv", ["pycomm bench allreduce", "--json", "o.json"])
    assert schema.command_line() == "pycomm bench allreduce --json o.json"


def test_load_reads_every_committed_file():
    for path in sorted((REPO / "bench" / "results").glob("*.json")):
        doc = schema.load(path)
        assert doc["rows"] and doc["meta"]["schema"] == schema.SCHEMA_VERSION, path


@pytest.mark.parametrize("text", ['{"meta": {}}', '{"rows": 3}', '"rows"', '[1, 2]', '[]',
                                  '{"rows": [], "meta": []}', '{"rows": [], "summary": {}}',
                                  '{"rows": [], "world": 2}', "not json"])
def test_load_refuses_other_shapes_naming_the_file(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="bad.json"):
        schema.load(path)


def test_rows_filter_by_collective(tmp_path):
    rows = [dict(collective="all_reduce", size=1), dict(collective="allreduce", size=2),
            dict(collective="all-reduce", size=3), dict(size=4),
            dict(collective="all_gather", size=5)]
    path = tmp_path / "r.json"
    schema.write(path, rows)
    for source in (path, str(path), schema.load(path), rows):
        assert [r["size"] for r in schema.rows(source, "all_reduce")] == [1, 2, 3, 4]
        assert [r["size"] for r in schema.rows(source, "allreduce")] == [1, 2, 3, 4]
        assert [r["size"] for r in schema.rows(source, "all_gather")] == [5]
        assert len(schema.rows(source)) == 5


def test_gpu_summary_reads_what_the_benches_write():
    from bench.gpu import summary as gpu_summary

    rows = [dict(name="pycomm auto", bytes=8, count=2, world=2, us=10.0, wrong=0),
            dict(name="nccl", bytes=8, count=2, world=2, why="refused")]
    doc = dict(meta=dict(world=2, gpus=1, nccl="2.28.9"), rows=rows, summary=[])
    assert gpu_summary.procs_lines("p", doc)[0].startswith(
        "p (2 processes on 1 GPU, NCCL 2.28.9): #wrong 0; nccl not run: refused")
    records = [dict(mode="stock", world_size=2, available=True, step_time_s=0.2, backend="gloo")]
    assert gpu_summary.ddp_lines("d", records) == gpu_summary.ddp_lines("d", dict(rows=records))
    checks = dict(meta=dict(model="resnet50", world=2, gpus=1, reference="gloo"),
                  rows=[dict(hook="fp32", worst=0.0, tolerance=1e-6, ok=True)])
    assert "fp32 worst 0.00e+00" in gpu_summary.ddp_grads_lines("g", checks)[0]
