"""GRPO ablations on the shipped tiny model, scored on a validation split carved from training.

    .venv/bin/python bench/ablations.py --completions 12800 --threads 1 --seeds 0 1 2 3 4 \
        --variants notebook07                                               # notebook 07's sweep
    .venv/bin/python bench/ablations.py --budget 60 --variants default,beta0  # 60 s of training

Each run (``grpo_minimal.course.ablations.run_variant``) trains from the shipped model with
``MathConfig()`` plus one variant's overrides, for an equal budget of sampled completions
(``--completions N``: it fixes ``max_steps``, so the numbers do not depend on the machine's load;
on the same CPU and thread count they repeat exactly) or for at most ``--budget`` seconds of
training (``time_budget_s``, evaluation not counted). It then measures greedy accuracy on a
**validation** split: the last ``--validation`` rows of the arithmetic train split, less any
problem whose swapped twin (``a+b`` / ``b+a``) stays in training; the run trains on the rest.
The test split is never read here: choices made from this table (defaults, say) are then
reported once on the test split, which decided nothing.

Results go to a JSON file (default ``bench/results/ablations.json``), one record per (variant,
seed, budget) with its machine, date, thread count and ``provenance``; a rerun skips the runs
already there (resumable).
"""

from __future__ import annotations

import argparse

import torch
from provenance import provenance  # bench/ is on the path when a script here runs
from tqdm.auto import tqdm

from grpo_minimal.course.ablations import (
    NOTEBOOK_07,
    RESULTS,
    VARIANTS,
    append_result,
    budget_of,
    load_results,
    run_variant,
    summarize,
    validation_split,
)
from grpo_minimal.data import load_math_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated names, or notebook07"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=float, default=60.0, help="training seconds per run")
    budget.add_argument(
        "--completions",
        type=int,
        default=0,
        help="sampled completions per run (sets max_steps; replaces --budget)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--validation", type=int, default=500, help="rows carved from train")
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    names = NOTEBOOK_07 if args.variants == "notebook07" else args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    budget_s = 0.0 if args.completions else args.budget
    label = budget_of({"completions": args.completions, "budget_s": budget_s})

    data = load_results(args.out)
    done = {(r["variant"], r["seed"], budget_of(r)) for r in data["runs"]}
    train, validation = validation_split(load_math_rows("arithmetic", "train"), args.validation)
    print(f"{len(train)} training rows, {len(validation)} validation rows; test split unused")
    todo = [(n, s) for n in names for s in args.seeds if (n, s, label) not in done]
    for name, seed in tqdm(todo, desc="ablation runs"):
        record = run_variant(name, seed, train, validation, args.completions, budget_s)
        append_result(
            args.out, data, record | {"provenance": provenance(threads=torch.get_num_threads())}
        )

    runs = [r for r in data["runs"] if budget_of(r) == label]
    print(
        f"\nvalidation greedy accuracy after {label} of training: mean over seeds, the seeds'"
        f" range, and with 5 or more seeds a 95% bootstrap interval of the mean;"
        f" {data['machine']}, {data['date']}"
    )
    print(f"{'variant':<14}{'seeds':>6}{'steps':>7}{'accuracy':>10}   range            interval")
    for row in summarize(runs, names):
        interval = "-" if row["interval"] is None else "[{:.1%}, {:.1%}]".format(*row["interval"])
        print(
            f"{row['variant']:<14}{row['seeds']:>6}{row['steps']:>7.0f}{row['accuracy']:>10.1%}"
            f"   {row['low']:.1%}-{row['high']:.1%}    {interval}"
        )


if __name__ == "__main__":
    main()
