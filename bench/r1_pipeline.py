"""DeepSeek-R1's pipeline in miniature on the tiny model, against plain GRPO at the same budget.

    .venv/bin/python bench/r1_pipeline.py                  # seeds 0-4, 100 steps a stage

The shipped model plays the cold-start checkpoint (it was fine-tuned to partial competence on
arithmetic before any RL: ``data/make_tiny_model.py``). The pipeline then runs reasoning RL
(GRPO, ``--stage-steps``), rejection sampling + SFT (``rft.RFTTrainer``, continuing from the RL
model; R1 fine-tunes the base model again on the RL model's samples, which this miniature does
not), and RL again (GRPO). Plain GRPO runs three times as many steps in one go: both sample
the same number of completions (``MathConfig()``: 64 a step). Each stage's learning rate decays
over the stage. Scored on the arithmetic **test** split (greedy accuracy, 500 problems), which
decides nothing here; results go to ``bench/results/r1_pipeline.json`` (notebook 08 reads it).
"""

from __future__ import annotations

import argparse

import torch
from provenance import provenance  # bench/ is on the path when a script here runs
from tqdm.auto import tqdm

from grpo_minimal.course.ablations import RESULTS, append_result, load_results
from grpo_minimal.course.rft import RFTTrainer
from grpo_minimal.data import load_train_eval_rows
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig, train_math

OUT = RESULTS.with_name("r1_pipeline.json")
STAGES = {"plain GRPO": [("GRPO", 3)], "R1 miniature": [("GRPO", 1), ("RFT", 1), ("GRPO", 1)]}


def run(recipe: str, seed: int, stage_steps: int, train: list[dict], test: list[dict]) -> dict:
    """One recipe from the shipped model; accuracy after each stage."""
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    accuracies = []
    for index, (method, length) in enumerate(STAGES[recipe]):
        rft = method == "RFT"
        cfg = MathConfig(
            device="cpu",
            seed=seed + 1000 * index,
            max_steps=length * stage_steps,
            eval_every=0,
            eval_n=len(test),
            beta=0.0 if rft else 0.04,
        )
        _, history = train_math(
            cfg,
            model,
            tokenizer,
            train,
            test,
            progress=False,
            trainer_cls=RFTTrainer if rft else LMGRPOTrainer,
        )
        if not accuracies:
            accuracies.append(history[0]["eval_accuracy"])
        accuracies.append(history[-1]["eval_accuracy"])
    return {
        "recipe": recipe,
        "seed": seed,
        "stage_steps": stage_steps,
        "stages": [m for m, _ in STAGES[recipe]],
        "accuracy_after_each": accuracies,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--stage-steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train, test = load_train_eval_rows("arithmetic", "test", 500)
    data = load_results(args.out)
    done = {(r["recipe"], r["seed"], r["stage_steps"]) for r in data["runs"]}
    todo = [
        (recipe, seed)
        for recipe in STAGES
        for seed in args.seeds
        if (recipe, seed, args.stage_steps) not in done
    ]
    for recipe, seed in tqdm(todo, desc="runs"):
        record = run(recipe, seed, args.stage_steps, train, test)
        record |= {"provenance": provenance(threads=torch.get_num_threads())}
        record = append_result(args.out, data, record)
        print(recipe, seed, " -> ".join(f"{a:.1%}" for a in record["accuracy_after_each"]))


if __name__ == "__main__":
    main()
