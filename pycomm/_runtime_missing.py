"""When torch or pycomm._C cannot load, `import pycomm` still works, so that
`pycomm doctor` can say why; everything else says why it cannot run. With torch
there (a broken or stale build), importing pycomm warns at once, and a process
group asked for pycomm fails with the reason rather than as an unknown backend."""
from __future__ import annotations

import warnings


def runtime_missing(error: ImportError):
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


def import_runtime(who: str):
    """pycomm._C, for the module `who`, which reads its tables; or an ImportError
    that names the ImportError that stopped the runtime."""
    import pycomm

    if pycomm._RUNTIME_ERROR is not None:
        raise ImportError(f"{who} reads its tables from pycomm's runtime, which did not load: "
                          f"{pycomm._RUNTIME_ERROR}") from pycomm._RUNTIME_ERROR
    return pycomm._C
