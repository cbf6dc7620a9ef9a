#!/usr/bin/env python3
"""PyTorch training throughput on the shapes of bench/train_bench (run on the H200 machine).

    python3 bench/torch_train_bench.py [--shape 135m|1b] [--precision fp32|bf16] [--batch 8]
                                        [--seq 1024] [--steps 10] [--warmup 3]
                                        [--profile [--top 25]]

transformers' LlamaForCausalLM with SDPA attention, fused AdamW, TF32 off (so fp32 rows are true
fp32), bf16 rows under torch.autocast. Prints one JSON line per row (tokens/s, step time, peak
memory), the same fields train_bench prints, so bench/train_compare.sh can pair them.
--profile then times one more step under torch.profiler and lists its CUDA kernels by GPU time
(ms per step), to set beside `train_bench --profile`.
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3, vocab_size=49152, max_position_embeddings=2048,
                 tie_word_embeddings=True),
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=4096,
               tie_word_embeddings=True, rope_theta=500000.0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="135m", choices=list(SHAPES))
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="list one step's CUDA kernels by time")
    ap.add_argument("--top", type=int, default=25, help="kernels listed by --profile")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cfg = LlamaConfig(attn_implementation="sdpa", **SHAPES[a.shape])
    model = LlamaForCausalLM(cfg).cuda().float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.time()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = (time.time() - t) / a.steps
    n = sum(p.numel() for p in model.parameters())
    print(json.dumps({"tool": "pytorch", "shape": a.shape, "precision": a.precision, "batch": a.batch,
                      "seq": a.seq, "params": n, "step_ms": round(dt * 1e3, 2),
                      "tokens_per_s": round(a.batch * a.seq / dt, 1),
                      "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "loss": round(loss.item(), 4), "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__}), flush=True)
    if a.profile:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_time_total > 0]
        kernels.sort(key=lambda e: e.device_time_total, reverse=True)
        total = sum(e.device_time_total for e in kernels)
        print(f"profile: one {a.shape} {a.precision} step, {total / 1e3:.1f} ms of kernels")
        for e in kernels[:a.top]:
            print(f"{e.device_time_total / 1e3:9.2f} ms {e.count:6d} calls  {e.key[:110]}")


if __name__ == "__main__":
    main()
