#!/usr/bin/env bash
# A LoRA adapter trained by `vkformer train --peft lora` (vkformer's own initialization, several
# steps, modules_to_save and embedding LoRA included) loads in peft with vkformer's logits, and its
# merged folder loads in transformers with the same logits. Run where torch/transformers/peft are.
#   tools/oracle/check_trained_adapter.sh VKFORMER_BINARY WORK_DIR [model_type ...]
set -u -o pipefail
bin="$1"
work="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
types=("$@")
[ ${#types[@]} -eq 0 ] && types=(llama gemma phi3 qwen3)
status=0
for t in "${types[@]}"; do
  w="$work/$t"
  rm -rf "$w" && mkdir -p "$w"
  cp -r "$root/tests/fixtures/parity/$t" "$w/model"
  python3 "$root/tests/common/word_tokenizer.py" "$w/model"
  python3 -c "print(' '.join(f't{3 + i % 7}' for i in range(2000)))" > "$w/train.txt"
  targets="all-linear"
  extra=(--lora-modules-to-save norm)
  [ "$t" = llama ] && targets="embed_tokens,q_proj,v_proj"
  "$bin" train --model "$w/model" --data "$w/train.txt" --out "$w/lora" --peft lora --lora-r 4 --lora-alpha 8 \
    --lora-target-modules "$targets" "${extra[@]}" --max-length 32 --batch-size 4 --max-steps 20 \
    --learning-rate 1e-2 --seed 3 > "$w/train.log" || { echo "$t: train FAILED"; tail -3 "$w/train.log"; status=1; continue; }
  "$bin" dump --model "$w/model" --adapter "$w/lora" --batch "$w/model/batch.safetensors" --out "$w/dump.safetensors" > /dev/null &&
    echo -n "$t trained adapter in peft: " &&
    python3 "$root/tools/oracle/check_saved_model.py" --model "$w/model" --adapter "$w/lora" \
      --batch "$w/model/batch.safetensors" --logits "$w/dump.safetensors" --tol 1e-5 | tail -1 &&
    "$bin" lora merge --model "$w/model" --adapter "$w/lora" --out "$w/merged" > /dev/null &&
    echo -n "$t merged in transformers: " &&
    python3 "$root/tools/oracle/check_saved_model.py" --model "$w/merged" \
      --batch "$w/model/batch.safetensors" --logits "$w/dump.safetensors" --tol 1e-5 | tail -1 ||
    { echo "$t: FAILED"; status=1; }
done
exit $status
