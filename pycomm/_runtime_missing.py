"""When torch or pycomm._C cannot load, `import pycomm` still works, so that
`pycomm doctor` can say why; everything else says why it cannot run. With torch
there (a broken or stale build), importing pycomm warns at once, and a process
group asked for pycomm fails with the reason rather than as an unknown backend."""
from __future__ import annotations

import warnings
from typing import Optional

# Why the runtime did not load, recorded here by runtime_missing (the package root, which
# catches the error, keeps it too as pycomm._RUNTIME_ERROR); None when it loaded. Kept here so
# that import_runtime need not reach back up to the package root for it.
_error: Optional[ImportError] = None


def runtime_missing(error: ImportError):
    global _error
    _error = error
    try:
        import torch  # noqa: F401
    except ImportError:
        return  # no torch: pycomm's install is incomplete, and doctor says so

    warnings.warn(f"pycomm's runtime did not load ({error}); only `pycomm doctor` works "
                  f"(scripts/setup.sh, or pip install --no-build-isolation ., builds it)",
                  RuntimeWarning, stacklevel=3)

    try:
        import torch.distributed as dist
    except ImportError:
        return

    def _create(*_args, **_kwargs):
        raise ImportError(f"pycomm's runtime did not load: {error}") from error

    if "pycomm" not in dist.Backend.backend_list:
        dist.Backend.register_backend("pycomm", _create, extended_api=True, devices=["cpu"])


def import_runtime(who: str, uses: str = "reads its tables from"):
    """pycomm._C, for `who`, which `uses` it; or an ImportError that names the ImportError
    that stopped the runtime ("<who> <uses> pycomm's runtime, which did not load: ...")."""
    if _error is not None:
        raise ImportError(f"{who} {uses} pycomm's runtime, which did not load: {_error}") \
            from _error
    from . import _C  # loaded by the package root before anything asks for it

    return _C
