#!/usr/bin/env python3
"""Writes a small WordLevel tokenizer for the CLI tests into DIR: tokens "t0".."t47" split on
whitespace (t0 unknown, t1 BOS, t2 EOS) and a chat template that marks user turns with t10 and
assistant turns with t11.

  python3 tests/common/word_tokenizer.py DIR
"""
import json
import sys

d = sys.argv[1]
vocab = {f"t{i}": i for i in range(48)}
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
           "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}},
          open(f"{d}/tokenizer.json", "w"))
json.dump({"bos_token": "t1", "eos_token": "t2",
           "chat_template": "{% for m in messages %}t{{ 10 if m['role'] == 'user' else 11 }} "
                            "{{ m['content'] }} {% endfor %}"},
          open(f"{d}/tokenizer_config.json", "w"))
