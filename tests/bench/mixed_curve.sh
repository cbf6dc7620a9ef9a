#!/usr/bin/env bash
# The vkformer side of the loss-curve harness (bench/mixed_curve.py), on a tiny model: the token
# file is deterministic and of the stated geometry; train_bench's loss-curve mode trains on it in
# fp32 and f16, writing one finite loss per step (f16 with its loss scale); bad token files fail
# with clear errors; and the comparison passes curves within 2% and fails one that is 5% off in a
# single 10-step window. (The PyTorch side needs torch and runs on the H200 machine.)
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
curve="$root/bench/mixed_curve.py"
model="$root/tests/fixtures/parity/llama"  # vocab 48, 64 positions
# A fixed corpus, so that the first batch (and the step-1 loss checked below) does not change with
# the repository's code, which the gate's own token files are made of.
corpus="$root/tests/fixtures/tokenizer/corpus.jsonl"
python3 "$curve" tokens --out "$work/t.bin" --steps 20 --batch 2 --seq 16 --vocab 48 --corpus "$corpus" > /dev/null || fail "tokens"
python3 "$curve" tokens --out "$work/t2.bin" --steps 20 --batch 2 --seq 16 --vocab 48 --corpus "$corpus" > /dev/null || fail "tokens"
[ "$(stat -c %s "$work/t.bin")" = $((20 * 2 * 16 * 4)) ] || fail "token file size $(stat -c %s "$work/t.bin")"
cmp -s "$work/t.bin" "$work/t2.bin" || fail "the token file is not deterministic"
common=(--model "$model" --tokens "$work/t.bin" --batch 2 --seq 16 --steps 20 --lr 3e-3 --lr-scheduler-type cosine
        --lr-warmup-steps 2 --weight-decay 0.01 --max-grad-norm 1.0)
mkdir "$work/cmp"
for p in fp32 f16; do
  "$bin" "${common[@]}" --precision "$p" --loss-log "$work/cmp/vkformer_$p.jsonl" > "$work/$p.out" 2> "$work/$p.err" ||
    fail "train_bench --precision $p exited $?: $(cat "$work/$p.err")"
  grep -q "\"mode\":\"loss_curve\",\"precision\":\"$p\",\"steps\":20" "$work/$p.out" || fail "summary: $(cat "$work/$p.out")"
done
python3 - "$work/cmp" <<'PY' || fail "loss logs are not as expected"
import json, math, sys
d = sys.argv[1]
f32 = [json.loads(l) for l in open(f"{d}/vkformer_fp32.jsonl")]
f16 = [json.loads(l) for l in open(f"{d}/vkformer_f16.jsonl")]
assert [r["step"] for r in f32] == list(range(1, 21)) == [r["step"] for r in f16]
assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in f32 + f16)
assert all(r["loss_scale"] == 65536 and r["skipped"] is False for r in f16), f16[0]
assert "loss_scale" not in f32[0]
# Same weights, same first batch: the step-1 losses agree to f16-product precision, and start near
# ln(48) for a freshly initialized model.
assert abs(f16[0]["loss"] - f32[0]["loss"]) <= 1e-2 * f32[0]["loss"], (f16[0], f32[0])
assert abs(f32[0]["loss"] - math.log(48)) < 0.5, f32[0]
# The schedule: warmup 2 then cosine to 0 over 20 steps.
assert f32[0]["lr"] == 0 and abs(f32[1]["lr"] - 1.5e-3) < 1e-12 and abs(f32[2]["lr"] - 3e-3) < 1e-12, f32[:3]
PY
# The comparison on real logs (vkformer f16 as "a", fp32 standing in for "b"): within 2%.
cp "$work/cmp/vkformer_fp32.jsonl" "$work/cmp/torch_bf16.jsonl"
python3 "$curve" compare "$work/cmp" > "$work/cmp.out" || fail "compare failed: $(cat "$work/cmp.out")"
grep -q "^PASS: vkformer f16 tracks torch bf16 within" "$work/cmp.out" || fail "$(cat "$work/cmp.out")"
# Synthetic curves: 1% off everywhere passes; 5% off in steps 11-20 only fails, at that window.
python3 - "$work" <<'PY'
import json, os, sys
w = sys.argv[1]
for name, factor in (("pass", lambda s: 1.01), ("fail", lambda s: 1.05 if 11 <= s <= 20 else 1.0)):
    os.makedirs(f"{w}/{name}")
    with open(f"{w}/{name}/torch_bf16.jsonl", "w") as b, open(f"{w}/{name}/vkformer_f16.jsonl", "w") as a:
        for s in range(1, 31):
            loss = 5.0 - 0.1 * s
            b.write(json.dumps({"step": s, "loss": loss}) + "\n")
            a.write(json.dumps({"step": s, "loss": loss * factor(s), "loss_scale": 65536, "skipped": s == 3}) + "\n")
PY
python3 "$curve" compare "$work/pass" > "$work/pass.out" || fail "1% apart failed: $(cat "$work/pass.out")"
grep -q "PASS: vkformer f16 tracks torch bf16 within 1.000%" "$work/pass.out" || fail "$(cat "$work/pass.out")"
grep -q "1 skipped step(s) at \[3\]" "$work/pass.out" || fail "skips not reported: $(cat "$work/pass.out")"
python3 "$curve" compare "$work/fail" > "$work/fail.out" && fail "5% apart passed: $(cat "$work/fail.out")"
grep -q "FAIL: vkformer f16 tracks torch bf16 within 5.000%" "$work/fail.out" || fail "$(cat "$work/fail.out")"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); assert s['pairs'][0]['worst_window_first_step'] == 11, s" \
  "$work/fail/summary.json" || fail "worst window"
# Bad input: a token file of the wrong geometry, tokens outside the vocabulary, a missing log.
"$bin" --model "$model" --tokens "$work/t.bin" --batch 2 --seq 15 --steps 20 --loss-log "$work/x.jsonl" \
  > /dev/null 2> "$work/err" && fail "wrong --seq accepted"
grep -q "is not a whole number of batches of 2 x 15 int32 tokens" "$work/err" || fail "$(cat "$work/err")"
python3 "$curve" tokens --out "$work/wide.bin" --steps 20 --batch 2 --seq 16 > /dev/null
"$bin" --model "$model" --tokens "$work/wide.bin" --batch 2 --seq 16 --steps 20 --loss-log "$work/x.jsonl" \
  > /dev/null 2> "$work/err" &&
  fail "byte tokens accepted by a 48-token model"
grep -q "outside the vocabulary \[0, 48)" "$work/err" || fail "$(cat "$work/err")"
"$bin" --model "$model" --tokens "$work/t.bin" --batch 2 --seq 16 --steps 2 > /dev/null 2> "$work/err" && fail "no --loss-log accepted"
grep -q -- "--loss-log FILE is required" "$work/err" || fail "$(cat "$work/err")"
echo "1 passed, 0 failed"
