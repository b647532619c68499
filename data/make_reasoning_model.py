"""Build the cold-start models of notebook 10: ``data/tiny_reasoning_lm/`` and ``tiny_direct_lm/``.

Run from the repository root (a few minutes on 2 CPU cores; seeded):

    .venv/bin/python data/make_reasoning_model.py                     # both models
    .venv/bin/python data/make_reasoning_model.py --share 0.2 --out /tmp/m   # one, elsewhere

What it does, top to bottom:

1. a tokenizer with one token per character (digits, ``+ - * =``, space) plus one token for each
   R1 tag (``<think>``, ``</think>``, ``<answer>``, ``</answer>``) and ``<pad>``, ``<eos>``,
   ``<unk>``; a ``tokenizers`` ``WordLevel`` model saved as a ``PreTrainedTokenizerFast``;
2. a Qwen2 causal LM from a config (random weights, about 0.8M parameters, context 64);
3. supervised fine-tuning (the "cold start" of DeepSeek-R1, arXiv 2501.12948v1, section
   2.3.1) on ``reasoning_train.jsonl`` minus its last ``VAL_SIZE`` problems, each target drawn
   once per batch: with probability ``share`` the column sums then the answer
   (``<think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>``), otherwise the answer alone
   (``<answer>632</answer>``); loss on the target tokens only. It stops at the first check
   (every ``CHECK_EVERY`` steps) where the written solutions of the ``VAL_SIZE`` held-back train
   problems reach ``TARGET_THINK_ACCURACY`` greedy accuracy. The model with no written targets
   stops at the first check where its greedy accuracy on those problems reaches the first
   model's: one able to write steps, one not. The checks are 50 steps apart, so it overshoots:
   the shipped pair starts RL 8.7 points apart on the held-back problems (42.7% against 34.0%)
   and 6.6 on the test problems (41.6% against 35.0%), and notebook 10 compares their gains as
   well as their final accuracies;
4. on the ``reasoning_test.jsonl`` problems (never used above): greedy accuracy as the model
   chooses, and with the first token forced to ``<think>`` or to ``<answer>``; the share of
   sampled completions (temperature 1) that write steps; all written to ``training_info.json``.

``share`` is 0.2 for ``tiny_reasoning_lm`` (a minority habit that RL can find and grow: at a 20%
habit a group of 8 samples would hold at least one written solution 1 - 0.8^8 = 83% of the time;
the shipped model opens a think block with probability 16.0% on average over the test prompts,
and a group of 8 holds one 75.2% of the time, notebook 10) and 0 for ``tiny_direct_lm``
(R1-Zero with nothing to reinforce). ``data/REASONING_MODEL.md`` records the shipped figures.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing the package
sys.path.insert(0, str(HERE))  # the tiny model's script, for its architecture
from make_tiny_model import build_model as build_tiny_model  # noqa: E402  (its architecture)
from make_tiny_model import build_tokenizer as build_tiny_tokenizer  # noqa: E402

from grpo_minimal.course.reasoning import (  # noqa: E402
    direct_target,
    operands,
    reasoning_rate,
    reasoning_target,
)
from grpo_minimal.course.sft import sft_batch  # noqa: E402
from grpo_minimal.data import load_jsonl  # noqa: E402
from grpo_minimal.rewards import accuracy_reward  # noqa: E402

SEED = 0
MODELS = {"tiny_reasoning_lm": 0.2, "tiny_direct_lm": 0.0}  # folder -> share of written targets
TAGS = ["<think>", "</think>", "<answer>", "</answer>"]
VAL_SIZE = 300  # the last train problems: not fine-tuned on, they decide when to stop
TARGET_THINK_ACCURACY = 0.5  # stop at the first check where written solutions reach this
MAX_STEPS = 3000
CHECK_EVERY = 50
BATCH_SIZE = 64
LEARNING_RATE = 1e-3
CONTEXT = 64
MAX_NEW_TOKENS = 40  # the longest written target is 34 tokens, then <eos>


def encode(tokenizer, text: str) -> list[int]:
    """Token ids of a target (characters and tags); a character outside the vocabulary is an
    error."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if tokenizer.unk_token_id in ids:
        raise ValueError(f"target {text!r} has characters outside the vocabulary")
    return ids


@torch.no_grad()
def complete(model, tokenizer, prompts: list[str], sample: bool = False) -> list[str]:
    """One completion per prompt, greedy or sampled at temperature 1."""
    model.eval()
    texts = []
    for start in range(0, len(prompts), 250):
        enc = tokenizer(prompts[start : start + 250], return_tensors="pt", padding=True)
        out = model.generate(
            **enc,
            do_sample=sample,
            max_new_tokens=MAX_NEW_TOKENS,
            top_k=None,
            temperature=1.0 if sample else None,
        )
        texts += tokenizer.batch_decode(
            out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
    model.train()
    return texts


def scores(model, tokenizer, rows: list[dict]) -> dict[str, float]:
    """Greedy accuracy as the model chooses and with the first token forced; sampled habit."""
    answers = [r["answer"] for r in rows]
    prompts = [r["prompt"] for r in rows]
    chosen = complete(model, tokenizer, prompts)
    result = {
        "accuracy": sum(accuracy_reward(chosen, answers)) / len(rows),
        "greedy_reasoning_rate": reasoning_rate(chosen),
    }
    for name, tag in (("think", "<think>"), ("direct", "<answer>")):
        forced = [tag + t for t in complete(model, tokenizer, [p + tag for p in prompts])]
        result[f"accuracy_{name}"] = sum(accuracy_reward(forced, answers)) / len(rows)
    result["sampled_reasoning_rate"] = reasoning_rate(complete(model, tokenizer, prompts, True))
    return {k: round(v, 4) for k, v in result.items()}


def build(
    share: float,
    out: Path,
    seed: int = SEED,
    steps: int | None = None,
    stop: Callable[[dict], bool] | None = None,
) -> dict:
    """Fine-tune a fresh model on targets written with probability ``share``, until ``stop``
    says yes to the validation scores (checked every ``CHECK_EVERY`` steps; by default, once
    written solutions reach ``TARGET_THINK_ACCURACY``), or for exactly ``steps`` steps."""
    stop = stop or (lambda val: val["accuracy_think"] >= TARGET_THINK_ACCURACY)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tokenizer = build_tiny_tokenizer(TAGS, context=CONTEXT)
    model = build_tiny_model(tokenizer, context=CONTEXT, max_new_tokens=MAX_NEW_TOKENS)
    params = sum(p.numel() for p in model.parameters())
    train = load_jsonl(HERE / "reasoning_train.jsonl")
    sft_rows, val_rows = train[:-VAL_SIZE], train[-VAL_SIZE:]
    test_rows = load_jsonl(HERE / "reasoning_test.jsonl")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    rng = random.Random(seed)
    start = time.perf_counter()
    model.train()
    step, val = 0, {}
    for step in range(1, (steps or MAX_STEPS) + 1):
        batch = []
        for r in rng.sample(sft_rows, BATCH_SIZE):
            target = reasoning_target if rng.random() < share else direct_target
            batch.append({"prompt": r["prompt"], "target": target(*operands(r["prompt"]))})
        loss = model(**sft_batch(tokenizer, batch, key="target", encode=encode)).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if steps is None and step % CHECK_EVERY == 0:
            val = scores(model, tokenizer, val_rows)
            print(
                f"share {share} step {step:5d}  loss {loss.item():.3f}  validation {val}",
                flush=True,
            )
            if stop(val):
                break
    info = {
        "seed": seed,
        "reasoning_share": share,
        "parameters": params,
        "sft_steps": step,
        "validation": val,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "test_problems": len(test_rows),
        "test": scores(model, tokenizer, test_rows),
        "seconds": round(time.perf_counter() - start, 1),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--share", type=float, help="share of written targets (one model)")
    parser.add_argument(
        "--direct-only",
        action="store_true",
        help="rebuild tiny_direct_lm against the shipped tiny_reasoning_lm",
    )
    parser.add_argument("--out", help="output folder of that one model")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed (default: {SEED})")
    parser.add_argument("--steps", type=int, help="SFT steps (default: the stopping rule)")
    args = parser.parse_args()
    if args.share is not None:
        build(args.share, Path(args.out or HERE / "tiny_reasoning_lm"), args.seed, args.steps)
        return
    if args.direct_only:
        info = json.loads((HERE / "tiny_reasoning_lm" / "training_info.json").read_text())
    else:
        info = build(MODELS["tiny_reasoning_lm"], HERE / "tiny_reasoning_lm", args.seed, args.steps)
    # the model with no written targets stops at the first check reaching the first one's
    # validation accuracy, so that they differ in what they can write; checks are CHECK_EVERY
    # steps apart, so it may overshoot (the shipped pair: 42.7% against 34.0%)
    start = info["validation"]["accuracy"]
    build(
        MODELS["tiny_direct_lm"],
        HERE / "tiny_direct_lm",
        args.seed,
        stop=lambda val: val["accuracy"] >= start,
    )


if __name__ == "__main__":
    main()
