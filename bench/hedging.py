"""Reward hacking and length bias on the tiny model (``grpo_minimal/course/hacking.py``), over seeds.

    .venv/bin/python bench/hedging.py          # seeds 10-14, 300 steps a run

Each seed: a cold start (150 SFT steps, 20% hedged targets) from the shipped model, then four
GRPO runs from it, 300 steps of 8 prompts x 8 completions each: the lenient and the strict
grader, each with the default ``dapo`` aggregation and with ``grpo``. Greedy strict accuracy
and hedge rate are scored on the arithmetic **test** split (500 problems), which decides
nothing here. Seeds 10-14 because seeds 0 and 1 (scored on the validation split) were used to
choose the cold start and the budget. Results go to ``bench/results/hedging.json`` (notebook 08
reads it). To use both cores, run two processes with different ``--seeds`` and ``--out`` files
and join their ``runs`` lists: two processes appending to one file would each rewrite it from
their own copy.
"""

from __future__ import annotations

import argparse

import torch
from provenance import provenance  # bench/ is on the path when a script here runs
from tqdm.auto import tqdm

from grpo_minimal.course.ablations import RESULTS, append_result, load_results
from grpo_minimal.course.hacking import run_hedging
from grpo_minimal.data import load_train_eval_rows

OUT = RESULTS.with_name("hedging.json")
RUNS = [("lenient", "dapo"), ("lenient", "grpo"), ("strict", "dapo"), ("strict", "grpo")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12, 13, 14])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train, test = load_train_eval_rows("arithmetic", "test", 500)
    data = load_results(args.out)
    done = {(r["seed"], r["steps"]) for r in data["runs"]}
    for seed in tqdm([s for s in args.seeds if (s, args.steps) not in done], desc="seeds"):
        record = run_hedging(seed, RUNS, train, test, args.steps)
        record |= {"provenance": provenance(threads=torch.get_num_threads())}
        record = append_result(args.out, data, record)
        summary = {name: run["greedy"] for name, run in record["runs"].items()}
        print(seed, "cold start", record["cold_start"], summary)


if __name__ == "__main__":
    main()
