#!/usr/bin/env bash
# `vkformer parity` run twice on the same model and batch writes bitwise-identical files, and the
# output holds every PARITY.md name (logits, loss, grad.*, step1.*, step2.*, loss.step1/2).
set -u
bin="$1"
fixture="$(cd "$(dirname "$0")/../fixtures/parity/llama" && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for run in a b; do
  "$bin" parity --model "$fixture" --batch "$fixture/batch.safetensors" --out "$out/$run.safetensors" \
    --steps 2 --lr 1e-3 --eps 1e-8 --weight-decay 0.01 > /dev/null || fail "parity run $run exited $?"
done
cmp -s "$out/a.safetensors" "$out/b.safetensors" || fail "two parity runs differ"
header=$(head -c 200000 "$out/a.safetensors" | tr -d '\0')
for name in '"logits"' '"loss"' '"loss.step1"' '"loss.step2"' '"grad.model.embed_tokens.weight"' \
            '"step1.lm_head.weight"' '"step2.model.norm.weight"'; do
  grep -qF "$name" <<<"$header" || fail "output lacks $name"
done
# Bad input: a missing batch file is a clear error, exit 1.
err=$("$bin" parity --model "$fixture" --batch "$out/none.safetensors" --out "$out/c.safetensors" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "missing batch exited $rc"
grep -q "none.safetensors" <<<"$err" || fail "unclear error: $err"
echo "1 passed, 0 failed"
