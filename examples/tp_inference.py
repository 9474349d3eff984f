"""Tensor-parallel inference with Hugging Face transformers on CPU ranks, on pycomm.

    pip install "transformers==5.23.0" "accelerate==1.16.0"   # or: pip install ".[bench]"
    torchrun --nproc-per-node 2 examples/tp_inference.py
    torchrun --nproc-per-node 2 examples/tp_inference.py --model /path/to/a/llama/checkpoint
    torchrun --nproc-per-node 2 examples/tp_inference.py --compile   # and under torch.compile

transformers splits the model over the ranks itself (DistributedConfig(tp_size=N): each
rank holds 1/N of every attention and MLP weight, DTensor underneath); the process group's
backend carries its all-reduces. Nothing else in the program names pycomm: the one line that
does is init_process_group("cpu:pycomm"). Without --model it makes a small Llama-shaped
model with random weights (no download; rank 0 writes it and tells the others where).

Rank 0 prints the generated tokens and the decode speed; every rank checks that its tokens
equal rank 0's. bench/tp_inference.py compares the same against gloo and a ceiling.
"""
import argparse
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist

import pycomm  # noqa: F401  (registers the "pycomm" backend)


def make_tiny_llama(path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8,
                      num_key_value_heads=4, vocab_size=2048, initializer_range=0.08)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(path)


def generate(model_path, prompt, tokens):
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.float32, distributed_config=DistributedConfig(tp_size=dist.get_world_size()))
    model.generate(prompt, max_new_tokens=2, do_sample=False)  # warm-up
    t0 = time.perf_counter()
    out = model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    return out[0, prompt.shape[1]:].tolist(), (time.perf_counter() - t0) / tokens


def compiled_forward(model_path, prompt):
    """One forward of the TP model compiled by torch.compile (Inductor): the graphs Dynamo
    made (1: the collectives stayed inside) and the largest difference from eager logits."""
    from transformers import AutoModelForCausalLM
    from transformers.distributed import DistributedConfig

    model = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.float32, distributed_config=DistributedConfig(tp_size=dist.get_world_size()))
    graphs = []

    def inductor(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    with torch.no_grad():
        eager = model(prompt).logits
        compiled = torch.compile(model, backend=inductor)(prompt).logits
    return len(graphs), (compiled - eager).abs().max().item(), compiled


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="a local checkpoint (default: a tiny random Llama)")
    p.add_argument("--tokens", type=int, default=16, help="tokens to generate (default 16)")
    p.add_argument("--compile", action="store_true",
                   help="also run one forward compiled by torch.compile (Inductor) and compare it")
    args = p.parse_args()

    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("WORLD_SIZE", 1))))
    dist.init_process_group("cpu:pycomm")
    rank, world = dist.get_rank(), dist.get_world_size()
    tmp = None
    path = [args.model]
    if args.model is None:
        if rank == 0:
            tmp = tempfile.mkdtemp(prefix="tiny-llama-")
            make_tiny_llama(tmp)
            path = [tmp]
        dist.broadcast_object_list(path, src=0)
    prompt = torch.arange(1, 9).unsqueeze(0)
    ours, seconds = generate(path[0], prompt, args.tokens)

    # Every rank generated the tokens rank 0 did (each computes the whole logits).
    first = torch.tensor(ours)
    dist.broadcast(first, 0)
    same = torch.equal(first, torch.tensor(ours))
    agree = torch.tensor([int(same)])
    dist.all_reduce(agree, op=dist.ReduceOp.MIN)
    if args.compile:
        graphs, diff, logits = compiled_forward(path[0], prompt)
        first = logits.clone()
        dist.broadcast(first, 0)
        same_logits = torch.tensor([int(torch.equal(first, logits))])
        dist.all_reduce(same_logits, op=dist.ReduceOp.MIN)
        if rank == 0:
            print(f"compiled (Inductor): {graphs} graph(s), logits within {diff:.1e} of eager, "
                  f"bitwise equal on every rank: {bool(same_logits)}")
    if tmp:
        shutil.rmtree(tmp)
    if rank == 0:
        print(f"tokens: {ours}")
        print(f"{world} ranks on pycomm: {seconds * 1e3:.1f} ms per token; "
              f"tokens equal on every rank: {bool(agree)}")
    dist.destroy_process_group()
    if not same:
        raise SystemExit(f"rank {rank}: tokens differ from rank 0's")


if __name__ == "__main__":
    main()
