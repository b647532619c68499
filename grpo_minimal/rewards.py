r"""Verifiable math rewards: safe answer extraction, exact comparison and format rewards.

A verifiable reward reads the final answer out of a completion and compares it with the gold
answer. No learned reward model, just rules (``answers.py``); notebook 05 walks through each one
with examples. Its equations, numbered as there::

    (17) r_acc(o, a*) = 1[value(extract(o)) == value(a*)]                        accuracy_reward
    (18) r_fmt(o) = 1[o == <think>t</think><answer>y</answer>, t and y non-empty]  format_reward
    (19) r(o) = w_acc r_acc(o, a*) + w_fmt r_fmt(o), w_acc = 1, w_fmt = 0.2       combined_reward

How an answer is read (answer segments, numbers, hedges, safety bounds) is in ``answers.py``;
this module turns it into rewards, and scores a batch of completions for the trainer
(``score_completions``).

Model output is data, never code: nothing here evaluates it. Each reward function scores each
completion inside ``try``/``except``: a pathological completion gets 0.0, never an exception.

Reward functions take the arguments TRL's ``GRPOTrainer`` passes (``completions`` plus every
dataset column as a keyword), so ``GRPOTrainer(reward_funcs=[accuracy_reward, format_reward])``
works unchanged. Completions may be plain strings or TRL's conversational format (a list of
``{"role": ..., "content": ...}`` messages; the last message is scored).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from .answers import (
    MAX_BRACE_DEPTH,
    MAX_COMPLETION_CHARS,
    MAX_NUMBER_DIGITS,
    answer_segments,
    extract_answer,
    extract_value,
    parse_gold,
    parse_number,
)
from .r1_format import R1_SYSTEM_PROMPT

__all__ = [
    "MAX_BRACE_DEPTH",
    "MAX_COMPLETION_CHARS",
    "MAX_NUMBER_DIGITS",
    "R1_SYSTEM_PROMPT",
    "RewardFunc",
    "accuracy_reward",
    "answer_segments",
    "combined_reward",
    "completion_text",
    "extract_answer",
    "extract_value",
    "format_reward",
    "is_r1_format",
    "lenient_accuracy_reward",
    "make_combined_reward",
    "parse_gold",
    "parse_number",
    "reward_functions",
    "reward_stats",
    "score_completions",
]

RewardFunc = Callable[..., Sequence[float | None]]
"""A reward function: ``func(prompts=..., completions=..., **columns)`` -> one reward (or None)
per completion, TRL's calling convention."""

# --- completions --------------------------------------------------------------------------------


def completion_text(completion: Any) -> str | None:
    """The text of one completion: a string, or TRL's conversational list of messages.

    For a list of ``{"role", "content"}`` messages the last message is used; its content may be
    a string or a list of parts (``{"type": "text", "text": ...}``). Anything else gives None.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)) and completion:
        completion = completion[-1]
    if not isinstance(completion, dict):
        return None
    content = completion.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)
    return None


def _safely(score: Callable[[], float]) -> float:
    """Run one per-completion score; any exception becomes 0.0 (the reward never raises)."""
    try:
        return float(score())
    except Exception:
        return 0.0


def _correct(completion: Any, gold: Fraction) -> float:
    """1.0 if the completion's final answer equals the gold exactly, else 0.0."""
    value = extract_value(completion_text(completion))
    return 1.0 if value is not None and value == gold else 0.0


def accuracy_reward(
    completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    r"""Outcome reward, equation (17): 1.0 when the final answer equals the gold, else 0.0.

    Args:
        completions: strings or TRL conversational completions, one per sample.
        answer: the gold answers (the data set's ``answer`` column), one per completion, e.g.
            ``"72"``, ``"1,080"``, ``"\frac{1}{2}"`` or a GSM8K solution ending in ``#### 72``.
        **kwargs: whatever else TRL passes (prompts, other columns, trainer state); ignored.

    Raises ValueError if the lengths differ or a gold is not a number (a data bug); a completion
    never raises, it scores 0.0.
    """
    if len(completions) != len(answer):
        raise ValueError(
            f"accuracy_reward got {len(completions)} completions but {len(answer)} answers"
        )
    parsed: dict[str, Fraction] = {}  # TRL repeats each gold num_generations times
    golds = []
    for gold in answer:
        key = repr(gold)
        if key not in parsed:
            parsed[key] = parse_gold(gold)
        golds.append(parsed[key])
    return [
        _safely(lambda c=c, g=g: _correct(c, g)) for c, g in zip(completions, golds, strict=True)
    ]


def lenient_accuracy_reward(
    completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any
) -> list[float]:
    """A deliberately BAD grader, for showing reward hacking (notebooks 05 and 08): 1.0 if the
    gold number appears anywhere among the completion's numbers, so a hedge is paid as an answer.
    Never train a model you mean to use with it."""
    if len(completions) != len(answer):
        raise ValueError(
            f"lenient_accuracy_reward got {len(completions)} completions but {len(answer)} answers"
        )
    return [
        _safely(lambda c=c, g=g: str(g) in re.findall(r"-?\d+", completion_text(c) or ""))
        for c, g in zip(completions, answer, strict=True)
    ]


def is_r1_format(text: str) -> bool:
    """True for exactly ``<think>reasoning</think><answer>answer</answer>`` and nothing else.

    Whitespace is allowed around and between the blocks; both blocks must be non-empty; each tag
    appears exactly once (tags are lower case). Longer than `MAX_COMPLETION_CHARS` is False.
    """
    if not isinstance(text, str) or len(text) > MAX_COMPLETION_CHARS:
        return False
    text = text.strip()
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    if any(text.count(tag) != 1 for tag in tags):
        return False
    if not (text.startswith("<think>") and text.endswith("</answer>")):
        return False
    think_end, answer_start = text.find("</think>"), text.find("<answer>")
    if answer_start < think_end or text[think_end + len("</think>") : answer_start].strip():
        return False
    think = text[len("<think>") : think_end]
    answer = text[answer_start + len("<answer>") : -len("</answer>")]
    return bool(think.strip()) and bool(answer.strip())


def format_reward(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """Format reward, equation (18): 1.0 for the strict R1 format (see `is_r1_format`), else 0.0.

    Same calling convention as `accuracy_reward`; extra keyword arguments are ignored.
    """
    return [_safely(lambda c=c: float(is_r1_format(completion_text(c)))) for c in completions]


def make_combined_reward(
    accuracy_weight: float = 1.0, format_weight: float = 0.2
) -> Callable[..., list[float]]:
    """A reward function ``accuracy_weight * accuracy + format_weight * format``, equation (19).

    TRL can also weight several reward functions itself (``GRPOConfig(reward_weights=...)``);
    one combined function is handy outside TRL and keeps the two weights in one place.
    """
    for name, weight in (("accuracy_weight", accuracy_weight), ("format_weight", format_weight)):
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {weight!r}")

    def combined_reward(
        completions: Sequence[Any], answer: Sequence[Any], **kwargs: Any
    ) -> list[float]:
        """Weighted sum of `accuracy_reward` and `format_reward`."""
        accuracy = accuracy_reward(completions, answer)
        fmt = format_reward(completions)
        return [accuracy_weight * a + format_weight * f for a, f in zip(accuracy, fmt, strict=True)]

    combined_reward.__doc__ = (
        f"{accuracy_weight} * accuracy_reward + {format_weight} * format_reward (see rewards.py)."
    )
    return combined_reward


combined_reward = make_combined_reward()
"""The default combined reward: 1.0 * accuracy + 0.2 * format."""


def reward_functions(
    funcs: Sequence[RewardFunc] | None = None,
    weights: Sequence[float] | None = None,
    format_weight: float = 0.0,
) -> tuple[list[RewardFunc], list[float]]:
    """The reward functions and weights of a run: ``funcs`` (weights 1 unless given), or by
    default ``accuracy_reward`` alone, plus ``format_reward`` weighted ``format_weight`` when
    that is above 0 (``MathConfig.format_weight``)."""
    if funcs is None:
        funcs = [accuracy_reward] + ([format_reward] if format_weight > 0 else [])
        weights = [1.0] + ([format_weight] if format_weight > 0 else [])
    weights = [1.0] * len(funcs) if weights is None else list(weights)
    if len(weights) != len(funcs):
        raise ValueError(f"{len(funcs)} reward functions but {len(weights)} reward weights")
    return list(funcs), weights


# --- scoring a batch for the trainer ------------------------------------------------------------


def _reward_name(func) -> str:
    return func.__name__ if hasattr(func, "__name__") else type(func).__name__


def _call_reward(func, prompts, completions, rows) -> Sequence:
    columns = {key: [row.get(key) for row in rows] for key in rows[0] if key != "prompt"}
    return func(prompts=prompts, completions=completions, **columns)


def score_completions(
    reward_funcs: Sequence[RewardFunc],
    reward_weights: Sequence[float],
    prompts: Sequence[str],
    completions: Sequence[str],
    rows: Sequence[dict],
) -> tuple[list[float], dict[str, float]]:
    """The weighted reward of every completion, equation (19) generalised; NaN where every
    function said ``None`` (cannot score: ``group_advantages`` leaves it out of its group).

    Each function is called as TRL calls it: ``func(prompts=..., completions=..., **columns)``,
    where ``prompts`` are the dataset's prompts (not the chat-formatted text the model saw) and
    ``columns`` every other field of the dataset rows (e.g. ``answer``).

    Each function is called once on the whole batch. A function that raises is called again on
    one completion at a time to name the completion that breaks it; returning the wrong number
    of values, NaN, infinity or a non-number is an error naming the function and the index.
    Returns the N rewards and the mean of each function (over the values it gave).
    """
    reward_funcs, reward_weights = reward_functions(reward_funcs, reward_weights)
    n = len(completions)
    rewards = [math.nan] * n
    means: dict[str, float] = {}
    for func, weight in zip(reward_funcs, reward_weights, strict=True):
        name = _reward_name(func)
        try:
            values = _call_reward(func, prompts, completions, rows)
        except Exception as err:
            index = _first_failing_completion(func, prompts, completions, rows)
            where = "" if index is None else f"on completion {index} ({completions[index]!r:.80})"
            raise RuntimeError(f"reward function {name!r} raised {where}: {err!r}") from err
        if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
            raise ValueError(
                f"reward function {name!r} returned {values!r:.80} for {n} completions; "
                "it must return a list with one reward (a number, or None) per completion"
            )
        values = list(values)
        if len(values) != n:
            raise ValueError(
                f"reward function {name!r} returned {len(values)} values for {n} completions; "
                "it must return one reward (a number, or None) per completion"
            )
        given = []
        for i, value in enumerate(values):
            if value is None:
                continue  # cannot score this one: ignored, as in TRL
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                try:
                    value = float(value)  # numpy and torch scalars
                except (TypeError, ValueError):
                    raise ValueError(
                        f"reward function {name!r} returned {value!r} for completion {i}; "
                        "rewards must be numbers (or None to skip a completion)"
                    ) from None
            if not math.isfinite(value):
                raise ValueError(
                    f"reward function {name!r} returned {value} for completion {i} "
                    f"({completions[i]!r:.80}); rewards must be finite (use None to skip)"
                )
            given.append(float(value))
            rewards[i] = (0.0 if math.isnan(rewards[i]) else rewards[i]) + weight * float(value)
        means[name] = sum(given) / len(given) if given else math.nan
    return rewards, means


def _first_failing_completion(func, prompts, completions, rows) -> int | None:
    for i in range(len(completions)):
        try:
            _call_reward(func, prompts[i : i + 1], completions[i : i + 1], rows[i : i + 1])
        except Exception:
            return i
    return None


def reward_stats(rewards: Sequence[float], num_generations: int) -> dict[str, float]:
    """Mean and std of the scored rewards, the number unscored (NaN), and the fraction of groups
    whose rewards are all equal (zero std: advantages 0, nothing to learn from that prompt)."""
    scored = [r for r in rewards if not math.isnan(r)]
    groups = [rewards[i : i + num_generations] for i in range(0, len(rewards), num_generations)]

    def flat(group: Sequence[float]) -> bool:
        values = [r for r in group if not math.isnan(r)]
        return len(values) < 2 or statistics.stdev(values) < 1e-6

    return {
        "reward_mean": statistics.fmean(scored) if scored else math.nan,
        "reward_std": statistics.stdev(scored) if len(scored) > 1 else 0.0,
        "frac_zero_std": sum(map(flat, groups)) / len(groups),
        "unscored": len(rewards) - len(scored),
    }
