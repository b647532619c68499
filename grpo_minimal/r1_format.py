"""The DeepSeek-R1 answer format, ``<think>steps</think><answer>y</answer>`` (DeepSeek-R1, arXiv
2501.12948 v1, section 2.2.1, table 1): the instruction that asks for it and what a completion's
think block says.

The prompt side (``lm_model.format_prompt``'s ``r1`` template) and the reward side
(``rewards.format_reward``) both read this module; the training loop reads ``reasoning_rate`` for
any dataset's completions. Completions are data: nothing here evaluates them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["R1_SYSTEM_PROMPT", "reasoning_rate", "think_block", "writes_steps"]

R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant "
    "solves it. The Assistant first thinks about the reasoning process and then gives the user "
    "the answer. The reasoning process and the answer are enclosed within <think> </think> and "
    "<answer> </answer> tags, respectively, i.e., <think> reasoning process here </think> "
    "<answer> answer here </answer>."
)
"""The DeepSeek-R1 format instruction that ``rewards.format_reward`` checks for."""

_THINK_RE = re.compile(r"<think>(.*?)</think>", re.DOTALL)


def think_block(text: str) -> str | None:
    """The text inside the first closed ``<think>...</think>``, or None when there is none."""
    match = _THINK_RE.search(text) if isinstance(text, str) else None
    return None if match is None else match[1]


def writes_steps(text: str) -> bool:
    """A completion writes steps when its think block holds something besides spaces."""
    block = think_block(text)
    return block is not None and bool(block.strip())


def reasoning_rate(completions: Sequence[str]) -> float:
    """The share of completions that write steps (a non-empty think block)."""
    return sum(writes_steps(c) for c in completions) / len(completions) if completions else 0.0
