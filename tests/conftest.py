import glob
import os

import pytest

from process_world import ProcessWorld


def pycomm_segments():
    shm_dir = os.environ.get("PYCOMM_SHM_DIR") or "/dev/shm"
    return sorted(glob.glob(os.path.join(shm_dir, "pycomm-*")))


@pytest.fixture(scope="session", autouse=True)
def no_segments_left_behind():
    """Nothing of any communicator may stay in /dev/shm after the suite."""
    before = set(pycomm_segments())
    yield
    left = sorted(set(pycomm_segments()) - before)
    assert not left, f"shared-memory segments left behind: {left}"


@pytest.fixture(scope="session")
def worlds():
    """worlds(n): a ProcessWorld of n ranks, started once per session."""
    started = {}

    def get(n):
        w = started.get(n)
        if w is None or not w.alive():
            if w is not None:
                w.kill()
            w = started[n] = ProcessWorld(n)
        return w

    yield get
    for w in started.values():
        w.close()
