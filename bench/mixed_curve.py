#!/usr/bin/env python3
"""The loss-curve gate of mixed precision: a 500-step training run of vkformer --precision f16
whose loss curve must track PyTorch autocast's (bf16) within 2% on the same data.

One command on a machine with torch + transformers and a vkformer build (the H200 machine):

    python3 bench/mixed_curve.py run --train-bench build/bench/train_bench --out DIR

writes into DIR, in order:
  model/              a Llama (hidden 512, 8 layers, 8 heads / 4 kv heads, MLP 1536, byte-level
                      vocabulary of 256, untied), initialized by transformers with seed 0 and saved
                      as a Hugging Face folder (fp32 safetensors).
  tokens.bin          500 batches of 8 x 256 byte tokens (int32 little-endian, [step, batch, seq]):
                      this repository's own text files (src, tests without fixtures, tools, bench,
                      scripts, README.md; sorted paths) cut into consecutive 256-byte windows, the
                      windows shuffled once by a fixed-seed Fisher-Yates (an LCG of our own, so the
                      order does not depend on the Python version), taken in order, no repeats.
  torch_bf16.jsonl    transformers' LlamaForCausalLM from model/ trained on those batches in order:
                      forward under torch.autocast(cuda, bfloat16), loss = model(input_ids,
                      labels=input_ids).loss (mean over batch x 255 next-token predictions),
                      clip_grad_norm_ 1.0, AdamW(fused, lr 6e-4, betas 0.9/0.999, eps 1e-8, weight
                      decay 0.01 except biases and norm weights, as transformers' Trainer groups
                      them), get_cosine_schedule_with_warmup(50 warmup steps, 500 steps). No dropout.
  torch_fp32.jsonl    the same in fp32 (TF32 off): how far mixed precision itself moves the curve.
  vkformer_f16.jsonl  bench/train_bench --model model/ --tokens tokens.bin --precision f16 with the
  vkformer_fp32.jsonl same hyperparameters (and fp32), loss scaling as transformers' Trainer with fp16.
  summary.json        the comparison below, machine-readable.

The comparison smooths every curve by the mean loss over consecutive 10-step windows (steps
1-10, 11-20, ...: 50 windows), then takes the relative difference |a - b| / b per window; it
prints the max and the mean for several pairs, the raw step-1 losses, and PASS when the max over
windows of vkformer f16 against torch bf16 is at most 2% (exit status 0; FAIL: 1).

Pieces, for checking parts on their own (no torch needed for `tokens` and `compare`):
    python3 bench/mixed_curve.py tokens --out FILE [--steps 500 --batch 8 --seq 256 --vocab 256]
    python3 bench/mixed_curve.py compare DIR
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODEL = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=4, vocab_size=256, max_position_embeddings=1024, rope_theta=10000.0,
             rms_norm_eps=1e-5, tie_word_embeddings=False, attention_dropout=0.0, hidden_act="silu")
TRAIN = dict(steps=500, batch=8, seq=256, lr=6e-4, warmup=50, weight_decay=0.01, max_grad_norm=1.0)
WINDOW = 10
GATE = 0.02
TEXT_SUFFIXES = (".cpp", ".h", ".py", ".md", ".comp", ".glsl", ".sh", ".txt", ".js", ".cmake")


# ----------------------------------------------------------------------------------------------
# Data (no torch)

def corpus_bytes(root=REPO):
    """The repository's text files, sorted by path, concatenated (fixtures and build output left out)."""
    paths = []
    for top in ("src", "tests", "tools", "bench", "scripts", "cmake"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            dirs[:] = sorted(x for x in dirs if not x.startswith(".") and os.path.join(rel, x) != os.path.join("tests", "fixtures"))
            paths += [os.path.join(d, f) for f in files if f.endswith(TEXT_SUFFIXES)]
    paths.append(os.path.join(root, "README.md"))
    data = bytearray()
    for p in sorted(set(paths)):
        with open(p, "rb") as f:
            data += f.read()
    return bytes(data)


def shuffled(n, seed):
    """Fisher-Yates over range(n) driven by a 64-bit LCG (Knuth's MMIX constants): the same order
    on every Python version."""
    order = list(range(n))
    x = seed
    for i in range(n - 1, 0, -1):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        j = (x >> 33) % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def write_tokens(path, steps, batch, seq, vocab=256, seed=0, corpus_file=None):
    """[steps, batch, seq] int32 little-endian byte tokens; returns how many bytes the corpus had.
    A vocabulary below 256 (small test models only) folds bytes modulo vocab. `corpus_file`: the
    bytes of that file instead of the repository's text files (tests: data that stays the same
    when the code changes)."""
    if corpus_file:
        with open(corpus_file, "rb") as f:
            data = f.read()
    else:
        data = corpus_bytes()
    windows = len(data) // seq
    need = steps * batch
    if windows < need:
        sys.exit(f"mixed_curve: the corpus has {windows} windows of {seq} bytes; {steps} x {batch} are needed")
    order = shuffled(windows, seed)[:need]
    with open(path, "wb") as f:
        for w in order:
            chunk = data[w * seq:(w + 1) * seq]
            f.write(struct.pack(f"<{seq}i", *[b % vocab for b in chunk]))
    return len(data)


# ----------------------------------------------------------------------------------------------
# Comparison (no torch)

def read_log(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    steps = [r["step"] for r in rows]
    if steps != list(range(1, len(rows) + 1)):
        sys.exit(f"mixed_curve: {path}: steps are not 1..{len(rows)} in order")
    for r in rows:
        if not math.isfinite(r["loss"]):
            sys.exit(f"mixed_curve: {path}: step {r['step']} has loss {r['loss']}")
    return rows


def window_means(losses, window=WINDOW):
    return [sum(losses[i:i + window]) / window for i in range(0, len(losses) - window + 1, window)]


def curve_difference(a, b, window=WINDOW):
    """Max and mean over windows of |mean_a - mean_b| / mean_b, and the worst window's first step."""
    if len(a) != len(b):
        sys.exit(f"mixed_curve: curves of {len(a)} and {len(b)} steps")
    wa, wb = window_means(a, window), window_means(b, window)
    if not wa:
        sys.exit(f"mixed_curve: fewer than {window} steps")
    rel = [abs(x - y) / abs(y) for x, y in zip(wa, wb)]
    worst = max(range(len(rel)), key=lambda i: rel[i])
    return {"max": max(rel), "mean": sum(rel) / len(rel), "worst_window_first_step": worst * window + 1,
            "windows": len(rel), "final_a": wa[-1], "final_b": wb[-1]}


def compare(out, window=WINDOW, gate=GATE):
    logs = {}
    for name in ("vkformer_f16", "vkformer_fp32", "torch_bf16", "torch_fp32"):
        p = os.path.join(out, name + ".jsonl")
        if os.path.exists(p):
            logs[name] = read_log(p)
    if "vkformer_f16" not in logs or "torch_bf16" not in logs:
        sys.exit(f"mixed_curve: {out} needs vkformer_f16.jsonl and torch_bf16.jsonl")
    loss = {k: [r["loss"] for r in v] for k, v in logs.items()}
    pairs = [("vkformer_f16", "torch_bf16", "the gate"),
             ("vkformer_fp32", "torch_fp32", "implementations, both fp32"),
             ("torch_bf16", "torch_fp32", "PyTorch's own mixed-precision effect"),
             ("vkformer_f16", "vkformer_fp32", "vkformer's own mixed-precision effect"),
             ("vkformer_f16", "torch_fp32", "vkformer f16 against the fp32 reference")]
    print(f"loss curves over {len(loss['vkformer_f16'])} steps, smoothed by the mean of consecutive "
          f"{window}-step windows; relative difference |a - b| / b per window")
    print(f"  {'a':14s} {'b':14s} {'max':>8s} {'mean':>8s} {'worst at':>9s} {'final a':>8s} {'final b':>8s}  what")
    summary = {"window": window, "gate": gate, "pairs": []}
    for a, b, what in pairs:
        if a not in loss or b not in loss:
            continue
        d = curve_difference(loss[a], loss[b], window)
        summary["pairs"].append(dict(a=a, b=b, what=what, **d))
        print(f"  {a:14s} {b:14s} {100 * d['max']:7.3f}% {100 * d['mean']:7.3f}% {d['worst_window_first_step']:9d} "
              f"{d['final_a']:8.4f} {d['final_b']:8.4f}  {what}")
    print("step-1 losses (same weights, same batch): " +
          ", ".join(f"{k} {v[0]:.5f}" for k, v in sorted(loss.items())))
    skipped = [r["step"] for r in logs["vkformer_f16"] if r.get("skipped")]
    scales = [r["loss_scale"] for r in logs["vkformer_f16"] if "loss_scale" in r]
    print(f"vkformer f16: {len(skipped)} skipped step(s){' at ' + str(skipped[:20]) if skipped else ''}; "
          f"loss scale {scales[0]:g} at step 1, {scales[-1]:g} at the end" if scales else "vkformer f16: no loss-scale column")
    gate_max = summary["pairs"][0]["max"]
    summary.update(skipped_steps=skipped, step1={k: v[0] for k, v in loss.items()},
                   result="PASS" if gate_max <= gate else "FAIL")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"{summary['result']}: vkformer f16 tracks torch bf16 within {100 * gate_max:.3f}% "
          f"(max over windows; gate {100 * gate:.0f}%)")
    return summary["result"] == "PASS"


# ----------------------------------------------------------------------------------------------
# PyTorch side (the H200 machine)

def make_model(model_dir, seed=0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**MODEL)).float()
    model.save_pretrained(model_dir)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {n / 1e6:.1f}M parameters -> {model_dir}", flush=True)


def decays(name):
    """transformers' Trainer (and vkformer's train::decays): no weight decay on biases and norms."""
    return not (name.endswith(".bias") or "norm" in name)


def torch_run(model_dir, tokens, log_path, precision, t):
    import torch
    from transformers import LlamaForCausalLM
    try:
        from transformers import get_cosine_schedule_with_warmup
    except ImportError:
        from transformers.optimization import get_cosine_schedule_with_warmup
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = LlamaForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").float().cuda()
    model.train()
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if decays(n)], "weight_decay": t["weight_decay"]},
              {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=t["lr"], betas=(0.9, 0.999), eps=1e-8, fused=True)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=t["warmup"], num_training_steps=t["steps"])
    ids_all = torch.frombuffer(bytearray(open(tokens, "rb").read()), dtype=torch.int32)
    ids_all = ids_all.view(-1, t["batch"], t["seq"])[: t["steps"]].long().cuda()
    start = time.time()
    with open(log_path, "w") as log:
        for step in range(1, t["steps"] + 1):
            ids = ids_all[step - 1]
            lr = sched.get_last_lr()[0]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_grad_norm"])
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            log.write(json.dumps({"step": step, "loss": loss.item(), "lr": lr, "grad_norm": norm.item()}) + "\n")
            if step == 1 or step % 100 == 0:
                print(f"  torch {precision} step {step} loss {loss.item():.4f}", flush=True)
    seconds = time.time() - start
    print(f"torch {precision}: {t['steps']} steps in {seconds:.1f} s", flush=True)
    return seconds


def vkformer_run(train_bench, model_dir, tokens, log_path, precision, t):
    cmd = [train_bench, "--model", model_dir, "--tokens", tokens, "--batch", str(t["batch"]), "--seq", str(t["seq"]),
           "--steps", str(t["steps"]), "--lr", str(t["lr"]), "--lr-scheduler-type", "cosine",
           "--lr-warmup-steps", str(t["warmup"]), "--weight-decay", str(t["weight_decay"]),
           "--max-grad-norm", str(t["max_grad_norm"]), "--precision", precision, "--loss-log", log_path]
    print("$ " + " ".join(cmd), flush=True)
    start = time.time()
    subprocess.run(cmd, check=True)
    seconds = time.time() - start
    print(f"vkformer {precision}: {t['steps']} steps in {seconds:.1f} s", flush=True)
    return seconds


def run(a):
    t = dict(TRAIN, steps=a.steps)
    os.makedirs(a.out, exist_ok=True)
    model_dir = os.path.join(a.out, "model")
    tokens = os.path.join(a.out, "tokens.bin")
    make_model(model_dir)
    n = write_tokens(tokens, t["steps"], t["batch"], t["seq"])
    print(f"tokens: {t['steps']} x {t['batch']} x {t['seq']} from {n} bytes of repository text -> {tokens}", flush=True)
    times = {}
    for p in ("f16", "fp32"):
        times[f"vkformer_{p}"] = vkformer_run(a.train_bench, model_dir, tokens,
                                              os.path.join(a.out, f"vkformer_{p}.jsonl"), p, t)
    for p in ("bf16", "fp32"):
        times[f"torch_{p}"] = torch_run(model_dir, tokens, os.path.join(a.out, f"torch_{p}.jsonl"), p, t)
    tokens_per_step = t["batch"] * t["seq"]
    print("wall time (including start-up): " + ", ".join(
        f"{k} {v:.1f} s ({t['steps'] * tokens_per_step / v:.0f} tok/s)" for k, v in times.items()))
    return compare(a.out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="everything: model, tokens, both frameworks, comparison")
    r.add_argument("--train-bench", required=True, help="path of vkformer's bench/train_bench binary")
    r.add_argument("--out", required=True, help="output folder")
    r.add_argument("--steps", type=int, default=TRAIN["steps"])
    k = sub.add_parser("tokens", help="write the token file only")
    k.add_argument("--out", required=True)
    k.add_argument("--steps", type=int, default=TRAIN["steps"])
    k.add_argument("--batch", type=int, default=TRAIN["batch"])
    k.add_argument("--seq", type=int, default=TRAIN["seq"])
    k.add_argument("--vocab", type=int, default=256, help="below 256: bytes folded modulo (small test models)")
    k.add_argument("--corpus", help="take the bytes of this file instead of the repository's text files")
    c = sub.add_parser("compare", help="compare the loss logs in a folder")
    c.add_argument("dir")
    a = ap.parse_args()
    if a.cmd == "run":
        sys.exit(0 if run(a) else 1)
    if a.cmd == "tokens":
        n = write_tokens(a.out, a.steps, a.batch, a.seq, a.vocab, corpus_file=a.corpus)
        print(f"tokens: {a.steps} x {a.batch} x {a.seq} from {n} bytes -> {a.out}")
        return
    sys.exit(0 if compare(a.dir) else 1)


if __name__ == "__main__":
    main()
