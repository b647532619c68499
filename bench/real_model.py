"""GRPO on a real model on a laptop: SmolLM2-135M-Instruct, 2 CPU cores, both backends (notebook 11).

    .venv/bin/grpo-minimal fetch smollm2-135m               # once
    .venv/bin/python bench/real_model.py                    # seeds 0-2, both backends
    .venv/bin/python bench/real_model.py --seeds 3 --backends grpo_minimal --out /tmp/r.json

Each seed trains the fetched model with ``MathConfig.PRESETS["smollm2-135m"]`` twice:
with this package's trainer, then with TRL's ``GRPOTrainer`` given at most the same steps and the
same training seconds (``time_budget_s``: the first run's; the clock is read after each step, so
TRL's last step may run past it): the two compare at equal time. Both are scored greedily on the
``chat_arithmetic`` **test** split (60 problems in no other split). No setting was tuned on it,
but it is not untouched: the first probe that picked the prompt and temperature predates the
splits, and some of its problems are now test problems; the learning rate is the one value
tried, and the steps were read off one validation run (``bench/README.md``, ``data/README.md``). The starting model is scored once (greedy is deterministic).

Results go to ``bench/results/real_model.json`` (notebook 11 reads it), one run at a time, each
stamped with the machine, the date, torch threads, TRL's version and ``provenance``; each keeps
every test problem's verdict before and after (for paired intervals) and the first completions as
text.
An interrupted sweep resumes where it stopped (runs already in the file are skipped).
"""

from __future__ import annotations

import argparse
import dataclasses

import torch
from provenance import provenance  # bench/ is on the path when a script here runs

from grpo_minimal.course.ablations import RESULTS, append_result, load_results
from grpo_minimal.course.real_model import MODEL, run, scored
from grpo_minimal.data import load_chat_arithmetic
from grpo_minimal.lm_model import load_model
from grpo_minimal.math_config import MathConfig

OUT = RESULTS.with_name("real_model.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--backends", nargs="+", default=["grpo_minimal", "trl"], choices=["grpo_minimal", "trl"]
    )
    parser.add_argument("--steps", type=int, default=None, help="default: the smollm2-135m preset")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import trl

    train_rows, test = load_chat_arithmetic("train"), load_chat_arithmetic("test")
    data = load_results(args.out)
    base = MathConfig.for_device(
        "cpu", model=MODEL, eval_split="test", eval_every=0, eval_n=len(test)
    )
    if args.steps:
        base.max_steps = args.steps
    if "start" not in data:
        model, tokenizer = load_model(MODEL, torch.device("cpu"))
        data["start"] = scored(model, tokenizer, test, base)
        data["config"] = base.to_dict()
        del model  # one copy of the weights at a time: each run's peak memory is its own
        print(f"start: test accuracy {data['start']['accuracy']:.3f}", flush=True)
    for seed in args.seeds:
        for backend in args.backends:
            if any(
                r["seed"] == seed and r["backend"] == backend and r["max_steps"] == base.max_steps
                for r in data["runs"]
            ):
                continue
            budget = 0.0
            if backend == "trl":  # the same training seconds as this seed's run of ours
                ours = [
                    r
                    for r in data["runs"]
                    if r["seed"] == seed
                    and r["backend"] == "grpo_minimal"
                    and r["max_steps"] == base.max_steps
                ]
                budget = ours[-1]["train_s"] if ours else 0.0
            cfg = dataclasses.replace(base, seed=seed, time_budget_s=budget)
            record = run(backend, cfg, train_rows, test)[0]
            stamp = {"trl": trl.__version__, "provenance": provenance(torch.get_num_threads())}
            record = append_result(args.out, data, record | stamp)
            print(
                f"{backend:12s} seed {seed}: {record['steps']} steps in {record['train_s']:.0f} s, "
                f"test accuracy {data['start']['accuracy']:.3f} -> "
                f"{record['after']['accuracy']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
