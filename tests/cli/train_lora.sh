#!/usr/bin/env bash
# `vkformer train --peft lora` end to end on a tiny Llama (a parity fixture) with a WordLevel
# tokenizer: the loss falls, the output is a peft adapter folder (no model copy) that generate and
# parity load and that continues the learned pattern, the base model folder is untouched,
# --peft-budget picks the rank worked out by hand and fails clearly when rank 1 does not fit,
# checkpoints resume bit for bit (with the LoRA options repeated, or taken from the checkpoint),
# --adapter continues an adapter or (without --peft) merges it, and misuse gives clear errors.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$root/parity/llama" "$work/model"
python3 "$root/../common/word_tokenizer.py" "$work/model"
cp -r "$work/model" "$work/model.orig"
python3 - "$work" <<'PY'
import sys
w = sys.argv[1]
with open(f"{w}/train.txt", "w") as f:  # a cycle t3 ... t9: fully predictable after one token
    f.write(" ".join(f"t{3 + i % 7}" for i in range(2000)))
PY
# (Its frozen head and final norm bound the logits, so the loss levels off near 1.5 rather than 0.)
# The tiny Llama: hidden 16, q 24 wide, k/v 12, MLP 24, 2 layers, 6224 parameters. all-linear at
# r 8: 2 layers x 8 x (q 40 + k 28 + v 28 + o 40 + gate 40 + up 40 + down 40) = 4096 trainable.
log=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/lora" --peft lora --lora-r 8 \
      --lora-alpha 16 --lora-target-modules all-linear --max-length 32 --batch-size 4 --max-steps 40 \
      --learning-rate 2e-2 --warmup-steps 2 --eval-fraction 0.1 --logging-steps 10 --seed 7) ||
  fail "LoRA train exited $?: $log"
grep -q "trainable params: 4096 || all params: 10320 || trainable%: 39.6899" <<<"$log" || fail "trainable count: $log"
# The memory plan of a LoRA run (base + adapter tensors, the adapter's extra activations) bounds the
# measured peak of live tensors, within 1.2x.
python3 - "$log" <<'PY' || fail "LoRA memory plan vs measured peak: $(grep '^memory' <<<"$log")"
import re, sys
units = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
m = re.search(r"memory: peak ([\d.]+) (\w+) of live tensors \(planned ([\d.]+) (\w+)\)", sys.argv[1])
peak, plan = float(m[1]) * units[m[2]], float(m[3]) * units[m[4]]
sys.exit(0 if peak <= plan <= 1.2 * peak else 1)
PY
first=$(grep -o "^step 1/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
last=$(grep -o "^step 40/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
[ -n "$first" ] && [ -n "$last" ] || fail "missing log lines: $log"
python3 -c "import sys; f,l=map(float,sys.argv[1:]); sys.exit(0 if l < 0.4*f else 1)" "$first" "$last" ||
  fail "LoRA loss did not fall enough: first $first last $last"
for f in adapter_config.json adapter_model.safetensors tokenizer.json tokenizer_config.json metrics.jsonl \
         loss_curve.svg; do
  [ -f "$work/lora/$f" ] || fail "LoRA output lacks $f"
done
for f in model.safetensors config.json; do [ ! -e "$work/lora/$f" ] || fail "LoRA output has a model copy ($f)"; done
python3 - "$work" <<'PY' || fail "adapter_config.json: $(cat "$work/lora/adapter_config.json")"
import json, sys
w = sys.argv[1]
c = json.load(open(f"{w}/lora/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 8 and c["lora_alpha"] == 16 and c["target_modules"] == "all-linear", c
assert c["base_model_name_or_path"] == f"{w}/model", c["base_model_name_or_path"]
PY
diff -r "$work/model" "$work/model.orig" > /dev/null || fail "training changed the base model folder"
# The adapter loads: generation continues the pattern (base + --adapter, or the adapter folder as
# --model), and the parity run reads it.
out=$("$bin" generate --model "$work/model" --adapter "$work/lora" --prompt "t3 t4 t5" --no-special --max-new-tokens 4) ||
  fail "generate --adapter exited $?"
[ "$out" = "t6 t7 t8 t9" ] || fail "base + adapter continued 't3 t4 t5' with '$out'"
out2=$("$bin" generate --model "$work/lora" --prompt "t3 t4 t5" --no-special --max-new-tokens 4) ||
  fail "generate --model ADAPTER_DIR exited $?"
[ "$out2" = "$out" ] || fail "the adapter folder as --model gave '$out2'"
"$bin" parity --model "$work/model" --adapter "$work/lora" --batch "$root/parity/llama/batch.safetensors" \
  --out "$work/parity.safetensors" --steps 1 > /dev/null || fail "parity --adapter on the trained adapter exited $?"

# --peft-budget: default targets q_proj,v_proj cost 136 per rank; 10% of 6224 is 622, so rank 4.
log=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/budget" --peft lora \
      --peft-budget 10 --max-length 16 --batch-size 2 --max-steps 1) || fail "budget run exited $?: $log"
grep -q "rank 4 (searched 1..12) gives 544 trainable parameters" <<<"$log" || fail "budget choice: $log"
grep -q '"r": 4' "$work/budget/adapter_config.json" || fail "budget adapter is not rank 4"
err=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/budget2" --peft lora \
      --peft-budget 1 --max-steps 1 2>&1); rc=$?
[ $rc -eq 1 ] || fail "an impossible budget exited $rc: $err"
grep -q "rank 1 needs 136 trainable parameters.*6224.*over the budget of 62" <<<"$err" || fail "unclear budget error: $err"

# Resume: 8 steps in one run = 4 steps + resume + 4 steps, bit for bit (adapter and AdamW state).
args=(--model "$work/model" --data "$work/train.txt" --max-length 16 --batch-size 3 --max-steps 8
      --learning-rate 3e-3 --lr-scheduler-type cosine --warmup-steps 2 --weight-decay 0.01 --seed 5)
lora=(--peft lora --lora-r 4 --lora-target-modules q_proj,v_proj,down_proj --lora-modules-to-save norm)
"$bin" train "${args[@]}" "${lora[@]}" --out "$work/a" --save-steps 4 > /dev/null || fail "run a exited $?"
for f in adapter_config.json adapter_model.safetensors optimizer.safetensors trainer_state.json; do
  [ -s "$work/a/checkpoint-4/$f" ] || fail "checkpoint-4 lacks $f"
done
[ ! -e "$work/a/checkpoint-4/model.safetensors" ] || fail "a LoRA checkpoint holds a model copy"
"$bin" train "${args[@]}" "${lora[@]}" --out "$work/b" --save-steps 4 --resume-from-checkpoint "$work/a/checkpoint-4" \
  > "$work/b.log" || fail "resumed run exited $?: $(cat "$work/b.log")"
grep -q "resumed from .*checkpoint-4 at step 4" "$work/b.log" || fail "no resume line: $(cat "$work/b.log")"
for f in adapter_model.safetensors optimizer.safetensors; do
  cmp -s "$work/a/checkpoint-8/$f" "$work/b/checkpoint-8/$f" || fail "$f differs after resume"
done
cmp -s "$work/a/adapter_model.safetensors" "$work/b/adapter_model.safetensors" || fail "final adapters differ after resume"
# Without the LoRA options, auto resume takes the adapter config from the checkpoint.
mkdir -p "$work/c" && cp -r "$work/a/checkpoint-4" "$work/c/"
"$bin" train "${args[@]}" --out "$work/c" --save-steps 4 --resume-from-checkpoint auto > "$work/c.log" ||
  fail "auto resume without LoRA options exited $?: $(cat "$work/c.log")"
cmp -s "$work/a/checkpoint-8/optimizer.safetensors" "$work/c/checkpoint-8/optimizer.safetensors" &&
  cmp -s "$work/a/adapter_model.safetensors" "$work/c/adapter_model.safetensors" ||
  fail "auto resume without LoRA options differs from the uninterrupted run"
# Other LoRA options than the checkpoint's: an error naming the field.
err=$("$bin" train "${args[@]}" --peft lora --lora-r 2 --lora-target-modules q_proj,v_proj,down_proj \
      --lora-modules-to-save norm --out "$work/d" --resume-from-checkpoint "$work/a/checkpoint-4" 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "different 'r'" <<<"$err" || fail "mismatched resume: rc $rc: $err"

# --adapter: continue training an adapter; without --peft, merge it and fine-tune in full (with a
# zero learning rate the merged model generates as base + adapter).
"$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/cont" --peft lora --adapter "$work/lora" \
  --max-length 16 --batch-size 2 --max-steps 2 > "$work/cont.log" || fail "continuing an adapter exited $?: $(cat "$work/cont.log")"
grep -q '"r": 8' "$work/cont/adapter_config.json" || fail "the continued adapter lost its config"
cmp -s "$work/cont/adapter_model.safetensors" "$work/lora/adapter_model.safetensors" && fail "the continued adapter did not train"
"$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/merged" --adapter "$work/lora" \
  --max-length 16 --batch-size 2 --max-steps 1 --learning-rate 0 > "$work/merged.log" ||
  fail "merging an adapter exited $?: $(cat "$work/merged.log")"
[ -f "$work/merged/model.safetensors" ] || fail "the merged run wrote no model"
out3=$("$bin" generate --model "$work/merged" --prompt "t3 t4 t5" --no-special --max-new-tokens 4) || fail "generate merged"
[ "$out3" = "$out" ] || fail "the merged model continued 't3 t4 t5' with '$out3'"

# Misuse.
err=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/e" --lora-r 4 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q -- "--lora-r is a LoRA option; add --peft lora" <<<"$err" || fail "LoRA option without --peft: $err"
err=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/e" --peft lora \
      --lora-target-modules nothing_here 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q "matches no module" <<<"$err" || fail "unmatched target: $err"
err=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/e" --peft lora --lora-r 4 \
      --peft-budget 5 2>&1); rc=$?
[ $rc -eq 1 ] && grep -q -- "--lora-r or --peft-budget, not both" <<<"$err" || fail "r and budget: $err"
echo "1 passed, 0 failed"
