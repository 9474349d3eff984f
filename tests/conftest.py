import glob
import os
import uuid

import pytest

from support import layers
from support.process_world import TEST_BACKEND, ProcessWorld, WorldPool

# A fast-layer test slower than this is named at the end of the run: it belongs in another
# layer (tests/support/layers.py), or the fast layer stops being the one a developer runs
# each time.
FAST_TEST_S = 15.0


def pytest_configure(config):
    _config[:] = [config]
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


_config = []  # pytest's config, once configured


def pytest_runtest_logreport(report):
    terminal = _config and _config[0].pluginmanager.get_plugin("terminalreporter")
    if report.failed and os.environ.get("PYCOMM_TEST_FAILURES_AT_ONCE") and terminal:
        # bench/gpu_check.sh: a step cut at its limit keeps why a test failed.
        terminal.write_line(f"\n{report.nodeid} FAILED ({report.when}):\n{report.longreprtext}")
        terminal.flush()
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


# Every process this run starts inherits the mark, and keeps it when it outlives its parent:
# the check for leftover servers below tells this run's from another run's on the same host.
# (setdefault: a test module that imports conftest again, or a pytest this run starts, keeps it.)
RUN_MARK = "PYCOMM_TEST_RUN"
os.environ.setdefault(RUN_MARK, f"{os.getpid()}-{uuid.uuid4().hex}")


def pycomm_sockets():
    """The abstract Unix sockets of pycomm's segment servers in this network namespace:
    {path: inode}."""
    with open("/proc/net/unix") as f:
        rows = [line.split() for line in f]
    return {r[7]: r[6] for r in rows if len(r) == 8 and r[7].startswith("@pycomm-")}


def held_links(fd_dir):
    """What each descriptor listed in fd_dir (/proc/PID/fd) points at; one closed meanwhile
    (the listing's own, in this process) is left out."""
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return  # the process is gone
    for fd in fds:
        try:
            yield os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            pass


def _held_by_this_run(inodes):
    """The inodes among these held by this process or by one that carries this run's mark
    (/proc/PID/environ is a process's environment as it started: this process's own
    predates the mark; its children's have it)."""
    wanted = {f"socket:[{i}]": i for i in inodes}
    mark = f"{RUN_MARK}={os.environ[RUN_MARK]}".encode()
    ours = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        held = set(held_links(f"/proc/{pid}/fd"))
        if not held & wanted.keys():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                marked = mark in f.read().split(b"\0")
        except OSError:
            continue  # gone meanwhile
        if marked or int(pid) == os.getpid():
            ours.update(wanted[link] for link in held & wanted.keys())
    return ours


def servers_left_by_this_run(before):
    """The segment servers that appeared since `before` and are held by a process of this
    run; another run's on the same host (a second pytest, CI's native tests) are not."""
    new = {path: inode for path, inode in pycomm_sockets().items() if path not in before}
    ours = _held_by_this_run(new.values())
    return sorted(path for path, inode in new.items() if inode in ours)


@pytest.fixture(scope="session", autouse=True)
def no_segments_left_behind():
    """Nothing of any communicator may stay in /dev/shm, or listen on a socket, after the suite."""
    before, sockets_before = set(pycomm_segments()), set(pycomm_sockets())
    yield
    left = sorted(set(pycomm_segments()) - before)
    assert not left, f"shared-memory segments left behind: {left}"
    listening = servers_left_by_this_run(sockets_before)
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
