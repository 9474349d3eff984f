"""The suite's layers (tests/support/layers.py): every test has exactly one, written in its
file; a test with none or two is a collection error naming it; a test's own layer wins over its
file's, for -m too; and a test written `fast` that starts rank processes fails, saying to mark
it `ranks`."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from support import layers
from support.layers import _starts_torchrun

pytestmark = pytest.mark.fast

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def test_every_collected_test_has_exactly_one_layer(request):
    wrong = {item.nodeid: names for item in request.session.items
             if len(names := [m.name for m in item.iter_markers() if m.name in layers.LAYERS]) != 1}
    assert not wrong, f"tests without exactly one layer marker: {wrong}"


def test_torchrun_is_told_from_other_commands():
    assert _starts_torchrun([sys.executable, "-m", "torch.distributed.run", "x.py"])
    assert _starts_torchrun("torchrun --nproc_per_node 2 x.py")
    assert _starts_torchrun(["/usr/bin/torchrun", "x.py"])
    assert not _starts_torchrun([sys.executable, "-c", "print(1)"])
    assert not _starts_torchrun(["python3", "tests/support/torchrun_ranks.py"])


# A small suite under the real conftest: each file breaks one rule, or keeps it.
SUITE = {
    "test_none.py": """
        def test_a():
            pass
    """,
    "test_two.py": """
        import pytest
        pytestmark = [pytest.mark.fast, pytest.mark.ranks]
        def test_b():
            pass
    """,
    "test_own.py": """
        import pytest
        pytestmark = pytest.mark.ranks
        def test_of_the_file():
            pass
        @pytest.mark.fast
        def test_of_its_own():
            pass
    """,
    "test_starts.py": """
        import multiprocessing as mp
        import subprocess
        import sys
        import pytest
        pytestmark = pytest.mark.fast
        def test_spawns():
            mp.get_context("spawn").Process(target=print).start()
        def test_torchrun():
            subprocess.run([sys.executable, "-m", "torch.distributed.run", "--help"])
        def test_a_helper_subprocess():
            subprocess.run([sys.executable, "-c", "pass"], check=True)
        @pytest.mark.ranks
        def test_marked_ranks():
            p = mp.get_context("spawn").Process(target=print)
            p.start()
            p.join()
    """,
}


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("layers")
    shutil.copy(os.path.join(TESTS_DIR, "conftest.py"), root / "conftest.py")
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text))

    def pytest_run(*args):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS_DIR, os.environ.get(
            "PYTHONPATH", "")]))
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                               "-p", "no:timeout", "-q", "--rootdir", str(root), *args],
                              cwd=root, env=env, capture_output=True, text=True, timeout=120)
    return pytest_run


def test_a_test_with_no_layer_or_two_is_a_collection_error_naming_it(small_suite):
    out = small_suite("--collect-only", "test_none.py", "test_two.py")
    assert out.returncode != 0, out.stdout
    assert "ERROR collecting test_none.py" in out.stdout, out.stdout
    assert "test_none.py::test_a: no layer" in out.stdout, out.stdout
    assert "ERROR collecting test_two.py" in out.stdout, out.stdout
    assert "test_two.py::test_b: two layers" in out.stdout, out.stdout


def test_a_tests_own_layer_wins_over_its_files(small_suite):
    for layer, test in (("fast", "test_of_its_own"), ("ranks", "test_of_the_file")):
        out = small_suite("--collect-only", "-m", layer, "test_own.py")
        assert out.returncode == 0, out.stdout + out.stderr
        assert [line for line in out.stdout.splitlines() if "::" in line] == \
            [f"test_own.py::{test}"], out.stdout


def test_a_fast_test_that_starts_rank_processes_fails_saying_to_mark_it_ranks(small_suite):
    out = small_suite("-rA", "test_starts.py")
    for test, what in (("test_spawns", "multiprocessing SpawnProcess.start"),
                       ("test_torchrun", "torchrun")):
        assert f"FAILED test_starts.py::{test}" in out.stdout, out.stdout
        assert f"test_starts.py::{test} is marked fast but starts rank processes ({what}): " \
               "mark it ranks" in out.stdout, out.stdout
    assert "PASSED test_starts.py::test_a_helper_subprocess" in out.stdout, out.stdout
    assert "PASSED test_starts.py::test_marked_ranks" in out.stdout, out.stdout
