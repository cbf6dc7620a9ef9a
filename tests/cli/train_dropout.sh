#!/usr/bin/env bash
# Training with dropout (a tiny starcoder2 with attention, residual and embedding dropout on):
# the same --seed gives bitwise-identical models, another seed or dropout off gives others;
# evaluation draws no dropout (a run evaluating every 2 steps trains the same model);
# --gradient-checkpointing trains bitwise the same model; resuming from a checkpoint reproduces
# the uninterrupted run bit for bit (the dropout stream's position is checkpointed).
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for m in drop nodrop; do
  cp -r "$root/parity/starcoder2" "$work/$m"
  python3 "$root/../common/word_tokenizer.py" "$work/$m"
done
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
path = f"{w}/drop/config.json"
c = json.load(open(path))
c.update(attention_dropout=0.1, residual_dropout=0.1, embedding_dropout=0.05)
json.dump(c, open(path, "w"), indent=2)
with open(f"{w}/train.txt", "w") as f:
    f.write(" ".join(f"t{3 + (i * 7) % 40}" for i in range(3000)))
with open(f"{w}/eval.txt", "w") as f:
    f.write(" ".join(f"t{3 + (i * 5) % 40}" for i in range(300)))
PY
args=(--data "$work/train.txt" --max-length 16 --batch-size 3 --max-steps 6 --learning-rate 3e-3
      --lr-scheduler-type cosine --warmup-steps 2 --weight-decay 0.01)
train() { "$bin" train "$@" > "$work/log" 2>&1 || fail "train $* exited $?: $(cat "$work/log")"; }
same() { cmp -s "$1/model.safetensors" "$2/model.safetensors"; }
train --model "$work/drop" "${args[@]}" --seed 5 --out "$work/a" --save-steps 3
train --model "$work/drop" "${args[@]}" --seed 5 --out "$work/b"
same "$work/a" "$work/b" || fail "two runs with --seed 5 differ"
train --model "$work/drop" "${args[@]}" --seed 6 --out "$work/c"
same "$work/a" "$work/c" && fail "--seed 6 trained the same model as --seed 5"
train --model "$work/nodrop" "${args[@]}" --seed 5 --out "$work/d"
same "$work/a" "$work/d" && fail "dropout had no effect"
train --model "$work/drop" "${args[@]}" --seed 5 --out "$work/e" --eval-data "$work/eval.txt" --eval-steps 2
grep -q '"eval_loss"' "$work/e/metrics.jsonl" || fail "no evaluation ran"
same "$work/a" "$work/e" || fail "evaluating during training changed the trained model"
train --model "$work/drop" "${args[@]}" --seed 5 --out "$work/g" --gradient-checkpointing
same "$work/a" "$work/g" || fail "--gradient-checkpointing trained another model"
python3 - "$work/a/checkpoint-3/trainer_state.json" <<'PY' || fail "trainer_state.json lacks the dropout stream"
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if s["dropout_seed"] == 5 and s["dropout_offset"] > 0 else 1)
PY
train --model "$work/drop" "${args[@]}" --seed 5 --out "$work/r" --save-steps 3 \
  --resume-from-checkpoint "$work/a/checkpoint-3"
grep -q "resumed from .*checkpoint-3 at step 3" "$work/log" || fail "no resume line: $(cat "$work/log")"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$work/a/checkpoint-6/$f" "$work/r/checkpoint-6/$f" || fail "$f differs after resume"
done
echo "1 passed, 0 failed"
