"""pycomm's errors, and how to catch them after DDP re-raised them.

    try:
        loss.backward()                      # DDP with pycomm.ring_hook or the "pycomm" backend
    except RuntimeError as e:
        if not pycomm.CommError.matches(e):  # CommTimeout, PeerDied, CollectiveMismatch too
            raise
        ...                                  # a peer died or stalled, or the ranks disagreed

The classes are made by the native module (pycomm._C), so that its C++ errors
keep their type on the direct API (``pycomm.all_reduce``, ``Work.wait()``, and
``torch.distributed`` calls on the "pycomm" backend made from Python). DDP
re-raises an error of a comm hook or of a backend as its own ``RuntimeError``
that carries only the text, so ``except pycomm.CommError`` misses it there. So
that text begins with the class's name and names the rank (``pycomm.CommTimeout:
rank 1: all_reduce #8: Timed out after 2 s, ...``; csrc/core/errors.h), and
``matches`` reads it. A typed exception's own message leaves the name out:
Python prints it in front already.
"""
from __future__ import annotations

from . import _C

__all__ = ["CollectiveMismatch", "CommError", "CommTimeout", "PeerDied"]

CommError = _C.CommError
CommTimeout = _C.CommTimeout
CollectiveMismatch = _C.CollectiveMismatch
# A peer's process exited: raised at once, not at the timeout. A subclass of
# CommTimeout (and so of CommError), so `except pycomm.CommTimeout` written
# before it existed still catches a dead peer.
PeerDied = _C.PeerDied

_CLASSES = (CommError, CommTimeout, CollectiveMismatch, PeerDied)


def _prefix(cls) -> str:
    return f"pycomm.{cls.__name__}: "


def _matches(cls, exc: BaseException) -> bool:
    """Whether ``exc`` is this pycomm error, or a RuntimeError that carries one.

    True for an instance of ``cls``, and for a RuntimeError (DDP's, or
    DistBackendError) whose message begins with the name of ``cls`` or of one of
    its subclasses, on its first line or after one of torch's own prefixes on a
    later line. Follows ``__cause__`` and ``__context__``.
    """
    prefixes = tuple(_prefix(k) for k in _CLASSES if issubclass(k, cls))
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, cls):
            return True
        if isinstance(exc, RuntimeError):
            for line in str(exc).splitlines():
                line = line.strip()
                # torch puts its own words before the text on some paths
                # ("RuntimeError: pycomm.CommTimeout: ..."); read past them.
                if any(line.startswith(p) or f": {p}" in line for p in prefixes):
                    return True
        exc = exc.__cause__ or exc.__context__
    return False


def _install() -> None:
    for cls in _CLASSES:
        cls.__module__ = "pycomm"
        cls.matches = classmethod(_matches)


_install()
