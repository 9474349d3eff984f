"""The one JSON layout every benchmark under bench/ writes, and the reader for it.

Standard library only, and no torch: the installed scaling model (``pycomm predict
--calibrate FILE``) reads benchmark files through this module, while bench/ itself is not
installed; the bench harness imports it from here.

A file is one object::

    {"meta":    {"schema": 1, "command": "python3 bench/collectives_perf.py --json ...",
                 "date": "2026-01-01T12:00:00+00:00", ...the bench's own facts...},
     "rows":    [{...one measurement...}, ...],
     "summary": [...the bench's closing lines, often empty...]}

Rows carry the shared columns named below (``size``,
``count``, ``dtype``, ``op``, ``world_size``, ``wrong``, ``pycomm_us``, ``stock_us``, ...) and
per-peer columns ``<peer>_<field>`` (``gloo_us``, ``pycomm_backend_busbw``, ...), see
:func:`column`. :func:`load` reads this object and nothing else; :func:`rows` also takes a
loaded document or a list of rows.
"""
from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

SCHEMA_VERSION = 1

# --------------------------------------------------------------------------- shared columns
# Columns every collective row carries (bench/collectives_perf.py), in nccl-tests' terms.
COLLECTIVE = "collective"   # "all_reduce", "all_gather", ... (a row without one: all_reduce)
SIZE = "size"               # bytes of the larger of a rank's input and output
COUNT = "count"             # elements, as nccl-tests counts them
DTYPE = "dtype"
OP = "op"                   # "sum", ...; "none" for collectives that do not reduce
WORLD_SIZE = "world_size"
BUSBW_FACTOR = "busbw_factor"
CEILING_US = "ceiling_us"
FRAC_OF_CEILING = "frac_of_ceiling"
PYCOMM_PEER = "pycomm_peer"  # which peer column the ratios call "pycomm"
# The columns pycomm.tools.scaling.calibrate fits (all_reduce rows only).
WRONG = "wrong"              # pycomm's wrong elements, summed over its peers and ranks
PYCOMM_US = "pycomm_us"      # pycomm's time: the direct API, else the backend group
STOCK_US = "stock_us"        # the stock backend's time (gloo on CPUs)
STOCK_BACKEND = "stock_backend"
STOCK_WRONG = "stock_wrong"
# Ratios.
GLOO_OVER_PYCOMM = "gloo_over_pycomm"
PYCOMM_OVER_MPI = "pycomm_over_mpi"
DIRECT_OVER_MPI = "direct_over_mpi"
FLAT_OVER_HIER = "flat_over_hier"
HOSTS = "hosts"

# Point-to-point rows (bench/p2p_perf.py): the collective rows' columns, one row per pattern
# and message size (size, count: one message), the pattern in the collective column; <peer>_us
# is per unit (half a round trip, one message of a window, one exchange) and busbw_factor is
# 1, or 2 for the exchange, which moves the size both ways.
P2P_LATENCY = "p2p_latency"  # ping-pong of send/recv (osu_latency)
P2P_BW = "p2p_bw"            # a window of isend -> irecv, then an ack (osu_bw)
P2P_BIBW = "p2p_bibw"        # batch_isend_irecv both ways at once (osu_bibw, window 1)
P2P = (P2P_LATENCY, P2P_BW, P2P_BIBW)
WINDOW = "window"            # messages per timed call (p2p_bw; 1 in the others)

# Training rows (bench/ddp_resnet50.py): one per (mode, world size).
MODE = "mode"
STEP_TIME_S = "step_time_s"
COMPUTE_S = "compute_s"
COMM_S = "comm_s"
SPEEDUP = "speedup"
EFFICIENCY = "efficiency"

# --------------------------------------------------------------------------- per-peer columns
# The peers' column prefixes as the benches write them.
PYCOMM_BACKEND = "pycomm_backend"     # pycomm as a torch.distributed backend group
PYCOMM_DIRECT = "pycomm_direct"       # pycomm.all_reduce
PYCOMM_NORESTORE = "pycomm_norestore"  # pycomm.all_reduce without its restore copy
PYCOMM_HIER = "pycomm_hier"           # the hierarchical backend (--hosts)
PYCOMM_C10D = "pycomm_c10d"           # the backend's own send/recv, without torch's wrapper (p2p)
GLOO = "gloo"
MPI = "mpi"
DEEPSPEED = "deepspeed"
INTRA_HOST = "intra_host"             # --hosts calibration sweeps
INTER_HOST = "inter_host"
LEADERS_HOST = "leaders_host"
PEERS = (PYCOMM_BACKEND, PYCOMM_DIRECT, PYCOMM_NORESTORE, PYCOMM_HIER, PYCOMM_C10D, GLOO, MPI,
         DEEPSPEED, INTRA_HOST, INTER_HOST, LEADERS_HOST)
# The pycomm peers whose wrong counts make up the shared `wrong` column.
PYCOMM_PEERS = (PYCOMM_BACKEND, PYCOMM_DIRECT, PYCOMM_NORESTORE, PYCOMM_HIER, PYCOMM_C10D)

# A peer's fields: time (µs, median of rounds), algbw and busbw (GB/s), spread ((max - min) /
# median of the rounds), each round's time (µs), wrong elements, and why it was dropped.
PEER_FIELDS = ("us", "algbw", "busbw", "spread", "rounds_us", "wrong", "error")


def column(peer: str, field: str) -> str:
    """The column of one peer's field: column("gloo", "us") == "gloo_us"."""
    if field not in PEER_FIELDS:
        raise ValueError(f"column: field must be one of {', '.join(PEER_FIELDS)}, got {field!r}")
    return f"{peer}_{field}"


# --------------------------------------------------------------------------- reading

def _collective_name(name: Any) -> str:
    """'allreduce', 'all-reduce', 'All_Reduce' and a missing column all mean all_reduce."""
    if name is None:
        return "all_reduce"
    text = str(name).strip().lower().replace("-", "_")
    return "all_reduce" if text == "allreduce" else text


def load(path: Union[str, os.PathLike]) -> dict:
    """{"meta": dict, "rows": [dict, ...], "summary": list} from a benchmark's JSON file
    (ValueError naming the file for anything else)."""
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e})") from None
    try:
        return document(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def document(data: Any) -> dict:
    """{"meta", "rows", "summary"} from JSON already loaded (ValueError for any other shape)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("rows"), list):
        raise ValueError('expected an object with a "rows" list, '
                         f"got {type(data).__name__}")
    unknown = sorted(set(data) - {"meta", "rows", "summary"})
    if unknown:
        raise ValueError(f"unknown top-level keys {unknown}: a bench's own facts go in meta")
    rows_ = data["rows"]
    bad = next((i for i, r in enumerate(rows_) if not isinstance(r, Mapping)), None)
    if bad is not None:
        raise ValueError(f"row {bad} is a {type(rows_[bad]).__name__}, not an object")
    meta = data.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise ValueError(f'"meta" is a {type(meta).__name__}, not an object')
    meta = dict(meta)
    summary = data.get("summary")
    if summary is None:
        summary = []
    if not isinstance(summary, list):
        raise ValueError(f'"summary" is a {type(summary).__name__}, not a list')
    return {"meta": meta, "rows": [dict(r) for r in rows_], "summary": summary}


def rows(source: Union[str, os.PathLike, Mapping, Sequence[Mapping]],
         collective: Optional[str] = None) -> list:
    """The rows of a file (path), a loaded document, or a list of rows; with `collective`
    ("all_reduce", "all_gather", ...), only that collective's rows (a row without a
    collective column is an all_reduce row)."""
    if isinstance(source, (str, os.PathLike)):
        out = load(source)["rows"]
    else:
        out = document(source if isinstance(source, Mapping) else {"rows": list(source)})["rows"]
    if collective is None:
        return out
    want = _collective_name(collective)
    return [r for r in out if _collective_name(r.get(COLLECTIVE)) == want]


# --------------------------------------------------------------------------- writing

def command_line(argv: Optional[Sequence[str]] = None) -> str:
    """The command that is running, as a user would type it: 'python3 bench/x.py --json f';
    a program name in argv[0] that is no file ('pycomm bench allreduce', as the pycomm
    command runs the benches) stands alone."""
    argv = list(sys.argv if argv is None else argv)
    words = [shlex.quote(a) for a in argv[1:]]
    if argv and not os.path.isfile(argv[0]):
        return " ".join([argv[0]] + words)
    exe = os.path.basename(sys.executable) or "python3"
    return " ".join([exe] + [shlex.quote(a) for a in argv[:1]] + words)


def write(path: Union[str, os.PathLike], rows: Iterable[Mapping],
          meta: Optional[Mapping] = None, summary: Optional[Sequence] = None,
          command: Optional[str] = None) -> dict:
    """Writes {"meta", "rows", "summary"} to `path` (atomically: a reader never sees half a
    file) and returns the document. meta gains "schema", "command" (the running command line
    unless given) and "date" (UTC, ISO 8601); the bench's own meta keys are kept."""
    doc_meta = dict(meta or {})
    doc_meta["schema"] = SCHEMA_VERSION
    doc_meta["command"] = command if command is not None else command_line()
    doc_meta["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    doc = {"meta": doc_meta, "rows": [dict(r) for r in rows], "summary": list(summary or [])}
    tmp = f"{os.fspath(path)}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return doc
