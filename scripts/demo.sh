#!/usr/bin/env bash
# The `make demo` job: pre-train a small Llama-architecture model from scratch on a public text
# corpus from Debian (fortunes-min: quotations, literature, riddles), with a byte-level BPE
# tokenizer trained on the same text, then sample a few continuations. About 3 minutes on a
# 2-core CPU through lavapipe; a GPU runs a larger default. Everything lands in build/demo.
set -euo pipefail
bin="${1:-build/vkformer}"
out="${2:-build/demo}"
corpus_dir="${VKF_DEMO_CORPUS:-/usr/share/games/fortunes}"
mkdir -p "$out"
"$bin" devices | head -n 2
cat "$corpus_dir/fortunes" "$corpus_dir/literature" "$corpus_dir/riddles" | sed 's/^%$//' > "$out/corpus.txt"
echo "corpus: $(wc -c < "$out/corpus.txt") bytes of English quotations from Debian's fortunes-min"
"$bin" tokenizer train --vocab-size 1024 --out "$out/tokenizer" "$out/corpus.txt"
# A GPU gets a wider, deeper model and more steps than the CPU device.
if "$bin" devices | grep -q "(selected)" && "$bin" devices | grep -A1 "(selected)" | grep -q "type: CPU"; then
  hidden=96; layers=3; inter=256; steps=240; length=64
else
  hidden=384; layers=6; inter=1024; steps=400; length=128
fi
cat > "$out/config.json" <<JSON
{"model_type": "llama", "vocab_size": 1024, "hidden_size": $hidden, "intermediate_size": $inter,
 "num_hidden_layers": $layers, "num_attention_heads": 6, "num_key_value_heads": 2,
 "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "hidden_act": "silu", "initializer_range": 0.02,
 "bos_token_id": 0, "eos_token_id": 0}
JSON
"$bin" train --config "$out/config.json" --tokenizer "$out/tokenizer" --data "$out/corpus.txt" \
  --out "$out/model" --max-length $length --batch-size 8 --max-steps $steps --learning-rate 3e-3 \
  --lr-scheduler-type cosine --warmup-steps 10 --weight-decay 0.01 --eval-fraction 0.05 \
  --logging-steps 10 --seed 1
echo "samples from the new model (sampling, temperature 0.8):"
for prompt in "The" "A man" "Life is"; do
  printf '  %s' "$prompt"
  "$bin" generate --model "$out/model" --prompt "$prompt" --max-new-tokens 24 --do-sample \
    --temperature 0.8 --top-k 40 --seed 3 | tr '\n' ' '
  echo
done
echo "the model, its tokenizer, metrics.jsonl and loss_curve.svg are in $out/model"
