#!/usr/bin/env python
"""Tensor-parallel inference on CPU ranks through a real client: Hugging Face transformers'
own tensor parallelism (`from_pretrained(..., distributed_config=DistributedConfig(tp_size=N))`,
DTensor underneath) on a Llama-shaped model with random weights made here (no download).

    python bench/tp_inference.py                       # 2 ranks, 3 rounds (about 9 min here:
                                                       # every launch imports transformers)
    python bench/tp_inference.py --rounds 5 --json out.json --png out.png
    python bench/tp_inference.py --layers 16 --hidden 1024 --prefill 1024

Modes, run in turns, one launch each per round (rounds give the spread):

    no_tp     one process on all N cores (N compute threads), no tensor parallelism
    gloo      TP=N, one process per rank, cores // N threads each, on gloo
    pycomm    the same on `cpu:pycomm`
    symm      the same on `cpu:pycomm`, with the row-parallel layers (o_proj, down_proj) writing
              their partial sums straight into PyTorch's symmetric memory (one buffer of the
              group, symm_mem.empty + rendezvous), so that each all-reduce reduces them where
              they lie, with no copy in or out (symmetric_row_outputs below)
    ceiling   the same on torch's fake process group (torch.testing's FakeProcessGroup):
              every collective returns at once, moves nothing and waits for nobody, so each
              rank runs its own share of the model at its own pace with the framework around
              the collectives (DTensor, the functional collectives' Python) still there. Its
              time is the slower rank's. Its logits are wrong (no partial sums are added),
              so its tokens are not compared.
    nccl      the same on NCCL (GPUs; named with --modes, never run yet: no GPU here)

Each launch measures, after a warm-up: decode, in ms per token, as (t(generate T tokens) -
t(generate 1 token)) / (T - 1), the median of 3 of each, so the prompt's prefill cancels;
and prefill, one forward of a --prefill-token prompt (large messages: hidden × tokens × 4
bytes per all-reduce), the median of 3. Each TP mode's time is its slowest rank's. Tokens
of every compared mode must equal gloo's (and the no-TP run's, reported apart: the same
sums in another order may flip a near-tie).

With --breakdown (on by default) the pycomm mode runs one more generate with pycomm's job
trace and torch.profiler on, and reports where a decode step goes on each rank
(bench/harness/decode_parts.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from harness.launch import run_in_session  # (harness puts pycomm on sys.path)

MODES = ("no_tp", "gloo", "pycomm", "symm", "ceiling")  # the default, in this order
ALL_MODES = MODES + ("nccl",)
TP_BACKENDS = {"gloo": "gloo", "pycomm": "cpu:pycomm", "symm": "cpu:pycomm", "nccl": "nccl"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2, help="tensor-parallel ranks (default 2)")
    p.add_argument("--cores", type=int, default=None,
                   help="cores the modes share (default: this process's affinity)")
    p.add_argument("--modes", default=",".join(MODES), help=f"some of {','.join(ALL_MODES)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--intermediate", type=int, default=1376)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--prompt", type=int, default=16, help="the decode runs' prompt, in tokens")
    p.add_argument("--tokens", type=int, default=32, help="tokens generated per decode run")
    p.add_argument("--prefill", type=int, default=512, help="the prefill prompt, in tokens")
    p.add_argument("--no-breakdown", dest="breakdown", action="store_false")
    p.add_argument("--timeout", type=float, default=600, help="seconds per launch")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--png", default=None, help="plot decode and prefill per mode here")
    # Internal: one rank of one launch.
    p.add_argument("--rank-job", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out-dir", default=None, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in ALL_MODES:
            p.error(f"--modes: unknown mode {m!r}; expected some of {', '.join(ALL_MODES)}")
    if args.ranks < 2:
        p.error("--ranks: tensor parallelism needs at least 2")
    if args.heads % args.ranks or args.kv_heads % args.ranks:
        p.error(f"--heads ({args.heads}) and --kv-heads ({args.kv_heads}) must divide by --ranks")
    return args


def make_model(args, path: str) -> None:
    """A Llama-shaped model with random weights, the same in every launch (seed 0). A wider
    initialisation than Llama's keeps greedy decoding from repeating one token, so that
    comparing tokens compares something."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=args.hidden, intermediate_size=args.intermediate,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads,
                      num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                      max_position_embeddings=max(2048, args.prefill + args.prompt + args.tokens),
                      initializer_range=0.08)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)


# ---------------------------------------------------------------- one rank of one launch

def init_group(mode: str, ranks: int):
    import torch.distributed as dist

    if mode == "no_tp":
        return
    if mode == "ceiling":
        from torch.testing._internal.distributed.fake_pg import FakeStore

        dist.init_process_group("fake", store=FakeStore(), rank=int(os.environ["RANK"]),
                                world_size=ranks)
        return
    if TP_BACKENDS.get(mode) == "cpu:pycomm":
        import pycomm  # noqa: F401 - registers the backend
    dist.init_process_group(TP_BACKENDS[mode])


def median_time(fn, n: int = 3) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rank_job(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    init_group(args.mode, args.ranks)
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    tp = args.mode != "no_tp"
    rank = int(os.environ.get("RANK", 0))
    extra = dict(distributed_config=DistributedConfig(tp_size=args.ranks)) if tp else {}
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32, **extra)
    model.eval()
    placed = symmetric_row_outputs(model, max(args.prefill, args.prompt + args.tokens)) \
        if args.mode == "symm" else None
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (1, args.prompt), generator=g)
    long_prompt = torch.randint(0, args.vocab, (1, args.prefill), generator=g)

    def generate(n):
        return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)

    def prefill():
        with torch.no_grad():  # as generate() runs it (not inference_mode: a user's call)
            model(long_prompt)

    out = dict(rank=rank, mode=args.mode)
    tokens = generate(args.tokens)[0, args.prompt:].tolist()  # the warm-up
    prefill()
    t_long = median_time(lambda: generate(args.tokens))
    t_one = median_time(lambda: generate(1))
    out["decode_ms"] = (t_long - t_one) / (args.tokens - 1) * 1e3
    out["prefill_ms"] = median_time(prefill) * 1e3
    out["tokens"] = tokens
    if placed is not None:
        out["placed"] = placed
    if args.profile:
        out["breakdown"] = profiled_decode(generate, args.tokens)
    with open(os.path.join(args.out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    if tp:
        import torch.distributed as dist

        if TP_BACKENDS.get(args.mode) == "cpu:pycomm":
            import pycomm

            pycomm.destroy()
        dist.destroy_process_group()


def symmetric_row_outputs(model, rows: int) -> dict:
    """The symm mode. Each row-parallel linear of the model's TP plan (each rank multiplies
    its slice of the input by its slice of the weight; an all-reduce adds the partial sums up)
    writes its partial sum into one symmetric-memory buffer of its group instead of a fresh
    tensor, so that transformers' own all-reduce of it (RowwiseParallel's inference path:
    F.linear, then dist.all_reduce) runs in place. Only the matmul's output is placed: the
    layer's TP wrapper stays around it (it calls the linear it captured when it was
    installed, which is swapped for one that writes into the buffer). One buffer serves every
    layer: each output is consumed (the residual add) before the next row-parallel layer
    runs. With gradients on, or an input larger than the buffer, the layer's own linear runs.
    Returns the count of calls that took each road, so the launcher can show the mode
    measured what it says."""
    import fnmatch

    import torch
    import torch.distributed._symmetric_memory as symm_mem

    plan = model.config.base_model_tp_plan or {}
    row_keys = [k for k, style in plan.items() if style == "rowwise"]
    layers = [m for name, m in model.named_modules()
              if any(fnmatch.fnmatch(name, "*" + k) for k in row_keys)]
    if not layers:
        raise SystemExit("tp_inference: symm: the model's TP plan names no rowwise linear")
    group = layers[0].weight.device_mesh.get_group()  # the group transformers all-reduces on
    buf = symm_mem.empty(rows * max(m.out_features for m in layers), dtype=torch.float32, device="cpu")
    symm_mem.rendezvous(buf, group)
    calls = {"symmetric": 0, "own": 0}

    def placed(module, own_linear):
        def linear(x, *rest, **kw):
            weight = module.weight  # this rank's slice, [out, in / ranks], inside the wrapper
            n = x.numel() // x.shape[-1] * weight.shape[0]
            if torch.is_grad_enabled() or rest or kw or module.bias is not None or n > buf.numel():
                calls["own"] += 1
                return own_linear(x, *rest, **kw)
            calls["symmetric"] += 1
            out = buf[:n].view(*x.shape[:-1], weight.shape[0])
            return torch.matmul(x, weight.t(), out=out)
        return linear

    for m in layers:
        wrapper = m.forward  # transformers' tp_forward (tensor_parallel.py, install_forward)
        cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or ()))
        if "original_forward" not in cells:
            raise SystemExit("tp_inference: symm: this transformers' TP wrapper is not the one the "
                             "mode was written for (5.23's install_forward)")
        cells["original_forward"].cell_contents = placed(m, cells["original_forward"].cell_contents)
    return calls


def profiled_decode(generate, tokens: int) -> dict:
    """One generate(tokens) with pycomm's job trace and torch.profiler on: the raw parts
    (the launcher lines the ranks' traces up)."""
    from torch.profiler import ProfilerActivity, profile

    from pycomm.tools import trace

    trace.start()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(tokens)
    wall = time.perf_counter() - t0
    jobs = [j._asdict() for j in trace.take()]
    trace.stop()
    from harness.decode_parts import compute_seconds

    return dict(wall_s=wall, tokens=tokens, compute_s=compute_seconds(prof.key_averages()), jobs=jobs)


# ---------------------------------------------------------------- the launcher

def launch(args, mode: str, model_dir: str, cores: int, profile: bool) -> list:
    """One launch of `mode`: its ranks' results (one for no_tp). Every rank writes its own
    file, where harness.launch.torchrun_rank_job takes rank 0's alone: no_tp runs without
    torchrun, and the ranks of ceiling's fake group cannot hand their results to rank 0."""
    out_dir = tempfile.mkdtemp(prefix=f"tp-{mode}-")
    common = [os.path.abspath(__file__), "--rank-job", "--mode", mode, "--model-dir", model_dir,
              "--out-dir", out_dir, "--ranks", str(args.ranks), "--vocab", str(args.vocab),
              "--prompt", str(args.prompt), "--tokens", str(args.tokens), "--prefill", str(args.prefill),
              "--heads", str(args.heads), "--kv-heads", str(args.kv_heads)]
    if profile:
        common.append("--profile")
    env = dict(os.environ)
    if mode == "no_tp":
        threads = cores
        cmd = [sys.executable] + common
    else:
        threads = max(1, cores // args.ranks)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={args.ranks}"] + common
    cmd += ["--threads", str(threads)]
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    rc, stdout, stderr = run_in_session(cmd, args.timeout, env=env)
    results = []
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name)) as f:
            results.append(json.load(f))
        os.remove(os.path.join(out_dir, name))
    os.rmdir(out_dir)
    expected = 1 if mode == "no_tp" else args.ranks
    if rc != 0 or len(results) != expected:
        why = "timed out" if rc is None else f"exit code {rc}"
        raise SystemExit(f"tp_inference: mode {mode} failed ({why}):\n{stderr[-3000:]}")
    return results


def breakdown_rows(results) -> list:
    from harness.decode_parts import decode_parts

    rows = []
    for r in results:
        b = r["breakdown"]
        others = [o["breakdown"]["jobs"] for o in results if o is not r]
        parts = decode_parts(b["wall_s"], b["tokens"], b["compute_s"], b["jobs"], others)
        rows.append(dict(kind="breakdown", rank=r["rank"], **parts))
    return rows


def summarize(rows, args) -> tuple:
    """Per mode: median and spread of decode and prefill over the rounds, and the lines."""
    from harness.timing import summarize as med_spread

    by_mode = {}
    for r in rows:
        if r.get("kind") == "round":
            by_mode.setdefault(r["mode"], []).append(r)
    stats = {}
    for mode, rs in by_mode.items():
        d, ds = med_spread([r["decode_ms"] for r in rs])
        p, ps = med_spread([r["prefill_ms"] for r in rs])
        stats[mode] = dict(mode=mode, decode_ms=d, decode_spread=ds, prefill_ms=p, prefill_spread=ps,
                           tokens_per_s=1e3 / d, rounds=len(rs),
                           same_tokens_as_gloo=all(r.get("same_as_gloo") for r in rs)
                           if mode not in ("ceiling", "gloo") and "gloo" in by_mode else None,
                           same_tokens_as_no_tp=all(r.get("same_as_no_tp") for r in rs)
                           if mode not in ("ceiling", "no_tp") and "no_tp" in by_mode else None)
    lines = []
    if "pycomm" in stats and "ceiling" in stats:
        s, c = stats["pycomm"], stats["ceiling"]
        lines.append(f"pycomm / ceiling: decode {s['decode_ms'] / c['decode_ms']:.2f}x, "
                     f"prefill {s['prefill_ms'] / c['prefill_ms']:.2f}x (target <= 1.05x)")
    if "symm" in stats and "pycomm" in stats:
        y, s = stats["symm"], stats["pycomm"]
        line = (f"symm / pycomm (activations in symmetric memory): decode {y['decode_ms'] / s['decode_ms']:.2f}x, "
                f"prefill {y['prefill_ms'] / s['prefill_ms']:.2f}x")
        if "ceiling" in stats:
            c = stats["ceiling"]
            line += f"; symm / ceiling: decode {y['decode_ms'] / c['decode_ms']:.2f}x, prefill {y['prefill_ms'] / c['prefill_ms']:.2f}x"
        lines.append(line)
    if "pycomm" in stats and "gloo" in stats:
        s, g = stats["pycomm"], stats["gloo"]
        lines.append(f"decode tokens/s: pycomm {s['tokens_per_s']:.1f} vs gloo {g['tokens_per_s']:.1f} "
                     f"({s['tokens_per_s'] / g['tokens_per_s']:.2f}x, target >= 2x); prefill "
                     f"{g['prefill_ms'] / s['prefill_ms']:.2f}x gloo's speed")
    if "pycomm" in stats and "no_tp" in stats:
        s, n = stats["pycomm"], stats["no_tp"]
        lines.append(f"pycomm TP={args.ranks} / one process on the same cores: decode "
                     f"{s['decode_ms'] / n['decode_ms']:.2f}x, prefill {s['prefill_ms'] / n['prefill_ms']:.2f}x")
    for mode, s in stats.items():
        if s["same_tokens_as_gloo"] is False:
            lines.append(f"WRONG: {mode}'s tokens differ from gloo's")
    return stats, lines


def print_tables(stats, breakdown, args) -> None:
    from harness.table import Column, Table

    t = Table([Column("mode", 8, "mode", align="<"), None,
               Column("decode ms/tok", 13, "decode_ms", ".2f"), Column("spread", 7, "decode_spread", ".1%"),
               Column("tok/s", 7, "tokens_per_s", ".1f"), None,
               Column(f"prefill {args.prefill} ms", 15, "prefill_ms", ".1f"),
               Column("spread", 7, "prefill_spread", ".1%"), None,
               Column("= gloo", 6, lambda r: {None: None, True: "yes", False: "NO"}[r["same_tokens_as_gloo"]]),
               Column("= no_tp", 7, lambda r: {None: None, True: "yes", False: "no"}[r["same_tokens_as_no_tp"]])])
    print(t.header())
    for mode in ALL_MODES:
        if mode in stats:
            print(t.row(stats[mode]))
    if breakdown:
        print(f"\n# where a decode step goes (pycomm, ms per token, one profiled generate of {args.tokens}"
              " tokens; the profiler's overhead lands in framework)")
        b = Table([Column("rank", 4, "rank", "d"), Column("step", 7, "step", ".2f"), None,
                   Column("compute", 8, "compute", ".2f"), Column("collective", 10, "collective", ".3f"),
                   Column("waiting", 8, "waiting", ".3f"), Column("handoff", 8, "handoff", ".3f"),
                   Column("framework", 9, "framework", ".2f"), None,
                   Column("colls/tok", 9, "collectives_per_token", ".1f")])
        print(b.header())
        for r in breakdown:
            print(b.row(r))


def plot(stats, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = [m for m in ALL_MODES if m in stats]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for ax, key, title in ((axes[0], "decode_ms", "decode, ms per token"),
                           (axes[1], "prefill_ms", "prefill, ms")):
        vals = [stats[m][key] for m in modes]
        errs = [stats[m][key] * stats[m][key.replace("_ms", "_spread")] / 2 for m in modes]
        ax.bar(modes, vals, yerr=errs, color=["#888", "#c66", "#36c", "#9c9", "#c9c"][:len(modes)])
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"# wrote {path}")


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.rank_job:
        rank_job(args)
        return
    from harness import driver

    cores = args.cores or len(os.sched_getaffinity(0))
    model_dir = tempfile.mkdtemp(prefix="tp-model-")
    make_model(args, model_dir)
    print(f"# tp_inference: transformers TP={args.ranks} on a Llama-shaped model ({args.layers} layers, "
          f"hidden {args.hidden}, {args.heads} heads / {args.kv_heads} KV, vocabulary {args.vocab}), "
          f"{cores} cores; decode: {args.tokens} tokens after {args.prompt}; prefill: {args.prefill} "
          f"tokens; {args.rounds} rounds, modes in turns", flush=True)
    rows, breakdown = [], []
    try:
        for rnd in range(args.rounds):
            tokens = {}
            for mode in args.modes:
                profile = args.breakdown and mode == "pycomm" and rnd == args.rounds - 1
                results = launch(args, mode, model_dir, cores, profile)
                row = dict(kind="round", round=rnd, mode=mode,
                           decode_ms=max(r["decode_ms"] for r in results),
                           prefill_ms=max(r["prefill_ms"] for r in results),
                           ranks_agree=all(r["tokens"] == results[0]["tokens"] for r in results))
                if mode == "symm":
                    row["placed"] = [r["placed"] for r in results]
                    if any(p["own"] or not p["symmetric"] for p in row["placed"]):
                        raise SystemExit(f"tp_inference: symm: not every row-parallel call took symmetric "
                                         f"memory on every rank: {row['placed']}")
                tokens[mode] = results[0]["tokens"]
                rows.append(row)
                if profile:
                    breakdown = breakdown_rows(results)
                print(f"# round {rnd} {mode:8} decode {row['decode_ms']:.2f} ms/token, prefill "
                      f"{row['prefill_ms']:.1f} ms", flush=True)
            for row in rows:
                if row["round"] == rnd and row["mode"] != "ceiling":
                    row["same_as_gloo"] = tokens[row["mode"]] == tokens.get("gloo") if "gloo" in tokens else None
                    row["same_as_no_tp"] = tokens[row["mode"]] == tokens.get("no_tp") if "no_tp" in tokens else None
    finally:
        import shutil

        shutil.rmtree(model_dir, ignore_errors=True)
    stats, lines = summarize(rows, args)
    print()
    print_tables(stats, breakdown, args)
    rows += [dict(kind="mode", **s) for s in stats.values()]
    rows += breakdown
    meta = dict(ranks=args.ranks, cores=cores, layers=args.layers, hidden=args.hidden,
                heads=args.heads, kv_heads=args.kv_heads, vocab=args.vocab, prompt=args.prompt,
                tokens=args.tokens, prefill=args.prefill, rounds=args.rounds)
    driver.report(args, "tp_inference", lines, rows, meta)
    if args.png:
        plot(stats, args.png)
    wrong = [r for r in rows if r.get("kind") == "round" and (r.get("same_as_gloo") is False or not r["ranks_agree"])
             and r["mode"] != "ceiling"]
    if wrong:
        raise SystemExit(f"tp_inference: tokens differ in {len(wrong)} runs")


if __name__ == "__main__":
    main()
