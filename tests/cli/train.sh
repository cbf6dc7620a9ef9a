#!/usr/bin/env bash
# `vkformer train` end to end on a tiny Llama (a parity fixture) with a WordLevel tokenizer: the
# loss falls on a learnable pattern, its steps replay one recording, evaluation runs, the output folder is a complete Hugging Face
# folder that `vkformer generate` uses and that continues the pattern; JSONL prompt/completion and
# chat "messages" data load; a malformed line is an error naming file and line.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$root/parity/llama" "$work/model"
python3 "$root/../common/word_tokenizer.py" "$work/model"
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
# A cycle t3 t4 ... t9 repeated: fully predictable after one token.
with open(f"{w}/train.txt", "w") as f:
    f.write(" ".join(f"t{3 + i % 7}" for i in range(2000)))
with open(f"{w}/sft.jsonl", "w") as f:
    f.write(json.dumps({"prompt": "t20 t21", "completion": "t22 t23"}) + "\n")
    f.write(json.dumps({"messages": [{"role": "user", "content": "t30 t31"}, {"role": "assistant", "content": "t32"}]}) + "\n")
    f.write(json.dumps({"text": "t40 t41 t42"}) + "\n")
with open(f"{w}/bad.jsonl", "w") as f:
    f.write(json.dumps({"text": "t5"}) + "\n{oops\n")
PY
log=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/out" --max-length 32 \
      --batch-size 4 --max-steps 40 --learning-rate 1e-2 --warmup-steps 2 --lr-scheduler-type cosine \
      --eval-fraction 0.1 --logging-steps 10 --seed 7) || fail "train exited $?: $log"
first=$(grep -o "^step 1/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
last=$(grep -o "^step 40/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
eval_loss=$(grep -o "final eval_loss [0-9.]*" <<<"$log" | awk '{print $3}')
[ -n "$first" ] && [ -n "$last" ] && [ -n "$eval_loss" ] || fail "missing log lines: $log"
# Text chunked to --max-length gives steps of one shape: after the first (eager) they replay.
replayed=$(grep -o "^steps replayed: [0-9]* of 40" <<<"$log" | awk '{print $3}')
[ -n "$replayed" ] && [ "$replayed" -ge 30 ] || fail "steps did not replay: $(grep '^steps replayed' <<<"$log")"
python3 -c "import sys; f,l,e=map(float,sys.argv[1:]); sys.exit(0 if l < 0.2*f and e < 0.5 else 1)" "$first" "$last" "$eval_loss" ||
  fail "loss did not fall enough: first $first last $last eval $eval_loss"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json generation_config.json \
         metrics.jsonl loss_curve.svg; do
  [ -f "$work/out/$f" ] || fail "output lacks $f"
done
[ "$(grep -c '"loss"' "$work/out/metrics.jsonl")" -eq 40 ] || fail "metrics.jsonl lacks per-step lines"
grep -q '"eval_loss"' "$work/out/metrics.jsonl" || fail "metrics.jsonl lacks the eval loss"
grep -q "<polyline" "$work/out/loss_curve.svg" || fail "loss_curve.svg has no curve"
out=$("$bin" generate --model "$work/out" --prompt "t3 t4 t5" --no-special --max-new-tokens 4) || fail "generate on the output exited $?"
[ "$out" = "t6 t7 t8 t9" ] || fail "the trained model continued 't3 t4 t5' with '$out'"
"$bin" train --model "$work/model" --data "$work/sft.jsonl" --out "$work/out2" --max-length 8 --no-packing \
  --batch-size 2 --max-steps 2 > /dev/null || fail "JSONL training exited $?"
err=$("$bin" train --model "$work/model" --data "$work/bad.jsonl" --out "$work/out3" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "bad JSONL exited $rc"
grep -q "bad.jsonl:2" <<<"$err" || fail "unclear error: $err"
# Ctrl-C: the run stops after the current step with a checkpoint, exit 130, and resumes.
"$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/int" --max-length 32 \
  --batch-size 4 --max-steps 100000 --logging-steps 1000 > "$work/int.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do [ "$(cat "$work/int/metrics.jsonl" 2>/dev/null | wc -l)" -ge 3 ] && break; sleep 0.05; done
kill -INT $pid
wait $pid
rc=$?
[ $rc -eq 130 ] || fail "interrupted run exited $rc: $(cat "$work/int.log")"
grep -q "stopped by Ctrl-C" "$work/int.log" || fail "no interruption message: $(cat "$work/int.log")"
ls -d "$work"/int/checkpoint-* > /dev/null 2>&1 || fail "no checkpoint after Ctrl-C"
n=$(ls -d "$work"/int/checkpoint-* | sed 's/.*checkpoint-//' | sort -n | tail -1)
log=$("$bin" train --model "$work/model" --data "$work/train.txt" --out "$work/int" --max-length 32 \
  --batch-size 4 --max-steps $((n + 2)) --resume-from-checkpoint auto) || fail "resume after Ctrl-C exited $?"
grep -q "resumed from .*checkpoint-$n at step $n" <<<"$log" || fail "resume after Ctrl-C: $log"
grep -q "^step $((n + 2))/$((n + 2))" <<<"$log" || fail "resume after Ctrl-C did not finish: $log"
echo "1 passed, 0 failed"
