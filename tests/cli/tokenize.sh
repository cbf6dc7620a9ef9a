#!/usr/bin/env bash
# End-to-end `vkformer tokenize` on a tiny tokenizer.json written here: encode, --no-special,
# --decode, a model folder with tokenizer_config.json, and clear errors (exit 1) for bad input.
set -u
bin="$1"
fail() { echo "FAIL: $*"; exit 1; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cat >"$dir/tokenizer.json" <<'JSON'
{"model": {"type": "WordLevel", "unk_token": "<unk>", "vocab": {"<unk>": 0, "<s>": 1, "hi": 2, "there": 3}},
 "pre_tokenizer": {"type": "WhitespaceSplit"},
 "added_tokens": [{"id": 1, "content": "<s>", "special": true, "lstrip": false, "rstrip": false, "single_word": false, "normalized": false}],
 "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
   "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}}
JSON
out=$(printf '"hi there"\n"hi you"\n' | "$bin" tokenize --tokenizer "$dir/tokenizer.json") || fail "encode exited $?"
[ "$out" = $'[1,2,3]\n[1,2,0]' ] || fail "encode gave: $out"
out=$(printf '"hi <s>there"\n' | "$bin" tokenize --tokenizer "$dir/tokenizer.json" --no-special) || fail "exit $?"
[ "$out" = '[2,1,3]' ] || fail "--no-special gave: $out"
out=$(printf '[1,2,3]\n' | "$bin" tokenize --tokenizer "$dir/tokenizer.json" --decode) || fail "exit $?"
[ "$out" = '"<s> hi there"' ] || fail "--decode gave: $out"
out=$(printf '[1,2,3]\n' | "$bin" tokenize --tokenizer "$dir/tokenizer.json" --decode --no-special) || fail "exit $?"
[ "$out" = '"hi there"' ] || fail "--decode --no-special gave: $out"
echo '{"add_bos_token": false, "bos_token": "<s>", "tokenizer_class": "LlamaTokenizer"}' >"$dir/tokenizer_config.json"
out=$(printf '"hi"\n' | "$bin" tokenize --tokenizer "$dir") || fail "folder exited $?"
[ "$out" = '[2]' ] || fail "add_bos_token=false in the folder gave: $out"

err=$(printf 'not json\n' | "$bin" tokenize --tokenizer "$dir/tokenizer.json" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "bad stdin exited $rc"
grep -q "stdin line 1: not valid JSON" <<<"$err" || fail "unclear message: $err"
err=$("$bin" tokenize --tokenizer "$dir/missing.json" </dev/null 2>&1); rc=$?
[ $rc -eq 1 ] || fail "missing file exited $rc"
grep -q "cannot open" <<<"$err" || fail "unclear message: $err"
echo '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}}' >"$dir/bad.json"
err=$("$bin" tokenize --tokenizer "$dir/bad.json" </dev/null 2>&1); rc=$?
[ $rc -eq 1 ] || fail "bad merges exited $rc"
grep -q "model.merges\[0\]" <<<"$err" || fail "unclear message: $err"
echo "1 passed, 0 failed"
