#!/usr/bin/env python3
"""Learning rates of transformers' schedulers, for tests/unit/test_schedule.cpp.

    python3 tools/oracle/schedule_fixture.py > tests/fixtures/schedule/transformers_lr.json

For each case, the learning rate the HF Trainer uses at optimizer steps 1..N: the scheduler's
get_last_lr() before each optimizer.step(), with the warmup steps TrainingArguments derives from
warmup_ratio (get_warmup_steps). Runs on the CPU; needs torch and transformers.
"""
import json
import sys

import torch
import transformers
from transformers import TrainingArguments, get_scheduler

CASES = [
    dict(type="constant", lr=3e-4, steps=5),
    dict(type="constant_with_warmup", lr=1e-3, steps=8, warmup_steps=3),
    dict(type="linear", lr=1e-3, steps=10, warmup_steps=4),
    dict(type="linear", lr=5e-5, steps=37, warmup_ratio=0.1),
    dict(type="cosine", lr=2e-4, steps=13, warmup_steps=2),
    dict(type="cosine", lr=1e-3, steps=50, warmup_ratio=0.06),
    dict(type="cosine_with_min_lr", lr=1e-3, steps=21, warmup_steps=3, min_lr=1e-4),
    dict(type="cosine_with_min_lr", lr=6e-4, steps=30, warmup_ratio=0.05, min_lr_rate=0.1),
]


def main():
    out = {"generator": "tools/oracle/schedule_fixture.py",
           "transformers_version": transformers.__version__, "torch_version": torch.__version__,
           "cases": []}
    for c in CASES:
        warmup = c.get("warmup_steps", 0)
        if "warmup_ratio" in c:
            try:
                args = TrainingArguments(output_dir="/tmp/sched", warmup_ratio=c["warmup_ratio"],
                                         report_to=[])
            except TypeError:  # versions where warmup_steps < 1 is the ratio
                args = TrainingArguments(output_dir="/tmp/sched", warmup_steps=c["warmup_ratio"],
                                         report_to=[])
            warmup = args.get_warmup_steps(c["steps"])
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([param], lr=c["lr"])
        kw = {}
        if "min_lr" in c:
            kw["scheduler_specific_kwargs"] = {"min_lr": c["min_lr"]}
        if "min_lr_rate" in c:
            kw["scheduler_specific_kwargs"] = {"min_lr_rate": c["min_lr_rate"]}
        sched = get_scheduler(c["type"], opt, num_warmup_steps=warmup,
                              num_training_steps=c["steps"], **kw)
        lrs = []
        for _ in range(c["steps"]):
            lrs.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        case = {k: v for k, v in c.items() if k != "lr"}
        out["cases"].append({**case, "learning_rate": c["lr"], "resolved_warmup_steps": warmup,
                             "lr_per_step": lrs})
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
