"""GRPO ablations on the shipped tiny model, scored on a validation split carved from training.

    .venv/bin/python bench/ablations.py                          # every variant, seeds 0-1
    .venv/bin/python bench/ablations.py --variants default,beta0 --seeds 0 1 2 3 4

Each run trains from the shipped model with ``MathConfig()`` plus the variant's overrides for at
most ``--budget`` seconds of training (``time_budget_s``; evaluation not counted) or its
``max_steps``, whichever ends first, then measures greedy accuracy on a **validation** split: the last ``--validation`` rows of the arithmetic train
split, less any problem whose swapped twin (``a+b`` / ``b+a``) stays in training; the run trains
on the rest. The test split is never read here: choices made from this table (defaults, say)
are then reported once on the test split, which decided nothing.

Results go to a JSON file (default ``bench/results/ablations.json``) with the machine and date,
one record per (variant, seed, budget); a rerun skips the runs already there (resumable).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from grpo_minimal.data import load_math_rows
from grpo_minimal.lm_train import MathConfig, train_math
from grpo_minimal.stats import bootstrap_ci

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
from make_arithmetic import problem_key  # noqa: E402  (a+b and b+a are one problem)

VARIANTS: dict[str, dict] = {
    "default": {},
    "beta0": {"beta": 0.0},
    "lr3e-4": {"learning_rate": 3e-4},
    "lr3e-4_beta0": {"learning_rate": 3e-4, "beta": 0.0},
    "G16_P4": {"num_generations": 16, "prompts_per_step": 4},
    "G4_P16": {"num_generations": 4, "prompts_per_step": 16},
    "scale_none": {"scale_rewards": "none"},
    "loss_grpo": {"loss_type": "grpo"},
    "iterations2": {"num_iterations": 2},
    "constant_lr": {"lr_scheduler_type": "constant"},
}
"""Overrides of ``MathConfig()``, by name."""


def split_train_validation(rows: list[dict], size: int) -> tuple[list[dict], list[dict]]:
    """Training rows and validation rows (the last ``size``, minus swapped twins of training)."""
    train, candidates = rows[:-size], rows[-size:]
    seen = {problem_key(r["prompt"]) for r in train}
    return train, [r for r in candidates if problem_key(r["prompt"]) not in seen]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--budget", type=float, default=60.0, help="training seconds per run")
    parser.add_argument("--validation", type=int, default=500, help="rows carved from train")
    parser.add_argument("--out", default="bench/results/ablations.json")
    args = parser.parse_args()
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")

    out = Path(args.out)
    data = json.loads(out.read_text()) if out.is_file() else {"runs": []}
    done = {(r["variant"], r["seed"], r["budget_s"]) for r in data["runs"]}
    train, validation = split_train_validation(
        load_math_rows("arithmetic", "train"), args.validation
    )
    print(f"{len(train)} training rows, {len(validation)} validation rows; test split unused")
    todo = [(n, s) for n in names for s in args.seeds if (n, s, args.budget) not in done]
    for name, seed in tqdm(todo, desc="ablation runs"):
        cfg = MathConfig(device="cpu", seed=seed, time_budget_s=args.budget,
                         eval_n=len(validation), eval_every=0, **VARIANTS[name])  # fmt: skip
        _, history = train_math(cfg, train_rows=train, eval_rows=validation, progress=False)
        data["runs"].append({
            "variant": name, "overrides": VARIANTS[name], "seed": seed, "budget_s": args.budget,
            "steps": history[-1]["step"], "train_s": history[-1]["train_s"],
            "validation_before": history[0]["eval_accuracy"],
            "validation_accuracy": history[-1]["eval_accuracy"], "validation_n": len(validation),
        })  # fmt: skip
        data["machine"] = (f"{platform.machine()}, {os.cpu_count()} CPUs, torch "
                           f"{torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
        data["date"] = datetime.date.today().isoformat()
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, out)  # a run interrupted later loses nothing already written

    print(f"\nvalidation greedy accuracy after <= {args.budget:.0f} s of training: mean over seeds,"
          f" the seeds' range, and with 5 or more seeds a 95% bootstrap interval of the mean;"
          f" {data['machine']}, {data['date']}")  # fmt: skip
    print(f"{'variant':<14}{'seeds':>6}{'steps':>7}{'accuracy':>10}   range            interval")
    for name in names:
        runs = [r for r in data["runs"] if r["variant"] == name and r["budget_s"] == args.budget]
        if not runs:
            continue
        acc = [r["validation_accuracy"] for r in runs]
        steps = statistics.median(r["steps"] for r in runs)
        interval = "-"
        if len(acc) >= 5:
            _, low, high = bootstrap_ci(acc, stat=np.mean)
            interval = f"[{low:.1%}, {high:.1%}]"
        print(f"{name:<14}{len(runs):>6}{steps:>7.0f}{statistics.fmean(acc):>10.1%}   "
              f"{min(acc):.1%}-{max(acc):.1%}    {interval}")  # fmt: skip


if __name__ == "__main__":
    main()
