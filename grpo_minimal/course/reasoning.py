"""The task of notebook 10, where written steps pay: three-digit addition, column by column.

A problem is ``347+285=``. A completion may answer at once or write the column sums first, from
the units up, in the DeepSeek-R1 format (arXiv 2501.12948v1, section 2.2.1, table 1)::

    direct     <answer>632</answer>
    reasoning  <think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>

Each step adds one column's digits and the carry from the column before (``+1``, written only when
there is one). The answer is the last digit of every column sum, read from the top column down,
after the top column's carry. Answering at once, the first digit depends on the carries of every
column below it; written down, each step is one small sum. After the same fine-tuning, the cold
start (``data/make_reasoning_model.py``) is right more often when it writes the steps than when
it answers at once: that gap is what an outcome reward can discover.

What it measures: ``think_block``, ``writes_steps`` and ``reasoning_rate`` (the share of
completions with a non-empty think block) read the R1 format of any dataset, so they live in the
core (``grpo_minimal/r1_format.py``) and are re-exported here; this task adds

- ``steps_right(prompt, text)``: the think block is exactly this problem's column sums;
- ``think_probability(model, tokenizer, prompts)``: the policy's chance of opening a think block
  as its first token, measured exactly instead of sampled.

``make_length_penalty`` is the reward of the comparison "steps penalised by length".
Completions are data: nothing here evaluates them; steps are compared as strings.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from ..r1_format import reasoning_rate, think_block, writes_steps

__all__ = [
    "column_steps",
    "direct_target",
    "log_reasoning",
    "make_length_penalty",
    "operands",
    "reasoning_rate",
    "reasoning_target",
    "steps_right",
    "steps_right_rate",
    "think_block",
    "think_probability",
    "writes_steps",
]

_PROMPT_RE = re.compile(r"([0-9]+)\+([0-9]+)=")


def operands(prompt: str) -> tuple[int, int]:
    """``(a, b)`` of a prompt ``a+b=``; a ValueError for any other prompt."""
    match = _PROMPT_RE.fullmatch(prompt.strip())
    if match is None:
        raise ValueError(f"not an addition prompt 'a+b=': {prompt!r}")
    return int(match[1]), int(match[2])


def column_steps(a: int, b: int) -> list[str]:
    """The column sums of ``a + b`` from the units up: ``7+5=12``, ``4+8+1=13``, ``3+2+1=6``.

    A column beyond the shorter number's digits adds 0 (``0+4=4``); a carry is written ``+1``.
    """
    if a < 0 or b < 0:
        raise ValueError(f"column sums need non-negative numbers, got {a} and {b}")
    x, y = str(a)[::-1], str(b)[::-1]
    steps, carry = [], 0
    for i in range(max(len(x), len(y))):
        da = int(x[i]) if i < len(x) else 0
        db = int(y[i]) if i < len(y) else 0
        total = da + db + carry
        steps.append(f"{da}+{db}{'+1' if carry else ''}={total}")
        carry = total // 10
    return steps


def direct_target(a: int, b: int) -> str:
    """The answer alone, in the R1 answer block: ``<answer>632</answer>``."""
    return f"<answer>{a + b}</answer>"


def reasoning_target(a: int, b: int) -> str:
    """The column sums in a think block, then the answer block."""
    return f"<think>{' '.join(column_steps(a, b))}</think>{direct_target(a, b)}"


def steps_right(prompt: str, text: str) -> bool | None:
    """Are the written steps this problem's column sums, all of them, in order? None when the
    completion writes no steps (nothing to judge)."""
    if not writes_steps(text):
        return None
    return think_block(text).split() == column_steps(*operands(prompt))


def steps_right_rate(prompts: Sequence[str], completions: Sequence[str]) -> float | None:
    """Among the completions that write steps, the share whose steps are right (None if none)."""
    judged = [steps_right(p, c) for p, c in zip(prompts, completions, strict=True)]
    judged = [j for j in judged if j is not None]
    return sum(judged) / len(judged) if judged else None


def make_length_penalty(tokenizer, per_token: float):
    """A reward ``-per_token * |o|``, ``|o|`` the completion's tokens (EOS not counted): added to
    the accuracy reward, each written token costs ``per_token``."""
    if not (isinstance(per_token, (int, float)) and 0 <= per_token < float("inf")):
        raise ValueError(f"per_token must be a finite number >= 0, got {per_token!r}")

    def length_penalty(completions: Sequence[str], **kwargs) -> list[float]:
        ids = tokenizer(list(completions), add_special_tokens=False)["input_ids"]
        return [-per_token * len(i) for i in ids]

    return length_penalty


@torch.no_grad()
def think_probability(model, tokenizer, prompts: Sequence[str]) -> float:
    """Mean over ``prompts`` of pi(``<think>`` | prompt) at temperature 1: the share of sampled
    completions that open a think block, in expectation, without sampling noise.

    One forward over the prompts, left-padded, with the position ids the training step gives
    them (``lm_trainer.completion_logits``): each prompt's tokens sit at 0, 1, ... whatever its
    padding, so a prompt's probability is the one it has alone. The last position is then every
    prompt's own last token."""
    think = tokenizer.convert_tokens_to_ids("<think>")
    if think is None or think == tokenizer.unk_token_id:
        raise ValueError("the tokenizer has no <think> token")
    enc = tokenizer(
        list(prompts),
        return_tensors="pt",
        padding=True,
        padding_side="left",
        add_special_tokens=False,
    )
    device = next(model.parameters()).device
    input_ids, mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)  # left padding changes nothing
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits[:, -1]
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # >= float32
    return logits.softmax(dim=-1)[:, think].mean().item()


def log_reasoning(record: dict, rollout) -> None:
    """A ``train_math`` observer (``on_step``): adds how the sampled completions reason to each
    step's record, ``reasoning_rate`` and ``steps_right`` (``steps_right_rate``)."""
    if rollout is None:  # the evaluation before the first step
        return
    prompts = [row["prompt"] for row in rollout.rows]
    record["reasoning_rate"] = reasoning_rate(rollout.completions)
    record["steps_right"] = steps_right_rate(prompts, rollout.completions)
