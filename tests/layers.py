"""The layers of the test suite: which layer each test belongs to, decided from what it does.

A developer runs one layer with `python3 -m pytest -m LAYER`; `python3 -m pytest` runs them all.

    fast         pure Python and one-process tests (a short helper subprocess included)
    ranks        tests that start several rank processes: the worlds fixtures, ProcessWorld,
                 multiprocessing, torchrun
    bench        the bench/ drivers run end to end, and bench/gpu_check.sh --dry-run
    examples     examples/ (and scripts/aarch64_smoke.py) under torchrun, as README launches them
    torch_suite  PyTorch's own distributed suite on gloo and on pycomm (tests/torch_suite/)

A test is classified where it is collected (tests/conftest.py), so a new test needs no marker:
a file of one kind is named in FILE_LAYERS; otherwise a test that reaches a process starter
through its own code, the test-suite helpers it calls or its fixtures is `ranks`, and any
other test is `fast`. A test may still name its layer with one of the markers; that wins.
"""
from __future__ import annotations

import fnmatch
import inspect
import os
import types

import torchrun_ranks

LAYERS = {
    "fast": "pure Python and one-process tests (python3 -m pytest -m fast)",
    "ranks": "tests that start several rank processes (worlds, ProcessWorld, torchrun)",
    "bench": "the bench/ drivers end to end, and bench/gpu_check.sh --dry-run",
    "examples": "examples/ under torchrun, as README launches them",
    "torch_suite": "PyTorch's own distributed suite on gloo and on pycomm",
}

# Files whose every test is of one kind, whatever its code shows: the drivers and examples
# start their ranks in a subprocess, where no code walk can see them.
FILE_LAYERS = {
    "test_torch_suite.py": "torch_suite",
    "test_examples.py": "examples",
    "test_train_3d.py": "examples",
    "test_bench_*.py": "bench",
    "test_gpu_check.py": "bench",
}

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

# What starts rank processes: these functions, and these attributes of these modules.
STARTERS = (torchrun_ranks.torchrun,)
STARTER_MODULES = ("multiprocessing", "torch.multiprocessing")
STARTER_ATTRIBUTES = frozenset({"Process", "Pool", "get_context", "spawn", "start_processes"})


def _ours(obj) -> bool:
    """Defined in a file of tests/ (its helpers and fixtures), not in pycomm or a library."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return path is not None and os.path.abspath(path).startswith(TESTS_DIR + os.sep)


def _codes(code: types.CodeType):
    """A code object and those nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def starts_processes(fn, _seen=None) -> bool:
    """Whether `fn` (a function or class of tests/) reaches a process starter through its
    own code and the functions and classes of tests/ it names, however deep."""
    seen = set() if _seen is None else _seen
    if isinstance(fn, type):
        return any(starts_processes(m, seen) for m in vars(fn).values()
                   if isinstance(m, (types.FunctionType, staticmethod, classmethod)))
    fn = getattr(fn, "__func__", fn)
    if not isinstance(fn, types.FunctionType) or fn.__code__ in seen:
        return False
    seen.add(fn.__code__)
    names = {n for code in _codes(fn.__code__) for n in code.co_names}
    scopes = [fn.__globals__]
    # `import test_backend_collectives as grids; grids.case`: names looked up in a module
    # of tests/ are searched there too.
    scopes += [vars(m) for m in (fn.__globals__.get(n) for n in names)
               if isinstance(m, types.ModuleType) and _ours(m)]
    for name in names:
        for scope in scopes:
            obj = scope.get(name)
            if obj is None:
                continue
            if any(obj is s for s in STARTERS):
                return True
            if isinstance(obj, types.ModuleType) and obj.__name__ in STARTER_MODULES \
                    and names & STARTER_ATTRIBUTES:
                return True  # mp.get_context("spawn"), torch.multiprocessing.spawn(...)
            if getattr(obj, "__name__", None) in STARTER_ATTRIBUTES \
                    and str(getattr(obj, "__module__", "")).startswith(STARTER_MODULES):
                return True  # from multiprocessing import get_context
            if isinstance(obj, (types.FunctionType, type)) and _ours(obj) \
                    and starts_processes(obj, seen):
                return True
    return False


def layer_of(item) -> str:
    """The layer of a collected pytest item."""
    named = [m.name for m in item.iter_markers() if m.name in LAYERS]
    if named:
        return named[0]
    base = os.path.basename(str(item.path))
    for pattern, layer in FILE_LAYERS.items():
        if fnmatch.fnmatch(base, pattern):
            return layer
    fixtures = [defs[-1].func for defs in item._fixtureinfo.name2fixturedefs.values() if defs]
    walked = [getattr(item, "function", None), *(f for f in fixtures if _ours(f))]
    if any(starts_processes(f) for f in walked if f is not None):
        return "ranks"
    return "fast"
