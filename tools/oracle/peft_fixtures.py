#!/usr/bin/env python3
"""LoRA parity fixtures (shared/PARITY.md with --adapter): peft adapters on the tiny models of
tests/fixtures/parity, trained for two AdamW steps by peft + transformers in fp32 and fp64.

    python3 tools/oracle/peft_fixtures.py --base tests/fixtures/parity --out DIR [--cases a,b] [--list]

Writes DIR/<case>/ with the base model (config.json, model.safetensors and batch.safetensors copied
from --base/<model_type>), adapter/ (adapter_config.json + adapter_model.safetensors written by
peft's save_pretrained), adamw.json, expected_<set>_fp32/fp64.safetensors and meta.json.

Result names follow PARITY.md: grad.<name> and step<k>.<name> use the adapter_model.safetensors key
of each trainable tensor (peft's in-memory name with the adapter name removed; a modules_to_save
copy under its module's own name). The adapter's LoRA tensors are set to seeded 0.2*N(0,1) values
(modules_to_save copies get the base value plus 0.05*N(0,1)) so that every tensor carries a
gradient and the copies differ from the base. The fp64 ground truth uses parity_fixtures.py's
Float64Everywhere mode. Needs torch, transformers, peft and safetensors; runs on the CPU.
"""
import argparse
import json
import pathlib
import platform
import shutil
import sys

import torch

import parity_fixtures as pf
import peft
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file

ADAMW = pf.ADAMW
STEPS = pf.STEPS
TYPES = pf.CASE_NAMES
ATTN = ["q_proj", "v_proj", "qkv_proj"]

# name -> (model_type, LoraConfig kwargs, what it exercises)
CASES = {}
for t in TYPES:
    CASES[f"{t}_lora"] = (t, dict(r=4, lora_alpha=8, target_modules="all-linear"),
                          "all-linear, r 4, alpha 8")
    CASES[f"{t}_save"] = (t, dict(r=3, lora_alpha=6, target_modules=ATTN,
                                  modules_to_save=["norm", "lm_head"]),
                          "attention projections + modules_to_save (final norm, lm_head)")
CASES["llama_rslora"] = ("llama", dict(r=4, lora_alpha=8, target_modules="all-linear", use_rslora=True),
                         "rsLoRA (scaling alpha/sqrt(r))")
CASES["gemma2_rslora"] = ("gemma2", dict(r=4, lora_alpha=8, target_modules="all-linear",
                                         use_rslora=True), "rsLoRA on softcapped gemma2")
CASES["llama_rank_pattern"] = ("llama", dict(r=4, lora_alpha=8, target_modules="all-linear",
                                             rank_pattern={"q_proj": 2, "layers.1.mlp.down_proj": 6},
                                             alpha_pattern={"o_proj": 3}),
                               "rank_pattern / alpha_pattern")
CASES["phi3_rank_pattern"] = ("phi3", dict(r=4, lora_alpha=8, target_modules="all-linear",
                                           rank_pattern={"qkv_proj": 2}, alpha_pattern={"down_proj": 5}),
                              "rank_pattern on fused projections")
CASES["llama_embedding"] = ("llama", dict(r=4, lora_alpha=8,
                                          target_modules=["embed_tokens", "q_proj", "v_proj"]),
                            "LoRA on the embedding (untied head)")
CASES["gemma_embedding"] = ("gemma", dict(r=4, lora_alpha=8,
                                          target_modules=["embed_tokens", "q_proj", "v_proj"]),
                            "LoRA on the embedding (tied head, embedding scaled by sqrt(hidden))")
CASES["qwen2_layers"] = ("qwen2", dict(r=2, lora_alpha=4, target_modules=["q_proj", "k_proj", "down_proj"],
                                       layers_to_transform=[1], layers_pattern="layers"),
                         "layers_to_transform [1] with layers_pattern")
# Appended (seeds come from the position in this table: keep earlier cases where they are).
CASES["llama_save_embed"] = ("llama", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           modules_to_save=["embed_tokens"]),
                             "modules_to_save on the embedding (untied head)")
CASES["gemma_save_embed"] = ("gemma", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                           modules_to_save=["embed_tokens"]),
                             "modules_to_save on the embedding of a tied model (the head keeps the base matrix)")


def file_name(mem_name):
    """peft in-memory parameter name -> adapter_model.safetensors key."""
    return mem_name.replace("modules_to_save.default.", "").replace(".default", "")


def set_adapter_values(model, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.dtype)
            if "lora_" in name:
                p.copy_(0.2 * noise)
            else:  # a modules_to_save copy
                p.add_(0.05 * noise)


def train(case_dir, batch, hp, precision):
    dtype = torch.float32 if precision == "fp32" else torch.float64
    base = pf.load(str(case_dir), dtype)
    model = PeftModel.from_pretrained(base, str(case_dir / "adapter"), is_trainable=True,
                                      autocast_adapter_dtype=False)
    model.train()
    mode = None
    if precision == "fp64":
        pf.buffers_to_float64(model)
        mode = pf.Float64Everywhere()
    params = {file_name(n): p for n, p in model.named_parameters() if p.requires_grad}
    for n, p in params.items():
        assert p.dtype == dtype, (n, p.dtype)
    opt = torch.optim.AdamW(list(params.values()), lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"], weight_decay=hp["weight_decay"], foreach=False)
    res = {}
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        if mode is not None:
            with mode:
                out = pf.forward(model, batch)
        else:
            out = pf.forward(model, batch)
        out.loss.backward()
        res[f"loss.step{step}"] = out.loss.detach().clone()
        if step == 1:
            res["logits"] = out.logits.detach().clone()
            res["loss"] = out.loss.detach().clone()
            for n, p in params.items():
                if p.grad is None:
                    raise RuntimeError(f"{n} got no gradient")
                res[f"grad.{n}"] = p.grad.detach().clone()
        opt.step()
        for n, p in params.items():
            res[f"step{step}.{n}"] = p.detach().clone()
    return res, list(params)


def run_case(name, base_root, out_root, index):
    model_type, cfg, features = CASES[name]
    src = pathlib.Path(base_root) / model_type
    d = pathlib.Path(out_root) / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    for f in ("config.json", "model.safetensors", "batch.safetensors"):
        shutil.copy(src / f, d / f)
    seed = 3000 + index
    torch.manual_seed(seed)
    base = pf.load(str(d), torch.float32)
    model = get_peft_model(base, LoraConfig(init_lora_weights=False, **cfg))
    set_adapter_values(model, seed)
    model.save_pretrained(str(d / "adapter"), safe_serialization=True)
    saved = load_file(str(d / "adapter" / "adapter_model.safetensors"))
    trainable = sorted(file_name(n) for n, p in model.named_parameters() if p.requires_grad)
    problems = []
    if sorted(saved) != trainable:
        problems.append(f"file keys {sorted(saved)} != trainable names {trainable}")
    batch = load_file(str(d / "batch.safetensors"))
    (d / "adamw.json").write_text(json.dumps(ADAMW, indent=1) + "\n")
    mask = batch["attention_mask"].bool()
    versions = {"transformers": transformers.__version__, "torch": torch.__version__,
                "peft": peft.__version__}
    errors = {}
    for set_name, hp in ADAMW.items():
        r32, names = train(d, batch, hp, "fp32")
        r64, _ = train(d, batch, hp, "fp64")
        pf.save_results(r32, d / f"expected_{set_name}_fp32.safetensors", torch.float32,
                        {**versions, "set": set_name, "precision": "fp32", "steps": STEPS})
        pf.save_results(r64, d / f"expected_{set_name}_fp64.safetensors", torch.float64,
                        {**versions, "set": set_name, "precision": "fp64(Float64Everywhere)",
                         "steps": STEPS})
        errors[set_name] = pf.compare(r32, r64, names, mask)
    meta = {"case": name, "model_type": model_type, "features": features, "lora_config": cfg,
            "generator": "tools/oracle/peft_fixtures.py", "seed": seed,
            "peft_version": peft.__version__, "transformers_version": transformers.__version__,
            "torch_version": torch.__version__, "python_version": platform.python_version(),
            "trainable": trainable, "x32_vs_x64": errors, "problems": problems}
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="tests/fixtures/parity")
    ap.add_argument("--out")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for n, (t, cfg, f) in CASES.items():
            print(f"{n:22s} {f}  {cfg}")
        return 0
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    print(f"peft {peft.__version__} transformers {transformers.__version__} torch {torch.__version__}")
    failed = []
    names = list(CASES)
    for n in [c for c in a.cases.split(",") if c]:
        try:
            m = run_case(n, a.base, a.out, names.index(n))
        except Exception as exc:
            import traceback
            traceback.print_exc()
            print(f"[{n}] FAILED: {exc}", flush=True)
            failed.append(n)
            continue
        for p in m["problems"]:
            print(f"[{n}] PROBLEM: {p}")
        for s, e in m["x32_vs_x64"].items():
            print(f"[{n}] {s:6s} X32-X64 logits {e['logits']:.1e} grad {e['grad.*']:.1e} "
                  f"step1 {e['step1.*']:.1e} step2 {e['step2.*']:.1e} ({len(m['trainable'])} tensors)",
                  flush=True)
    print(f"failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
