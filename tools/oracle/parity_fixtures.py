#!/usr/bin/env python3
"""Parity fixtures (shared/PARITY.md): one tiny random model per architecture, trained for two
AdamW steps by transformers in fp32 and in fp64, with every result vkformer must reproduce.

    python3 tools/oracle/parity_fixtures.py --out DIR [--cases llama,gemma2,...] [--list]

Writes DIR/<model_type>/ with config.json + model.safetensors (save_pretrained, fp32, tied weights
stored once), batch.safetensors, adamw.json, expected_<set>_fp32.safetensors (F32),
expected_<set>_fp64.safetensors (F64) for set in {strict, decay}, and meta.json (versions, seed, the
config used, the features exercised, transformers' own fp32-vs-fp64 errors and the attributes that
transformers' modules took from the config: layer types, windows, scalings, inv_freq, ...).

Runs on the CPU, single-threaded, so that a rerun gives the same bytes. Needs torch, transformers
(v5; v4 mostly works) and safetensors.

The fp64 ground truth. transformers hard-codes float32 in places (RMSNorm and LayerNorm upcasts,
`softmax(..., dtype=torch.float32)`, the rotary tables, `logits.float()` in the loss), so a model
loaded with dtype=float64 still rounds to float32 there. The fp64 runs therefore execute under
`Float64Everywhere`, a torch function mode that turns every requested float32 into float64 (a cast,
a dtype= argument, `.float()`), and every floating buffer is made float64 first. The inv_freq
tables keep the float32-rounded values transformers builds (they are part of the model, exactly as
vkformer builds them in fp32); everything computed from them is float64. meta.json reports how far
the stock fp64 run (without the mode) is from this ground truth.
"""

import argparse
import dataclasses
import inspect
import json
import math
import os
import pathlib
import platform
import shutil
import sys
import time

import torch
from torch.overrides import TorchFunctionMode

import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

try:
    from transformers import PreTrainedConfig as BaseConfig
except ImportError:  # transformers v4
    from transformers import PretrainedConfig as BaseConfig

TRANSFORMERS_MAJOR = int(transformers.__version__.split(".")[0])

B, T, PAD_LEN = 2, 8, 3  # row 1 is right-padded over its last PAD_LEN positions
EXTRA_IGNORED = (0, 4)  # (row, position) of an extra -100 label inside the unpadded row
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # real positions draw ids from [1, vocab): never the pad id
STEPS = 2
ADAMW = {
    "strict": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-3, "weight_decay": 0.0},
    "decay": {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
}
MATRIX_STD, NORM_STD, BIAS_STD = 0.2, 0.1, 0.1
BASE_SEED = 1000
DROPOUT_FIELDS = ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                  "residual_dropout", "embedding_dropout", "mlp_dropout", "dropout",
                  "classifier_dropout")

COMMON = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=24, vocab_size=48, max_position_embeddings=64)


def rope(theta=10000.0, **extra):
    return {"rope_type": "default", "rope_theta": theta, **extra}


# Each case: model_type (= directory name), what it exercises, config fields (on top of COMMON),
# and expectations checked on the constructed model (config attribute -> value; "rotary_dims":
# the number of inv_freq entries per rotary table).
CASES = [
    dict(name="llama",
         features="RMSNorm, SwiGLU, GQA 4:2, head_dim 6 (4*6 != hidden 16), llama3 rope scaling "
                  "(inv_freq[0] in the smoothed band, inv_freq[1:] divided by factor; the "
                  "unscaled high-frequency band needs a wavelength < 16/4, below 2*pi), "
                  "untied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 16}),
         expect={"head_dim": 6, "rotary_dims": [3]}),
    dict(name="mistral",
         features="sliding window 4 on every layer (T=8), GQA, head_dim 6, untied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, sliding_window=4, tie_word_embeddings=False,
                     rope_parameters=rope()),
         expect={"head_dim": 6, "sliding_window": 4, "rotary_dims": [3]}),
    dict(name="qwen2",
         features="q/k/v biases, layer 0 full + layer 1 sliding window 4 (use_sliding_window, "
                  "max_window_layers 1), tied lm_head, head_dim = hidden/heads = 4",
         config=dict(rms_norm_eps=1e-5, use_sliding_window=True, sliding_window=4,
                     max_window_layers=1, tie_word_embeddings=True, rope_parameters=rope()),
         expect={"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 4,
                 "rotary_dims": [2]}),
    dict(name="qwen3",
         features="per-head q_norm/k_norm (RMSNorm over head_dim, before rope), head_dim 6, "
                  "no sliding, untied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, use_sliding_window=False,
                     tie_word_embeddings=False, rope_parameters=rope()),
         expect={"head_dim": 6, "rotary_dims": [3]}),
    dict(name="gemma",
         features="(1+w) RMSNorm, embeddings * sqrt(hidden), GeGLU (gelu_pytorch_tanh), head_dim 6, "
                  "tied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, hidden_act="gelu_pytorch_tanh",
                     hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                     rope_parameters=rope()),
         expect={"head_dim": 6, "rotary_dims": [3]}),
    dict(name="gemma2",
         features="(1+w) sandwich norms, query_pre_attn_scalar 5 != head_dim 6, attention "
                  "softcap 2.0, final logit softcap 3.0, layer 0 sliding(4) / layer 1 full, "
                  "embeddings * sqrt(hidden), tied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, hidden_activation="gelu_pytorch_tanh",
                     query_pre_attn_scalar=5, attn_logit_softcapping=2.0,
                     final_logit_softcapping=3.0, sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"],
                     tie_word_embeddings=True, rope_parameters=rope()),
         expect={"head_dim": 6, "query_pre_attn_scalar": 5, "sliding_window": 4,
                 "layer_types": ["sliding_attention", "full_attention"], "rotary_dims": [3]}),
    dict(name="gemma3_text",
         features="(1+w) sandwich norms, per-head (1+w) q/k norms, layer 0 sliding(4) with local "
                  "rope base 100 / layer 1 full with rope base 10000, query_pre_attn_scalar 6, "
                  "no softcapping, embeddings * sqrt(hidden), tied lm_head",
         config=dict(head_dim=6, rms_norm_eps=1e-5, hidden_activation="gelu_pytorch_tanh",
                     query_pre_attn_scalar=6, sliding_window=4,
                     layer_types=["sliding_attention", "full_attention"],
                     tie_word_embeddings=True,
                     rope_parameters={"sliding_attention": rope(100.0),
                                      "full_attention": rope(10000.0)}),
         v4_config=dict(rope_theta=10000.0, rope_local_base_freq=100.0),
         expect={"head_dim": 6, "sliding_window": 4,
                 "layer_types": ["sliding_attention", "full_attention"], "rotary_dims": [3, 3]}),
    dict(name="phi3",
         features="fused qkv_proj [q|k|v] and gate_up_proj [gate|up], RMSNorm, GQA, "
                  "head_dim = hidden/heads = 4, no sliding window, untied lm_head",
         config=dict(rms_norm_eps=1e-5, sliding_window=None, original_max_position_embeddings=64,
                     tie_word_embeddings=False, rope_parameters=rope()),
         expect={"rotary_dims": [2]}),
    dict(name="olmo2",
         features="post-norms only (post_attention / post_feedforward RMSNorm on the branch "
                  "outputs), q_norm/k_norm over the whole q/k projections, untied lm_head",
         config=dict(rms_norm_eps=1e-5, tie_word_embeddings=False, rope_parameters=rope()),
         expect={"rotary_dims": [2]}),
    dict(name="granite",
         features="embedding_multiplier 2.0, residual_multiplier 0.5, attention_multiplier 0.3 "
                  "(replaces 1/sqrt(head_dim)), logits_scaling 4.0 (logits divided), untied",
         config=dict(rms_norm_eps=1e-5, embedding_multiplier=2.0, residual_multiplier=0.5,
                     attention_multiplier=0.3, logits_scaling=4.0, tie_word_embeddings=False,
                     rope_parameters=rope()),
         expect={"rotary_dims": [2]}),
    dict(name="smollm3",
         features="NoPE layer: no_rope_layers [1, 0] (1 = use rope): layer 0 rotary, layer 1 no "
                  "rotary; tied lm_head",
         config=dict(rms_norm_eps=1e-5, no_rope_layers=[1, 0], use_sliding_window=False,
                     tie_word_embeddings=True, rope_parameters=rope()),
         expect={"no_rope_layers": [1, 0], "rotary_dims": [2]}),
    dict(name="stablelm",
         features="LayerNorm (with bias), partial rotary 0.5 (4 of head_dim 8), q/k/v biases, "
                  "sequential residual, GQA 2:1, untied lm_head",
         config=dict(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                     layer_norm_eps=1e-5, use_qkv_bias=True, qk_layernorm=False,
                     use_parallel_residual=False, tie_word_embeddings=False,
                     rope_parameters=rope(partial_rotary_factor=0.5)),
         # transformers 5 reads rope_parameters["partial_rotary_factor"], but StableLmConfig also
         # keeps a top-level partial_rotary_factor (undeclared, default 0.25) that v4 reads: pass
         # it too so that config.json is consistent.
         extra_kwargs=dict(partial_rotary_factor=0.5),
         expect={"rotary_dims": [2], "partial_rotary_factor": 0.5}),
    dict(name="cohere",
         features="bias-free LayerNorm, parallel attention + MLP from one norm, interleaved "
                  "rotary, logit_scale 0.25 (logits multiplied), tied lm_head",
         config=dict(layer_norm_eps=1e-5, logit_scale=0.25, use_qk_norm=False,
                     tie_word_embeddings=True, rope_parameters=rope()),
         expect={"logit_scale": 0.25, "rotary_dims": [2]}),
    dict(name="starcoder2",
         features="LayerNorm with bias, c_fc -> gelu_pytorch_tanh -> c_proj MLP with biases, "
                  "attention biases, sliding window 4, tied lm_head",
         config=dict(norm_epsilon=1e-5, use_bias=True, sliding_window=4,
                     hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True,
                     rope_parameters=rope()),
         expect={"sliding_window": 4, "rotary_dims": [2]}),
]
CASE_NAMES = [c["name"] for c in CASES]


# ----------------------------------------------------------------------------------- fp64 mode

class Float64Everywhere(TorchFunctionMode):
    """Every float32 that transformers asks for becomes float64 (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.rewrites = 0

    def _fix(self, a):
        if a is torch.float32:
            self.rewrites += 1
            return torch.float64
        return a

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name == "float" and args and isinstance(args[0], torch.Tensor):
            self.rewrites += 1
            return args[0].to(torch.float64)
        if (name == "type_as" and len(args) == 2 and isinstance(args[1], torch.Tensor)
                and args[1].dtype == torch.float32 and args[0].is_floating_point()):
            self.rewrites += 1
            return args[0].to(torch.float64)
        args = tuple(self._fix(a) for a in args)
        if "dtype" in kwargs:
            kwargs["dtype"] = self._fix(kwargs["dtype"])
        return func(*args, **kwargs)


def buffers_to_float64(model):
    for module in model.modules():
        for key, buf in list(module._buffers.items()):
            if buf is not None and buf.is_floating_point():
                module._buffers[key] = buf.to(torch.float64)
        # a few rotary modules keep a plain tensor attribute (original_inv_freq) besides buffers
        for key, val in list(vars(module).items()):
            if isinstance(val, torch.Tensor) and not isinstance(val, torch.nn.Parameter) \
                    and val.is_floating_point() and key not in module._buffers:
                setattr(module, key, val.to(torch.float64))


# ------------------------------------------------------------------------------------- configs

def declared_fields(cls):
    """Names a config class declares (v5 strict dataclasses, or v4 __init__ parameters)."""
    names = set()
    for klass in (cls, BaseConfig):
        if dataclasses.is_dataclass(klass):
            names |= {f.name for f in dataclasses.fields(klass)}
        else:
            names |= {p for p in inspect.signature(klass.__init__).parameters
                      if p not in ("self", "kwargs", "args")}
    return names


def build_config(case):
    cls = CONFIG_MAPPING[case["name"]]
    fields = declared_fields(cls)
    wanted = dict(COMMON)
    wanted.update(case["config"])
    for key in DROPOUT_FIELDS:
        wanted.setdefault(key, 0.0)
    wanted.update(pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    if "rope_parameters" not in fields:  # transformers v4: rope_theta / rope_scaling
        rp = wanted.pop("rope_parameters")
        if "v4_config" in case:
            wanted.update(case["v4_config"])
        else:
            wanted["rope_theta"] = rp["rope_theta"]
            if rp["rope_type"] != "default":
                wanted["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    used, skipped = {}, {}
    for key, val in wanted.items():
        (used if key in fields else skipped)[key] = val
    # Optional extras (dropouts / ids / alternative spellings) silently skipped; a case field that
    # the class does not declare is reported: transformers would keep it as a stray attribute.
    optional = set(DROPOUT_FIELDS) | {"pad_token_id", "bos_token_id", "eos_token_id",
                                      "hidden_act", "hidden_activation", "partial_rotary_factor"}
    not_declared = sorted(k for k in skipped if k not in optional)
    for key, val in case.get("extra_kwargs", {}).items():
        if key not in used:
            used[key] = val
    config = cls(**used)
    for key in DROPOUT_FIELDS:  # whatever the architecture calls its dropouts: all zero
        if isinstance(getattr(config, key, None), (int, float)) and getattr(config, key):
            setattr(config, key, 0.0)
    return config, used, not_declared


# ------------------------------------------------------------------------------ model and batch

def norm_offset(param):
    """0 for (1+w) norms (transformers initializes them to zeros), 1 for w norms (ones)."""
    if torch.all(param == 0):
        return 0.0
    if torch.all(param == 1):
        return 1.0
    raise RuntimeError("a 1-D weight that is neither all zeros nor all ones after init")


def randomize(model, seed):
    """Deterministic non-trivial values for every parameter; returns {name: init description}."""
    gen = torch.Generator().manual_seed(seed)
    kinds = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if name.endswith("bias"):
                p.copy_(BIAS_STD * noise)
                kinds[name] = f"bias: {BIAS_STD}*N(0,1)"
            elif p.ndim >= 2:
                p.copy_(MATRIX_STD * noise)
                kinds[name] = f"matrix: {MATRIX_STD}*N(0,1)"
            else:
                off = norm_offset(p)
                p.copy_(off + NORM_STD * noise)
                kinds[name] = (f"norm weight, (1+w) form: {NORM_STD}*N(0,1)" if off == 0 else
                               f"norm weight: 1 + {NORM_STD}*N(0,1)")
    return kinds


def make_batch(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (B, T), generator=gen, dtype=torch.int64)
    mask = torch.ones(B, T, dtype=torch.int64)
    mask[1, T - PAD_LEN:] = 0
    ids[mask == 0] = PAD_ID
    labels = ids.clone()
    labels[mask == 0] = -100
    labels[EXTRA_IGNORED] = -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def reference_loss(logits, labels):
    """PARITY.md's loss: logits[:, :-1] against labels[:, 1:], ignore -100, mean over counted."""
    v = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v),
                                             labels[:, 1:].reshape(-1), ignore_index=-100)


def load(model_dir, dtype):
    kw = {"dtype": dtype} if TRANSFORMERS_MAJOR >= 5 else {"torch_dtype": dtype}
    return AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", **kw)


def forward(model, batch, labels=True):
    kw = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
              use_cache=False)
    if labels:
        kw["labels"] = batch["labels"]
    return model(**kw)


def train(model_dir, batch, hp, precision):
    """Two AdamW steps on the batch; returns ({result name: tensor}, extra info)."""
    dtype = torch.float32 if precision == "fp32" else torch.float64
    model = load(model_dir, dtype)
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) and m.p != 0:
            raise RuntimeError(f"dropout {m} is not zero")
    mode = None
    if precision == "fp64":
        buffers_to_float64(model)
        mode = Float64Everywhere()
    params = dict(model.named_parameters())
    for name, p in params.items():
        assert p.dtype == dtype and p.requires_grad, name
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]),
                            eps=hp["eps"], weight_decay=hp["weight_decay"], foreach=False)
    res, info = {}, {}
    for step in range(1, STEPS + 1):
        opt.zero_grad()
        if mode is not None:
            with mode:
                out = forward(model, batch)
        else:
            out = forward(model, batch)
        loss = out.loss
        loss.backward()
        res[f"loss.step{step}"] = loss.detach().clone()
        if step == 1:
            res["logits"] = out.logits.detach().clone()
            res["loss"] = loss.detach().clone()
            info["loss_formula_diff"] = abs(
                reference_loss(out.logits.detach().double(), batch["labels"]).item() -
                loss.item())
            for name, p in params.items():
                if p.grad is None:
                    raise RuntimeError(f"{name} got no gradient")
                res[f"grad.{name}"] = p.grad.detach().clone()
        opt.step()
        for name, p in params.items():
            res[f"step{step}.{name}"] = p.detach().clone()
    if mode is not None:
        info["float32_requests_rewritten"] = mode.rewrites
    return res, info, list(params)


def stock_fp64_logits(model_dir, batch):
    """Logits and loss of transformers' own fp64 run (float32 upcasts left in)."""
    model = load(model_dir, torch.float64)
    model.train()
    with torch.no_grad():
        out = forward(model, batch)
    return out.logits, out.loss


# --------------------------------------------------------------------------------------- facts

FACT_ATTRS = ("scaling", "sliding_window", "head_dim", "num_key_value_groups", "is_causal",
              "use_rope", "is_sliding", "layer_type", "attention_type", "attn_logit_softcapping",
              "softcap", "rotary_ndims", "rotary_emb_dim", "partial_rotary_factor",
              "attention_multiplier", "residual_multiplier", "embedding_multiplier",
              "logits_scaling", "logit_scale", "final_logit_softcapping", "use_parallel_residual",
              "qk_layernorm", "eps", "variance_epsilon", "normalized_shape", "padding_idx",
              "rope_type", "attention_scaling", "embed_scale", "normalizer", "hidden_size",
              "intermediate_size", "in_features", "out_features", "use_qk_norm")


def jsonable(v):
    if isinstance(v, torch.Tensor):
        return v.tolist() if v.numel() <= 64 else f"tensor{list(v.shape)}"
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int, float, str)) for x in v):
        return list(v)
    return repr(v)


def model_facts(model):
    """What transformers' modules took from the config (one entry per module of layer 0/1)."""
    facts = {}
    for name, m in model.named_modules():
        entry = {"class": type(m).__name__}
        for a in FACT_ATTRS:
            if a in vars(m) or a in m._buffers:
                val = vars(m).get(a, m._buffers.get(a))
                if callable(val) and not isinstance(val, torch.Tensor):
                    continue
                entry[a] = jsonable(val)
        for key, buf in m._buffers.items():
            if buf is not None and "inv_freq" in key and "original" not in key:
                entry[f"buffer:{key}"] = jsonable(buf)
                entry[f"buffer:{key}:dtype"] = str(buf.dtype)
        for key, val in vars(m).items():
            if "attention_scaling" in key and key not in entry:
                entry[key] = jsonable(val)
        if "act_fn" in m._modules or "activation_fn" in m._modules:
            act = m._modules.get("act_fn") or m._modules.get("activation_fn")
            entry["activation"] = type(act).__name__ + (
                f"(approximate={act.approximate})" if hasattr(act, "approximate") else "")
        if hasattr(m, "bias") and isinstance(getattr(m, "bias", None), torch.nn.Parameter):
            entry["has_bias"] = True
        if len(entry) > 1 or name == "":
            facts[name or "<root>"] = entry
    return facts


def rotary_table_sizes(model):
    sizes = []
    for name, m in model.named_modules():
        for key, buf in m._buffers.items():
            if buf is not None and key.endswith("inv_freq") and "original" not in key:
                sizes.append(buf.numel())
    return sizes


def check_expectations(case, config, model):
    problems = []
    for key, want in case.get("expect", {}).items():
        if key == "rotary_dims":
            got = rotary_table_sizes(model)
        else:
            got = getattr(config, key, "<absent>")
            if isinstance(got, tuple):
                got = list(got)
        if got != want:
            problems.append(f"{key}: expected {want!r}, got {got!r}")
    tied = "lm_head.weight" not in dict(model.named_parameters())
    if tied != bool(config.tie_word_embeddings):
        problems.append(f"tie_word_embeddings={config.tie_word_embeddings} but lm_head "
                        f"{'absent' if tied else 'present'} in named_parameters")
    return problems


# ---------------------------------------------------------------------------------------- main

def max_err(a, b, mask=None):
    d = (a.double() - b.double()).abs()
    if mask is not None:
        d = d[mask]
    return d.max().item() if d.numel() else 0.0


def compare(r32, r64, names, mask):
    e = {"logits": max_err(r32["logits"], r64["logits"], mask),
         "loss": max_err(r32["loss"], r64["loss"])}
    for s in range(1, STEPS + 1):
        e[f"loss.step{s}"] = max_err(r32[f"loss.step{s}"], r64[f"loss.step{s}"])
    for prefix in ["grad"] + [f"step{s}" for s in range(1, STEPS + 1)]:
        worst, where = 0.0, None
        for n in names:
            err = max_err(r32[f"{prefix}.{n}"], r64[f"{prefix}.{n}"])
            if err >= worst:
                worst, where = err, n
        e[f"{prefix}.*"] = worst
        e[f"{prefix}.* worst"] = where
    return e


def save_results(res, path, dtype, meta):
    out = {k: v.detach().to(dtype).contiguous().clone() for k, v in res.items()}
    # one metadata key: safetensors writes a multi-key metadata map in hash order, which would make
    # the bytes differ from run to run
    info = " ".join(f"{k}={v}" for k, v in meta.items())
    save_file(out, str(path), metadata={"generator": f"tools/oracle/parity_fixtures.py {info}"})


def dir_size(path):
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def run_case(case, out_root):
    idx = CASE_NAMES.index(case["name"])
    seed = BASE_SEED + idx
    d = pathlib.Path(out_root) / case["name"]
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    t0 = time.time()

    config, used, not_declared = build_config(case)
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(config)
    model = model.to(torch.float32)
    init = randomize(model, seed)
    problems = check_expectations(case, config, model)
    if not_declared:
        problems.append(f"fields not declared by {type(config).__name__}: {not_declared}")
    facts = model_facts(model)
    save_kw = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        save_kw["safe_serialization"] = True
    model.save_pretrained(str(d), **save_kw)
    saved = load_file(str(d / "model.safetensors"))
    want = {n: p.detach() for n, p in model.named_parameters()}
    if set(saved) != set(want):
        problems.append(f"saved tensors {sorted(set(saved) ^ set(want))} differ from "
                        "named_parameters")
    # the reloaded model must hold exactly the values set here (no re-init, no conversion)
    reloaded = dict(load(str(d), torch.float32).named_parameters())
    for n, p in want.items():
        if n not in reloaded or not torch.equal(reloaded[n].detach(), p):
            problems.append(f"reloaded {n} differs from the saved value")

    batch = make_batch(config.vocab_size, seed + 500)
    save_file(batch, str(d / "batch.safetensors"))
    (d / "adamw.json").write_text(json.dumps(ADAMW, indent=1) + "\n")
    mask = batch["attention_mask"].bool()

    versions = {"transformers": transformers.__version__, "torch": torch.__version__}
    errors, infos, names = {}, {}, None
    for set_name, hp in ADAMW.items():
        r32, i32, names = train(str(d), batch, hp, "fp32")
        r64, i64, _ = train(str(d), batch, hp, "fp64")
        save_results(r32, d / f"expected_{set_name}_fp32.safetensors", torch.float32,
                     {**versions, "set": set_name, "precision": "fp32", "steps": STEPS})
        save_results(r64, d / f"expected_{set_name}_fp64.safetensors", torch.float64,
                     {**versions, "set": set_name, "precision": "fp64(Float64Everywhere)",
                      "steps": STEPS})
        errors[set_name] = compare(r32, r64, names, mask)
        if set_name == "strict":
            null_grads = {n: int(((r64[f"grad.{n}"].abs() < 1e-12) &
                                  (r32[f"grad.{n}"] != 0)).sum()) for n in names}
            null_grads = {n: c for n, c in null_grads.items() if c}
        infos[set_name] = {"fp32": i32, "fp64": i64}
        if set_name == "strict":
            stock_logits, stock_loss = stock_fp64_logits(str(d), batch)
            infos["stock_fp64_vs_ground_truth"] = {
                "logits": max_err(stock_logits, r64["logits"], mask),
                "loss": max_err(stock_loss, r64["loss"]),
                "note": "transformers' own fp64 run keeps its float32 upcasts; this is how far "
                        "it is from the Float64Everywhere ground truth"}
            infos["fp32_logits_abs_max"] = r32["logits"].abs().max().item()
            infos["fp32_loss"] = r32["loss"].item()

    meta = {
        "case": case["name"],
        "model_type": config.model_type,
        "architectures": getattr(config, "architectures", None),
        "model_class": type(model).__name__,
        "features": case["features"],
        "generator": "tools/oracle/parity_fixtures.py",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "seed": seed,
        "batch_seed": seed + 500,
        "config_fields_passed": used,
        "config_effective": json.loads(config.to_json_string(use_diff=False)),
        "parameter_init": init,
        "parameter_names": names,
        "batch": {"B": B, "T": T, "row1_padding": f"last {PAD_LEN} positions (attention_mask 0, "
                  f"input id {PAD_ID} = pad_token_id, label -100)",
                  "extra_ignored_label": list(EXTRA_IGNORED),
                  "real_token_ids": "uniform in [1, vocab)"},
        "steps": STEPS,
        "adamw": ADAMW,
        "procedure": "per set and precision: from_pretrained(dir, dtype, attn_implementation="
                     "'eager'); train(); AdamW(foreach=False); per step: zero_grad, forward with "
                     "labels (use_cache=False), loss.backward, record, opt.step, record params",
        "fp64": "run under Float64Everywhere (every float32 request -> float64, buffers float64; "
                "inv_freq keeps transformers' float32-rounded values)",
        "x32_vs_x64": errors,
        "info": infos,
        "expectation_problems": problems,
        "null_gradient_elements": {
            "note": "elements whose fp64 gradient is below 1e-12 in magnitude while the fp32 one "
                    "is not exactly 0: the true gradient is (analytically) zero, so with a tiny "
                    "AdamW eps the fp32 update there is driven by rounding noise and X32-X64 of "
                    "step<k> is large for that tensor",
            "counts": null_grads},
        "module_facts": facts,
    }
    (d / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    meta["size_bytes"] = dir_size(d)
    meta["seconds"] = round(time.time() - t0, 2)  # log only: meta.json stays reproducible
    return meta


def fmt(x):
    return f"{x:.1e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=False, help="output directory (one sub-directory per case)")
    ap.add_argument("--cases", default=",".join(CASE_NAMES),
                    help="comma-separated subset of: " + ",".join(CASE_NAMES))
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        for c in CASES:
            print(f"{c['name']:12s} {c['features']}")
        return 0
    if not args.out:
        ap.error("--out is required")
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASE_NAMES]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {CASE_NAMES}")
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float32)
    transformers.logging.set_verbosity_error()
    print(f"transformers {transformers.__version__}  torch {torch.__version__}  "
          f"python {platform.python_version()}", flush=True)

    failed, rows = [], []
    for n in names:
        case = CASES[CASE_NAMES.index(n)]
        try:
            m = run_case(case, args.out)
        except Exception as exc:  # keep going: one broken case must not hide the others
            import traceback
            traceback.print_exc()
            print(f"[{n}] FAILED: {type(exc).__name__}: {exc}", flush=True)
            failed.append(n)
            continue
        rows.append(m)
        for p in m["expectation_problems"]:
            print(f"[{n}] PROBLEM: {p}", flush=True)
        for s, e in m["x32_vs_x64"].items():
            print(f"[{n}] {s:6s} X32-X64: logits {fmt(e['logits'])} loss {fmt(e['loss'])} "
                  f"grad {fmt(e['grad.*'])} step1 {fmt(e['step1.*'])} "
                  f"step2 {fmt(e['step2.*'])} loss.step2 {fmt(e['loss.step2'])} "
                  f"(worst step2: {e['step2.* worst']})", flush=True)
        if m["null_gradient_elements"]["counts"]:
            print(f"[{n}] null-gradient elements: {m['null_gradient_elements']['counts']}",
                  flush=True)
        st = m["info"]["stock_fp64_vs_ground_truth"]
        print(f"[{n}] size {m['size_bytes'] / 1024:.0f} KiB, {len(m['parameter_names'])} "
              f"params, loss {m['info']['fp32_loss']:.4f}, |logits|max "
              f"{m['info']['fp32_logits_abs_max']:.2f}, stock-fp64 vs truth: logits "
              f"{fmt(st['logits'])} loss {fmt(st['loss'])}, "
              f"loss formula diff {fmt(m['info']['strict']['fp32']['loss_formula_diff'])}, "
              f"fp32 rewrites {m['info']['strict']['fp64'].get('float32_requests_rewritten')}, "
              f"{m['seconds']} s", flush=True)
    total = sum(m["size_bytes"] for m in rows)
    print(f"\n{len(rows)} cases written to {args.out}, {total / 1024:.0f} KiB in all")
    print(f"{'case':12s} {'KiB':>5s} {'set':6s} {'logits':>8s} {'loss':>8s} {'grad':>8s} "
          f"{'step1':>8s} {'step2':>8s}")
    for m in rows:
        for s, e in m["x32_vs_x64"].items():
            print(f"{m['case']:12s} {m['size_bytes'] / 1024:5.0f} {s:6s} {fmt(e['logits']):>8s} "
                  f"{fmt(e['loss']):>8s} {fmt(e['grad.*']):>8s} {fmt(e['step1.*']):>8s} "
                  f"{fmt(e['step2.*']):>8s}")
    probs = [(m["case"], p) for m in rows for p in m["expectation_problems"]]
    if failed or probs:
        print(f"FAILED cases: {failed}; problems: {probs}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
