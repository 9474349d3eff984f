"""A communicator's settings: the one settings table (csrc/core/settings.h,
read through pycomm._C) with its defaults,
overridden by each setting's PYCOMM_* environment variable.

    from pycomm import config
    config.setting("hier_leader_max_bytes")     # 65536, or $PYCOMM_HIER_LEADER_MAX_KB KiB
    [s.env for s in config.SETTINGS]            # every variable pycomm reads for its settings
"""
from __future__ import annotations

import datetime
import math
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
    lo: float    # the least value, in the setting's unit (not the variable's); 0 for a choice
    hi: float    # the largest
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
    value = _number(s.env, raw) * s.factor
    _C.check_setting(s.name, value, s.env)  # its bounds: nan, inf, negatives and huge sizes refused
    return _CAST[s.type](value)


def setting(name: str, world: int = 2):
    """The value a communicator of `world` ranks on this host gets for setting `name`."""
    s = _BY_NAME.get(name)
    if s is None:
        raise ValueError(f"name: unknown setting {name!r}; expected one of {', '.join(_BY_NAME)}")
    value = _from_env(s)
    return _C.default_config(world, usable_cores())[name] if value is None else value


def timeout_seconds(timeout, default=None) -> float:
    """`timeout` (seconds or a timedelta), else $PYCOMM_TIMEOUT, else `default`
    (the group's own timeout), else pycomm's default. Each is checked against the
    timeout's bounds (finite, at least a millisecond): a ValueError naming
    `timeout`, the variable or the group's timeout."""
    s = _BY_NAME["timeout_s"]
    if timeout is None:
        value = _from_env(s)
        if value is not None:
            return value
        if default is None:
            return float(_C.default_config(1, 1)["timeout_s"])
        # A group's timeout longer than pycomm's longest (decades) means "no
        # deadline" for any run: the longest serves, rather than an error.
        timeout, source = min(float(default), s.hi), "the group's timeout"
    else:
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ValueError(f"timeout: expected a positive number of seconds or a timedelta, "
                             f"got {timeout!r}")
        source = "timeout"
    try:
        seconds = float(timeout)
    except OverflowError:  # an int beyond any float
        seconds = math.inf
    _C.check_setting(s.name, seconds, source)
    return seconds


def communicator_config(world: int, timeout_s: float) -> dict:
    """The settings for a communicator of `world` ranks (the timeout is resolved
    by timeout_seconds, which the caller runs first)."""
    config = _C.default_config(world, usable_cores())
    for s in SETTINGS:
        value = _from_env(s)
        if value is not None:
            config[s.name] = value
    config["timeout_s"] = timeout_s
    return config
