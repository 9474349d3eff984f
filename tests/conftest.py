import glob
import os

import pytest

from support import layers
from support.process_world import TEST_BACKEND, ProcessWorld, WorldPool

# A fast-layer test slower than this is named at the end of the run: it belongs in another
# layer (tests/support/layers.py), or the fast layer stops being the one a developer runs
# each time.
FAST_TEST_S = 15.0


def pytest_configure(config):
    for name, what in layers.LAYERS.items():
        config.addinivalue_line("markers", f"{name}: layer: {what}")


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(collector, name, obj):
    """A test whose layer is not written once is an error of its file's collection."""
    made = yield
    for item in made if isinstance(made, list) else [made]:
        if isinstance(item, pytest.Function):
            try:
                layers.written_layer(item)
            except layers.LayerError as e:
                raise collector.CollectError(str(e)) from None
    return made


_layer_of = {}  # node id -> layer, of the tests collected
_slow_fast_tests = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Each test keeps its one layer's marker before -m selects (tests/support/layers.py). Soak
    tests run only when -m names them, whatever else -m selects (`-m ranks` must not start a
    soak)."""
    _layer_of.update(layers.settle_layers(items))
    if "soak" not in (config.getoption("markexpr") or ""):
        soak = [item for item in items if item.get_closest_marker("soak")]
        if soak:
            config.hook.pytest_deselected(items=soak)
            items[:] = [item for item in items if not item.get_closest_marker("soak")]


@pytest.fixture(autouse=True)
def fast_tests_start_no_ranks(request, monkeypatch):
    """The written layer is true: a `fast` test that starts rank processes fails."""
    if request.node.get_closest_marker("fast"):
        layers.refuse_rank_processes(monkeypatch, request.node.nodeid)


def pytest_runtest_logreport(report):
    if report.when == "call" and report.duration > FAST_TEST_S \
            and _layer_of.get(report.nodeid) == "fast":
        _slow_fast_tests.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter):
    if _slow_fast_tests:
        terminalreporter.write_line(
            f"fast-layer tests over {FAST_TEST_S:.0f} s (mark them with another layer, "
            "tests/support/layers.py): "
            + ", ".join(f"{n} ({s:.0f} s)" for n, s in _slow_fast_tests))


def pycomm_segments():
    shm_dir = os.environ.get("PYCOMM_SHM_DIR") or "/dev/shm"
    return sorted(glob.glob(os.path.join(shm_dir, "pycomm-*")))


def pycomm_sockets():
    """The abstract Unix sockets of pycomm's segment servers in this network namespace."""
    with open("/proc/net/unix") as f:
        paths = (line.split()[-1] for line in f if len(line.split()) == 8)
        return sorted(p for p in paths if p.startswith("@pycomm-"))


@pytest.fixture(scope="session", autouse=True)
def no_segments_left_behind():
    """Nothing of any communicator may stay in /dev/shm, or listen on a socket, after the suite."""
    before, sockets_before = set(pycomm_segments()), set(pycomm_sockets())
    yield
    left = sorted(set(pycomm_segments()) - before)
    assert not left, f"shared-memory segments left behind: {left}"
    listening = sorted(set(pycomm_sockets()) - sockets_before)
    assert not listening, f"segment servers left behind: {listening}"


@pytest.fixture(scope="session")
def worlds():
    """worlds(n): a gloo world of n ranks, each with a pycomm communicator, started once
    per session (process_world.WorldPool)."""
    pool = WorldPool(ProcessWorld)
    yield pool
    pool.close()


def segments_of(pids):
    """The /dev/shm/pycomm-<pid>-* segments created by any of these processes."""
    prefixes = tuple(f"pycomm-{pid}-" for pid in pids)
    return [s for s in pycomm_segments() if os.path.basename(s).startswith(prefixes)]


@pytest.fixture(scope="session")
def backend_worlds():
    """backend_worlds(n): a world of n ranks whose default group is the backend
    under test (process_world.TEST_BACKEND, "cpu:pycomm" unless
    PYCOMM_TEST_BACKEND says otherwise)."""
    pool = WorldPool(lambda n: ProcessWorld(n, backend=TEST_BACKEND))
    yield pool
    pool.close()
