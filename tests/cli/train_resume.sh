#!/usr/bin/env bash
# Checkpoints: training 8 steps in one run and resuming from its step-4 checkpoint give
# bitwise-identical parameters and optimizer state at step 8; --save-total-limit keeps the newest;
# killing a run (SIGKILL) while it writes a checkpoint leaves every checkpoint-* folder complete,
# and --resume-from-checkpoint auto finishes the run from the newest one.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures" && pwd)"
work=$(mktemp -d)
trap 'kill -9 $pid 2>/dev/null; rm -rf "$work"' EXIT
pid=0
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$root/parity/llama" "$work/model"
python3 "$root/../common/word_tokenizer.py" "$work/model"
python3 - "$work" <<'PY'
import sys
w = sys.argv[1]
with open(f"{w}/train.txt", "w") as f:
    f.write(" ".join(f"t{3 + (i * 7) % 40}" for i in range(3000)))
PY
args=(--model "$work/model" --data "$work/train.txt" --max-length 16 --batch-size 3 --max-steps 8
      --learning-rate 3e-3 --lr-scheduler-type cosine --warmup-steps 2 --weight-decay 0.01 --seed 5)
"$bin" train "${args[@]}" --out "$work/a" --save-steps 4 > /dev/null || fail "run a exited $?"
"$bin" train "${args[@]}" --out "$work/b" --save-steps 4 --resume-from-checkpoint "$work/a/checkpoint-4" > "$work/b.log" ||
  fail "resumed run exited $?"
grep -q "resumed from .*checkpoint-4 at step 4" "$work/b.log" || fail "no resume line: $(cat "$work/b.log")"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$work/a/checkpoint-8/$f" "$work/b/checkpoint-8/$f" || fail "$f differs after resume"
done
cmp -s "$work/a/model.safetensors" "$work/b/model.safetensors" || fail "final models differ after resume"
# --save-total-limit 2 keeps the two newest of checkpoints 2, 4, 6, 8.
"$bin" train "${args[@]}" --out "$work/c" --save-steps 2 --save-total-limit 2 > /dev/null || fail "run c exited $?"
[ "$(ls -d "$work"/c/checkpoint-* | xargs -n1 basename | tr '\n' ' ')" = "checkpoint-6 checkpoint-8 " ] ||
  fail "kept: $(ls "$work/c")"
# Kill during the second checkpoint's write (each file write is followed by a 400 ms pause), at
# three different moments: checkpoint-2 must stay intact, and resuming from it must reproduce the
# uninterrupted run bit for bit.
for attempt in 1 2 3; do
  rm -rf "$work/k"
  VKF_CHECKPOINT_PAUSE_MS=400 "$bin" train "${args[@]}" --out "$work/k" --save-steps 2 > /dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do ls -d "$work"/k/.checkpoint-4* > /dev/null 2>&1 && break; sleep 0.05; done
  ls -d "$work"/k/.checkpoint-4* > /dev/null 2>&1 || fail "attempt $attempt: the second checkpoint never started"
  sleep "0.$((attempt * 3 - 2))"
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  [ -d "$work/k/checkpoint-2" ] || fail "attempt $attempt: checkpoint-2 is gone after the kill"
  [ ! -d "$work/k/checkpoint-4" ] || [ -s "$work/k/checkpoint-4/trainer_state.json" ] ||
    fail "attempt $attempt: a half-written checkpoint-4 is visible"
  for d in "$work"/k/checkpoint-*; do
    for f in config.json model.safetensors optimizer.safetensors trainer_state.json; do
      [ -s "$d/$f" ] || fail "attempt $attempt: $d lacks $f after the kill"
    done
  done
  "$bin" train "${args[@]}" --out "$work/k" --save-steps 2 --resume-from-checkpoint auto > "$work/k.log" 2>&1 ||
    fail "attempt $attempt: resume failed: $(cat "$work/k.log")"
  grep -q "resumed from .*checkpoint-[24] at step [24]" "$work/k.log" || fail "attempt $attempt: $(head -3 "$work/k.log")"
  cmp -s "$work/a/checkpoint-8/model.safetensors" "$work/k/checkpoint-8/model.safetensors" ||
    fail "attempt $attempt: resumed-after-kill model differs from the uninterrupted one"
  cmp -s "$work/a/checkpoint-8/optimizer.safetensors" "$work/k/checkpoint-8/optimizer.safetensors" ||
    fail "attempt $attempt: resumed-after-kill optimizer state differs"
done
echo "1 passed, 0 failed"
