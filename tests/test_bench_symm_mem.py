"""bench/symm_mem_perf.py end to end, quickly, through its command line: every road at a
size the one-shot takes and one the in-place path takes, values checked, the summary said."""
import pytest

from support.bench_script import run_script
from pycomm.tools import results_schema as schema

pytestmark = pytest.mark.bench

ROADS = {"ordinary", "symmetric", "one_shot", "two_shot", "gloo", "copy"}


def test_symm_mem_perf_checks_every_road(tmp_path):
    out = tmp_path / "symm.json"
    stdout, _ = run_script("symm_mem_perf.py", ["--sizes", "8,65536", "--reps", "1", "--budget", "0.002",
                                                 "--json", out], tmp_path, 300)
    rows = schema.rows(schema.load(out))
    assert {(r["size"], r["road"]) for r in rows} == {(s, k) for s in (8, 65536) for k in ROADS}, stdout
    assert all(r["wrong"] == 0 and r["us"] > 0 for r in rows), stdout
    assert "symmetric" in stdout and "x ordinary" in stdout
