#!/usr/bin/env node
// Builds small tokenizers with the Hugging Face library itself (Node bindings) and saves their
// tokenizer.json files into OUTDIR, for the parity test of models and stages the downloaded
// tokenizers do not use: WordPiece (BERT normalizer, pre-tokenizer and processing) and Unigram
// (byte fallback, NFKC, Digits, Metaspace, template processing).
//   node build_test_tokenizers.js OUTDIR
'use strict';
const path = require('path');
const os = require('os');
const fs = require('fs');

const npmDir = process.env.VKF_NPM_DIR || path.join(os.homedir(), '.cache', 'vkformer', 'npm');
const t = require(path.join(npmDir, 'node_modules', '@anush008', 'tokenizers'));
const out = process.argv[2];
fs.mkdirSync(out, { recursive: true });

const letters = 'abcdefghijklmnopqrstuvwxyz0123456789'.split('');
const punct = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~'.split('');
const words = ['hello', 'world', 'the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog',
  'un', 'line', 'one', 'two', 'three', 'tab', 'cafe', 'user', 'example', 'com', 'you', 'are'];
const suffixes = ['##s', '##ing', '##aff', '##able', '##ly', '##ed', '##er', '##ion', '##lo'];

// WordPiece, BERT style.
{
  const vocab = {};
  for (const w of ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', ...letters, ...punct,
    ...letters.map((c) => '##' + c), ...words, ...suffixes, '東', '京', '日', '本', 'и', '##р'])
    if (!(w in vocab)) vocab[w] = Object.keys(vocab).length;
  const tok = new t.Tokenizer(t.WordPiece.init(vocab, { unkToken: '[UNK]' }));
  tok.setNormalizer(t.bertNormalizer());
  tok.setPreTokenizer(t.bertPreTokenizer());
  tok.setPostProcessor(t.bertProcessing(['[SEP]', 3], ['[CLS]', 2]));
  tok.setDecoder(t.wordPieceDecoder());
  tok.addSpecialTokens(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']);
  tok.save(path.join(out, 'wordpiece.json'));
}

// Unigram with byte fallback.
{
  const pieces = [['<unk>', 0], ['<s>', 0], ['</s>', 0], ['▁', -2.5]];
  letters.forEach((c, i) => pieces.push([c, -4 - i / 10]));
  letters.slice(0, 26).forEach((c, i) => pieces.push(['▁' + c, -4.5 - i / 20]));
  words.forEach((w, i) => pieces.push(['▁' + w, -6 - i / 7], [w, -7 - i / 5]));
  ['He', 'llo', 'Hel', 'lo', 'wor', 'ld', 'qu', 'ick', 'Ca', 'fé', 'é', 'Ü'].forEach((w, i) =>
    pieces.push([w, -5 - i / 3]));
  for (let b = 0; b < 256; b++) pieces.push(['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>', -12]);
  const tok = new t.Tokenizer(t.Unigram.init(pieces, { unkId: 0, byteFallback: true }));
  tok.setNormalizer(t.nfkcNormalizer());
  tok.setPreTokenizer(t.sequencePreTokenizer([t.digitsPreTokenizer(true), t.metaspacePreTokenizer()]));
  tok.setPostProcessor(t.templateProcessing('<s> $A </s>', null, [['<s>', 1], ['</s>', 2]]));
  tok.setDecoder(t.sequenceDecoder([t.byteFallbackDecoder(), t.metaspaceDecoder()]));
  tok.addSpecialTokens(['<unk>', '<s>', '</s>']);
  tok.save(path.join(out, 'unigram.json'));
}

// Hand-written tokenizer.json files, loaded and checked by the library (fromFile) before they are
// saved, covering the remaining stages: BPE with prefix/suffix, ByteLevel with its regex, Split
// behaviours, WordLevel, the string normalizers and decoders, and added-token options.
function bpeFrom(words, base, { prefix = '', suffix = '' } = {}) {
  const vocab = {};
  const add = (w) => { if (!(w in vocab)) vocab[w] = Object.keys(vocab).length; };
  base.forEach((c) => { add(c); if (prefix) add(prefix + c); if (suffix) add(c + suffix); if (prefix && suffix) add(prefix + c + suffix); });
  const merges = [];
  for (const w of words) {
    const chars = [...w];
    let left = chars[0];
    for (let i = 1; i < chars.length; i++) {
      let right = (prefix ? prefix : '') + chars[i] + (i === chars.length - 1 ? suffix : '');
      const m = left + right.slice(prefix.length);
      if (!(m in vocab)) { add(right); add(m); merges.push([left, right]); }
      left = m;
    }
  }
  return { vocab, merges };
}
function save(name, obj) {
  const file = path.join(out, name + '.json');
  fs.writeFileSync(file, JSON.stringify(obj));
  t.Tokenizer.fromFile(file).save(file);  // fails here if the library rejects the file
}
const added = (id, content, o = {}) => ({ id, content, single_word: false, lstrip: false,
  rstrip: false, normalized: false, special: true, ...o });
const ascii = [];
for (let c = 33; c < 127; c++) ascii.push(String.fromCharCode(c));
const common = ['the', 'quick', 'brown', 'fox', 'hello', 'world', 'line', 'you', 'are', 'com',
  'example', 'user', 'tab', 'mixed', 'spaces', 'emoji', 'ing', 'er', 'th', 'and', 'it', 'is'];

{  // BPE with a continuing-subword prefix and an end-of-word suffix.
  const { vocab, merges } = bpeFrom(common, ascii.map((c) => c.toLowerCase()), { prefix: '##', suffix: '</w>' });
  vocab['<unk>'] = Object.keys(vocab).length;
  const n = Object.keys(vocab).length;
  save('bpe_suffix', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(n, '<mask>', { lstrip: true, single_word: true }),
      added(n + 1, '[special]', { special: false, normalized: true }), added(n + 2, '<s>'), added(n + 3, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' },
      { type: 'Lowercase' }, { type: 'Strip', strip_left: true, strip_right: true },
      { type: 'Replace', pattern: { Regex: '\\s+' }, content: ' ' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' },
      { type: 'Punctuation', behavior: 'Isolated' }, { type: 'Digits', individual_digits: false }] },
    post_processor: { type: 'RobertaProcessing', sep: ['</s>', n + 3], cls: ['<s>', n + 2], trim_offsets: true, add_prefix_space: false },
    decoder: { type: 'BPEDecoder', suffix: '</w>' },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: '##',
      end_of_word_suffix: '</w>', fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
  });
}

{  // GPT-2 / RoBERTa style byte-level BPE with merges as "a b" strings.
  const alphabet = t.byteLevelAlphabet();
  const { vocab, merges } = bpeFrom(common.map((w) => 'Ġ' + w).concat(common), alphabet);
  const n = Object.keys(vocab).length;
  save('bytelevel', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(n, '<s>'), added(n + 1, '</s>'), added(n + 2, '<mask>', { lstrip: true }),
      added(n + 3, '<|im_start|>', { rstrip: true })],
    normalizer: { type: 'NFKC' },
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    post_processor: { type: 'Sequence', processors: [{ type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [n], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [n + 1], tokens: ['</s>'] } } }] },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, vocab, merges: merges.map((m) => m.join(' ')) },
  });
}

{  // WordLevel with Split behaviours and string decoders.
  const vocab = { '[UNK]': 0, '[CLS]': 1, '[SEP]': 2 };
  for (const w of common.concat(ascii, ['hello ', 'world ', 'the ', ' ', '1', '12', '123'])) if (!(w in vocab)) vocab[w] = Object.keys(vocab).length;
  save('wordlevel', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(0, '[UNK]'), added(1, '[CLS]'), added(2, '[SEP]')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKD' }, { type: 'Lowercase' }, { type: 'Prepend', prepend: '>' }] },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { String: ' ' }, behavior: 'MergedWithPrevious', invert: false },
      { type: 'Split', pattern: { Regex: '\\d+' }, behavior: 'Contiguous', invert: false },
      { type: 'Split', pattern: { Regex: '[aeiou]' }, behavior: 'MergedWithNext', invert: true },
      { type: 'Split', pattern: { String: '>' }, behavior: 'Removed', invert: false },
      { type: 'Whitespace' }] },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '[CLS]': { id: '[CLS]', ids: [1], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [2], tokens: ['[SEP]'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: 'e' }, content: 'E' },
      { type: 'Replace', pattern: { Regex: '[0-9]+' }, content: '#' }, { type: 'Strip', content: 'h', start: 1, stop: 0 }, { type: 'Fuse' }] },
    model: { type: 'WordLevel', vocab, unk_token: '[UNK]' },
  });
}

{  // Metaspace with prepend_scheme "first", byte-fallback BPE with ignore_merges.
  const base = ascii.concat(['▁']);
  const { vocab, merges } = bpeFrom(common.map((w) => '▁' + w).concat(common), base);
  for (let b = 0; b < 256; b++) vocab['<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>'] = Object.keys(vocab).length;
  vocab['▁hello▁world'] = Object.keys(vocab).length;
  const n = Object.keys(vocab).length;
  save('metaspace', {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [added(n, '<s>'), added(n + 1, '</s>'), added(n + 2, '<|im_start|>')],
    normalizer: null,
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [n], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false }] },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: true, ignore_merges: true, vocab, merges },
  });
}

// A SentencePiece-style Precompiled normalizer: a tiny charsmap (Darts double-array trie + the
// replacement strings) built here, so the library checks that vkformer reads the format alike.
function charsmap(map) {
  const keys = Object.keys(map).map((k) => Buffer.from(k, 'utf8'));
  let blob = Buffer.alloc(0);
  const value = new Map();
  for (const k of Object.keys(map)) {
    value.set(Buffer.from(k, 'utf8').toString('hex'), blob.length);
    blob = Buffer.concat([blob, Buffer.from(map[k], 'utf8'), Buffer.from([0])]);
  }
  // Trie nodes as prefixes; every node gets its own 256-unit block for its children.
  const units = [0];
  let blocks = 1;
  function place(p, prefix) {
    const base = 256 * blocks++;
    while (units.length < base + 256) units.push(0);
    const kids = new Set();
    for (const k of keys) if (k.length > prefix.length && k.subarray(0, prefix.length).equals(prefix)) kids.add(k[prefix.length]);
    const key = prefix.toString('hex');
    const leaf = prefix.length > 0 && value.has(key);
    units[p] = (units[p] & 0xff) | (leaf ? 1 << 8 : 0) | ((p ^ base) << 10);
    if (leaf) units[base] = (value.get(key) | 0x80000000) >>> 0;
    for (const c of [...kids].sort((a, b) => a - b)) {
      units[base ^ c] = c;
      place(base ^ c, Buffer.concat([prefix, Buffer.from([c])]));
    }
  }
  place(0, Buffer.alloc(0));
  const trie = Buffer.alloc(units.length * 4);
  units.forEach((u, i) => trie.writeUInt32LE(u >>> 0, i * 4));
  const head = Buffer.alloc(4);
  head.writeUInt32LE(trie.length, 0);
  return Buffer.concat([head, trie, blob]).toString('base64');
}
{
  const pieces = [['<unk>', 0], ['▁', -2]];
  letters.forEach((c, i) => pieces.push([c, -4 - i / 10], ['▁' + c, -4.5 - i / 20]));
  ['fi', 'XII', 'ks', 'ae'].forEach((w, i) => pieces.push([w, -3 - i]));
  save('precompiled', {
    version: '1.0', truncation: null, padding: null, added_tokens: [added(0, '<unk>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Precompiled', precompiled_charsmap: charsmap({
      'ﬁ': 'fi', 'Ⅻ': 'XII', 'x': 'ks', 'æ': 'ae', '\u3000': ' ', '①': '1', 'é': 'e', 'e\u0301': 'E', 'ab': 'AB', '👍🏻': '+', 'ς': 'σ' }) },
      { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    post_processor: null,
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: 0, byte_fallback: false, vocab: pieces },
  });
}
