#!/usr/bin/env bash
# `vkformer lora merge` on peft-made adapters: the merged folder's logits (vkformer dump) equal the
# base + adapter logits within fp32 rounding, for an untied model with modules_to_save, a tied model
# whose lm_head copy forces an untied merged head, and embedding LoRA or an embedding copy on a tied
# model; unmerge restores the base; an adapter on a wrong base is a clear error.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures/peft" && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
max_diff() {  # max |a - b| over the "logits" tensors of two safetensors files (F32)
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def logits(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        e = h["logits"]
        f.seek(8 + n + e["data_offsets"][0])
        raw = f.read(e["data_offsets"][1] - e["data_offsets"][0])
    return struct.unpack(f"<{len(raw) // 4}f", raw)
a, b = logits(sys.argv[1]), logits(sys.argv[2])
assert len(a) == len(b) and len(a) > 0
print(max(abs(x - y) for x, y in zip(a, b)))
PY
}
for case in llama_save cohere_save gemma_embedding gemma_save_embed; do
  fx="$root/$case"
  log=$("$bin" lora merge --model "$fx" --adapter "$fx/adapter" --out "$out/$case" 2>&1) || fail "$case: merge exited $?: $log"
  "$bin" dump --model "$fx" --adapter "$fx/adapter" --batch "$fx/batch.safetensors" --out "$out/$case.adapter.st" >/dev/null || fail "$case: dump with adapter"
  "$bin" dump --model "$out/$case" --batch "$fx/batch.safetensors" --out "$out/$case.merged.st" >/dev/null || fail "$case: dump merged"
  "$bin" dump --model "$fx" --batch "$fx/batch.safetensors" --out "$out/$case.base.st" >/dev/null || fail "$case: dump base"
  d=$(max_diff "$out/$case.adapter.st" "$out/$case.merged.st")
  python3 -c "import sys; sys.exit(0 if $d < 1e-5 else 1)" || fail "$case: merged logits differ by $d"
  d0=$(python3 -c "print($(max_diff "$out/$case.adapter.st" "$out/$case.base.st"))")
  python3 -c "import sys; sys.exit(0 if $d0 > 1e-3 else 1)" || fail "$case: the adapter changes nothing ($d0)"
  u=$(sed -n 's/^unmerge: max .* = //p' <<<"$log")
  [ -n "$u" ] && python3 -c "import sys; sys.exit(0 if $u < 1e-6 else 1)" || fail "$case: unmerge difference '$u'"
  echo "$case: merged vs base+adapter $d (adapter effect $d0), unmerge $u"
done
grep -q '"tie_word_embeddings": false' "$out/cohere_save/config.json" || fail "cohere merged head is still tied"
# An adapter made for another model type is refused with the file named.
err=$("$bin" lora merge --model "$root/llama_lora" --adapter "$root/phi3_lora/adapter" --out "$out/x" 2>&1); rc=$?
[ $rc -ne 0 ] || fail "mismatched adapter accepted"
grep -q "adapter_model.safetensors" <<<"$err" || fail "unclear error: $err"
echo "1 passed, 0 failed"
