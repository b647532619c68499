"""Does encoding each prompt once pay? ``LMGRPOTrainer`` with and without the shared prompt cache.

    .venv/bin/python bench/prompt_cache.py              # the CPU lesson's defaults (notebook 06)
    .venv/bin/python bench/prompt_cache.py --threads 1

The G completions of a group share their prompt. With ``share_prompts`` (``lm_grpo.py``,
``shared_prompt_logits``) the log-prob passes (policy, reference, and old policy when
``num_iterations > 1``) encode each prompt once and copy its key/value cache G times; without it
every row runs prompt + completion. Sampling is the same in both (one ``generate`` call over all
rows). Both give the same numbers (``tests/test_lm.py``); this measures only speed.

Same model, data and settings for both: ``MathConfig()`` on the CPU. The two run in interleaved
rounds, each round a fresh trainer from the same seed, and the median step of each round is
compared, so that load from other programs hits both alike. Printed: median step times and the
ratio without / with sharing per round.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from transformers import set_seed

from grpo_minimal.data import load_math_rows
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig


def median_step_ms(share: bool, rows: list[dict], steps: int, warmup: int) -> tuple[float, float]:
    """Median step and sampling time (ms) of a fresh trainer."""
    cfg = MathConfig(device="cpu", max_steps=steps + warmup)
    set_seed(cfg.seed)
    model, tokenizer = load_model(cfg.model, torch.device("cpu"))
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    trainer.share_prompts = share
    step_ms, sample_ms = [], []
    size = cfg.prompts_per_step
    for i in range(warmup + steps):
        record, _ = trainer.step(rows[i * size : (i + 1) * size])
        if i >= warmup:
            step_ms.append(1000 * record["step_s"])
            sample_ms.append(1000 * record["sample_s"])
    return statistics.median(step_ms), statistics.median(sample_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default: 6)")
    parser.add_argument("--steps", type=int, default=16, help="timed steps per round (default: 16)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: 2)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = load_math_rows("arithmetic", "train")
    print(f"torch threads: {torch.get_num_threads()}; MathConfig() defaults on the CPU")
    ratios = []
    for r in range(1, args.rounds + 1):
        shared, shared_sample = median_step_ms(True, rows, args.steps, args.warmup)
        plain, plain_sample = median_step_ms(False, rows, args.steps, args.warmup)
        ratios.append(plain / shared)
        print(
            f"round {r}: step {shared:.0f} ms shared, {plain:.0f} ms not shared "
            f"(sampling {shared_sample:.0f} / {plain_sample:.0f} ms): ratio {ratios[-1]:.2f}"
        )
    print(
        f"median ratio, step time without / with the shared prompt cache: "
        f"{statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"
    )


if __name__ == "__main__":
    main()
