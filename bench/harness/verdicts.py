"""How the drivers and the results page judge a time: against what was measured in the same
run (the best peer, the ceiling), with the rounds' spread, never against one median alone.

A ratio of two columns is taken round by round where both were measured in the same turns
(gloo, DeepSpeed, the ceiling, the torch floor: a slow spell touches both alike), giving the
median of the rounds' ratios and their range. Open MPI is measured in the same turns where
its ranks are the bench's own (a row's `mpi_in_turns` is true: one mpirun launch); where it
ran in a launch of its own, its rounds pair with none of the others': its ratio is the ratio
of the medians, and its range the widest the rounds allow (fastest over slowest, slowest
over fastest).

torch's own per-call cost is measured as a column of its own (`torch_floor`: the same dist.*
calls on a backend that completes at once), in the same turns as pycomm. pycomm's time minus
it is the backend's own share, and "pycomm within Open MPI's time plus torch's cost" is
(pycomm - floor) / mpi <= 1, the difference taken round by round.

A target "at most x" is met when the whole range is at most x, missed when the whole range
is above it, and otherwise within the spread: the rounds cannot tell ("at least x" alike).

gloo's ratio is printed beside the verdicts and judges nothing: gloo's own time swings
several-fold between runs and machines, so a ratio to gloo says more about gloo's day than
about pycomm.

A row is in pycomm.tools.results_schema's layout (<peer>_us, <peer>_rounds_us, ceiling_us).
Standard library only, and no import of pycomm: scripts/results_page.py loads this file by
its path to judge README's headline as the drivers judge their summaries."""
from __future__ import annotations

import statistics
from typing import Optional, Sequence, Tuple

Spread = Tuple[float, float, float]  # (median, lowest, highest)

# The peers that can be the best peer: (column prefix, name, measured in the same turns as
# pycomm). gloo is not one (see the module doc). Open MPI's rounds pair with pycomm's where
# the row says so (<prefix>_in_turns).
BEST_PEERS = (("mpi", "Open MPI", False), ("deepspeed", "DeepSpeed", True))
# The column of torch's own per-call cost (bench/harness/peers/torch_floor.py).
FLOOR = "torch_floor"


def ratio(num: Sequence[float], den: Sequence[float], paired: bool) -> Optional[Spread]:
    """num / den over the rounds (see the module doc); None when either has no round."""
    num, den = [x for x in num if x], [x for x in den if x]
    if not num or not den:
        return None
    if paired and len(num) == len(den):
        each = [a / b for a, b in zip(num, den)]
        return statistics.median(each), min(each), max(each)
    return (statistics.median(num) / statistics.median(den), min(num) / max(den),
            max(num) / min(den))


def spread(rounds: Sequence[float]) -> Optional[Spread]:
    """A column's own rounds: (median, fastest, slowest)."""
    rounds = [x for x in rounds if x is not None]
    return (statistics.median(rounds), min(rounds), max(rounds)) if rounds else None


def verdict(r: Spread, at_most: Optional[float] = None,
            at_least: Optional[float] = None) -> Optional[bool]:
    """True (met), False (missed) or None (the rounds straddle the target): a target of at
    most `at_most`, or of at least `at_least`."""
    if at_least is not None:
        return verdict((-r[0], -r[2], -r[1]), at_most=-at_least)
    if r[2] <= at_most:
        return True
    if r[1] > at_most:
        return False
    return None


def verdict_text(r: Spread, at_most: Optional[float] = None,
                 at_least: Optional[float] = None) -> str:
    return {True: "met", False: "MISSED",
            None: "within the rounds' spread"}[verdict(r, at_most, at_least)]


def show(r: Optional[Spread], digits: int = 2, unit: str = "") -> str:
    """'0.86x (0.85-0.87)': the median and the range; '-' for None."""
    if r is None:
        return "-"
    med, lo, hi = (f"{x:.{digits}f}" for x in r)
    return f"{med}{unit} ({lo}-{hi})"


def _rounds(row: dict, peer: str) -> list:
    return row.get(f"{peer}_rounds_us") or []


def in_turns(row: dict, prefix: str, paired: bool = False) -> bool:
    """Whether a peer's rounds pair with pycomm's: always for one measured in the same turns
    (`paired`), and for Open MPI where the row says its launch was the bench's own."""
    return paired or bool(row.get(f"{prefix}_in_turns"))


def net_ratio(row: dict, primary: str, den: str = "mpi",
              floor: str = FLOOR) -> Optional[Spread]:
    """(pycomm - floor) / den over the rounds: pycomm's time less torch's own per-call cost,
    round by round (both are measured in the same turns), over the `den` column (paired
    where its rounds are in the same turns too); None where a column is missing."""
    mine, low = _rounds(row, primary), _rounds(row, floor)
    if not mine or len(mine) != len(low) or not row.get(f"{den}_us"):
        return None
    return ratio([a - b for a, b in zip(mine, low)], _rounds(row, den), in_turns(row, den))


def judge(row: dict, primary: str, at_most: float = 1.0) -> dict:
    """One row judged for its pycomm column `primary`: "pycomm", its rounds (us, Spread);
    "best", None or (the best peer's name, pycomm / it (Spread), verdict against at_most);
    "of_ceil", the ceiling / pycomm over pycomm's rounds; "gloo", gloo / pycomm round by
    round; "floor", torch's per-call cost (us, Spread); "net_mpi", (pycomm - floor) / Open
    MPI (net_ratio) (None where a column is missing)."""
    mine = _rounds(row, primary)
    present = [p for p in BEST_PEERS if row.get(f"{p[0]}_us")]
    best = None
    if present:
        key, name, paired = min(present, key=lambda p: row[f"{p[0]}_us"])
        r = ratio(mine, _rounds(row, key), in_turns(row, key, paired))
        best = None if r is None else (name, r, verdict(r, at_most))
    return dict(pycomm=spread(mine), best=best,
                of_ceil=ratio([row.get("ceiling_us")], mine, paired=False),
                gloo=ratio(_rounds(row, "gloo"), mine, paired=True),
                floor=spread(_rounds(row, FLOOR)), net_mpi=net_ratio(row, primary))
