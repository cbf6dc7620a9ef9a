#!/usr/bin/env bash
# `vkformer tokenizer train`: a byte-level BPE tokenizer trained on text files reaches the asked
# vocabulary size, and the Hugging Face tokenizers library (npm binding, tools/oracle) loads the
# written tokenizer.json and encodes/decodes the parity corpus exactly as vkformer does.
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v node >/dev/null || fail "node is not installed; run scripts/setup.sh (make test does)"
python3 - "$root/tests/fixtures/tokenizer/corpus.jsonl" "$work/train.txt" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for _ in range(3):
        f.write("\n".join(lines) + "\n")
    f.write(open(__import__("os").path.join(__import__("os").path.dirname(sys.argv[1]), "..", "..", "..", "README.md"), encoding="utf-8").read())
PY
out=$("$bin" tokenizer train --vocab-size 600 --out "$work/tok" "$work/train.txt") || fail "train exited $?"
grep -q "with 600 tokens" <<<"$out" || fail "unexpected: $out"
corpus="$root/tests/fixtures/tokenizer/corpus.jsonl"
for mode in encode encode-nospecial; do
  flag=""; [ $mode = encode-nospecial ] && flag="--no-special"
  ours=$("$bin" tokenize --tokenizer "$work/tok" $flag < "$corpus") || fail "tokenize exited $?"
  theirs=$(node "$root/tools/oracle/tokenizer_oracle.js" "$work/tok/tokenizer.json" $mode < "$corpus") ||
    fail "the HF library could not use the trained tokenizer"
  [ "$ours" = "$theirs" ] || fail "$mode differs from the HF library"
done
ids=$("$bin" tokenize --tokenizer "$work/tok" < "$corpus")
back=$("$bin" tokenize --tokenizer "$work/tok" --decode <<<"$ids")
theirs=$(node "$root/tools/oracle/tokenizer_oracle.js" "$work/tok/tokenizer.json" decode <<<"$ids")
[ "$back" = "$theirs" ] || fail "decode differs from the HF library"
[ "$back" = "$(cat "$corpus")" ] || fail "decode(encode(x)) != x"
echo "1 passed, 0 failed ($(wc -l < "$corpus") corpus lines, 0 mismatches)"
