#!/usr/bin/env python3
"""Greedy-generation fixtures: for each parity fixture model (tests/fixtures/parity/<case>), the
tokens transformers' generate() produces greedily for a left-padded batch of two prompts and for the
first prompt alone. Written to one JSON file that tests/unit/test_generate.cpp reads.

  python3 tools/oracle/generate_fixtures.py [--out tests/fixtures/generate/greedy.json]
"""
import argparse
import glob
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM

PROMPTS = [[5, 9, 13, 21, 7, 30], [17, 3, 11]]
MAX_NEW = 10
PAD, EOS = 0, 2


def run(model, prompts):
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False,
                         pad_token_id=PAD, eos_token_id=EOS, num_beams=1)
    rows = []
    for r in out[:, width:].tolist():
        if EOS in r:  # tokens after EOS are padding
            r = r[: r.index(EOS) + 1]
        rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/generate/greedy.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    result = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
              "prompts": PROMPTS, "max_new_tokens": MAX_NEW, "pad_token_id": PAD,
              "eos_token_id": EOS, "cases": {}}
    for d in sorted(glob.glob("tests/fixtures/parity/*/")):
        case = os.path.basename(os.path.dirname(d))
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
        model.eval()
        with torch.no_grad():
            result["cases"][case] = {"batch": run(model, PROMPTS), "single": run(model, PROMPTS[:1])}
        print(case, result["cases"][case])
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
