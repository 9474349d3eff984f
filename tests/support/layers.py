"""The layers of the test suite, and the rules that keep each test's written layer true.

A developer runs one layer with `python3 -m pytest -m LAYER`; `python3 -m pytest` runs them all.

    fast         pure Python and one-process tests (a short helper subprocess included)
    ranks        tests that start several rank processes: the worlds fixtures, ProcessWorld,
                 multiprocessing, torchrun
    bench        the bench/ drivers run end to end, and bench/gpu_check.sh --dry-run
    examples     examples/ (and scripts/aarch64_smoke.py) under torchrun, as README launches them
    torch_suite  PyTorch's own distributed suite on gloo and on pycomm (tests/torch_suite/)

Each test file names its layer in one line, `pytestmark = pytest.mark.LAYER`; a test of
another layer in the file carries its own marker, which wins over its class's and its file's
(the nearest written layer is the test's). A test with no layer, or two written side by side,
is a collection error naming it (tests/conftest.py). A `fast` test that starts rank processes
fails, saying to mark it `ranks` (`refuse_rank_processes`): the one check that a written layer
is true that costs nothing.
"""
from __future__ import annotations

import multiprocessing.process
import os
import re
import subprocess

import pytest

LAYERS = {
    "fast": "pure Python and one-process tests (python3 -m pytest -m fast)",
    "ranks": "tests that start several rank processes (worlds, ProcessWorld, torchrun)",
    "bench": "the bench/ drivers end to end, and bench/gpu_check.sh --dry-run",
    "examples": "examples/ under torchrun, as README launches them",
    "torch_suite": "PyTorch's own distributed suite on gloo and on pycomm",
}


class LayerError(Exception):
    """A test whose layer is not written once."""


def written_layer(item) -> str:
    """The layer written nearest to `item` (the test, then its class, then its file)."""
    for node in reversed(item.listchain()):
        names = sorted({m.name for m in node.own_markers if m.name in LAYERS})
        if len(names) > 1:
            raise LayerError(f"{item.nodeid}: two layers written on {node.nodeid or 'it'}: "
                             f"{', '.join(names)}; give it one of {', '.join(LAYERS)}")
        if names:
            return names[0]
    raise LayerError(f"{item.nodeid}: no layer; write `pytestmark = pytest.mark.LAYER` in its "
                     f"file (or mark the test), LAYER one of {', '.join(LAYERS)} "
                     "(tests/support/layers.py)")


def settle_layers(items) -> dict:
    """Leave on each test exactly its own layer's marker, so that `-m` sees that one: a test
    marked `fast` in a `ranks` file must not be selected by `-m ranks`. The layer written on
    a file or class is taken off it and put on each of its tests that writes none.
    Returns each test's layer by its node id."""
    layers = {id(item): written_layer(item) for item in items}
    for item in items:
        for node in item.listchain()[:-1]:
            node.own_markers[:] = [m for m in node.own_markers if m.name not in LAYERS]
        if item.get_closest_marker(layers[id(item)]) is None:
            item.add_marker(layers[id(item)])
    return {item.nodeid: layers[id(item)] for item in items}


def _starts_torchrun(args) -> bool:
    """A command (a list or a shell line) that runs torchrun or `-m torch.distributed.run`."""
    words = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    text = " ".join(os.fsdecode(w) if isinstance(w, (bytes, os.PathLike)) else str(w)
                    for w in words)
    return re.search(r"(^|[\s/])torchrun(\s|$)|torch\.distributed\.run", text) is not None


def refuse_rank_processes(monkeypatch, nodeid: str) -> None:
    """For a `fast` test: starting a process of multiprocessing (ProcessWorld, the worlds
    fixtures, torch.multiprocessing) or torchrun fails the test, naming its right layer.
    Failed is a BaseException, so no `except Exception` in the code under test hides it."""
    def refuse(what):
        pytest.fail(f"{nodeid} is marked fast but starts rank processes ({what}): "
                    "mark it ranks (tests/support/layers.py)", pytrace=False)

    def start(self):
        refuse(f"multiprocessing {type(self).__name__}.start")

    popen_init = subprocess.Popen.__init__

    def popen(self, args, *a, **kw):
        if _starts_torchrun(args):
            refuse("torchrun")
        popen_init(self, args, *a, **kw)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    monkeypatch.setattr(subprocess.Popen, "__init__", popen)
