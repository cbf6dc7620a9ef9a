#!/usr/bin/env bash
# `vkformer pull` against a local Hub (tests/common/hub_server.py on 127.0.0.1): the cache layout of
# huggingface_hub (refs without newline, relative snapshot symlinks, blobs named by sha256 for LFS
# files and git blob sha1 for others, checked with sha256sum and git hash-object), no download the
# second time, offline answers, resume of a download that broke halfway (within one run, and in a
# later run from the .incomplete file), a corrupted cached blob re-fetched, a server sending corrupt
# data refused, tokens (HF_TOKEN, $HF_HOME/token) sent to the Hub but never to the storage host,
# revisions, --include, retries on 503, relative redirects of a renamed repository, and unsafe file
# names refused without anything written outside the cache.
set -u
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
fixtures="$here/../fixtures"
work=$(mktemp -d)
server_pid=""
stop_server() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap 'stop_server; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Repositories: a tiny model (main and v1 branches), a private one, one with a 3 MB LFS file.
repo="$work/root/models/acme/tiny"
mkdir -p "$repo/main" "$repo/v1" "$work/root/models/acme/secret/main" "$work/root/models/acme/big/main" \
         "$work/root/models/acme/evil/main"
cp "$fixtures/parity/llama/config.json" "$fixtures/parity/llama/model.safetensors" "$repo/main/"
python3 "$here/../common/word_tokenizer.py" "$repo/main"
echo "# tiny" > "$repo/main/README.md"
mkdir -p "$repo/main/extra/deep" && echo "nested" > "$repo/main/extra/deep/note.txt"
cp "$repo/main/config.json" "$repo/v1/" && echo "v1" > "$repo/v1/README.md"
cp "$repo/main/config.json" "$work/root/models/acme/secret/main/"
head -c 3000000 /dev/urandom > "$work/root/models/acme/big/main/data.bin"
echo "{}" > "$work/root/models/acme/evil/main/config.json"

start_server() {  # extra arguments: fault injection
  stop_server
  rm -f "$work/ports"
  python3 "$here/../common/hub_server.py" "$work/root" --port-file "$work/ports" --log "$work/log.jsonl" \
    --token sekret --private acme/secret --unsafe acme/evil --rename acme/old-name=acme/tiny --max-seconds 300 "$@" &
  server_pid=$!
  for _ in $(seq 1 100); do [ -f "$work/ports" ] && break; sleep 0.05; done
  read -r hub_port _ < "$work/ports" || fail "the test server did not start"
  export HF_ENDPOINT="http://127.0.0.1:$hub_port"
  : > "$work/log.jsonl"
}
export HF_HOME="$work/hf" VKF_HUB_RETRY_WAIT_MS=20
unset HF_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HF_TOKEN_PATH
cache="$HF_HOME/hub/models--acme--tiny"
start_server

# 1. Layout.
snap=$("$bin" pull acme/tiny 2>"$work/err") || fail "pull exited $?: $(cat "$work/err")"
commit=$(cat "$cache/refs/main")
[ "${#commit}" -eq 40 ] || fail "refs/main holds '$commit'"
[ "$(wc -c < "$cache/refs/main")" -eq 40 ] || fail "refs/main is not exactly 40 bytes (a newline?)"
[ "$snap" = "$cache/snapshots/$commit" ] || fail "printed '$snap'"
sha=$(sha256sum "$repo/main/model.safetensors" | cut -d' ' -f1)
[ "$(readlink "$snap/model.safetensors")" = "../../blobs/$sha" ] || fail "model.safetensors links to $(readlink "$snap/model.safetensors")"
gsha=$(git hash-object "$repo/main/config.json")
[ "$(readlink "$snap/config.json")" = "../../blobs/$gsha" ] || fail "config.json links to $(readlink "$snap/config.json")"
[ "$(readlink "$snap/extra/deep/note.txt")" = "../../../../blobs/$(git hash-object "$repo/main/extra/deep/note.txt")" ] ||
  fail "nested link: $(readlink "$snap/extra/deep/note.txt")"
for f in config.json model.safetensors tokenizer.json README.md extra/deep/note.txt; do
  cmp -s "$snap/$f" "$repo/main/$f" || fail "$f differs from the served file"
done
ls "$cache/blobs" | grep -q incomplete && fail "an .incomplete file was left"
[ -f "$HF_HOME/hub/.locks/models--acme--tiny/$sha.lock" ] || fail "no lock file under .locks"
grep '"server": "storage"' "$work/log.jsonl" | grep -q '/lfs/' || fail "the LFS file was not fetched from the storage host"

# 2. Cached: only the listing is asked for.
: > "$work/log.jsonl"
"$bin" pull acme/tiny -q > /dev/null 2>&1 || fail "second pull"
[ "$(wc -l < "$work/log.jsonl")" -eq 1 ] || fail "second pull made requests beyond the listing: $(cat "$work/log.jsonl")"

# 3. Offline.
: > "$work/log.jsonl"
out=$(HF_HUB_OFFLINE=1 "$bin" pull acme/tiny 2>/dev/null) || fail "offline pull exited $?"
[ "$out" = "$snap" ] || fail "offline pull printed '$out'"
[ ! -s "$work/log.jsonl" ] || fail "offline pull made requests"
err=$(HF_HUB_OFFLINE=1 "$bin" pull acme/never 2>&1) && fail "offline pull of an uncached repo succeeded"
grep -q "not in the hub cache" <<<"$err" && grep -q "HF_HUB_OFFLINE" <<<"$err" || fail "unclear offline error: $err"

# 4. Revisions and --include.
snap1=$("$bin" pull acme/tiny@v1 -q) || fail "pull @v1"
[ -f "$cache/refs/v1" ] && [ "$(cat "$cache/refs/v1")" != "$commit" ] || fail "refs/v1 missing or equal to main"
[ "$(cat "$snap1/README.md")" = "v1" ] || fail "v1 README: $(cat "$snap1/README.md")"
snapc=$("$bin" pull "acme/tiny@$commit" -q) || fail "pull @commit"
[ "$snapc" = "$snap" ] || fail "pull @commit printed $snapc"
rm -rf "$HF_HOME"
"$bin" pull acme/tiny --include "*.json" -q > /dev/null || fail "pull --include"
[ -e "$cache/snapshots/$commit/config.json" ] && [ ! -e "$cache/snapshots/$commit/model.safetensors" ] ||
  fail "--include '*.json' fetched: $(ls "$cache/snapshots/$commit")"

# 5. A cached blob corrupted in place (same size) is detected and fetched again.
"$bin" pull acme/tiny -q > /dev/null || fail "pull before corruption"
blob="$cache/blobs/$sha"
printf 'XXXX' | dd of="$blob" bs=1 seek=100 conv=notrunc status=none
err=$("$bin" pull acme/tiny -q 2>&1 >/dev/null) || fail "pull after corruption exited $?: $err"
grep -q "corrupt" <<<"$err" || fail "no corruption message: $err"
cmp -s "$snap/model.safetensors" "$repo/main/model.safetensors" || fail "the corrupt blob was not replaced"

# 6. Resume: the storage drops the connection halfway once; the retry asks for the rest.
"$bin" pull acme/big -q > /dev/null 2>&1 || true
rm -rf "$HF_HOME"
start_server --fail-halfway data.bin=1
"$bin" pull acme/big -q > /dev/null || fail "pull with one broken transfer"
bsha=$(sha256sum "$work/root/models/acme/big/main/data.bin" | cut -d' ' -f1)
grep -q '"range": "bytes=1500000-"' "$work/log.jsonl" || fail "no resuming Range request: $(grep storage "$work/log.jsonl")"
cmp -s "$HF_HOME/hub/models--acme--big/blobs/$bsha" "$work/root/models/acme/big/main/data.bin" || fail "resumed file differs"
# ... and across runs: every attempt breaks, the run fails, the partial file stays, no snapshot link.
rm -rf "$HF_HOME"
start_server --fail-halfway data.bin=10
VKF_HUB_RETRIES=0 "$bin" pull acme/big -q > /dev/null 2>"$work/err" && fail "pull succeeded with every transfer broken"
grep -q "resumes from there" "$work/err" || fail "unclear error: $(cat "$work/err")"
part="$HF_HOME/hub/models--acme--big/blobs/$bsha.incomplete"
[ -s "$part" ] || fail "no partial file kept"
[ ! -e "$HF_HOME/hub/models--acme--big/blobs/$bsha" ] || fail "an incomplete blob appears complete"
ls "$HF_HOME"/hub/models--acme--big/snapshots/*/data.bin > /dev/null 2>&1 && fail "a snapshot link to an incomplete file"
have=$(stat -c %s "$part")
start_server
"$bin" pull acme/big -q > /dev/null || fail "resuming pull"
grep -q "\"range\": \"bytes=$have-\"" "$work/log.jsonl" || fail "the next run did not resume at $have: $(cat "$work/log.jsonl")"
cmp -s "$HF_HOME/hub/models--acme--big/blobs/$bsha" "$work/root/models/acme/big/main/data.bin" || fail "resumed file differs"
# A server that ignores Range: the partial file is restarted, not appended to.
rm -rf "$HF_HOME"
start_server --fail-halfway data.bin=1 --ignore-range
"$bin" pull acme/big -q > /dev/null || fail "pull with a server ignoring Range"
cmp -s "$HF_HOME/hub/models--acme--big/blobs/$bsha" "$work/root/models/acme/big/main/data.bin" || fail "file differs (ignored Range)"

# 7. A server sending corrupt data: refused, nothing stored.
rm -rf "$HF_HOME"
start_server --corrupt model.safetensors
err=$("$bin" pull acme/tiny -q 2>&1) && fail "pull of corrupt data succeeded"
grep -q "does not match its etag" <<<"$err" || fail "unclear corruption error: $err"
ls "$cache/blobs" | grep -q "$sha" && fail "a corrupt blob was stored"
[ ! -e "$cache/snapshots/$commit/model.safetensors" ] || fail "a snapshot link to corrupt data"

# 8. Tokens: needed for the private repository, sent to the Hub, never to the storage host.
start_server --flaky-api 2
"$bin" pull acme/tiny -q > /dev/null || fail "pull through two 503 answers"
[ "$(grep -c '"status": 503' "$work/log.jsonl")" -eq 2 ] || fail "the 503 answers were not retried"
err=$("$bin" pull acme/secret 2>&1) && fail "private repository without a token"
grep -q "HF_TOKEN" <<<"$err" || fail "the error does not mention HF_TOKEN: $err"
HF_TOKEN=sekret "$bin" pull acme/secret -q > /dev/null || fail "pull with HF_TOKEN"
rm -rf "$HF_HOME/hub/models--acme--secret"
mkdir -p "$HF_HOME" && echo "sekret" > "$HF_HOME/token"
"$bin" pull acme/secret -q > /dev/null || fail "pull with \$HF_HOME/token"
: > "$work/log.jsonl"
rm -rf "$HF_HOME/hub/models--acme--tiny"
"$bin" pull acme/tiny -q > /dev/null || fail "pull with a token present"
grep '"server": "hub"' "$work/log.jsonl" | grep -q '"auth": false' && fail "a Hub request without the token"
grep '"server": "storage"' "$work/log.jsonl" | grep -q '"auth": true' && fail "the token was sent to the storage host"
rm -f "$HF_HOME/token"

# 9. A renamed repository: relative redirects are followed.
"$bin" pull acme/old-name -q > /dev/null || fail "pull through a relative redirect"

# 10. Unsafe file names in a listing: refused, nothing written outside the cache.
err=$("$bin" pull acme/evil 2>&1) && fail "pull of a listing with unsafe names succeeded"
grep -q "refusing the repository file name" <<<"$err" || fail "unclear unsafe-name error: $err"
[ ! -e "$work/escape.txt" ] && [ ! -e "$HF_HOME/escape.txt" ] && [ ! -e /etc/vkf-escape ] || fail "a file escaped the cache"
for bad in "../x" "acme/../x" "acme//x" "acme/x@../../y" "acme/x@/abs"; do
  "$bin" pull "$bad" > /dev/null 2>&1 && fail "pull '$bad' was accepted"
done

echo "1 passed, 0 failed"
