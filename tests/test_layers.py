"""The suite's layers (tests/layers.py): every test lands in exactly one, and a test that starts
rank processes is never in the fast layer, however it starts them."""
import fnmatch
import glob
import multiprocessing as mp
import os
from multiprocessing import get_context

import pytest

import layers
from layers import starts_processes
from process_world import ProcessWorld
from torchrun_ranks import torchrun

# These tests name process starters to check the walk, and start none: named, not walked.
pytestmark = pytest.mark.fast


def test_every_collected_test_has_exactly_one_layer(request):
    wrong = {item.nodeid: names for item in request.session.items
             if len(names := [m.name for m in item.iter_markers() if m.name in layers.LAYERS]) != 1}
    assert not wrong, f"tests without exactly one layer marker: {wrong}"


def test_every_file_pattern_names_a_test_file():
    files = [os.path.basename(p) for p in glob.glob(os.path.join(layers.TESTS_DIR, "test_*.py"))]
    stale = [p for p in layers.FILE_LAYERS if not fnmatch.filter(files, p)]
    assert not stale, f"FILE_LAYERS names no file: {stale}"
    assert set(layers.FILE_LAYERS.values()) <= set(layers.LAYERS)


def _pure(n):
    return [i * 2 for i in range(n)]


def _spawns(n):
    ctx = mp.get_context("spawn")
    return [ctx.Process(target=_pure, args=(i,)) for i in range(n)]


def _imported_by_name():
    return get_context("spawn").Process(target=_pure, args=(1,))


def _through_a_helper():
    return _pure(2) + len(_spawns(0))


def _in_a_closure():
    def get():
        return ProcessWorld(2)
    return get


class _Launcher:
    def go(self):
        return torchrun("x.py", ranks=2)


def test_the_walk_finds_every_way_to_start_processes():
    assert not starts_processes(_pure)
    assert starts_processes(_spawns)             # multiprocessing, in its own code
    assert starts_processes(_imported_by_name)   # from multiprocessing import get_context
    assert starts_processes(_through_a_helper)   # through a helper of tests/
    assert starts_processes(_in_a_closure)       # in a nested function (a fixture's get)
    assert starts_processes(_Launcher)           # a class of tests/ whose method starts them
    assert starts_processes(lambda: _Launcher().go())


def test_the_suites_own_process_starters_are_found():
    import conftest
    import test_setup

    assert starts_processes(ProcessWorld)
    assert starts_processes(conftest._world_pool)   # behind the worlds fixtures
    assert starts_processes(test_setup.run_setup)   # multiprocessing in a test file's helper
    assert not starts_processes(conftest.pycomm_segments)
