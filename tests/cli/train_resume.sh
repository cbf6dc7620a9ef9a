#!/usr/bin/env bash
# Checkpoints: training 8 steps in one run and resuming from its step-4 checkpoint give
# bitwise-identical parameters and optimizer state at step 8, in fp32 and in mixed precision (the
# loss scaler's state, with skipped steps and scale growth on both sides of the checkpoint, is
# restored); --save-total-limit keeps the newest;
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
# Mixed precision: inf gradients injected at steps 2 and 5 (test hook) and a growth interval of 2.
# By GradScaler's rule: 1 clean (tracker 1), 2 overflow (scale 2^15, tracker 0), 3 clean, 4 clean
# (2^16, tracker 0) | 5 overflow (2^15), 6 clean, 7 clean (2^16), 8 clean (tracker 1).
export VKF_TEST_LOSS_SCALING="growth_interval=2,overflow_at=2:5"
"$bin" train "${args[@]}" --precision f16 --out "$work/m" --save-steps 4 > "$work/m.log" ||
  fail "f16 run exited $?: $(cat "$work/m.log")"
grep -q "step 2/8  inf/nan gradients: update skipped, loss scale 65536 -> 32768 (1 skipped so far)" "$work/m.log" ||
  fail "no skipped-step line: $(cat "$work/m.log")"
grep -q "loss_scale 65536  skipped 2" "$work/m.log" || fail "the last step line lacks the scale: $(tail -3 "$work/m.log")"
"$bin" train "${args[@]}" --precision f16 --out "$work/n" --save-steps 4 \
  --resume-from-checkpoint "$work/m/checkpoint-4" > "$work/n.log" || fail "resumed f16 run exited $?: $(cat "$work/n.log")"
for f in model.safetensors optimizer.safetensors; do
  cmp -s "$work/m/checkpoint-8/$f" "$work/n/checkpoint-8/$f" || fail "f16: $f differs after resume"
done
cmp -s "$work/a/checkpoint-8/model.safetensors" "$work/m/checkpoint-8/model.safetensors" &&
  fail "the f16 run with two skipped steps trained the fp32 run's model"
python3 - "$work" <<'PY' || fail "f16 trainer state or metrics are not as GradScaler's rule gives"
import json, sys
w = sys.argv[1]
def state(d):
    return json.load(open(f"{w}/{d}/trainer_state.json"))
s4, s8, r8 = state("m/checkpoint-4"), state("m/checkpoint-8"), state("n/checkpoint-8")
assert s4["precision"] == "f16", s4["precision"]
assert (s4["grad_scaler"]["scale"], s4["grad_scaler"]["_growth_tracker"], s4["skipped_steps"]) == (65536, 0, 1), s4
assert (s8["grad_scaler"]["scale"], s8["grad_scaler"]["_growth_tracker"], s8["skipped_steps"]) == (65536, 1, 2), s8
assert r8["grad_scaler"] == s8["grad_scaler"] and r8["skipped_steps"] == 2, r8
assert r8["param_steps"] == s8["param_steps"] and s8["optimizer_steps"] == 6, s8["optimizer_steps"]
assert r8["log_history"] == s8["log_history"]
rows = [json.loads(l) for l in open(f"{w}/m/metrics.jsonl")]
assert [r["step"] for r in rows if r["skipped"]] == [2, 5], rows
assert [r["loss_scale"] for r in rows] == [65536, 65536, 32768, 32768, 65536, 32768, 32768, 65536], rows
# Trainer semantics: the schedule does not advance on a skipped step.
lr = {r["step"]: r["lr"] for r in rows}
assert lr[3] == lr[2] and lr[6] == lr[5] and lr[3] != lr[4], lr
assert json.load(open(f"{w}/a/checkpoint-4/trainer_state.json"))["precision"] == "fp32"
PY
unset VKF_TEST_LOSS_SCALING
"$bin" train "${args[@]}" --out "$work/x" --resume-from-checkpoint "$work/m/checkpoint-4" > "$work/x.log" 2>&1 &&
  fail "an f16 checkpoint resumed in fp32"
grep -q "written by a --precision f16 run; resume it with --precision f16" "$work/x.log" || fail "$(cat "$work/x.log")"
"$bin" train "${args[@]}" --out "$work/y" --precision bf16 > "$work/y.log" 2>&1 && fail "--precision bf16 accepted"
grep -q -- "--precision 'bf16': use fp32" "$work/y.log" || fail "$(cat "$work/y.log")"
echo "1 passed, 0 failed"
