"""docs/coverage.md's generated blocks are what scripts/coverage_page.py writes: the route
table from the backend's own routing table, the counts from the records in bench/results/coverage."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "coverage_page.py")


def _script(*args, env=None):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)


def test_committed_page_is_current():
    # With an override set, to show the page is written from the defaults, not the shell's.
    env = dict(os.environ, PYCOMM_DIRECT_MAX_KB="1")
    done = _script("--check", env=env)
    assert done.returncode == 0, done.stdout + done.stderr


def test_routes_come_from_the_routing_table():
    sys.path.insert(0, os.path.dirname(SCRIPT))
    try:
        import coverage_page
    finally:
        sys.path.pop(0)
    from pycomm import routing

    rows = {line.split("|")[1].strip(" `"): line for line in coverage_page.routes_block()
            if line.startswith("| `")}
    assert sorted(rows) == sorted(routing.COLLECTIVES)
    small = routing.route("all_reduce", local_size=coverage_page.LOCAL, count=2)
    large = routing.route("all_reduce", local_size=coverage_page.LOCAL, count=(16 << 20) // 4)
    assert f"`{small.algorithm}` at 8 B" in rows["all_reduce"]
    assert f"`{large.algorithm}` at 16 MiB" in rows["all_reduce"]
    # Point-to-point across hosts is gloo's: the table says so.
    assert rows["send"].split("|")[4].strip() == "gloo"
