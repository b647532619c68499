"""Supervised fine-tuning (SFT) on given targets: the "cold start" of DeepSeek-R1's pipeline.

DeepSeek-R1 (arXiv 2501.12948v1, section 2.3.1) fine-tunes the base model on a few thousand
written-out examples before RL, to give RL a behaviour to start from. Notebook 08 does the same on
the tiny model to give it a behaviour it never shows otherwise (hedging), so that reward hacking
and GRPO's length bias can be watched. Equation (52), over a batch B of (prompt q, target y):

    L_SFT = - (1 / sum_b |y_b|) * sum_b sum_t log pi(y_b,t | q_b, y_b,<t)     (y: target + <eos>)

the mean over all target tokens of the batch (what transformers' causal-LM loss computes from
``labels``), so a long target weighs more than a short one, as in the ``dapo`` aggregation.

Targets are encoded one character at a time (the tiny model's vocabulary is characters), and a
character outside the vocabulary is an error naming it rather than a silent ``<unk>``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

__all__ = ["encode_chars", "sft_batch", "supervised_finetune"]


def encode_chars(tokenizer, text: str) -> list[int]:
    """Token ids of ``text``, one per character (the tiny model's vocabulary is characters)."""
    ids = tokenizer.convert_tokens_to_ids(list(text))
    unknown = sorted({c for c, i in zip(text, ids, strict=True) if i == tokenizer.unk_token_id})
    if unknown:
        raise ValueError(f"target {text!r} has characters outside the vocabulary: {unknown}")
    return ids


def sft_batch(
    tokenizer, rows: Sequence[dict], key: str = "answer", encode: Callable = encode_chars
) -> dict[str, torch.Tensor]:
    """Right-padded ``prompt + target + <eos>``; labels are -100 except on target and <eos>.
    ``encode(tokenizer, text)`` gives the ids of a text (the tiny model's: one per character)."""
    prompts = [encode(tokenizer, r["prompt"]) for r in rows]
    targets = [encode(tokenizer, r[key]) + [tokenizer.eos_token_id] for r in rows]
    length = max(len(p) + len(a) for p, a in zip(prompts, targets, strict=True))
    ids = torch.full((len(rows), length), tokenizer.pad_token_id)
    labels = torch.full((len(rows), length), -100)
    mask = torch.zeros((len(rows), length), dtype=torch.long)
    for i, (p, a) in enumerate(zip(prompts, targets, strict=True)):
        ids[i, : len(p) + len(a)] = torch.tensor(p + a)
        labels[i, len(p) : len(p) + len(a)] = torch.tensor(a)
        mask[i, : len(p) + len(a)] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def supervised_finetune(
    model,
    tokenizer,
    rows: Sequence[dict],
    steps: int,
    key: str = "answer",
    batch_size: int = 64,
    learning_rate: float = 3e-4,
    seed: int = 0,
) -> list[float]:
    """``steps`` AdamW steps on L_SFT (52) over random batches of ``rows[i][key]``; returns the
    losses."""
    if steps < 0 or batch_size < 1 or not rows:
        raise ValueError(
            f"need steps >= 0, batch_size >= 1 and rows, got {steps}, {batch_size}, "
            f"{len(rows)} rows"
        )
    rng, rows = random.Random(seed), list(rows)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    device = next(model.parameters()).device
    model.train()
    losses = []
    for _ in range(steps):
        batch = sft_batch(tokenizer, rng.sample(rows, min(batch_size, len(rows))), key)
        loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses
