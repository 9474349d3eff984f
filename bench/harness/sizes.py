"""Message sizes: "64K" on a command line, the -b/-e/-f sweep of nccl-tests, and bytes as
a person reads them."""
from __future__ import annotations

import argparse

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from '8', '64K', '1M', '1.5G' (K, M, G: powers of 1024; a trailing B is fine).
    Raises argparse.ArgumentTypeError, so it serves as an argparse type."""
    text = str(text).strip().upper().rstrip("B")
    try:
        if text and text[-1] in _UNITS:
            return int(float(text[:-1]) * _UNITS[text[-1]])
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size like 8, 64K, 1M or 1G, "
                                         f"got {text!r}") from None


def sweep(begin: int, end: int, factor: float, include=(), step: int = 1) -> list:
    """The sizes begin, begin*factor, ... up to end, each at least `step` bytes above the
    last (factor <= 1: `step` bytes apart), with the sizes of `include` that fall within
    begin..end, sorted and each once."""
    out, s = [], begin
    while s <= end:
        out.append(s)
        s = max(s + step, int(s * factor))
    out += [t for t in include if begin <= t <= end]
    return sorted(set(out))


def human(nbytes: int) -> str:
    """'64 KiB', '16 MiB', '8 B': the largest unit that divides the size."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def add_size_options(p: argparse.ArgumentParser, factor_note: str = ""):
    """nccl-tests' -b/-e/-f on a parser; check_size_options refuses a bad range after."""
    p.add_argument("-b", "--minbytes", type=parse_size, default="8", metavar="SIZE",
                   help="smallest message, in bytes: a size such as 8, 64K or 1M "
                        "(K, M, G: powers of 1024)")
    p.add_argument("-e", "--maxbytes", type=parse_size, default="256M", metavar="SIZE",
                   help="largest message, in bytes: a size such as 8, 64K or 1M")
    p.add_argument("-f", "--stepfactor", type=float, default=4.0, metavar="FACTOR",
                   help="multiply the size by this from one row to the next" + factor_note)


def check_size_options(p: argparse.ArgumentParser, args):
    if args.minbytes < 1 or args.minbytes > args.maxbytes:
        p.error("-b must be >= 1 and must not exceed -e")
