"""bench/setup_perf.py end to end, quickly, through its command line: every step timed,
each group's first message checked."""
import json

import pytest

from support.bench_script import run_script

pytestmark = pytest.mark.bench


def test_setup_perf_times_every_step(tmp_path):
    out = tmp_path / "setup.json"
    stdout, _ = run_script("setup_perf.py", ["--groups", "2", "--json", out], tmp_path, 300)
    rows = json.loads(out.read_text())["rows"]
    assert [r["call"] for r in rows] == ["new_group", "first_send", "destroy"], stdout
    assert all(r["pycomm_us"] > 0 for r in rows), stdout
    assert "new_group" in stdout and "ms" in stdout
