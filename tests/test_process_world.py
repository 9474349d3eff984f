"""The test harness's own promise: one failure does not cascade. A world in
which a run raised is replaced before the next test uses it (tests/conftest.py),
since its communicator may be aborted or its ranks out of step."""
import os

import pytest

from support.process_world import RankFailed

pytestmark = pytest.mark.ranks


def _fail():
    raise RuntimeError("this rank fails on purpose")


def _pid():
    return os.getpid()


def test_a_world_whose_run_failed_is_replaced(worlds):
    first = worlds(1)
    pids = first.run(_pid)
    with pytest.raises(RankFailed, match="fails on purpose"):
        first.run(_fail)
    second = worlds(1)
    assert second is not first
    assert second.run(_pid) != pids
    assert worlds(1) is second  # a healthy world is kept
