#!/usr/bin/env python3
"""Writes docs/results.md from bench/results/*.json, and README's headline block from it.

    scripts/results_page.py           rewrite docs/results.md and README's headline block
    scripts/results_page.py --check   exit 1, naming the file, if either is not what it
                                      would write (tests/test_results_page.py runs this)

Nobody copies a measured number by hand: a bench writes its JSON (pycomm/tools/
results_schema.py: {"meta", "rows", "summary"}), this script turns every file into tables in
the columns the bench prints, and says when and with which command the file was made
(meta["date"] and meta["command"]; a file from before the bench recorded them gets the date
of the commit that last changed it, and "command not recorded").

Standard library only, and no torch: results_schema.py is loaded by its path, so the
package's __init__ (which imports torch and the extension) never runs.
"""
from __future__ import annotations

import argparse
import difflib
import importlib.util
import math
import os
import subprocess
import sys
import textwrap
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "docs", "results.md")
README = os.path.join(ROOT, "README.md")

HEADLINE_BEGIN = "<!-- headline: written by scripts/results_page.py from bench/results; do not edit -->"
HEADLINE_END = "<!-- end of headline -->"


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

def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def fixed(digits: int) -> Callable[[Any], str]:
    return lambda v: "-" if _missing(v) else f"{v:.{digits}f}"


def ratio(v: Any) -> str:
    # As the bench prints them: one decimal from 10 up, two below.
    if _missing(v):
        return "-"
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"


def integer(v: Any) -> str:
    return "-" if _missing(v) else str(int(v))


def percent(v: Any, digits: int = 1) -> str:
    return "-" if _missing(v) else f"{100 * v:.{digits}f}%"


def signed_percent(v: Any) -> str:
    return "-" if _missing(v) else f"{100 * v:+.1f}%"


def ms(v: Any) -> str:
    return "-" if _missing(v) else f"{1e3 * v:.1f}"


def cell(v: Any) -> str:
    """Any value, for the generic table."""
    if _missing(v):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, dict)):
        return "…"
    return str(v).replace("|", "\\|").replace("\n", " ")


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
                if peer not in found and any(not _missing(x.get(key)) for x in rows):
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
    if _missing(us):
        return "-"
    spread = row.get(schema.column(peer, "spread"))
    return f"{us:.2f}" if _missing(spread) else f"{us:.2f} ±{100 * spread:.0f}%"


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
        ratios = [k for k in RATIO_LABELS if any(not _missing(r.get(k)) for r in these)]
        ratios += sorted({k for r in these for k in r if "_over_" in k and k not in RATIO_LABELS
                          and not _missing(r.get(k))})
        ceiling = any(not _missing(r.get(schema.CEILING_US)) for r in these)
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
                         fixed(1)(None if _missing(cal.get("alpha_s")) else 1e6 * cal["alpha_s"]),
                         fixed(2)(None if _missing(bw) else bw / 1e9), integer(r.get("buckets")),
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
    for line in doc["summary"]:
        out += ["", f"- {line.get('line', line) if isinstance(line, dict) else line}"]
    return out


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
    for line in doc["summary"]:
        out += ["", f"- {line.get('line', line) if isinstance(line, dict) else line}"]
    return out


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
    for line in doc["summary"]:
        out += ["", f"- {line.get('line', line) if isinstance(line, dict) else line}"]
    return out


# --------------------------------------------------------------------------- anything else

def generic_table(name: str, path: str, doc: dict) -> List[str]:
    keys: List[str] = []
    for r in doc["rows"]:
        for k, v in r.items():
            if k not in keys and not isinstance(v, (list, dict)):
                keys.append(k)
    body = [[cell(r.get(k)) for k in keys] for r in doc["rows"]]
    out = [""] + table(keys, body, left=len(keys))
    for s in doc["summary"]:
        out += ["", f"- {s.get('line', s) if isinstance(s, dict) else s}"]
    return out


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


# --------------------------------------------------------------------------- the page

INTRO = """\
# Measured results

This page is written by `scripts/results_page.py` from every `bench/results/*.json`; do not
edit it by hand. Rerun the script after a bench writes a file (`--check` says whether the page
is current; `tests/test_results_page.py` runs it). Each section says when its file was made and
with which command. Times are medians (collectives: the median over rounds of the slowest
rank's per-call median); ± is the spread over rounds, (max - min) / median; algbw and busbw are
GB/s by nccl-tests' convention; #wrong counts elements that differ from the exact result.
[performance.md](performance.md) says what the numbers mean, on which host they were taken,
and which measurements have no file here."""


def render_file(path: str, page_dir: str) -> List[str]:
    """The section of one file; links are relative to the page's folder."""
    name = os.path.splitext(os.path.basename(path))[0]
    doc = schema.load(path)
    out = ["", f"## {name}", ""]
    shown = os.path.relpath(path, ROOT)
    if shown.startswith(".."):
        shown = os.path.basename(path)

    def link(p: str) -> str:
        return os.path.relpath(p, page_dir).replace(os.sep, "/")

    stem = os.path.splitext(path)[0]
    also = [f"[{ext}]({link(stem + '.' + ext)})" for ext in ("txt", "png")
            if os.path.exists(stem + "." + ext)]
    out.append(f"- File: [{shown}]({link(path)})" + (f" (beside it: {', '.join(also)})" if also else ""))
    out += provenance(path, doc["meta"])
    k = kind(doc)
    if k == "collectives":
        out += collective_facts(doc["meta"])
        out += collective_tables(name, path, doc)
    elif k == "training":
        out += training_tables(name, path, doc)
    elif k == "tp_inference":
        out += tp_tables(name, path, doc)
    elif k == "per_call":
        out += per_call_tables(name, path, doc)
    elif k == "symm_mem":
        out += symm_tables(name, path, doc)
    else:
        out += generic_table(name, path, doc)
    if os.path.exists(stem + ".png"):
        out += ["", f"![{name}]({link(stem + '.png')})"]
    return out


def result_files(results_dir: str) -> List[str]:
    return sorted(os.path.join(results_dir, f) for f in os.listdir(results_dir)
                  if f.endswith(".json"))


def render_page(paths: Sequence[str], page_dir: str) -> str:
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    out = [INTRO, "", "Files: " + ", ".join(f"[{n}](#{anchor(n)})" for n in names)]
    for p in paths:
        out += render_file(p, page_dir)
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- README's headline

def _row(doc: dict, collective: str, size: int) -> Optional[dict]:
    return next((r for r in schema.rows(doc["rows"], collective) if r.get(schema.SIZE) == size),
                None)


def headline(results_dir: str, page_link: str = "docs/results.md") -> List[str]:
    """The committed runs' ratios to what was measured beside pycomm (the fastest peer, the
    ceiling, the no-communication step), with the rounds' range, each linked to its table. A
    file or a row that is not there drops its line."""
    lines = []
    path = os.path.join(results_dir, "collectives_2ranks.json")
    if os.path.exists(path):
        doc = schema.load(path)
        rows = [_row(doc, "all_reduce", size) for size in (64 << 10, 16 << 20)]
        link = f"{page_link}#{anchor('all_reduce (collectives_2ranks)')}"
        judged = [verdicts.judge(r, r.get(schema.PYCOMM_PEER) or schema.PYCOMM_BACKEND)
                  for r in rows if r]
        if len(judged) == 2 and all(j["pycomm"] and j["of_ceil"] for j in judged):
            small, large = judged
            text = (f"- **All-reduce, 2 CPU ranks, float32**, median (range over the rounds): "
                    f"at 64 KiB pycomm takes {verdicts.show(small['pycomm'], 1, ' µs')}")
            if small["best"] and large["best"]:
                text += (f", {verdicts.show(small['best'][1], 2, 'x')} the time of "
                         f"{small['best'][0]}, the fastest peer measured, and at 16 MiB "
                         f"{verdicts.show(large['best'][1], 2, 'x')} {large['best'][0]}'s")
            text += (f"; the memory-copy ceiling measured beside it takes "
                     f"{verdicts.show(small['of_ceil'])} of pycomm's time at 64 KiB and "
                     f"{verdicts.show(large['of_ceil'])} at 16 MiB")
            if small["gloo"]:
                text += (f". gloo's time swings between rounds and runs: at 64 KiB it took "
                         f"{verdicts.show(small['gloo'], 1, 'x')} pycomm's")
            lines.append(f"{text} ([table]({link})). Made by {made_by(path, doc['meta'])}.")
    path = os.path.join(results_dir, "ddp_resnet50_2ranks.json")
    if os.path.exists(path):
        doc = schema.load(path)
        by_mode = {r.get("mode"): r for r in doc["rows"] if r.get("world_size") == 2}
        got = [(m, by_mode[m].get("over_no_comm")) for m in ("backend", "ring", "stock")
               if m in by_mode and not _missing(by_mode[m].get("over_no_comm"))]

        def over(mode, key):
            """'1.03x (1.01-1.05)': a ratio to a ceiling, with the rounds' range where kept."""
            r = by_mode[mode]
            lo, hi = r.get(key + "_min"), r.get(key + "_max")
            return (f"{r[key]:.2f}x" if _missing(lo) or _missing(hi)
                    else verdicts.show((r[key], lo, hi), 2, "x"))

        if len(got) == 3:
            waits = [by_mode[m].get("over_sync_only") for m in ("backend", "ring")]
            against_sync = ("" if any(_missing(w) for w in waits) else
                            f"; against the step that only waits for the slowest rank "
                            f"(one element per bucket), {over('backend', 'over_sync_only')} and "
                            f"{over('ring', 'over_sync_only')}")
            lines.append(
                f"- **ResNet-50 under DDP, 2 CPU ranks**, median (range over the rounds): "
                f"against the same step with no communication at all, a step takes "
                f"{over('backend', 'over_no_comm')} on the pycomm backend, "
                f"{over('ring', 'over_no_comm')} with `pycomm.ring_hook`, and "
                f"{over('stock', 'over_no_comm')} on gloo{against_sync} "
                f"([table]({page_link}#{anchor('ddp_resnet50_2ranks')})). Made by "
                f"{made_by(path, doc['meta'])}.")
    path = os.path.join(results_dir, "tp_inference_2ranks.json")
    if os.path.exists(path):
        doc = schema.load(path)
        modes = {r["mode"]: r for r in doc["rows"] if r.get("kind") == "mode"}
        if all(m in modes for m in ("pycomm", "gloo", "ceiling")):
            p, g, c = modes["pycomm"], modes["gloo"], modes["ceiling"]
            same = "the same tokens as gloo" if p.get("same_tokens_as_gloo") else "OTHER tokens than gloo"
            y = modes.get("symm")
            symm = ("" if y is None else
                    f"; with the activations the all-reduces take in symmetric memory, decode takes "
                    f"{y['decode_ms'] / c['decode_ms']:.2f}x and prefill {y['prefill_ms'] / c['prefill_ms']:.2f}x"
                    + ("" if y.get("same_tokens_as_gloo") else " (OTHER tokens than gloo)"))
            lines.append(
                f"- **Tensor-parallel inference, transformers TP=2 on 2 CPU ranks** (a Llama-shaped "
                f"model), median over the rounds: decode takes {p['decode_ms'] / c['decode_ms']:.2f}x "
                f"and prefill {p['prefill_ms'] / c['prefill_ms']:.2f}x the time of the same TP run "
                f"whose collectives cost nothing; decode runs {p['tokens_per_s'] / g['tokens_per_s']:.1f}x "
                f"gloo's tokens per second, with {same}{symm} "
                f"([table]({page_link}#{anchor('tp_inference_2ranks')})). Made by "
                f"{made_by(path, doc['meta'])}.")
    # Wrapped as the rest of README is (a break inside `code` reads as a space), never
    # between a number and its unit.
    def glue(line):
        return line.replace(" KiB", "\0KiB").replace(" MiB", "\0MiB")

    return [textwrap.fill(glue(line), width=96, subsequent_indent="  ", break_long_words=False,
                          break_on_hyphens=False).replace("\0", " ") for line in lines]


def ratio_range(r, key) -> str:
    """A ratio's range over the rounds, or '-'."""
    lo, hi = r.get(key + "_min"), r.get(key + "_max")
    return "-" if _missing(lo) or _missing(hi) else f"{lo:.3f}-{hi:.3f}"


def with_headline(readme: str, lines: Sequence[str]) -> str:
    begin, end = readme.find(HEADLINE_BEGIN), readme.find(HEADLINE_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{README}: no headline block (a line '{HEADLINE_BEGIN}', then "
                         f"'{HEADLINE_END}')")
    block = "\n".join([HEADLINE_BEGIN, *lines, HEADLINE_END])
    return readme[:begin] + block + readme[end + len(HEADLINE_END):]


# --------------------------------------------------------------------------- main

def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a file differs from what would be written")
    p.add_argument("--results", default=RESULTS_DIR, help="the folder of JSON files")
    p.add_argument("--out", default=PAGE, help="the page to write")
    p.add_argument("--readme", default=README,
                   help="the README whose headline block to write ('' for none)")
    a = p.parse_args(argv)

    wanted = {a.out: render_page(result_files(a.results), os.path.dirname(os.path.abspath(a.out)))}
    if a.readme:
        with open(a.readme) as f:
            wanted[a.readme] = with_headline(f.read(), headline(a.results))
    stale = []
    for path, text in wanted.items():
        try:
            with open(path) as f:
                now = f.read()
        except FileNotFoundError:
            now = None
        if now == text:
            continue
        if a.check:
            stale.append(path)
            diff = difflib.unified_diff((now or "").splitlines(), text.splitlines(),
                                        path, "generated", lineterm="", n=1)
            print("\n".join(list(diff)[:40]), file=sys.stderr)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")
    if stale:
        print("not current: " + ", ".join(os.path.relpath(s, ROOT) for s in stale)
              + " (run scripts/results_page.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
