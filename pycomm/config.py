"""A communicator's settings: pycomm's defaults (csrc/core/tuning.h, the one
place that states them) overridden by PYCOMM_* environment variables."""
from __future__ import annotations

import datetime
import os

from . import _C

# Environment variable -> (setting, factor from the variable's unit to the setting's).
_ENV = {
    "PYCOMM_SPIN_US": ("spin_us", 1),
    "PYCOMM_YIELD_US": ("yield_us", 1),
    "PYCOMM_DIRECT_KB": ("slot_bytes", 1024),
    "PYCOMM_RING_BUFFER_KB": ("link_bytes", 1024),
    "PYCOMM_RING_BUFFERS": ("link_buffers", 1),
    "PYCOMM_DIRECT_MAX_KB": ("direct_max_bytes", 1024),
    "PYCOMM_RESTORE_ON_FAILURE": ("restore_on_failure", 1),
    "PYCOMM_CUDA_BUFFER_MB": ("cuda_buffer_bytes", 1 << 20),
}


def timeout_seconds(timeout, default=None) -> float:
    """`timeout` (seconds or a timedelta), else $PYCOMM_TIMEOUT, else `default`,
    else pycomm's default."""
    if timeout is None:
        raw = os.environ.get("PYCOMM_TIMEOUT")
        if raw:
            return _number("PYCOMM_TIMEOUT", raw)
        if default is not None:
            return float(default)
        return float(_C.default_config(1, 1)["timeout_s"])
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds or a timedelta, "
                         f"got {timeout!r}")
    return float(timeout)


def _number(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None


def communicator_config(world: int, timeout_s: float) -> dict:
    """The settings for a communicator of `world` ranks (PYCOMM_TIMEOUT is read
    by timeout_seconds, which the caller resolves first)."""
    config = _C.default_config(world, len(os.sched_getaffinity(0)))
    for env, (key, factor) in _ENV.items():
        raw = os.environ.get(env)
        if raw:
            value = _number(env, raw) * factor
            config[key] = bool(value) if isinstance(config[key], bool) else type(config[key])(value)
    config["timeout_s"] = timeout_s
    return config
