#!/usr/bin/env python3
"""Does a model folder load into transformers and give the expected logits?

    python3 tools/oracle/check_saved_model.py --model DIR --batch BATCH.safetensors \
        --logits LOGITS.safetensors [--key logits] [--tol 1e-5] [--adapter ADAPTER_DIR]

Loads DIR with AutoModelForCausalLM.from_pretrained (fp32, eager attention, CPU), runs the batch
(input_ids, attention_mask from BATCH.safetensors; eval mode, no labels) and prints
max |logits - given| over the non-padding positions (attention_mask == 1), where the given logits
are the tensor KEY of LOGITS.safetensors ([B, T, V], e.g. a parity fixture's
expected_strict_fp32.safetensors or vkformer's own output). vkformer uses it to prove that the
folders it saves load in transformers. Exit status: 0 when the folder loaded with no missing,
unexpected or mismatched tensors (and, with --tol, the error is within it); 1 otherwise.
With --adapter, a peft LoRA adapter folder is loaded onto the model (peft.PeftModel.from_pretrained)
and the adapted model's logits are compared.
"""

import argparse
import sys

import torch
import transformers
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with config.json + safetensors")
    ap.add_argument("--batch", required=True, help="safetensors with input_ids, attention_mask")
    ap.add_argument("--logits", required=True, help="safetensors holding the logits to compare")
    ap.add_argument("--key", default="logits", help="tensor name in --logits (default: logits)")
    ap.add_argument("--tol", type=float, default=None, help="fail when the error exceeds this")
    ap.add_argument("--adapter", default=None, help="a peft adapter folder to load onto the model")
    args = ap.parse_args()

    torch.set_num_threads(1)
    major = int(transformers.__version__.split(".")[0])
    dtype_kw = {"dtype": torch.float32} if major >= 5 else {"torch_dtype": torch.float32}
    model, info = AutoModelForCausalLM.from_pretrained(
        args.model, attn_implementation="eager", output_loading_info=True, **dtype_kw)
    if args.adapter:
        import peft
        model = peft.PeftModel.from_pretrained(model, args.adapter, autocast_adapter_dtype=False)
        print(f"peft {peft.__version__}: loaded {args.adapter}")
    model.eval()
    bad = {k: v for k, v in info.items() if v and k in
           ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    for k, v in bad.items():
        print(f"loading: {k}: {sorted(map(str, v))}")

    batch = load_file(args.batch)
    ids, mask = batch["input_ids"].long(), batch["attention_mask"].long()
    given = load_file(args.logits)[args.key]
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    if tuple(given.shape) != tuple(logits.shape):
        print(f"shape mismatch: transformers gives {list(logits.shape)}, "
              f"{args.logits}:{args.key} is {list(given.shape)}")
        return 1
    keep = mask.bool()
    err = (logits.double() - given.double()).abs()[keep].max().item()
    print(f"{type(model).__name__} (transformers {transformers.__version__}, torch "
          f"{torch.__version__}): max |logits - given| over {int(keep.sum())} non-padding "
          f"positions = {err:.3e}")
    if bad or (args.tol is not None and not err <= args.tol):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
