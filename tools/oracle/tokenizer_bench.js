#!/usr/bin/env node
// Encode throughput of the HF tokenizers library (Node bindings) on the same text as
// bench/tokenize_bench.cpp: the parity corpus repeated REPEAT times, one encode call, best of 3.
//   RAYON_NUM_THREADS=1 node tokenizer_bench.js TOKENIZER_JSON [REPEAT] [CORPUS]
'use strict';
const path = require('path');
const os = require('os');
const fs = require('fs');

const npmDir = process.env.VKF_NPM_DIR || path.join(os.homedir(), '.cache', 'vkformer', 'npm');
const t = require(path.join(npmDir, 'node_modules', '@anush008', 'tokenizers'));

async function main() {
  const [file, repeat = '200', corpus = 'tests/fixtures/tokenizer/corpus.jsonl'] = process.argv.slice(2);
  const joined = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) + '\n').join('');
  const text = joined.repeat(Number(repeat));
  const tok = t.Tokenizer.fromFile(file);
  let best = Infinity, n = 0;
  for (let i = 0; i < 3; i++) {
    const t0 = process.hrtime.bigint();
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    n = enc.getIds().length;
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  const bytes = Buffer.byteLength(text, 'utf8');
  console.log(`hf-tokenizers (node): ${bytes} bytes, ${n} tokens, ${best.toFixed(3)} s, ` +
              `${(bytes / best / 1e6).toFixed(2)} MB/s, ${(n / best).toFixed(0)} tokens/s`);
}
main();
