"""bench/tp_inference.py and bench/per_call_floor.py end to end, quickly, through their
command lines: a one-layer model, one round of every mode, the breakdown from the traces;
every road of the per-call floor at one size, values checked."""
import json

import pytest

from support.bench_script import run_script
from pycomm.tools import results_schema as schema

pytestmark = pytest.mark.bench


def test_tp_inference_runs_every_mode(tmp_path):
    pytest.importorskip("transformers", reason="the bench extra (pip install '.[bench]')")
    out = tmp_path / "tp.json"
    stdout, _ = run_script("tp_inference.py", ["--rounds", "1", "--layers", "1", "--hidden", "64",
                                               "--intermediate", "128", "--vocab", "256", "--tokens", "4",
                                               "--prompt", "4", "--prefill", "32", "--json", out,
                                               "--png", tmp_path / "tp.png"], tmp_path, 600)
    rows = schema.rows(schema.load(out))
    modes = {r["mode"]: r for r in rows if r.get("kind") == "mode"}
    assert set(modes) == {"no_tp", "gloo", "pycomm", "symm", "ceiling"}, stdout
    assert modes["pycomm"]["same_tokens_as_gloo"] is True, stdout
    assert modes["symm"]["same_tokens_as_gloo"] is True, stdout
    assert all(m["decode_ms"] > 0 and m["prefill_ms"] > 0 for m in modes.values())
    parts = [r for r in rows if r.get("kind") == "breakdown"]
    assert sorted(p["rank"] for p in parts) == [0, 1]
    for p in parts:
        # One all-reduce after attention and one after the MLP per layer, the embedding's
        # and the logits' gather: at least 2 collectives a token, and every part measured.
        assert p["collectives_per_token"] >= 2 and p["compute"] > 0 and p["collective"] > 0, p
        assert p["step"] >= p["compute"] + p["collective"], p
    assert (tmp_path / "tp.png").stat().st_size > 0
    assert "pycomm / ceiling: decode" in stdout
    assert "symm / pycomm (activations in symmetric memory): decode" in stdout


def test_per_call_floor_checks_every_road(tmp_path):
    out = tmp_path / "floor.json"
    stdout, _ = run_script("per_call_floor.py", ["--sizes", "8,4096", "--reps", "1", "--calls", "20",
                                                 "--json", out], tmp_path, 300)
    rows = schema.rows(schema.load(out))
    roads = {(r["backend"], r["road"]) for r in rows}
    for road in ("dist", "async+wait", "funcol", "funcol_ops", "op", "dispatch"):
        assert ("gloo", road) in roads and ("pycomm", road) in roads, road
    assert ("pycomm", "direct") in roads
    assert all(r["wrong"] == 0 and r["us"] > 0 for r in rows), stdout
