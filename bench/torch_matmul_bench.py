#!/usr/bin/env python3
"""PyTorch reference for bench/matmul_bench: the same GEMM shapes and transpose modes through
torch.matmul on the same GPU, timed with CUDA events (median of repeats after a warm-up). Prints
one Markdown row per case, to set beside vkformer's numbers in bench/RESULTS.md.

--dtype float32 (default): fp32 tensors, TF32 off (true fp32), beside `matmul_bench`.
--dtype float16: f16 tensors (cuBLAS tensor cores) with fp32 accumulation (reduced-precision
reductions off), beside `matmul_bench --precision f16`. Note that torch reads f16 operands, half
the bytes of vkformer's f32 tensors, which vkformer rounds to f16 as it stages them.

  python3 bench/torch_matmul_bench.py [--shapes MxNxK[:mode],...] [--repeats R]
                                      [--dtype float32|float16]
"""
import argparse
import statistics

import torch

DEFAULT = ("256x256x256,512x512x512,1024x1024x1024,2048x2048x2048,4096x4096x4096,"
           "8192x1536x576,8192x576x1536,8192x49152x576,8192x1536x576:nt,8192x1536x576:tn,"
           "1x49152x576:nt,8x1536x576:nt")


def parse(text):
    dims, _, mode = text.partition(":")
    m, n, k = (int(x) for x in dims.split("x"))
    return m, n, k, mode or "nn"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    dtype = getattr(torch, args.dtype)
    dev = torch.device("cuda")
    what = "fp32, TF32 off" if args.dtype == "float32" else "f16, fp32 accumulation"
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {what}")
    print("| M x N x K | mode | ms (median) | GFLOP/s |")
    print("|---|---|---:|---:|")
    for case in args.shapes.split(","):
        m, n, k, mode = parse(case)
        a = torch.randn((k, m) if mode[0] == "t" else (m, k), device=dev, dtype=dtype)
        b = torch.randn((n, k) if mode[1] == "t" else (k, n), device=dev, dtype=dtype)
        fa = (lambda x: x.t()) if mode[0] == "t" else (lambda x: x)
        fb = (lambda x: x.t()) if mode[1] == "t" else (lambda x: x)
        out = torch.empty((m, n), device=dev, dtype=dtype)
        torch.matmul(fa(a), fb(b), out=out)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeats):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.matmul(fa(a), fb(b), out=out)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        ms = statistics.median(times)
        print(f"| {m} x {n} x {k} | {mode} | {ms:.3f} | {2 * m * n * k / ms / 1e6:.0f} |")


if __name__ == "__main__":
    main()
