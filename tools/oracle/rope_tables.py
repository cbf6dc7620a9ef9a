#!/usr/bin/env python3
"""Fixture for tests/unit/test_rope.cpp: transformers' rotary inverse frequencies, attention
scaling and cos/sin tables for one config of each rope type.

    python tools/oracle/rope_tables.py [OUT]      (default: tests/fixtures/rope/rope_tables.json)

Needs torch and transformers (v5 `rope_parameters` configs; v4 `rope_scaling` configs also work).
Runs on the CPU: torch's GPU kernels divide by a scalar through its reciprocal, which can differ in
the last bit. transformers builds inv_freq with float32 tensors whatever the default dtype, so the
values are float32 (written as exact JSON doubles); attention_scaling is a Python float.

Each case's "config" uses vkformer's RopeConfig field names (src/ops/rope_tables.h): 0 means
"absent" for factor (yarn / longrope) and original_max_position_embeddings. "cos"/"sin" are the
[len(positions), rotary_dim] tables of the rotary embedding's forward (freqs = inv_freq @ positions
in float32, emb = cat(freqs, freqs), emb.cos() * attention_scaling), computed from this inv_freq.
"""

import argparse
import json
import pathlib
import sys

import torch
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])

# Sample positions: 0, small, repeated-free, and the far end of a 4K table.
POSITIONS = [0, 1, 2, 3, 7, 100, 1000, 4095]


def rope_config(**fields):
    """A RopeConfig (vkformer field names) with transformers' defaults for the fields not given."""
    cfg = {
        "type": "default",
        "theta": 10000.0,
        "head_dim": 64,
        "partial_rotary_factor": 1.0,
        "factor": 1.0,
        "original_max_position_embeddings": 0,
        "max_position_embeddings": 4096,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": None,
        "mscale_all_dim": None,
        "attention_factor": None,
        "truncate": True,
        "short_factor": [],
        "long_factor": [],
    }
    unknown = set(fields) - set(cfg)
    if unknown:
        raise KeyError(f"unknown RopeConfig fields {unknown}")
    cfg.update(fields)
    return cfg


SHORT = [1.0 + 0.037 * i for i in range(32)]  # not float32-exact: exercises the float32 rounding
LONG = [1.0 + 1.31 * i for i in range(32)]

CASES = [
    dict(name="default_theta1e4", config=rope_config()),
    dict(name="default_theta5e5_partial0.5",
         config=rope_config(theta=500000.0, head_dim=128, partial_rotary_factor=0.5)),
    dict(name="linear_factor4", config=rope_config(type="linear", factor=4.0)),
    dict(name="dynamic_factor2_init",
         config=rope_config(type="dynamic", factor=2.0, max_position_embeddings=2048)),
    dict(name="dynamic_factor2_seq5000",
         config=rope_config(type="dynamic", factor=2.0, max_position_embeddings=2048),
         seq_len=5000, positions=POSITIONS + [4999]),
    dict(name="llama3_factor8",
         config=rope_config(type="llama3", theta=500000.0, head_dim=128, factor=8.0,
                            low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=8192,
                            max_position_embeddings=131072)),
    dict(name="yarn_factor4",
         config=rope_config(type="yarn", factor=4.0, original_max_position_embeddings=4096,
                            max_position_embeddings=16384)),
    dict(name="yarn_factor4_mscale",
         config=rope_config(type="yarn", factor=4.0, original_max_position_embeddings=4096,
                            max_position_embeddings=16384, mscale=0.707, mscale_all_dim=1.0)),
    dict(name="yarn_factor4_no_truncate",
         config=rope_config(type="yarn", factor=4.0, original_max_position_embeddings=4096,
                            max_position_embeddings=16384, truncate=False)),
    dict(name="yarn_partial0.5_betas",
         config=rope_config(type="yarn", theta=1000000.0, head_dim=128, partial_rotary_factor=0.5,
                            factor=4.0, original_max_position_embeddings=4096,
                            max_position_embeddings=16384, beta_fast=16.0, beta_slow=2.0)),
    dict(name="longrope_short",
         config=rope_config(type="longrope", factor=0.0, original_max_position_embeddings=4096,
                            max_position_embeddings=131072, short_factor=SHORT, long_factor=LONG),
         seq_len=100),
    dict(name="longrope_long",
         config=rope_config(type="longrope", factor=0.0, original_max_position_embeddings=4096,
                            max_position_embeddings=131072, short_factor=SHORT, long_factor=LONG),
         seq_len=5000, positions=POSITIONS + [4999]),
]


def rope_type_for_transformers(cfg):
    """transformers v5 no longer registers "default"; linear scaling with factor 1.0 computes the
    same numbers (the final division by 1.0 is exact)."""
    if cfg["type"] == "default" and "default" not in ROPE_INIT_FUNCTIONS:
        return "linear", 1.0
    return cfg["type"], cfg["factor"]


def hf_config(cfg):
    """A LlamaConfig carrying cfg in the form this transformers version reads."""
    rope_type, factor = rope_type_for_transformers(cfg)
    params = {"rope_type": rope_type}
    if rope_type != "default":
        if factor != 0.0:
            params["factor"] = factor
    if rope_type in ("yarn", "longrope", "llama3") and cfg["original_max_position_embeddings"]:
        params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    if rope_type == "llama3":
        params["low_freq_factor"] = cfg["low_freq_factor"]
        params["high_freq_factor"] = cfg["high_freq_factor"]
    if rope_type == "yarn":
        params["beta_fast"] = cfg["beta_fast"]
        params["beta_slow"] = cfg["beta_slow"]
        params["truncate"] = cfg["truncate"]
        for key in ("mscale", "mscale_all_dim"):
            if cfg[key] is not None:
                params[key] = cfg[key]
    if rope_type in ("yarn", "longrope") and cfg["attention_factor"] is not None:
        params["attention_factor"] = cfg["attention_factor"]
    if rope_type == "longrope":
        params["short_factor"] = cfg["short_factor"]
        params["long_factor"] = cfg["long_factor"]

    heads = 4
    common = dict(hidden_size=cfg["head_dim"] * heads, num_attention_heads=heads,
                  num_key_value_heads=heads, head_dim=cfg["head_dim"],
                  max_position_embeddings=cfg["max_position_embeddings"])
    if TRANSFORMERS_MAJOR >= 5:
        params["rope_theta"] = cfg["theta"]
        if cfg["partial_rotary_factor"] != 1.0:
            params["partial_rotary_factor"] = cfg["partial_rotary_factor"]
        return LlamaConfig(**common, rope_parameters=params)
    # v4: rope_theta and partial_rotary_factor are config attributes; longrope reads the original
    # context length from the config itself.
    extra = {}
    if cfg["partial_rotary_factor"] != 1.0:
        extra["partial_rotary_factor"] = cfg["partial_rotary_factor"]
    if rope_type == "longrope" and cfg["original_max_position_embeddings"]:
        extra["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    scaling = None if rope_type == "default" else params
    return LlamaConfig(**common, rope_theta=cfg["theta"], rope_scaling=scaling, **extra)


def hf_cos_sin(inv_freq, attention_scaling, positions):
    """The rotary embedding forward of transformers' Llama-family models, on CPU in float32."""
    inv = inv_freq[None, :, None].float()
    pos = torch.tensor([positions], dtype=torch.int64)[:, None, :].float()
    freqs = (inv @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention_scaling)[0], (emb.sin() * attention_scaling)[0]


def run_case(case):
    cfg = case["config"]
    seq_len = case.get("seq_len", 0)
    positions = case.get("positions", POSITIONS)
    rope_type, _ = rope_type_for_transformers(cfg)
    fn = ROPE_INIT_FUNCTIONS[rope_type]
    # The forward-time update of dynamic / longrope passes max(position_ids) + 1 as a tensor.
    seq_arg = None
    if seq_len:
        seq_arg = torch.tensor(seq_len) if cfg["type"] == "dynamic" else seq_len
    inv_freq, attention_scaling = fn(hf_config(cfg), torch.device("cpu"), seq_arg)
    attention_scaling = float(attention_scaling)
    cos, sin = hf_cos_sin(inv_freq, attention_scaling, positions)
    return {
        "name": case["name"],
        "config": cfg,
        "seq_len": seq_len,
        "hf_function": fn.__name__,
        "inv_freq_dtype": str(inv_freq.dtype),
        "inv_freq": [float(v) for v in inv_freq.tolist()],
        "attention_scaling": attention_scaling,
        "positions": positions,
        "cos": [[float(v) for v in row] for row in cos.tolist()],
        "sin": [[float(v) for v in row] for row in sin.tolist()],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default="tests/fixtures/rope/rope_tables.json")
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    fixture = {
        "generator": "tools/oracle/rope_tables.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "note": "inv_freq holds transformers' float32 values; cos/sin are [positions, rotary_dim]",
        "cases": [run_case(case) for case in CASES],
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(fixture, indent=1) + "\n")
    tmp.replace(out)
    print(f"wrote {len(fixture['cases'])} cases to {out} (transformers {transformers.__version__})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
