#!/usr/bin/env python3
"""transformers' generate() throughput on the shapes of bench/decode_bench (run on the H200 machine).

    python3 bench/torch_decode_bench.py [--shape 1b|135m] [--dtype float32|float16] [--batch 1,8]
                                         [--prompt 32] [--new 64]

Random-weight LlamaForCausalLM (SDPA), greedy decoding with the KV cache, min_new_tokens =
max_new_tokens so every row generates the same count. Decode tokens/s = batch * (new - 1) over the
time of a full generate minus that of a generate of one new token (the prefill). One JSON line per
batch size, with the same fields decode_bench prints.
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from torch_train_bench import SHAPES


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1b", choices=list(SHAPES))
    ap.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    cfg = LlamaConfig(attn_implementation="sdpa", **SHAPES[a.shape])
    model = LlamaForCausalLM(cfg).to("cuda", getattr(torch, a.dtype)).eval()
    n = sum(p.numel() for p in model.parameters())
    for b in [int(x) for x in a.batch.split(",")]:
        ids = torch.randint(1, cfg.vocab_size, (b, a.prompt), device="cuda")
        mask = torch.ones_like(ids)

        def gen(new):
            torch.cuda.synchronize()
            t = time.time()
            with torch.no_grad():
                model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                               do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            return time.time() - t

        gen(a.new)  # warm-up
        full = min(gen(a.new) for _ in range(2))
        prefill = min(gen(1) for _ in range(2))
        s = full - prefill
        print(json.dumps({"tool": "transformers", "shape": a.shape, "dtype": a.dtype, "batch": b, "prompt": a.prompt,
                          "new": a.new, "params": n, "decode_tokens_per_s": round(b * (a.new - 1) / s, 1),
                          "ms_per_step": round(1e3 * s / (a.new - 1), 2), "device": torch.cuda.get_device_name(),
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
