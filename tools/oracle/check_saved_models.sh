#!/usr/bin/env bash
# Round trip through transformers, on a machine that has it: for each parity fixture, vkformer
# trains two AdamW steps and saves the model as a Hugging Face folder, dumps its logits on the
# fixture batch, and tools/oracle/check_saved_model.py loads the folder with
# AutoModelForCausalLM.from_pretrained and compares transformers' logits with vkformer's.
#   tools/oracle/check_saved_models.sh VKFORMER_BINARY WORK_DIR [case ...]
set -u -o pipefail
bin="$1"
work="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  for d in "$root"/tests/fixtures/parity/*/; do cases+=("$(basename "$d")"); done
fi
status=0
for c in "${cases[@]}"; do
  f="$root/tests/fixtures/parity/$c"
  mkdir -p "$work/$c"
  "$bin" parity --model "$f" --batch "$f/batch.safetensors" --out "$work/$c/parity.safetensors" \
    --save "$work/$c/saved" > /dev/null &&
    "$bin" dump --model "$work/$c/saved" --batch "$f/batch.safetensors" --out "$work/$c/dump.safetensors" > /dev/null &&
    echo -n "$c: " &&
    python3 "$root/tools/oracle/check_saved_model.py" --model "$work/$c/saved" \
      --batch "$f/batch.safetensors" --logits "$work/$c/dump.safetensors" --tol 1e-5 | tail -1 ||
    { echo "$c: FAILED"; status=1; }
done
exit $status
