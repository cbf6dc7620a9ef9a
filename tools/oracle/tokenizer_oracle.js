#!/usr/bin/env node
// The reference for vkformer's tokenizer: runs the Hugging Face `tokenizers` library (through
// its Node bindings, @anush008/tokenizers) on JSON lines from stdin, writing one JSON line per
// input in the same format as `vkformer tokenize`.
//   node tokenizer_oracle.js TOKENIZER_JSON MODE < lines
// MODE: encode | encode-nospecial (JSON strings in, id arrays out),
//       decode | decode-skip (id arrays in, strings out; decode-skip skips special tokens).
// The npm packages live in $VKF_NPM_DIR (default ~/.cache/vkformer/npm; scripts/setup.sh).
'use strict';
const path = require('path');
const os = require('os');
const readline = require('readline');

const npmDir = process.env.VKF_NPM_DIR || path.join(os.homedir(), '.cache', 'vkformer', 'npm');
let tokenizers;
try {
  tokenizers = require(path.join(npmDir, 'node_modules', '@anush008', 'tokenizers'));
} catch (e) {
  console.error(`tokenizer_oracle: cannot load @anush008/tokenizers from ${npmDir} ` +
                `(${e.message}); run scripts/setup.sh`);
  process.exit(2);
}

async function main() {
  const [file, mode] = process.argv.slice(2);
  if (!file || !['encode', 'encode-nospecial', 'decode', 'decode-skip'].includes(mode)) {
    console.error('usage: tokenizer_oracle.js TOKENIZER_JSON encode|encode-nospecial|decode|decode-skip');
    process.exit(2);
  }
  const tok = tokenizers.Tokenizer.fromFile(file);
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const out = [];
  for await (const line of rl) {
    if (line.trim() === '') continue;
    const value = JSON.parse(line);
    if (mode.startsWith('encode')) {
      const enc = await tok.encode(value, null, { addSpecialTokens: mode === 'encode' });
      out.push(JSON.stringify(enc.getIds()));
    } else {
      out.push(JSON.stringify(await tok.decode(value, mode === 'decode-skip')));
    }
  }
  process.stdout.write(out.map((l) => l + '\n').join(''));
}

main().catch((e) => {
  console.error(`tokenizer_oracle: ${e.stack || e}`);
  process.exit(1);
});
