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
