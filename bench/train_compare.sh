#!/usr/bin/env bash
# One call, both tools, same GPU: vkformer's train_bench and PyTorch's torch_train_bench.py on the
# 135M and 1B shapes (batch 8 x 1024), printing each row and the ratio vkformer / PyTorch: fp32
# against fp32, and mixed precision (vkformer --precision f16 with loss scaling) against PyTorch's
# bf16 autocast.
#   bench/train_compare.sh TRAIN_BENCH_BINARY OUT_JSONL [shape ...]
set -u -o pipefail
bin="$1"
out="$2"
shift 2
shapes=("$@")
[ ${#shapes[@]} -eq 0 ] && shapes=(135m 1b)
here="$(cd "$(dirname "$0")" && pwd)"
: > "$out"
for s in "${shapes[@]}"; do
  for p in fp32 f16; do
    "$bin" --shape "$s" --precision "$p" --batch 8 --seq 1024 --steps 10 --warmup 3 | grep '^{' >> "$out" ||
      echo "vkformer $s $p failed"
  done
  for p in fp32 bf16; do
    python3 "$here/torch_train_bench.py" --shape "$s" --precision "$p" | grep '^{' >> "$out" || echo "pytorch $s $p failed"
  done
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
get = lambda tool, s, p: next((r for r in rows if r["tool"] == tool and r["shape"] == s and r["precision"] == p), None)
for s in sorted({r["shape"] for r in rows}):
    for p in ("fp32", "bf16"):
        t = get("pytorch", s, p)
        v = get("vkformer", s, "fp32" if p == "fp32" else "f16")
        if not t:
            continue
        vk = f"{v['tokens_per_s']:.0f} tok/s, {v['step_ms']:.0f} ms, {v['peak_gib']:.1f} GiB" if v else "not run"
        ratio = f"{v['tokens_per_s'] / t['tokens_per_s']:.2f}x" if v else "-"
        print(f"{s:5s} {p:5s} vkformer {vk:36s} pytorch {t['tokens_per_s']:.0f} tok/s, {t['step_ms']:.0f} ms, "
              f"{t['peak_gib']:.1f} GiB  ratio {ratio}")
PY
