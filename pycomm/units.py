"""Byte sizes as people read them: the one formatter of pycomm's runtime and tools."""
from __future__ import annotations

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def human_bytes(n) -> str:
    """'64 KiB', '1.5 GiB', '8 B': the largest binary unit the size reaches, whole when it
    divides the size, else to one decimal. None (not known) reads '?'."""
    if n is None:
        return "?"
    for unit, scale in _UNITS:
        if n >= scale:
            return f"{n // scale} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"
