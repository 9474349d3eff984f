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

Standard library only, and no torch (scripts/results_tables.py, which makes the tables, loads
results_schema.py by its path, so the package's __init__ never runs).
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import textwrap
from typing import List, Optional, Sequence

# The tables, one function a kind of file (beside this script, so on sys.path when it runs).
from results_tables import (ROOT, anchor, file_tables, missing, provenance, schema,
                            verdicts)

RESULTS_DIR = os.path.join(ROOT, "bench", "results")
PAGE = os.path.join(ROOT, "docs", "results.md")
README = os.path.join(ROOT, "README.md")

HEADLINE_BEGIN = "<!-- headline: written by scripts/results_page.py from bench/results; do not edit -->"
HEADLINE_END = "<!-- end of headline -->"


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
    out += file_tables(name, path, doc)
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
            text = (f"- **All-reduce, 2 CPU ranks, float32** (median, range over the rounds): "
                    f"at 64 KiB pycomm takes {verdicts.show(small['pycomm'], 1, ' µs')}")
            if small["best"] and large["best"]:
                text += (f", {verdicts.show(small['best'][1], 2, 'x')} the time of "
                         f"{small['best'][0]}, the fastest peer measured, and at 16 MiB "
                         f"{verdicts.show(large['best'][1], 2, 'x')} {large['best'][0]}'s")
            text += (f"; the memory-copy ceiling beside it takes "
                     f"{verdicts.show(small['of_ceil'])} of pycomm's time at 64 KiB and "
                     f"{verdicts.show(large['of_ceil'])} at 16 MiB")
            if small["gloo"]:
                text += f"; gloo {verdicts.show(small['gloo'], 1, 'x')} at 64 KiB"
            lines.append(f"{text} ([table]({link})).")
    path = os.path.join(results_dir, "ddp_resnet50_2ranks.json")
    if os.path.exists(path):
        doc = schema.load(path)
        by_mode = {r.get("mode"): r for r in doc["rows"] if r.get("world_size") == 2}
        got = [(m, by_mode[m].get("over_no_comm")) for m in ("backend", "ring", "stock")
               if m in by_mode and not missing(by_mode[m].get("over_no_comm"))]

        def over(mode, key):
            """'1.03x (1.01-1.05)': a ratio to a ceiling, with the rounds' range where kept."""
            r = by_mode[mode]
            lo, hi = r.get(key + "_min"), r.get(key + "_max")
            return (f"{r[key]:.2f}x" if missing(lo) or missing(hi)
                    else verdicts.show((r[key], lo, hi), 2, "x"))

        if len(got) == 3:
            lines.append(
                f"- **ResNet-50 under DDP, 2 CPU ranks**: a step takes "
                f"{over('backend', 'over_no_comm')} the step with no communication on the pycomm "
                f"backend, {over('ring', 'over_no_comm')} with `pycomm.ring_hook`, "
                f"{over('stock', 'over_no_comm')} on gloo "
                f"([table]({page_link}#{anchor('ddp_resnet50_2ranks')})).")
    path = os.path.join(results_dir, "tp_inference_2ranks.json")
    if os.path.exists(path):
        doc = schema.load(path)
        modes = {r["mode"]: r for r in doc["rows"] if r.get("kind") == "mode"}
        if all(m in modes for m in ("pycomm", "gloo", "ceiling")):
            p, g, c = modes["pycomm"], modes["gloo"], modes["ceiling"]
            same = "the same tokens" if p.get("same_tokens_as_gloo") else "OTHER tokens"
            lines.append(
                f"- **Transformers TP=2 inference, 2 CPU ranks**: decode "
                f"{p['decode_ms'] / c['decode_ms']:.2f}x and prefill "
                f"{p['prefill_ms'] / c['prefill_ms']:.2f}x the run whose collectives cost nothing, "
                f"{p['tokens_per_s'] / g['tokens_per_s']:.1f}x gloo's tokens per second, {same} "
                f"([table]({page_link}#{anchor('tp_inference_2ranks')})).")
    # Wrapped as the rest of README is (a break inside `code` reads as a space), never
    # between a number and its unit.
    def glue(line):
        return line.replace(" KiB", "\0KiB").replace(" MiB", "\0MiB")

    return [textwrap.fill(glue(line), width=96, subsequent_indent="  ", break_long_words=False,
                          break_on_hyphens=False).replace("\0", " ") for line in lines]


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
