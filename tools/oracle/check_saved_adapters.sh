#!/usr/bin/env bash
# Round trip of LoRA adapters through peft, on a machine that has it: for each peft fixture,
# vkformer trains the adapter two AdamW steps and saves it (peft format), dumps the adapted logits,
# and tools/oracle/check_saved_model.py --adapter loads base + adapter with
# peft.PeftModel.from_pretrained and compares; then `vkformer lora merge` writes a merged folder
# that transformers must load with the same logits.
#   tools/oracle/check_saved_adapters.sh VKFORMER_BINARY WORK_DIR [case ...]
set -u -o pipefail
bin="$1"
work="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  for d in "$root"/tests/fixtures/peft/*/; do cases+=("$(basename "$d")"); done
fi
status=0
for c in "${cases[@]}"; do
  f="$root/tests/fixtures/peft/$c"
  mkdir -p "$work/$c"
  "$bin" parity --model "$f" --adapter "$f/adapter" --batch "$f/batch.safetensors" \
    --out "$work/$c/parity.safetensors" --save "$work/$c/adapter" > /dev/null &&
    "$bin" dump --model "$f" --adapter "$work/$c/adapter" --batch "$f/batch.safetensors" \
      --out "$work/$c/dump.safetensors" > /dev/null &&
    echo -n "$c adapter: " &&
    python3 "$root/tools/oracle/check_saved_model.py" --model "$f" --adapter "$work/$c/adapter" \
      --batch "$f/batch.safetensors" --logits "$work/$c/dump.safetensors" --tol 1e-5 | tail -1 &&
    "$bin" lora merge --model "$f" --adapter "$work/$c/adapter" --out "$work/$c/merged" > /dev/null &&
    echo -n "$c merged: " &&
    python3 "$root/tools/oracle/check_saved_model.py" --model "$work/$c/merged" \
      --batch "$f/batch.safetensors" --logits "$work/$c/dump.safetensors" --tol 1e-5 | tail -1 ||
    { echo "$c: FAILED"; status=1; }
done
exit $status
