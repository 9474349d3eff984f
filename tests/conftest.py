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


def _world_pool(**kwargs):
    """get(n): a ProcessWorld of n ranks (ProcessWorld(n, **kwargs)), started
    once per session. A world in which a test failed is replaced, as a dead one
    is: one failure (an aborted communicator, a rank left out of step) must not
    fail every later test of that size for the same cause."""
    started = {}

    def get(n):
        w = started.get(n)
        if w is None or not w.alive() or w.failed:
            if w is not None:
                w.kill()
            w = started[n] = ProcessWorld(n, **kwargs)
        return w

    return get, started


def _close_pool(started):
    for w in started.values():
        if w.failed:
            w.kill()
        else:
            w.close()


@pytest.fixture(scope="session")
def worlds():
    """worlds(n): a gloo world of n ranks, each with a pycomm communicator."""
    get, started = _world_pool()
    yield get
    _close_pool(started)


def segments_of(pids):
    """The /dev/shm/pycomm-<pid>-* segments created by any of these processes."""
    prefixes = tuple(f"pycomm-{pid}-" for pid in pids)
    return [s for s in pycomm_segments() if os.path.basename(s).startswith(prefixes)]


@pytest.fixture(scope="session")
def backend_worlds():
    """backend_worlds(n): a world of n ranks whose default group is the backend
    under test (process_world.TEST_BACKEND, "cpu:pycomm" unless
    PYCOMM_TEST_BACKEND says otherwise)."""
    from process_world import TEST_BACKEND

    get, started = _world_pool(backend=TEST_BACKEND)
    yield get
    _close_pool(started)
