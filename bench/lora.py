"""LoRA against a full fine-tune on a real model: SmolLM2-135M-Instruct on a CPU (notebook 11).

    .venv/bin/grpo-minimal fetch smollm2-135m      # once
    .venv/bin/python bench/lora.py                 # seeds 0-2, both methods (about 25 min)
    .venv/bin/python bench/lora.py --seeds 0 --steps 2 --out /tmp/lora.json   # a smoke test

Each seed trains the fetched model at notebook 11's settings (``MathConfig.PRESETS``:
20 steps of 2 prompts x 8 completions, beta 0) twice: a full fine-tune (learning rate 1e-5) and
LoRA at rank 16 on every block linear (``MathConfig.PRESETS``: learning rate 3e-4, chosen
on the validation split by ``data/probe_lora_smollm2.py``). Both are scored greedily on the
``chat_arithmetic`` test split (60 problems; no setting was chosen on it). Then two runs of two
steps at beta 0.04 (a reference model for the full fine-tune, the adapter switched off for
LoRA) measure what the reference costs.

Every run is its own process (its peak memory is its own), one after another on 2 torch threads,
so seconds compare between the methods in this run. Each record keeps: trainable and total
parameters, the process's peak resident memory during training (``VmHWM``, loading included,
read before the 60-problem scoring) and what it held once the model was loaded, the seconds of
each step and their mean (the first step, a warm-up, left out), and the test accuracy with each
test problem's verdict. ``course.real_model.lora_comparison`` gives LoRA - full over the paired
seeds with a 95% Student-t interval. Sampling's share of a step is not recorded.

Results: ``bench/results/lora.json`` (notebook 11 reads it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import os
import platform
import statistics
from pathlib import Path

from llm_ppo_vs_grpo import resident_mb  # bench/ is on the path when a script here runs
from provenance import provenance

RESULTS = Path(__file__).resolve().parent / "results" / "lora.json"
RANK = 16


def one_run(job: dict) -> dict:
    """Train one (method, seed) in this process and score it on the test split."""
    import torch

    from grpo_minimal.course.real_model import MODEL, scored
    from grpo_minimal.data import load_chat_arithmetic
    from grpo_minimal.lm_train import MathConfig, setup, train_math

    torch.set_num_threads(2)
    test = load_chat_arithmetic("test")
    lora_r = RANK if job["method"] == "lora" else 0
    settings = {"model": MODEL, "lora_r": lora_r, "seed": job["seed"], "eval_every": 0}
    cfg = MathConfig.for_device("cpu", **settings | job["overrides"])
    model, tokenizer = setup(cfg)
    loaded_mb = resident_mb()
    # train_math's own evaluations (before and after) get one problem; ``scored`` reads all 60
    trainer, history = train_math(cfg, model, tokenizer, eval_rows=test[:1], progress=False)
    model = trainer.model
    steps = [r for r in history if "step_s" in r]
    record = {
        "method": job["method"],
        "seed": job["seed"],
        "lora_r": lora_r,
        "beta": cfg.beta,
        "learning_rate": cfg.learning_rate,
        "steps": len(steps),
        "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "parameters": sum(p.numel() for p in model.parameters()),
        "loaded_mb": round(loaded_mb, 1),
        "peak_memory_mb": round(history[-1]["peak_memory_mb"], 1),
        "step_s": [round(r["step_s"], 3) for r in steps],
        "mean_step_s": round(statistics.fmean(r["step_s"] for r in steps[1:]), 3)
        if len(steps) > 1
        else None,
        "reward_mean": [round(r["reward_mean"], 4) for r in steps],
        "train_s": history[-1]["train_s"],
    }
    if job["score"]:
        record["after"] = scored(model, tokenizer, test, cfg)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--steps", type=int, default=None, help="default: the smollm2-135m preset's 20"
    )
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    steps = {"max_steps": args.steps} if args.steps else {}
    jobs = [
        {"method": method, "seed": seed, "score": True, "overrides": steps}
        for seed in args.seeds
        for method in ("full", "lora")
    ]
    jobs += [
        {"method": method, "seed": 0, "score": False, "overrides": {"beta": 0.04, "max_steps": 2}}
        for method in ("full", "lora")
    ]
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        start = pool.apply(scored_start)
        runs = []
        for job in jobs:
            runs.append(pool.apply(one_run, (job,)))
            print(
                json.dumps(
                    {
                        k: v
                        for k, v in runs[-1].items()
                        if k not in ("after", "step_s", "reward_mean")
                    }
                ),
                flush=True,
            )
    import peft

    result = {  # notebook 11 prints machine, threads, date and peft
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "threads": 2,
        "date": datetime.date.today().isoformat(),
        "peft": peft.__version__,
        "rank": RANK,
        "start": start,
        "runs": runs,
        "provenance": provenance(threads=2),  # each run's process sets 2 torch threads
    }
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    from grpo_minimal.course.real_model import lora_comparison

    print(json.dumps(lora_comparison(result)))


def scored_start() -> dict:
    """The fetched model before training, scored greedily on the test split (deterministic)."""
    import torch

    from grpo_minimal.course.real_model import MODEL, scored
    from grpo_minimal.data import load_chat_arithmetic
    from grpo_minimal.lm_train import MathConfig, setup

    torch.set_num_threads(2)
    test = load_chat_arithmetic("test")
    cfg = MathConfig.for_device("cpu", model=MODEL, eval_split="test", eval_n=len(test))
    model, tokenizer = setup(cfg)
    return scored(model, tokenizer, test, cfg)


if __name__ == "__main__":
    main()
