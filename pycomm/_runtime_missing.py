"""When torch or pycomm._C cannot load, the torch-free parts still import. With
torch there (a broken or stale build), importing pycomm warns at once, and a
process group asked for pycomm fails with the reason rather than as an
unknown backend."""
from __future__ import annotations

import warnings


def runtime_missing(error: ImportError):
    try:
        import torch  # noqa: F401
    except ImportError:
        return  # no torch: the torch-free parts are all there is to use

    warnings.warn(f"pycomm's runtime did not load ({error}); only its torch-free parts "
                  f"(pycomm.config, pycomm.routing, pycomm.tools.scaling) work",
                  RuntimeWarning, stacklevel=3)

    try:
        import torch.distributed as dist
    except ImportError:
        return

    def _create(*_args, **_kwargs):
        raise ImportError(f"pycomm's runtime did not load: {error}") from error

    if "pycomm" not in dist.Backend.backend_list:
        dist.Backend.register_backend("pycomm", _create, extended_api=True, devices=["cpu"])
