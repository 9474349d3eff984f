"""A communicator's settings: the one settings table (csrc/core/settings.h,
read through pycomm._C) with its defaults,
overridden by each setting's PYCOMM_* environment variable.

    from pycomm import config
    config.setting("hier_leader_max_bytes")     # 65536, or $PYCOMM_HIER_LEADER_MAX_KB KiB
    [s.env for s in config.SETTINGS]            # every variable pycomm reads for its settings
"""
from __future__ import annotations

import datetime
import os
from typing import NamedTuple

from ._runtime_missing import import_runtime
from .host_cpus import usable_cores

_C = import_runtime("pycomm.config")


class Setting(NamedTuple):
    name: str    # the config dict's key
    field: str   # where it lives in the C++ CommConfig
    env: str     # the environment variable that overrides it
    unit: str    # that variable's unit
    factor: int  # from the variable's unit to the setting's
    type: str    # "int", "float", "bool", or "choice" (one of the unit's "a/b/c")
    why: str


SETTINGS = tuple(Setting(**row) for row in _C.settings())
_BY_NAME = {s.name: s for s in SETTINGS}
_CAST = {"int": int, "float": float, "bool": bool}


def _number(name: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {raw!r}") from None


def _from_env(s: Setting):
    """The value $s.env gives the setting, or None when it is unset."""
    raw = os.environ.get(s.env)
    if not raw:
        return None
    if s.type == "choice":
        choices = s.unit.split("/")
        if raw not in choices:
            raise ValueError(f"{s.env}: expected one of {', '.join(choices)}, got {raw!r}")
        return raw
    value = _number(s.env, raw)
    if value < 0:
        raise ValueError(f"{s.env}: expected a number of 0 or more, got {raw!r}")
    return _CAST[s.type](value * s.factor)


def setting(name: str, world: int = 2):
    """The value a communicator of `world` ranks on this host gets for setting `name`."""
    s = _BY_NAME.get(name)
    if s is None:
        raise ValueError(f"name: unknown setting {name!r}; expected one of {', '.join(_BY_NAME)}")
    value = _from_env(s)
    return _C.default_config(world, usable_cores())[name] if value is None else value


def timeout_seconds(timeout, default=None) -> float:
    """`timeout` (seconds or a timedelta), else $PYCOMM_TIMEOUT, else `default`,
    else pycomm's default."""
    if timeout is None:
        value = _from_env(_BY_NAME["timeout_s"])
        if value is not None:
            return value
        if default is not None:
            return float(default)
        return float(_C.default_config(1, 1)["timeout_s"])
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout: expected a positive number of seconds or a timedelta, "
                         f"got {timeout!r}")
    return float(timeout)


def communicator_config(world: int, timeout_s: float) -> dict:
    """The settings for a communicator of `world` ranks (the timeout is resolved
    by timeout_seconds, which the caller runs first)."""
    config = _C.default_config(world, usable_cores())
    for s in SETTINGS:
        value = _from_env(s)
        if value is not None:
            config[s.name] = value
    if config["team_threads"] < 1:  # a team has its caller at least
        raise ValueError(f"PYCOMM_THREADS: expected 1 or more threads, got "
                         f"{os.environ.get('PYCOMM_THREADS')!r}")
    config["timeout_s"] = timeout_s
    return config
