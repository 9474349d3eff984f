"""The tables of docs/results.md, one function a kind of bench/results/*.json file, in the
columns the bench prints; with the cells' formats and a file's provenance (when and with which
command it was made). scripts/results_page.py puts them on the page.

Standard library only, and no torch: results_schema.py and the harness's verdicts are loaded
by their paths, so the package's __init__ (which imports torch and the extension) never runs.
"""
from __future__ import annotations

import importlib.util
import math
import os
import subprocess
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name, *parts):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


schema = _load("pycomm_results_schema", "pycomm", "tools", "results_schema.py")
# How the drivers judge a time (the best peer, the ceiling, the rounds' range): the headline
# judges the same way.
verdicts = _load("bench_verdicts", "bench", "harness", "verdicts.py")

# --------------------------------------------------------------------------- numbers

def missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def fixed(digits: int) -> Callable[[Any], str]:
    return lambda v: "-" if missing(v) else f"{v:.{digits}f}"


def ratio(v: Any) -> str:
    # As the bench prints them: one decimal from 10 up, two below.
    if missing(v):
        return "-"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def integer(v: Any) -> str:
    return "-" if missing(v) else str(int(v))


def percent(v: Any, digits: int = 1) -> str:
    return "-" if missing(v) else f"{100 * v:.{digits}f}%"


def signed_percent(v: Any) -> str:
    return "-" if missing(v) else f"{100 * v:+.1f}%"


def ms(v: Any) -> str:
    return "-" if missing(v) else f"{1e3 * v:.1f}"


def ratio_range(r, key) -> str:
    """A ratio's range over the rounds, or '-'."""
    lo, hi = r.get(key + "_min"), r.get(key + "_max")
    return "-" if missing(lo) or missing(hi) else f"{lo:.3f}-{hi:.3f}"


def cell(v: Any) -> str:
    """Any value, for the generic table."""
    if missing(v):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, dict)):
        return "…"
    return str(v).replace("|", "\\|").replace("\n", " ")


def summary_lines(doc: dict) -> List[str]:
    """A file's summary lines (strings, or dicts with a "line"), as the page's bullets."""
    return [x for s in doc["summary"]
            for x in ("", f"- {s.get('line', s) if isinstance(s, dict) else s}")]


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 0) -> List[str]:
    """A Markdown table; the first `left` columns are text, the others numbers."""
    align = ["---"] * left + ["---:"] * (len(header) - left)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


# --------------------------------------------------------------------------- provenance

def _git(*args: str) -> Optional[subprocess.CompletedProcess]:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None


def own_history() -> bool:
    """Whether this checkout is the top of a git work tree (a copy of it inside another
    repository's folder, as scripts/torch_release_tests.sh makes, is not)."""
    out = _git("rev-parse", "--show-toplevel")
    return (out is not None and out.returncode == 0
            and os.path.realpath(out.stdout.strip()) == os.path.realpath(ROOT))


def git_date(path: str) -> Optional[str]:
    """The committer date of the last commit that changed `path`, or None (no git history
    of this checkout, not committed)."""
    if not own_history():
        return None
    out = _git("log", "-1", "--format=%cI", "--", os.path.relpath(path, ROOT))
    if out is None:
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def provenance(path: str, meta: dict) -> List[str]:
    date = meta.get("date")
    if date:
        when = f"- Made: {date}"
    else:
        committed = git_date(path)
        when = (f"- Made: {committed} (the date of the commit that last changed the file, "
                "which does not record its own)" if committed else "- Made: date not recorded")
    command = meta.get("command")
    how = f"- Command: `{command}`" if command else "- Command: not recorded"
    return [when, how]


def made_by(path: str, meta: dict) -> str:
    """For README: with which command, and on which day."""
    date = meta.get("date") or git_date(path)
    day = date[:10] if date else "an unrecorded day"
    command = meta.get("command")
    if command:
        return f"`{command}` on {day}"
    return (f"a run on {day} that did not record its command ([the command]"
            "(docs/performance.md#how-the-committed-files-were-made))")


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading of letters, digits, '_', '-', spaces and '()'."""
    keep = "".join(c for c in heading.lower() if c.isalnum() or c in "_- ")
    return keep.replace(" ", "-")


# --------------------------------------------------------------------------- collectives

# Ratio columns as the bench labels them.
RATIO_LABELS = {
    schema.GLOO_OVER_PYCOMM: "gloo/pyc",
    schema.PYCOMM_OVER_MPI: "pyc/mpi",
    schema.DIRECT_OVER_MPI: "dir/mpi",
    schema.FLAT_OVER_HIER: "flat/hier",
}


def collective_of(name: Any) -> str:
    """A row's collective as schema.rows() matches it: no column, or "allreduce", is all_reduce."""
    text = "all_reduce" if name is None else str(name).strip().lower().replace("-", "_")
    return "all_reduce" if text == "allreduce" else text


def peers_of(rows: Sequence[dict]) -> List[str]:
    """The peers with a time in any row, in the order the bench wrote their columns."""
    found: List[str] = []
    for r in rows:
        for key in r:
            if key.endswith("_us") and f"{key[:-3]}_busbw" in r:
                peer = key[:-3]
                if peer not in found and any(not missing(x.get(key)) for x in rows):
                    found.append(peer)
    return found


def peer_label(peer: str, meta: dict) -> str:
    """The bench's short name: the text before ' = ' in meta["peers"], else the column's."""
    said = (meta.get("peers") or {}).get(peer)
    if isinstance(said, str) and " = " in said:
        return said.split(" = ", 1)[0].strip()
    return {"pycomm_backend": "pycomm", "pycomm_direct": "direct",
            "pycomm_norestore": "norestore", "pycomm_hier": "hier"}.get(peer, peer)


def time_cell(row: dict, peer: str) -> str:
    us = row.get(schema.column(peer, "us"))
    if missing(us):
        return "-"
    spread = row.get(schema.column(peer, "spread"))
    return f"{us:.2f}" if missing(spread) else f"{us:.2f} ±{100 * spread:.0f}%"


def collective_tables(name: str, path: str, doc: dict) -> List[str]:
    meta, rows = doc["meta"], doc["rows"]
    out: List[str] = []
    order: List[str] = []
    for r in rows:
        c = collective_of(r.get(schema.COLLECTIVE))
        if c not in order:
            order.append(c)
    lines_of: Dict[str, List[str]] = {}
    for s in doc["summary"]:
        if isinstance(s, dict) and s.get("line"):
            lines_of.setdefault(collective_of(s.get("collective")), []).append(s["line"])
        elif isinstance(s, str):
            lines_of.setdefault("", []).append(s)
    for c in order:
        these = schema.rows(rows, c)
        peers = peers_of(these)
        ratios = [k for k in RATIO_LABELS if any(not missing(r.get(k)) for r in these)]
        ratios += sorted({k for r in these for k in r if "_over_" in k and k not in RATIO_LABELS
                          and not missing(r.get(k))})
        ceiling = any(not missing(r.get(schema.CEILING_US)) for r in these)
        header = ["size", "count", "type", "redop"]
        for p in peers:
            label = peer_label(p, meta)
            header += [f"{label} us", "algbw", "busbw", "#wrong"]
        header += [RATIO_LABELS.get(k, k.replace("_over_", "/")) for k in ratios]
        if ceiling:
            header += ["ceil us", "of_ceil"]
        body = []
        for r in these:
            line = [integer(r.get(schema.SIZE)), integer(r.get(schema.COUNT)),
                    cell(r.get(schema.DTYPE)), cell(r.get(schema.OP))]
            for p in peers:
                line += [time_cell(r, p), fixed(2)(r.get(schema.column(p, "algbw"))),
                         fixed(2)(r.get(schema.column(p, "busbw"))),
                         integer(r.get(schema.column(p, "wrong")))]
            line += [ratio(r.get(k)) for k in ratios]
            if ceiling:
                line += [fixed(1)(r.get(schema.CEILING_US)), fixed(2)(r.get(schema.FRAC_OF_CEILING))]
            body.append(line)
        heading = f"{c} ({name})"
        call = next((r.get("call") for r in these if r.get("call")), None)
        out += ["", f"### {heading}", ""]
        if call and call != c:
            out += [f"Called as `dist.{call}`.", ""]
        out += table(header, body, left=4)
        for line in lines_of.get(c, []):
            out += ["", f"- {line}"]
    for line in lines_of.get("", []):
        out += ["", f"- {line}"]
    return out


def collective_facts(meta: dict) -> List[str]:
    facts = []
    if meta.get("world_size") is not None:
        ranks = f"{meta['world_size']} ranks"
        if meta.get("hosts"):
            ranks += f" posing as {meta['hosts']} hosts"
        facts.append(ranks)
    for key, what in (("dtype", "{}"), ("op", "op {}"), ("algorithm", "algorithm {}"),
                      ("rounds", "{} rounds"), ("threads", "{} thread(s) per rank"),
                      ("stock_backend", "stock backend {}")):
        if meta.get(key) is not None:
            facts.append(what.format(meta[key]))
    out = ["- " + ", ".join(facts)] if facts else []
    peers = meta.get("peers") or {}
    if peers:
        out.append("- Columns: " + "; ".join(str(v) for v in peers.values()))
    for note in meta.get("notes") or []:
        out.append(f"- {note}")
    for key, what in (("size", "size"), ("busbw", "busbw"), ("ceiling", "ceiling")):
        if isinstance(meta.get(key), str):
            out.append(f"- {what}: {meta[key]}")
    return out


# --------------------------------------------------------------------------- training

def training_tables(name: str, path: str, doc: dict) -> List[str]:
    rows = doc["rows"]
    first = rows[0]
    out = []
    world = sorted({r.get("world_size") for r in rows if r.get("mode") != "baseline"
                    and r.get("world_size") is not None})
    out.append(f"- {first.get('model', '?')} under DDP on {first.get('device', '?')} "
               f"(stock backend {first.get('backend', '?')}); N = {', '.join(map(str, world))}; "
               f"{first.get('image_size', '?')}x{first.get('image_size', '?')} images, batch "
               f"{first.get('batch_size', '?')} per rank, {first.get('threads', '?')} thread(s) "
               f"per rank; "
               + (f"the modes in turns, {first['rounds']} rounds of {first.get('steps', '?')} "
                  f"timed steps each" if first.get("rounds") else
                  f"median of {first.get('steps', '?')} timed steps")
               + f" after {first.get('warmup', '?')} warm-up; the .txt beside the file has "
               "the bench's breakdown of a step, where it printed one")
    base = next((r for r in rows if r.get("mode") == "baseline"), None)
    if base is not None:
        ips = base.get("images_per_s")
        out.append(f"- 1-rank baseline (rank 0 alone, no DDP): T1 = {ms(base.get('step_time_s'))} ms "
                   f"per step, {fixed(1)(ips)} images/s")
    out.append("- /no-comm: the step over the no-comm step of the same ranks (1.0: communication "
               "costs nothing), /sync-only: over the step that all-reduces one element per bucket "
               "(only the waiting for the slowest rank); both the median over rounds in which "
               "the modes ran in turns, with the rounds' range (files made before the rounds: "
               "'-'); comm: the time a bucket was in flight per step (hook futures; "
               "'-' without a hook); exposed: the wait after backward; alone: the same buckets "
               "all-reduced with no compute; shares are of the step; ±: (slowest - fastest) / "
               "median of the timed steps")
    header = ["mode", "N", "step ms", "±", "/no-comm", "rounds", "/sync-only", "rounds",
              "images/s", "speedup", "eff", "comm ms", "exposed ms", "share", "alone ms",
              "alone share", "Amdahl f"]
    body = []
    for r in rows:
        if r.get("mode") == "baseline":
            continue
        if not r.get("available", True):
            body.append([cell(r.get("mode")), integer(r.get("world_size"))]
                        + ["-"] * (len(header) - 3) + [f"not run: {cell(r.get('reason'))}"])
            continue
        steps = r.get("step_times_s") or []
        med = r.get("step_time_s")
        spread = ((max(steps) - min(steps)) / med) if steps and med else None
        body.append([cell(r.get("mode")), integer(r.get("world_size")), ms(med),
                     percent(spread, 0), fixed(3)(r.get("over_no_comm")),
                     ratio_range(r, "over_no_comm"), fixed(3)(r.get("over_sync_only")),
                     ratio_range(r, "over_sync_only"),
                     fixed(1)(r.get("images_per_s")), fixed(3)(r.get("speedup")),
                     percent(r.get("efficiency")), ms(r.get("comm_s")),
                     ms(r.get("exposed_comm_s")), percent(r.get("comm_share")),
                     ms(r.get("comm_alone_s")), percent(r.get("comm_alone_share")),
                     fixed(3)(r.get("amdahl_f"))])
    out += [""] + table(header, body, left=1)

    modelled = [r for r in rows if isinstance(r.get("prediction"), dict)]
    if modelled:
        out += ["", "The scaling model (pycomm/tools/scaling, an alpha-beta ring with no overlap; "
                "full overlap is the lower bound) against the measured step, with alpha and B "
                "fitted to an all-reduce sweep in the same run. The last two columns take the "
                "no-comm step as the compute instead of T1.", ""]
        header = ["mode", "N", "alpha us", "B GB/s", "buckets", "MB", "model comm ms",
                  "predicted ms", "full overlap ms", "measured ms", "error",
                  "predicted ms (no-comm compute)", "error (no-comm compute)"]
        body = []
        for r in modelled:
            cal, pred = r.get("calibration") or {}, r["prediction"]
            alt = r.get("prediction_no_comm_compute") or {}
            wire = r.get("wire_bytes")
            mb = sum(wire) / 1e6 if isinstance(wire, list) and wire else None
            bw = cal.get("bandwidth_Bps")
            body.append([cell(r.get("mode")), integer(r.get("world_size")),
                         fixed(1)(None if missing(cal.get("alpha_s")) else 1e6 * cal["alpha_s"]),
                         fixed(2)(None if missing(bw) else bw / 1e9), integer(r.get("buckets")),
                         fixed(1)(mb), ms(pred.get("comm_s")), ms(pred.get("predicted_step_s")),
                         ms(pred.get("full_overlap_step_s")), ms(r.get("step_time_s")),
                         signed_percent(pred.get("relative_error")),
                         ms(alt.get("predicted_step_s")), signed_percent(alt.get("relative_error"))])
        out += table(header, body, left=1)
    return out


# --------------------------------------------------------------------------- inference

def tp_tables(name: str, path: str, doc: dict) -> List[str]:
    """bench/tp_inference.py: each mode's decode and prefill, then where a decode step goes."""
    m = doc["meta"]
    out = [f"- transformers' tensor parallelism, TP={m.get('ranks')} on {m.get('cores')} cores: a "
           f"Llama-shaped model with random weights ({m.get('layers')} layers, hidden {m.get('hidden')}, "
           f"{m.get('heads')} heads / {m.get('kv_heads')} KV, vocabulary {m.get('vocab')}); decode: "
           f"{m.get('tokens')} tokens after {m.get('prompt')}; prefill: one forward of {m.get('prefill')} "
           f"tokens; {m.get('rounds')} rounds, the modes in turns; a TP mode's time is its slowest rank's",
           "- ceiling: TP on torch's fake process group (every collective returns at once and moves "
           "nothing); symm: pycomm with the row-parallel layers' outputs in symmetric memory, "
           "reduced in place; no_tp: one process on all the cores; = gloo: the same tokens as gloo's in "
           "every round", ""]
    modes = [r for r in doc["rows"] if r.get("kind") == "mode"]
    yes = {True: "yes", False: "NO", None: "-"}
    out += table(["mode", "decode ms/token", "±", "tokens/s", "prefill ms", "±", "= gloo", "= no_tp"],
                 [[cell(r["mode"]), fixed(2)(r.get("decode_ms")), percent(r.get("decode_spread")),
                   fixed(1)(r.get("tokens_per_s")), fixed(1)(r.get("prefill_ms")),
                   percent(r.get("prefill_spread")), yes[r.get("same_tokens_as_gloo")],
                   yes[r.get("same_tokens_as_no_tp")]] for r in modes], left=1)
    parts = [r for r in doc["rows"] if r.get("kind") == "breakdown"]
    if parts:
        out += ["", "Where a decode step goes on pycomm, ms per token (one generate with pycomm's job "
                "trace and torch.profiler on; the profiler's overhead lands in framework):", ""]
        keys = ("step", "compute", "collective", "waiting", "handoff", "framework")
        out += table(["rank"] + list(keys) + ["collectives/token"],
                     [[integer(r.get("rank"))] + [fixed(3)(r.get(k)) for k in keys]
                      + [fixed(1)(r.get("collectives_per_token"))] for r in parts])
    return out + summary_lines(doc)


def per_call_tables(name: str, path: str, doc: dict) -> List[str]:
    """bench/per_call_floor.py: each road's µs per call by size, on each backend."""
    rows = doc["rows"]
    backends = sorted({r["backend"] for r in rows})
    us = {(r["backend"], r["size"], r["road"]): r for r in rows}
    out = [f"- 2 ranks, {doc['meta'].get('grad_mode')}; rank 0's median µs per call over "
           f"{doc['meta'].get('reps')} reps (± their spread); x dist: over dist.all_reduce on the "
           "same backend", ""]
    header = ["size", "road"]
    for b in backends:
        header += [f"{b} µs", "±", "x dist"]
    body = []
    for size in sorted({r["size"] for r in rows}):
        for road in dict.fromkeys(r["road"] for r in rows):
            line = [integer(size), road]
            for b in backends:
                r, d = us.get((b, size, road)), us.get((b, size, "dist"))
                line += [fixed(1)(r and r["us"]), percent(r and r["spread"], 0),
                         fixed(2)(r["us"] / d["us"] if r and d else None)]
            body.append(line)
    out += table(header, body, left=2)
    return out + summary_lines(doc)


def symm_tables(name: str, path: str, doc: dict) -> List[str]:
    """bench/symm_mem_perf.py: each road's µs per call by size, and over ordinary's."""
    rows = doc["rows"]
    us = {(r["size"], r["road"]): r for r in rows}
    roads = list(dict.fromkeys(r["road"] for r in rows))
    out = ["- all-reduce (sum, float32) on pycomm, 2 ranks: the slower rank's median µs per call "
           f"over {doc['meta'].get('reps')} reps (± their spread), the roads in turns; x ord: over "
           "dist.all_reduce of an ordinary tensor", ""]
    header = ["size"]
    for road in roads:
        header += [f"{road} µs", "±"]
    header += ["symmetric x ord", "one_shot x ord", "#wrong"]
    body = []
    for size in sorted({r["size"] for r in rows}):
        line = [integer(size)]
        for road in roads:
            r = us.get((size, road))
            line += [fixed(1)(r and r["us"]), percent(r and r["spread"], 0)]
        o = us.get((size, "ordinary"))
        for road in ("symmetric", "one_shot"):
            r = us.get((size, road))
            line.append(fixed(2)(r["us"] / o["us"] if r and o else None))
        line.append(integer(sum(us[(size, k)]["wrong"] for k in roads if (size, k) in us)))
        body.append(line)
    out += table(header, body, left=1)
    return out + summary_lines(doc)


# --------------------------------------------------------------------------- anything else

def generic_table(name: str, path: str, doc: dict) -> List[str]:
    keys: List[str] = []
    for r in doc["rows"]:
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict)):
                keys.append(k)
    body = [[cell(r.get(k)) for k in keys] for r in doc["rows"]]
    out = [""] + table(keys, body, left=len(keys))
    return out + summary_lines(doc)


def kind(doc: dict) -> str:
    rows = doc["rows"]
    if rows and all(r.get("kind") in ("round", "mode", "breakdown") for r in rows):
        return "tp_inference"
    if rows and all(r.get("kind") == "road" for r in rows):
        return "per_call"
    if rows and all(r.get("kind") == "symm_road" for r in rows):
        return "symm_mem"
    if rows and all(schema.MODE in r for r in rows):
        return "training"
    if rows and all(schema.SIZE in r and schema.COUNT in r for r in rows):
        return "collectives"
    return "other"


def file_tables(name: str, path: str, doc: dict) -> List[str]:
    """The facts and tables of one file's section, by the kind of file it is."""
    k = kind(doc)
    if k == "collectives":
        return collective_facts(doc["meta"]) + collective_tables(name, path, doc)
    by_kind = {"training": training_tables, "tp_inference": tp_tables,
               "per_call": per_call_tables, "symm_mem": symm_tables}
    return by_kind.get(k, generic_table)(name, path, doc)
