#!/usr/bin/env bash
# End to end through the local Hub (tests/common/hub_server.py): `vkformer train --model org/name
# --data org/dataset` fetches the model and only the chosen split of a Parquet dataset
# (data/train-00000-of-00001.parquet, as push_to_hub names it), trains (the loss falls, the output
# continues the pattern); --split chooses another split, an unknown split lists those there are;
# offline (HF_HUB_OFFLINE=1, server stopped) train, generate and tokenize run from the cache, and an
# uncached dataset is a clear error. A cache written the way huggingface_hub writes it (built here
# by Python: refs without newline, blobs by sha256 / git sha1, relative symlinks, .no_exist) is
# used offline. Local CSV/JSON data with the column options.
set -u
bin="$1"
here="$(cd "$(dirname "$0")" && pwd)"
fixtures="$here/../fixtures"
work=$(mktemp -d)
server_pid=""
stop_server() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap 'stop_server; rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

model="$work/root/models/acme/tiny/main"
ds="$work/root/datasets/acme/pattern/main"
mkdir -p "$model" "$ds/data"
cp "$fixtures/parity/llama/config.json" "$fixtures/parity/llama/model.safetensors" "$model/"
python3 "$here/../common/word_tokenizer.py" "$model"
cp "$fixtures/parquet/train/pattern.parquet" "$ds/data/train-00000-of-00001.parquet"
cp "$fixtures/parquet/train/pattern.parquet" "$ds/data/test-00000-of-00001.parquet"
echo "# pattern" > "$ds/README.md"

python3 "$here/../common/hub_server.py" "$work/root" --port-file "$work/ports" --log "$work/log.jsonl" --max-seconds 300 &
server_pid=$!
for _ in $(seq 1 100); do [ -f "$work/ports" ] && break; sleep 0.05; done
read -r hub_port _ < "$work/ports" || fail "the test server did not start"
export HF_ENDPOINT="http://127.0.0.1:$hub_port" HF_HOME="$work/hf"
unset HF_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HF_TOKEN_PATH

log=$("$bin" train --model acme/tiny --data acme/pattern --out "$work/out" --max-length 32 --batch-size 4 \
      --max-steps 40 --learning-rate 1e-2 --warmup-steps 2 --logging-steps 10 --seed 7 2>&1) || fail "train exited $?: $log"
first=$(grep -o "^step 1/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
last=$(grep -o "^step 40/40  loss [0-9.]*" <<<"$log" | awk '{print $4}')
[ -n "$first" ] && [ -n "$last" ] || fail "missing log lines: $log"
python3 -c "import sys; f,l=map(float,sys.argv[1:]); sys.exit(0 if l < 0.2*f else 1)" "$first" "$last" ||
  fail "loss did not fall: first $first last $last"
out=$("$bin" generate --model "$work/out" --prompt "t3 t4 t5" --no-special --max-new-tokens 4) || fail "generate exited $?"
[ "$out" = "t6 t7 t8 t9" ] || fail "the trained model continued 't3 t4 t5' with '$out'"
grep -q "train-00000-of-00001.parquet" "$work/log.jsonl" || fail "the train split was not fetched"
grep -q "test-00000-of-00001.parquet" "$work/log.jsonl" && fail "the test split was fetched for training"
[ -d "$HF_HOME/hub/datasets--acme--pattern/snapshots" ] || fail "the dataset is not in the shared cache"

"$bin" train --model acme/tiny --data acme/pattern --split test --out "$work/out2" --max-length 32 --max-steps 1 \
  > /dev/null 2>&1 || fail "--split test"
err=$("$bin" train --model acme/tiny --data acme/pattern --split nope --out "$work/out3" --max-length 32 2>&1) &&
  fail "--split nope succeeded"
grep -q "no files for the split 'nope'" <<<"$err" && grep -q "test, train" <<<"$err" || fail "unclear split error: $err"

# Offline, with the server gone: everything from the cache.
stop_server
export HF_HUB_OFFLINE=1
"$bin" train --model acme/tiny --data acme/pattern --out "$work/out4" --max-length 32 --max-steps 2 > /dev/null 2>&1 ||
  fail "offline train"
"$bin" generate --model acme/tiny --prompt "t3" --no-special --max-new-tokens 2 > /dev/null || fail "offline generate"
[ "$(echo '"t3 t4"' | "$bin" tokenize --tokenizer acme/tiny --no-special)" = "[3,4]" ] || fail "offline tokenize"
err=$("$bin" train --model acme/tiny --data acme/other --out "$work/out5" 2>&1) && fail "offline uncached dataset"
grep -q "acme/other" <<<"$err" && grep -q "not in the hub cache" <<<"$err" || fail "unclear offline error: $err"

# A cache as huggingface_hub writes it, built independently of vkformer.
python3 - "$work/pycache" "$model" <<'PY'
import hashlib, os, sys
cache, src = sys.argv[1], sys.argv[2]
repo = os.path.join(cache, "models--acme--pyhub")
commit = "0123456789abcdef0123456789abcdef01234567"
for d in ("blobs", "refs", "snapshots/" + commit, ".no_exist/" + commit):
    os.makedirs(os.path.join(repo, d), exist_ok=True)
open(os.path.join(repo, "refs", "main"), "w").write(commit)
open(os.path.join(repo, ".no_exist", commit, "chat_template.jinja"), "w").close()
for name in sorted(os.listdir(src)):
    data = open(os.path.join(src, name), "rb").read()
    lfs = name.endswith(".safetensors")
    etag = hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    open(os.path.join(repo, "blobs", etag), "wb").write(data)
    link = os.path.join(repo, "snapshots", commit, name)
    os.symlink(os.path.relpath(os.path.join(repo, "blobs", etag), os.path.dirname(link)), link)
PY
out=$(HF_HUB_CACHE="$work/pycache" "$bin" generate --model acme/pyhub --prompt "t3 t4" --no-special --max-new-tokens 2) ||
  fail "a huggingface_hub-layout cache was not used offline"
ref=$("$bin" generate --model "$model" --prompt "t3 t4" --no-special --max-new-tokens 2)
[ "$out" = "$ref" ] || fail "the cached model generated '$out', the folder '$ref'"
unset HF_HUB_OFFLINE

# Local data in other formats, with the column options.
mkdir -p "$work/local"
python3 - "$work/local" <<'PY'
import csv, json, sys
d = sys.argv[1]
with open(f"{d}/train.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["q", "a"])
    for i in range(20):
        w.writerow([f"t20 t21 \"t{22 + i % 3}\"", "t30,t31".replace(",", " ")])
json.dump({"data": [{"body": "t3 t4 t5 t6"} for _ in range(30)]}, open(f"{d}/records.json", "w"), indent=1)
PY
"$bin" train --model acme/tiny --data "$work/local" --prompt-column q --completion-column a --out "$work/o6" \
  --max-length 8 --no-packing --max-steps 1 > /dev/null 2>&1 || fail "CSV folder with --prompt-column/--completion-column"
"$bin" train --model acme/tiny --data "$work/local/records.json" --text-column body --out "$work/o7" \
  --max-length 8 --max-steps 1 > /dev/null 2>&1 || fail "JSON with --text-column"
err=$("$bin" train --model acme/tiny --data "$work/local/records.json" --text-column nope --out "$work/o8" 2>&1) &&
  fail "a missing --text-column succeeded"
grep -q 'no column "nope"' <<<"$err" || fail "unclear column error: $err"
echo "1 passed, 0 failed"
