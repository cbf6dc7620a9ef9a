#!/usr/bin/env bash
# A/B timing of decode variants in one call, the way bench/RESULTS.md's decode sections measure a
# change: every variant is a decode_bench command (a binary and its flags), run alternately for a
# few rounds after one throwaway run that brings the GPU's clocks up, then once more with
# --stage-profile. Prints the replayed step's ms per variant and round, and each variant's stages.
#   bench/decode_ab.sh [-r ROUNDS] [-a 'COMMON FLAGS'] 'VARIANT A' 'VARIANT B' ...
# A variant is a binary followed by its own flags, e.g.
#   bench/decode_ab.sh build/bench/decode_bench 'build/bench/decode_bench --skinny-early-epilogue'
# Common flags default to the batch-1 replay of the 1B shape with f16 weights and 300 ms of
# warm-up before each timed run.
set -u -o pipefail
rounds=3
common="--shape 1b --dtype f16 --modes replay --batch 1 --warmup-ms 300"
while getopts "r:a:" opt; do
  case "$opt" in
    r) rounds="$OPTARG" ;;
    a) common="$OPTARG" ;;
    *) echo "usage: $0 [-r ROUNDS] [-a 'COMMON FLAGS'] 'VARIANT' ..." >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -lt 1 ]; then
  echo "usage: $0 [-r ROUNDS] [-a 'COMMON FLAGS'] 'VARIANT' ..." >&2
  exit 2
fi
variants=("$@")

# ms per step of one run (decode_bench prints one JSON line per run), with the same timed as
# transformers is (the whole generate minus a one-token generate) where decode_bench prints it, or
# "failed".
ms_of() {
  # shellcheck disable=SC2086  # the variant and the common flags are word lists on purpose
  $1 $common | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(" ".join("%.4f" % r["ms_per_step"] + (" (%.4f minus prefill)" % r["ms_per_step_minus_prefill"]
                if "ms_per_step_minus_prefill" in r else "") for r in rows) if rows else "failed")'
}

# The throwaway run (its own flags may not repeat one of the common ones: decode_bench takes each
# option once).
# shellcheck disable=SC2086
${variants[0]} $common > /dev/null 2>&1 || echo "throwaway run failed: ${variants[0]}"
for ((r = 1; r <= rounds; ++r)); do
  for v in "${variants[@]}"; do
    echo "round $r | $(ms_of "$v") ms | $v"
  done
done
for v in "${variants[@]}"; do
  echo "=== stage profile: $v"
  # shellcheck disable=SC2086
  $v $common --stage-profile --profile-shapes 2>&1 | grep -E "GPU time|^  [a-z]" || echo "failed"
done
