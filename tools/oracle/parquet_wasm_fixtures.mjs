// Writes Parquet test files with arrow-rs (through the parquet-wasm npm package, built from the Rust
// `parquet` crate) plus the rows they hold, for tests/unit/test_parquet.cpp: an independent writer
// exercising what the reader must handle (PLAIN and dictionary encodings, data pages v1 and v2, the
// delta encodings arrow-rs uses for v2, snappy/gzip/zstd, several row groups and pages, nulls,
// list<struct> "messages", list<string>, int64/double/bool columns).
//
//   NODE_PATH=~/.cache/vkformer/npm/node_modules node tools/oracle/parquet_wasm_fixtures.mjs \
//       tests/fixtures/parquet/arrow_rs
//
// needs the npm packages parquet-wasm and apache-arrow (scripts/setup.sh installs them). Writes
// OUT_DIR/<variant>.parquet, OUT_DIR/expected.json ({"rows": [...], "files": [...]}) and
// OUT_DIR/../train/pattern.parquet. The same inputs give the same bytes, so the committed files can
// be regenerated and compared (npm install parquet-wasm@0.8.0 apache-arrow@21 into NODE_PATH first).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(import.meta.url);
const modules = process.env.NODE_PATH || path.join(process.env.HOME, '.cache/vkformer/npm/node_modules');
const arrow = require(path.join(modules, 'apache-arrow'));
const pq = await import(path.join(modules, 'parquet-wasm/node/parquet_wasm.js'));

const out = process.argv[2];
if (!out) {
  console.error('usage: node parquet_wasm_fixtures.mjs OUT_DIR');
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

// Deterministic rows: a small LCG, repeated values (so dictionaries help), unicode, empty strings,
// nulls in every nullable column, long strings that cross page boundaries.
let seed = 12345;
const rand = (n) => {
  seed = (seed * 1103515245 + 12345) % 2147483648;
  return seed % n;
};
const words = ['alpha', 'beta', 'gamma', 'δέλτα', '数据', 'emoji 🙂', '', 'tab\there', 'quote "x"', 'line\nbreak'];
const rows = [];
for (let i = 0; i < 257; ++i) {
  const nwords = 1 + rand(12);
  const text = Array.from({ length: nwords }, () => words[rand(words.length)]).join(' ') + (i % 50 === 7 ? 'x'.repeat(700) : '');
  const turns = rand(4);
  const messages = i % 31 === 5 ? null : Array.from({ length: turns }, (_, t) => ({
    role: t % 2 === 0 ? 'user' : 'assistant',
    content: t === 1 && i % 9 === 0 ? null : `${words[rand(words.length)]} #${i}.${t}`,
  }));
  rows.push({
    id: i * 1000003 - 500000,
    text,
    prompt: i % 13 === 3 ? null : `Q${i % 17}: ${words[rand(words.length)]}?`,
    completion: `A${i}`,
    messages,
    tags: i % 7 === 0 ? null : Array.from({ length: rand(3) }, () => words[rand(4)]),
    score: i % 11 === 0 ? null : (i * 0.37) - 20.125,
    flag: i % 5 === 2 ? null : i % 3 === 0,
  });
}

const utf8 = () => new arrow.Utf8();
const messageType = new arrow.Struct([
  new arrow.Field('role', utf8(), true),
  new arrow.Field('content', utf8(), true),
]);
const columns = {
  id: arrow.vectorFromArray(rows.map((r) => BigInt(r.id)), new arrow.Int64()),
  text: arrow.vectorFromArray(rows.map((r) => r.text), utf8()),
  prompt: arrow.vectorFromArray(rows.map((r) => r.prompt), utf8()),
  completion: arrow.vectorFromArray(rows.map((r) => r.completion), utf8()),
  messages: arrow.vectorFromArray(rows.map((r) => r.messages), new arrow.List(new arrow.Field('item', messageType, true))),
  tags: arrow.vectorFromArray(rows.map((r) => r.tags), new arrow.List(new arrow.Field('item', utf8(), true))),
  score: arrow.vectorFromArray(rows.map((r) => r.score), new arrow.Float64()),
  flag: arrow.vectorFromArray(rows.map((r) => r.flag), new arrow.Bool()),
};
const table = new arrow.Table(columns);
const ipc = arrow.tableToIPC(table, 'stream');

const compressions = { none: pq.Compression.UNCOMPRESSED, snappy: pq.Compression.SNAPPY, gzip: pq.Compression.GZIP, zstd: pq.Compression.ZSTD };
const files = [];
for (const [cname, codec] of Object.entries(compressions)) {
  for (const dict of [true, false]) {
    for (const version of ['v1', 'v2']) {
      let props = new pq.WriterPropertiesBuilder()
        .setCompression(codec)
        .setDictionaryEnabled(dict)
        .setWriterVersion(version === 'v1' ? pq.WriterVersion.V1 : pq.WriterVersion.V2)
        .setMaxRowGroupSize(100)
        .setDataPageSizeLimit(600);
      if (!dict && version === 'v1') props = props.setEncoding(pq.Encoding.PLAIN);
      const bytes = pq.writeParquet(pq.Table.fromIPCStream(ipc), props.build());
      const name = `arrow_rs_${cname}_${dict ? 'dict' : 'plain'}_${version}.parquet`;
      fs.writeFileSync(path.join(out, name), bytes);
      files.push(name);
    }
  }
}
// A training set for tests/cli/hub_train.sh: a "text" column of the cycle t3 .. t9 (fully
// predictable after one token), snappy, dictionary-encoded, as push_to_hub writes train splits.
const pattern = Array.from({ length: 60 }, (_, r) => Array.from({ length: 40 }, (_, k) => `t${3 + ((r + k) % 7)}`).join(' '));
const patternTable = new arrow.Table({ text: arrow.vectorFromArray(pattern, utf8()) });
fs.mkdirSync(path.join(out, '..', 'train'), { recursive: true });
fs.writeFileSync(path.join(out, '..', 'train', 'pattern.parquet'), pq.writeParquet(
  pq.Table.fromIPCStream(arrow.tableToIPC(patternTable, 'stream')),
  new pq.WriterPropertiesBuilder().setCompression(pq.Compression.SNAPPY).build()));
// JSON has no 64-bit integers in JS: ids stay within 2^53, so plain numbers are exact.
fs.writeFileSync(path.join(out, 'expected.json'), JSON.stringify({ writer: 'arrow-rs via parquet-wasm 0.8.0', files, rows }, null, 0) + '\n');
console.log(`wrote ${files.length} files and expected.json to ${out}`);
