"""How far the tiny model goes: one long GRPO run with validation accuracy along the way.

    .venv/bin/python bench/how_far.py                       # MathConfig() for 3000 steps, seed 0
    .venv/bin/python bench/how_far.py --steps 1000 --set beta=0.0 --seeds 0 1

Notebook 07 (section 7) plots the committed curve: how many steps, and sampled completions, the
default settings need to reach a given validation accuracy, against what 60 s of training on 2
cores buys. The learning rate decays linearly over ``--steps``, so a longer run is not the
start of a shorter one followed by more steps: each ``--steps`` is its own run. Runs already in
the results file (same overrides, seed and steps) are skipped. Validation rows
come from the train split as in ``bench/ablations.py``; the test split is never read.
"""

from __future__ import annotations

import argparse
import ast
import json

import torch
from provenance import provenance  # bench/ is on the path when a script here runs
from tqdm.auto import tqdm

from grpo_minimal.course.ablations import RESULTS, append_result, load_results, validation_split
from grpo_minimal.data import load_math_rows
from grpo_minimal.lm_train import MathConfig, train_math

OUT = RESULTS.with_name("how_far.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="MathConfig overrides, e.g. beta=0.0",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            overrides[key] = value  # a plain string, e.g. loss_type=grpo
    torch.set_num_threads(args.threads)
    train, validation = validation_split(load_math_rows("arithmetic", "train"), 500)
    data = load_results(args.out)
    done = {
        (json.dumps(r["overrides"], sort_keys=True), r["seed"], r["max_steps"])
        for r in data["runs"]
    }
    todo = [
        s for s in args.seeds if (json.dumps(overrides, sort_keys=True), s, args.steps) not in done
    ]
    for seed in tqdm(todo, desc="runs"):
        cfg = MathConfig(
            device="cpu",
            seed=seed,
            max_steps=args.steps,
            eval_every=args.eval_every,
            eval_n=len(validation),
            **overrides,
        )
        _, history = train_math(cfg, train_rows=train, eval_rows=validation, progress=False)
        per_step = cfg.prompts_per_step * cfg.num_generations
        curve = [
            {
                "step": h["step"],
                "completions": h["step"] * per_step,
                "train_s": h["train_s"],
                "validation_accuracy": h["eval_accuracy"],
            }
            for h in history
            if h.get("eval_accuracy") is not None
        ]
        append_result(
            args.out,
            data,
            {
                "overrides": overrides,
                "seed": seed,
                "max_steps": args.steps,
                "curve": curve,
                "provenance": provenance(threads=torch.get_num_threads()),
            },
        )
        for point in curve:
            print(
                f"seed {seed} step {point['step']:5d} ({point['completions']:7d} completions): "
                f"{point['validation_accuracy']:.1%}"
            )


if __name__ == "__main__":
    main()
