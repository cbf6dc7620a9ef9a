#!/usr/bin/env bash
# One call, both tools, same GPU: vkformer's decode_bench (f16 weights, the replayed and the eager
# step) and transformers' generate (torch_decode_bench.py, float16) on the 1B shape at batch 1 and
# 8, printing each row, the share of the batch-1 memory roofline and the ratio vkformer /
# transformers. The script finds torch_decode_bench.py beside itself, so run it from the checkout.
#   bench/decode_compare.sh DECODE_BENCH_BINARY OUT_JSONL [shape]
set -u -o pipefail
bin="$1"
out="$2"
shape="${3:-1b}"
here="$(cd "$(dirname "$0")" && pwd)"
: > "$out"
"$bin" --shape "$shape" --dtype f16 --modes replay,eager --batch 1,8 | grep '^{' >> "$out" ||
  echo "vkformer decode_bench failed"
python3 "$here/torch_decode_bench.py" --shape "$shape" --dtype float16 --batch 1,8 | grep '^{' >> "$out" ||
  echo "transformers generate failed"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref = {r["batch"]: r for r in rows if r["tool"] == "transformers"}
for r in rows:
    if r["tool"] != "vkformer":
        continue
    t = ref.get(r["batch"])
    roof = f", {100 * r['decode_tokens_per_s'] / r['roofline_b1_tokens_per_s']:.0f}% of the b1 roofline" if r["batch"] == 1 else ""
    vs = f"  transformers {t['decode_tokens_per_s']:.1f} tok/s  ratio {r['decode_tokens_per_s'] / t['decode_tokens_per_s']:.1f}x" if t else ""
    whole = f", {r['ms_per_step_minus_prefill']:.3f} ms timed as transformers is" if "ms_per_step_minus_prefill" in r else ""
    print(f"{r['shape']} b{r['batch']} {r['mode']:6s} vkformer {r['decode_tokens_per_s']:.1f} tok/s "
          f"({r['ms_per_step']:.3f} ms{roof}{whole}; {r['check']}){vs}")
PY
