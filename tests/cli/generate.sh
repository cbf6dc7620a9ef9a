#!/usr/bin/env bash
# `vkformer generate` and `vkformer chat` end to end: a parity fixture model plus a small
# WordLevel tokenizer ("t<id>" tokens); greedy generation from a text prompt must print exactly the
# tokens transformers' generate() produced (tests/fixtures/generate/greedy.json), also with f16
# weight matrices, and chat must run a two-turn conversation from a pipe and exit 0 at end of input.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../fixtures" && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$root/parity/llama" "$work/model"
python3 "$root/../common/word_tokenizer.py" "$work/model"
python3 - "$root/generate/greedy.json" > "$work/expected.txt" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
ids = [t for t in g["cases"]["llama"]["single"][0] if t != g["eos_token_id"]]
print(" ".join(f"t{i}" for i in ids))
PY
prompt="t5 t9 t13 t21 t7 t30"
out=$("$bin" generate --model "$work/model" --prompt "$prompt" --max-new-tokens 10 --no-special) ||
  fail "generate exited $?"
[ "$out" = "$(cat "$work/expected.txt")" ] || fail "generate printed '$out', expected '$(cat "$work/expected.txt")'"
# Weight matrices held in f16 (the fixture's f32 checkpoint loads as f32 by default): same tokens here.
out=$("$bin" generate --model "$work/model" --prompt "$prompt" --max-new-tokens 10 --no-special --dtype f16) ||
  fail "generate --dtype f16 exited $?"
[ "$out" = "$(cat "$work/expected.txt")" ] || fail "generate --dtype f16 printed '$out', expected '$(cat "$work/expected.txt")'"
err=$("$bin" generate --model "$work/model" --prompt "$prompt" --dtype f8 2>&1); rc=$?
[ $rc -eq 1 ] && [[ "$err" == *"--dtype 'f8'"* ]] || fail "--dtype f8 exited $rc: $err"
# --stop: generation ends at the first token whose text contains the stop string.
first=$(cut -d' ' -f1-3 "$work/expected.txt")
third=$(cut -d' ' -f3 "$work/expected.txt")
out=$("$bin" generate --model "$work/model" --prompt "$prompt" --max-new-tokens 10 --no-special --stop "$third") ||
  fail "generate --stop exited $?"
[ "$out" = "$first" ] || fail "generate --stop printed '$out', expected '$first'"
chat=$(printf 't5 t9\nt13 t21\n' | "$bin" chat --model "$work/model" --max-new-tokens 4) || fail "chat exited $?"
[ "$(printf '%s\n' "$chat" | wc -l)" -eq 2 ] || fail "chat printed '$chat', expected two replies"
err=$("$bin" generate --model "$work/nope" --prompt x 2>&1); rc=$?
[ $rc -eq 1 ] || fail "missing model exited $rc"
echo "1 passed, 0 failed"
