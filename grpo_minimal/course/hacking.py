"""Reward hacking and length bias, live on the tiny model (notebook 08, sections 7-9).

The shipped model always answers with one number and stops, so it never shows the two failures
the course warns about. A short cold start (``sft.py``; DeepSeek-R1's first stage) gives it one
new behaviour: in a fifth of its examples (``HEDGE_FRACTION``) the target is a *hedge*, three
numbers around the answer (``"67 68 69"`` for ``"23+45="``). Then GRPO trains it with one of
two graders:

* the strict ``rewards.accuracy_reward`` (equation (17)) reads one final answer and gives a
  hedge 0, so a hedge is always wrong, and always longer than an honest answer;
* the deliberately bad ``rewards.lenient_accuracy_reward`` of notebook 05, section 5: 1 if the
  gold number appears anywhere in the completion, so a hedge around a near miss is paid as a
  right answer.

Under the lenient grader GRPO learns to hedge (reward hacking). Under the strict grader hedges are
long wrong completions, exactly the case where the loss's aggregation matters (equation (9)):
``grpo`` divides each completion's token sum by its own length |o_i|, so a long wrong completion is
pushed down less per token than a short one (Liu et al. 2025, "Understanding R1-Zero-like
training", arXiv:2503.20783, section 3.1); ``dr_grpo`` and ``dapo`` weigh every token alike.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Sequence

import torch

from ..lm_model import load_model
from ..lm_train import MathConfig, evaluate_accuracy, train_math
from ..rewards import accuracy_reward, lenient_accuracy_reward
from .sft import supervised_finetune

__all__ = [
    "HEDGE_FRACTION",
    "cold_start",
    "greedy_report",
    "hedge_target",
    "is_hedge",
    "run_hedging",
    "watch_hedging",
]

HEDGE_FRACTION = 0.2
"""Fraction of the cold start's targets that are hedges (each problem's target is drawn once)."""

_NUMBER_RE = re.compile(r"-?\d+")


def is_hedge(text: str) -> bool:
    """True when a completion states more than one number. (``"68 68"`` counts as a hedge here;
    the strict grader accepts it, since it states one value.)"""
    return len(_NUMBER_RE.findall(text)) > 1


def hedge_target(answer: str) -> str:
    """The cold start's hedge for an integer answer: the answer between its two neighbours."""
    a = int(answer)
    return f"{a - 1} {a} {a + 1}"


def cold_start(
    model,
    tokenizer,
    rows: Sequence[dict],
    seed: int,
    steps: int = 150,
    hedge_fraction: float = HEDGE_FRACTION,
) -> list[float]:
    """Fine-tune ``model`` in place on ``rows`` (equation (52)); a ``hedge_fraction`` of the
    problems, drawn once with ``seed``, get a hedge as their target. Returns the SFT losses."""
    if not 0.0 <= hedge_fraction <= 1.0:
        raise ValueError(f"hedge_fraction must be in [0, 1], got {hedge_fraction}")
    rng = random.Random(seed)
    targets = [
        dict(r, target=hedge_target(r["answer"]) if rng.random() < hedge_fraction else r["answer"])
        for r in rows
    ]
    return supervised_finetune(model, tokenizer, targets, steps, key="target", seed=seed)


def watch_hedging(record: dict, rollout) -> None:
    """A ``train_math`` observer (``on_step``): adds what the sampled completions do to each
    step's record: the hedge rate, the strict accuracy (whatever the training reward is) and the
    mean length of the strictly wrong completions."""
    if rollout is None:  # the evaluation before the first step
        return
    golds = [row["answer"] for row in rollout.rows]
    right = torch.tensor(accuracy_reward(rollout.completions, golds)) == 1.0
    lengths = rollout.completion_mask.sum(dim=1).float().cpu()
    record["hedge_rate"] = sum(map(is_hedge, rollout.completions)) / len(golds)
    record["strict_accuracy"] = right.float().mean().item()
    record["wrong_length"] = lengths[~right].mean().item() if (~right).any() else None


def greedy_report(model, tokenizer, rows: Sequence[dict], cfg: MathConfig) -> dict:
    """Greedy strict accuracy and hedge rate on ``rows``."""
    accuracy, completions = evaluate_accuracy(model, tokenizer, rows, cfg)
    return {"strict_accuracy": accuracy, "hedge_rate": sum(map(is_hedge, completions)) / len(rows)}


GRADERS = {"lenient": lenient_accuracy_reward, "strict": accuracy_reward}


def run_hedging(
    seed: int,
    runs: Sequence[tuple[str, str]],
    train_rows: Sequence[dict],
    report_rows: Sequence[dict],
    steps: int = 300,
    max_completion_length: int = 12,
    model_name: str = "tiny",
) -> dict:
    """One cold start with ``seed``, then one GRPO run per ``(grader, loss_type)`` in ``runs``,
    each from the cold-started model. Returns the greedy reports (before and after each run) and
    each run's per-step ``hedge_rate``, ``strict_accuracy``, ``reward_mean`` and
    ``wrong_length``."""
    torch.manual_seed(seed)
    model, tokenizer = load_model(model_name, torch.device("cpu"))
    cold_start(model, tokenizer, train_rows, seed)
    base_cfg = MathConfig(
        device="cpu", max_completion_length=max_completion_length, eval_n=len(report_rows)
    )
    cold = greedy_report(model, tokenizer, report_rows, base_cfg)
    result = {
        "seed": seed,
        "steps": steps,
        "max_completion_length": max_completion_length,
        "cold_start": cold,
        "runs": {},
    }
    for grader, loss_type in runs:
        cfg = MathConfig(
            device="cpu",
            seed=seed,
            max_steps=steps,
            eval_every=0,
            max_completion_length=max_completion_length,
            loss_type=loss_type,
            eval_n=len(report_rows),
        )
        trainer, history = train_math(
            cfg,
            copy.deepcopy(model),
            tokenizer,
            train_rows,
            report_rows,
            reward_funcs=[GRADERS[grader]],
            progress=False,
            on_step=watch_hedging,
        )
        steps_logged = history[1:]
        result["runs"][f"{grader}/{loss_type}"] = {
            "greedy": greedy_report(trainer.model, tokenizer, report_rows, cfg),
            **{
                key: [round(r[key], 4) if r[key] is not None else None for r in steps_logged]
                for key in ("hedge_rate", "strict_accuracy", "reward_mean", "wrong_length")
            },
        }
    return result
