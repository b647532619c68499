"""Lab 06 checks: the LLM step (notebook 06, equations (2), (5)-(9), (15), (16)).

Exercises mirror the package (``completions``, ``lm_trainer``, ``lm_grpo``) with the same names and signatures:
``mask_after_eos`` (15), ``completion_logps`` (16) and ``LMGRPOTrainer.step`` (written as a plain
function ``step(self, rows)``); the last check trains the shipped tiny model with the learner's
step and asks that held-out greedy accuracy rise.

Every check runs on the shipped tiny model (``data/tiny_math_lm``, CPU, float32) and is seeded.
The step is compared with the package's on the same fixed rollout, so both see the same tokens;
the check's ``self.sample`` returns other completions if it is called again, so a step that
samples twice (and scores one rollout, updates on another) is caught by name.

``lab check`` runs the hand-made cases and ``*_twins(PUBLIC_SEED)``; grading runs
``*_twins(seed)`` with the grader's seed: the same kinds (written and sampled rollouts,
temperatures other than 1, each config setting the step is graded on) with other values. The
training check is not a case list: it trains from seed 0 for ``lab check`` and from seed 1 for
grading, whatever the grader's seed (``TRAINING_SEEDS``).

The training check asks for 5 points (quick mode, 60 steps) or 10 (150 steps); the margins
measured behind those thresholds are in bench/README.md ("Lab 06's training check").

A step with the advantages' sign flipped makes accuracy fall; one that never steps the optimizer
leaves it unchanged: both fail.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import os
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from transformers import set_seed

from grpo_minimal import lm_trainer as package
from grpo_minimal.completions import CompletionGroups, sample_completions
from grpo_minimal.completions import mask_after_eos as package_mask_after_eos
from grpo_minimal.data import load_train_eval_rows
from grpo_minimal.labs.checking import (
    Case,
    InKernel,
    Mistake,
    beside,
    cases_for,
    draw_int,
    failure,
    generator,
    grading,
    raised,
    run_cases,
)
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig, evaluate_accuracy, training_batches
from grpo_minimal.rewards import accuracy_reward

FLOAT32_ULP = 2**-24
"""Relative rounding of float32."""

CPU = torch.device("cpu")


@functools.cache
def _tiny():
    """The shipped tiny model and its tokenizer, loaded once (checks never change it)."""
    return load_model("tiny", CPU)


def tiny_model():
    """A fresh copy of the shipped tiny model (float32, CPU) and its tokenizer."""
    model, tokenizer = _tiny()
    return copy.deepcopy(model), tokenizer


# --- exercise 1: mask_after_eos, equation (15) ----------------------------------------------------


def _ids(*rows: Sequence[int]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


EOS = 1  # the tiny model's <eos>; its <pad> is 0 and its digits are 3..12

MASK_PUBLIC = [
    Case(
        "EOS in the middle of the row",
        (_ids([5, 1, 7, 7]), [EOS]),
        expected=_ids([1, 1, 0, 0]),
        hint="the EOS itself is part of the completion (the model must learn to stop): "
        "1 up to AND including the first EOS, 0 after it",
    ),
    Case(
        "no EOS: the completion ran to max_completion_length",
        (_ids([5, 6, 7, 8]), [EOS]),
        expected=_ids([1, 1, 1, 1]),
        hint="a row without EOS keeps every token",
    ),
    Case(
        "EOS first",
        (_ids([1, 5, 5, 5]), [EOS]),
        expected=_ids([1, 0, 0, 0]),
        hint="an empty answer: only the EOS counts",
    ),
    Case(
        "the padding is EOS too (models whose pad token is their EOS)",
        (_ids([5, 6, 1, 1, 1]), [EOS]),
        expected=_ids([1, 1, 1, 0, 0]),
        hint="only the FIRST EOS ends the completion; the EOS tokens after it are padding",
    ),
    Case(
        "a batch: each row has its own first EOS",
        (_ids([5, 1, 7, 1], [5, 6, 7, 8], [1, 5, 5, 5], [5, 8, 1, 6]), [EOS]),
        hint="work row by row (dim=1): a cumulative count of EOS tokens along the row",
    ),
    Case(
        "two end tokens (a chat model's <|im_end|> and <|endoftext|>)",
        (_ids([5, 1, 7, 1], [5, 6, 7, 8], [1, 5, 5, 5], [5, 8, 1, 6]), [1, 8]),
        hint="eos_ids is a list: the first token that is ANY of them ends the completion "
        "(torch.isin)",
    ),
]


def _pick(g: torch.Generator, options: Sequence):
    return options[draw_int(g, 0, len(options) - 1)]


def _plain(g: torch.Generator, n: int, eos_ids: Sequence[int]) -> list[int]:
    """``n`` tokens of the tiny vocabulary (2..17: digits and signs) that are none of ``eos_ids``."""
    pool = [token for token in range(2, 18) if token not in eos_ids]
    return [pool[i] for i in torch.randint(0, len(pool), (n,), generator=g).tolist()]


def _random_ids(
    g: torch.Generator, rows: int, columns: int, eos_ids: Sequence[int]
) -> torch.Tensor:
    """Digits with end tokens sprinkled in: some rows end early, some twice, some never."""
    ids = torch.randint(3, 13, (rows, columns), generator=g)
    ends = torch.rand(rows, columns, generator=g) < 0.25
    which = torch.randint(0, len(eos_ids), (rows, columns), generator=g)
    return torch.where(ends, torch.tensor(list(eos_ids))[which], ids)


def mask_twins(seed: int) -> list[Case]:
    """One case of every kind ``mask_after_eos`` is graded on, with tokens drawn from ``seed``.

    Each kind keeps its structure (where the end tokens are, how many rows, a list or a tuple of
    end tokens); only the tokens, the lengths and the other end token change."""
    g = generator(seed)
    E = EOS
    length = draw_int(g, 4, 8)
    middle = draw_int(g, 1, length - 2)
    other, third = _plain(g, 1, [E])[0], _plain(g, 1, [E])[0]
    while third == other:
        third = _plain(g, 1, [E])[0]
    both = [E, other]
    pad_run, before = draw_int(g, 2, 4), draw_int(g, 1, 4)
    gap = draw_int(g, 1, 3)
    late = gap + 3 + draw_int(g, 0, 2)
    batch = [
        _plain(g, length, [E]),  # no EOS
        [E, *_plain(g, length - 1, [E])],  # EOS first
        [*_plain(g, middle, [E]), E, *_random_ids(g, 1, length - middle - 1, [E])[0].tolist()],
        [*_plain(g, length - 1, [E]), E],  # EOS last
    ]
    order = torch.randperm(len(batch), generator=g).tolist()
    column = [[E], _plain(g, 1, [E]), *[[token] for token in _random_ids(g, 1, 4, [E])[0].tolist()]]
    column = [column[i] for i in torch.randperm(len(column), generator=g).tolist()]
    first, then = draw_int(g, 1, 2), draw_int(g, 1, 2)  # the row goes on after its end token
    return [
        Case(
            f"EOS in the middle of a row of {length}",
            (_ids([*_plain(g, middle, [E]), E, *_plain(g, length - middle - 1, [E])]), [E]),
            hint="the EOS itself is part of the completion (the model must learn to stop): "
            "1 up to AND including the first EOS, 0 after it",
        ),
        Case(
            f"no EOS in a row of {length}: it ran to max_completion_length",
            (_ids(_plain(g, length, [E])), [E]),
            hint="a row without EOS keeps every token",
        ),
        Case(
            f"EOS first in a row of {length}",
            (_ids([E, *_plain(g, length - 1, [E])]), [E]),
            hint="an empty answer: only the EOS counts",
        ),
        Case(
            f"the padding is EOS too: {before} tokens, then {pad_run} EOS",
            (_ids([*_plain(g, before, [E]), *[E] * pad_run]), [E]),
            hint="only the FIRST EOS ends the completion; the EOS tokens after it are padding",
        ),
        Case(
            "two EOS with a token between them",
            (
                _ids(
                    [
                        *_plain(g, gap, [E]),
                        E,
                        *_plain(g, 1, [E]),
                        E,
                        *_plain(g, late - gap - 3, [E]),
                    ],
                    [E, *_plain(g, 1, [E]), E, *_plain(g, late - 3, [E])],
                ),
                [E],
            ),
            hint="the FIRST EOS ends the completion, not the last",
        ),
        Case(
            f"a batch of 4 rows of {length}: each row has its own first EOS",
            (_ids(*[batch[i] for i in order]), [E]),
            hint="work row by row (dim=1): a cumulative count of EOS tokens along the row",
        ),
        Case(
            f"one token per completion (C = 1), {len(column)} rows",
            (_ids(*column), [E]),
            hint="with C = 1 every token is kept, EOS or not",
        ),
        Case(
            f"two end tokens {both} (a chat model's <|im_end|> and <|endoftext|>)",
            (
                _ids(
                    [*_plain(g, first, both), other, *_plain(g, length - first - 1, [])],
                    [*_plain(g, first, both), E, *_plain(g, length - first - 1, [])],
                    _plain(g, length, both),
                ),
                both,
            ),
            hint="eos_ids is a list: the first token that is ANY of them ends the completion "
            "(torch.isin)",
        ),
        Case(
            f"eos_ids as a tuple {(other, E)}",
            (
                _ids(
                    [*_plain(g, first, both), E, *_plain(g, 2, [])],
                    [other, *_plain(g, first + 2, [])],
                ),
                (other, E),
            ),
            hint="eos_ids may be any sequence of ints (a list or a tuple)",
        ),
        Case(
            f"the end token {other} first, the other end token later",
            (
                _ids(
                    [*_plain(g, first, both), other, *_plain(g, then, both), E, *_plain(g, 2, [])]
                ),
                both,
            ),
            hint="whichever end token comes first ends the completion",
        ),
        *(
            Case(
                f"random rows, {rows}x{columns}, {len(eos)} end token(s)",
                (_random_ids(g, rows, columns, eos), eos),
                show=f"tensor of shape ({rows}, {columns}), eos_ids={eos}",
                hint="1 up to and including the first end token of each row, 0 after it",
            )
            for rows, columns, eos in [
                (draw_int(g, 6, 16), draw_int(g, 6, 12), [E]),
                (draw_int(g, 6, 16), draw_int(g, 6, 12), both),
                (draw_int(g, 4, 8), draw_int(g, 20, 30), [third, E, other]),
            ]
        ),
    ]


def _same_mask(got, expected: torch.Tensor) -> bool:
    """Same shape and the same 0/1 values; any dtype (long, bool, float) is accepted."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    return torch.equal(got.detach().to(torch.float64), expected.to(torch.float64))


def _eos_count_at_most_one(completion_ids: torch.Tensor, eos_ids) -> torch.Tensor:
    """A mistake: keep while the running count of EOS (this token's included) is <= 1, which
    keeps everything after the first EOS up to a second one."""
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids)))
    return (is_eos.long().cumsum(dim=1) <= 1).long()


def _eos_counted_down_the_batch(completion_ids: torch.Tensor, eos_ids) -> torch.Tensor:
    """A mistake: the EOS counted along dim=0 (down the batch), not along each row."""
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids)))
    return ((is_eos.long().cumsum(dim=0) - is_eos.long()) == 0).long()


MASK_MISTAKES = [
    Mistake(
        _eos_count_at_most_one,
        "the tokens after the first EOS must be 0: keep a token when NO EOS comes before "
        "it in its row, (is_eos.cumsum(dim=1) - is_eos) == 0; a count <= 1 also keeps "
        "what follows the first EOS",
    ),
    Mistake(
        _eos_counted_down_the_batch,
        "count the EOS along each row (dim=1, the tokens of one completion), not down the "
        "batch (dim=0)",
    ),
]


def check_mask_after_eos(fn: Callable, seed: int | None = None) -> None:
    """Equation (15): the hand-made rows and their drawn twins; with the grader's ``seed``, fresh
    twins only."""
    cases = cases_for(MASK_PUBLIC, mask_twins, seed)
    run_cases(
        fn,
        "mask_after_eos",
        cases,
        package_mask_after_eos,
        compare=_same_mask,
        mistakes=MASK_MISTAKES,
    )


# --- exercise 2: completion_logps, equation (16) --------------------------------------------------


def make_rollout(
    prompts: Sequence[str], completions: Sequence[str], num_generations: int
) -> CompletionGroups:
    """A rollout written by hand: ``completions`` (G per prompt, in order) are strings of the
    tiny model's characters, ``$`` standing for <eos>; prompts are left-padded, completions
    right-padded with <pad>, and the mask is equation (15)."""
    _, tokenizer = _tiny()
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    rows = [
        [tokenizer.eos_token_id if ch == "$" else tokenizer.convert_tokens_to_ids(ch) for ch in c]
        for c in completions
    ]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    mask = package_mask_after_eos(ids, [tokenizer.eos_token_id])
    G = num_generations
    return CompletionGroups(
        enc["input_ids"],
        enc["attention_mask"],
        ids,
        mask,
        prompts=[p for p in prompts for _ in range(G)],
        completions=[c.replace("$", "") for c in completions],
        rows=[{"prompt": p, "answer": ""} for p in prompts for _ in range(G)],
    )


def _gold(prompt: str) -> int:
    """The gold of an addition prompt ``"a+b="``."""
    a, b = prompt.rstrip("=").split("+")
    return int(a) + int(b)


@functools.cache
def sampled_rollout(
    seed: int,
    prompts: tuple[str, ...],
    num_generations: int,
    max_new_tokens: int,
    temperature: float = 1.0,
) -> CompletionGroups:
    """Completions sampled from the tiny model (seeded), as ``sample_completions`` returns them.
    The caller's random state is left as it was."""
    model, tokenizer = _tiny()
    rows = [{"prompt": p, "answer": str(_gold(p))} for p in prompts]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return sample_completions(
            model,
            tokenizer,
            rows,
            list(prompts),
            num_generations=num_generations,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )


def _describe(rollout: CompletionGroups, temperature: float, extra: str = "") -> str:
    """How a rollout case is printed: the completions as the model wrote them, if few."""
    _, tokenizer = _tiny()
    G, shape = rollout.num_generations, tuple(rollout.completion_ids.shape)
    if rollout.completion_ids.numel() <= 24:
        texts = [
            "".join(tokenizer.convert_ids_to_tokens(ids[mask.bool()].tolist()))
            for ids, mask in zip(rollout.completion_ids, rollout.completion_mask, strict=True)
        ]
        text = "; ".join(
            f"{rollout.prompts[i]!r} -> {texts[i : i + G]}" for i in range(0, len(texts), G)
        )
    else:
        prompts = rollout.prompts[::G]
        text = f"{len(prompts)} prompts {prompts} x {G} sampled completions"
    return f"model=tiny, rollout {text}, completion_ids {shape}, temperature={temperature}{extra}"


def _logps_view(fn: Callable) -> Callable:
    """Call ``fn`` like ``completion_logps`` and keep what the loss uses: the log-probs of the
    real completion tokens (padding after EOS set to 0), and with ``with_entropy`` the entropy
    stacked under them; ``requires_grad`` for the case that asks for it."""

    def view(
        model,
        rollout: CompletionGroups,
        temperature: float = 1.0,
        with_entropy: bool = False,
        share_prompts: bool = True,
        part: str = "values",
    ):
        out, carries_gradient = beside(
            fn, _called_noting_gradient, model, rollout, temperature, with_entropy, share_prompts
        )
        if out is None or out is Ellipsis:
            return out
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise TypeError(
                "completion_logps must return a pair (logps [N, C], entropy [N, C] or None), "
                f"got {type(out).__name__}"
            )
        logps, entropy = out
        if not isinstance(logps, torch.Tensor):
            raise TypeError(f"logps must be a tensor [N, C], got {type(logps).__name__}")
        if part == "requires_grad":
            return carries_gradient
        padding = rollout.completion_mask == 0
        if logps.shape != padding.shape:
            return logps.detach()
        logps = logps.detach().masked_fill(padding, 0.0)
        if not with_entropy:
            return logps
        if not isinstance(entropy, torch.Tensor) or entropy.shape != padding.shape:
            return f"entropy {entropy if entropy is None else tuple(entropy.shape)}"
        return torch.stack([logps, entropy.detach().masked_fill(padding, 0.0)])

    return view


def _called_noting_gradient(fn: Callable, *args: Any) -> tuple[Any, bool]:
    """``fn(*args)``, and whether its first output carries a gradient: asked where ``fn`` runs
    (the measurer, when judged apart; what comes back from there is detached data)."""
    out = fn(*args)
    first = out[0] if isinstance(out, tuple | list) and out else None
    return out, bool(isinstance(first, torch.Tensor) and first.requires_grad)


def _logps_close(got, expected) -> bool:
    """Equal up to float32 rounding of the model's passes: the same log-probs computed in another
    order (one pass per row vs a shared prompt pass, position ids or not) differ by a few ulps of
    the values' scale, amplified by the 4 layers (at most 3e-6 measured on these rollouts); 256
    ulps of the scale is far below any real mistake, which moves a log-prob by 1e-2 or more."""
    if not isinstance(expected, torch.Tensor):
        return got == expected
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    tolerance = 256 * FLOAT32_ULP * (expected.abs().max().item() + 1.0)
    return torch.allclose(got.double(), expected.double(), rtol=0.0, atol=tolerance)


_TEMPERATURE_HINT = (
    "divide the logits by the temperature before the log-softmax: the log-probs of the "
    "distribution the tokens were sampled from, equation (16)"
)


@functools.cache
def _logps_public() -> list[Case]:
    model, _ = _tiny()
    one = make_rollout(["23+45="], ["68$", "69$"], 2)
    two = make_rollout(["9+9=", "23+45="], ["18$", "1$", "68$", "681"], 2)
    return [
        Case(
            "one prompt, two completions",
            (model, one, 1.0),
            show=_describe(one, 1.0),
            hint="the logits at position t predict token t+1: completion token 0 is "
            "predicted by the LAST PROMPT position; log-softmax over the vocabulary "
            "(dim=-1), then gather the completion token, equation (16)",
        ),
        Case(
            "prompts of different lengths (left padding)",
            (model, two, 1.0),
            show=_describe(two, 1.0),
            hint="pass attention_mask (prompt_mask and completion_mask, concatenated) so "
            "that the left padding of the shorter prompt is not attended to; repeat each "
            "prompt G times in place (repeat_interleave): completion i answers prompt i // G",
        ),
        Case(
            "temperature 0.7",
            (model, two, 0.7),
            show=_describe(two, 0.7),
            hint=_TEMPERATURE_HINT,
        ),
        Case(
            "with_entropy=True: log-probs stacked over entropies",
            (model, one, 1.0, True),
            show=_describe(one, 1.0, ", with_entropy=True"),
            hint="entropy of each position's distribution: logsumexp(z) - sum(softmax(z) * z)"
            " with z = logits / temperature (no gradient needed); None without with_entropy",
        ),
        Case(
            "the log-probs carry a gradient",
            (model, one, 1.0),
            {"part": "requires_grad"},
            show=_describe(one, 1.0),
            hint="no torch.no_grad() and no .detach(): the loss differentiates these log-probs",
        ),
    ]


def _addition(g: torch.Generator, a_digits: int, b_digits: int) -> str:
    a = draw_int(g, 10 ** (a_digits - 1), 10**a_digits - 1)
    b = draw_int(g, 10 ** (b_digits - 1), 10**b_digits - 1)
    return f"{a}+{b}="


@functools.cache
def logps_twins(seed: int) -> list[Case]:
    """One case of every kind ``completion_logps`` is graded on, drawn from ``seed``: written
    and sampled rollouts of drawn additions (prompts of 4, 5 and 6 characters: unequal left
    padding), temperatures other than 1, with and without entropy, C = 1, share_prompts=False."""
    model, _ = _tiny()
    g = generator(seed)
    prompts = (_addition(g, 1, 2), _addition(g, 2, 2), _addition(g, 1, 1))
    temperature = _pick(g, (0.5, 0.6, 0.7, 0.8, 1.25, 1.5))
    right = _gold(prompts[1])
    wrong = right + _pick(g, (-10, -1, 1, 10))
    one = make_rollout([prompts[1]], [f"{right}$", f"{wrong}$"], 2)
    seeds = torch.randint(0, 2**31 - 1, (3,), generator=g).tolist()
    sampled = sampled_rollout(seeds[0], prompts, 4, 5)
    warm = sampled_rollout(seeds[1], prompts, 4, 5, temperature)
    short = sampled_rollout(seeds[2], prompts[:2], 3, 1)
    T = temperature
    return [
        Case(
            "one prompt, a right and a wrong completion",
            (model, one, 1.0),
            show=_describe(one, 1.0),
            hint="the logits at position t predict token t+1; log-softmax over the vocabulary "
            "(dim=-1), then gather the completion token, equation (16)",
        ),
        Case(
            "sampled rollout, unequal prompt and completion lengths",
            (model, sampled, 1.0),
            show=_describe(sampled, 1.0),
            hint="position t of the completion is predicted by the logits one position "
            "earlier; mask the left padding; log-softmax over the vocabulary",
        ),
        Case(
            f"sampled at temperature {T}",
            (model, warm, T),
            show=_describe(warm, T),
            hint=_TEMPERATURE_HINT,
        ),
        Case(
            "with_entropy=True at temperature 1",
            (model, sampled, 1.0, True),
            show=_describe(sampled, 1.0, ", with_entropy=True"),
            hint="entropy of each position's distribution: logsumexp(z) - sum(softmax(z) * z)",
        ),
        Case(
            f"sampled at temperature {T}, with entropy",
            (model, warm, T, True),
            show=_describe(warm, T, ", with_entropy=True"),
            hint="z = logits / temperature for both the log-probs and the entropy: the entropy "
            "of the distribution the tokens were sampled from",
        ),
        Case(
            f"the log-probs carry a gradient (temperature {T})",
            (model, warm, T),
            {"part": "requires_grad"},
            show=_describe(warm, T),
            hint="no torch.no_grad() and no .detach(): the loss differentiates these log-probs",
        ),
        Case(
            "one new token per completion (C = 1)",
            (model, short, 1.0),
            show=_describe(short, 1.0),
            hint="with C = 1 only the last prompt position's logits are used",
        ),
        Case(
            f"share_prompts=False is accepted (same numbers, temperature {T})",
            (model, warm, T, False, False),
            show=_describe(warm, T, ", with_entropy=False, share_prompts=False"),
            hint="share_prompts only chooses how the package computes the same logits",
        ),
    ]


_PACKAGE_LOGPS: dict[tuple, tuple] = {}
"""The package's answer per (model, rollout, arguments): the cases' rollouts are kept by the
caches above, so each is computed once per process."""


def _package_logps(
    model,
    rollout: CompletionGroups,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
    part: str = "values",
):
    key = (id(model), id(rollout), temperature, with_entropy, share_prompts, part)
    hit = _PACKAGE_LOGPS.get(key)
    if hit is None or hit[0] is not model or hit[1] is not rollout:
        view = _logps_view(package.completion_logps)
        value = view(model, rollout, temperature, with_entropy, share_prompts, part)
        hit = _PACKAGE_LOGPS[key] = (model, rollout, value)
    return hit[2]


def _summed_per_sequence(
    model,
    rollout: CompletionGroups,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
):
    """A mistake: each completion's log-probs summed over its tokens, [N] instead of [N, C]."""
    logps, entropy = package.completion_logps(
        model, rollout, temperature, with_entropy, share_prompts
    )
    return (logps * rollout.completion_mask).sum(-1), entropy


LOGPS_MISTAKES = [
    Mistake(
        _logps_view(_summed_per_sequence),
        "one log-prob per completion TOKEN, [N, C]: no sum over the tokens (the loss gives "
        "each token its own ratio and mask; a completion's sum is not what grpo_loss takes)",
    ),
]


def check_completion_logps(fn: Callable, seed: int | None = None) -> None:
    """Equation (16) against the package: hand-made rollouts and their drawn twins (written and
    sampled rollouts); with the grader's ``seed``, fresh twins only."""
    run_cases(
        _logps_view(fn) if callable(fn) else fn,
        "completion_logps",
        cases_for(_logps_public(), logps_twins, seed),
        _package_logps,
        compare=_logps_close,
        mistakes=LOGPS_MISTAKES,
    )


# --- exercise 3: one GRPO step ---------------------------------------------------------------------

STEP_SETTINGS = dict(device="cpu", prompts_per_step=2, num_generations=4, max_steps=10)
"""The step checks' trainer: the lesson's defaults (dapo, beta = 0.04, lr 1e-4, 5 new tokens),
2 prompts x 4 completions, a 10-step learning-rate schedule."""

STEP_ROWS = [{"prompt": "42+44=", "answer": "86"}, {"prompt": "43+78=", "answer": "121"}]
"""Two training problems whose groups are mixed (some right, some wrong) and of unequal
lengths in the fixed rollout: every advantage, mask and aggregation mistake shows."""

GRADIENT_OF = "model.embed_tokens.weight"
"""The parameter whose gradient is compared: tied to the LM head, every log-prob reaches it."""


@dataclass(frozen=True)
class Gradient:
    """A parameter's gradient after the step, printed short (its norm and largest entry)."""

    name: str
    value: torch.Tensor = field(repr=False)

    def __repr__(self) -> str:
        norm, largest = self.value.norm().item(), self.value.abs().max().item()
        return f"gradient of {self.name}: norm {norm:.6g}, largest |entry| {largest:.6g}"


def _move_off_reference(model, seed: int = 0) -> None:
    """Nudge every weight (seeded) so the policy differs from the reference: the KL term then
    has a value and a gradient (on the first step of a real run both are exactly 0)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.005 * torch.randn(p.shape, generator=generator))


@dataclass(frozen=True)
class StepSetup:
    """What a step case starts from besides the config: the problems, the seed of the nudge off
    the reference and the seed of the fixed rollout."""

    rows: tuple[tuple[str, str], ...]  # (prompt, answer) of each problem
    nudge: int = 0
    sample: int = 1

    def dataset_rows(self) -> list[dict]:
        return [{"prompt": prompt, "answer": answer} for prompt, answer in self.rows]


PUBLIC_SETUP = StepSetup(tuple((row["prompt"], row["answer"]) for row in STEP_ROWS))


@functools.cache
def _fixed_rollout(setup: StepSetup, temperature: float = 1.0, draw: int = 0) -> CompletionGroups:
    """A seeded rollout of ``setup``'s problems from the nudged policy at ``temperature``, for
    both steps compared; ``draw`` 1 is another one (what a second ``sample`` call returns)."""
    cfg = MathConfig(**{**STEP_SETTINGS, "beta": 0.0, "temperature": temperature})
    model, tokenizer = tiny_model()
    _move_off_reference(model, setup.nudge)
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    rows = setup.dataset_rows()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(setup.sample)
        rollout = trainer.sample(rows)
        if draw == 0:
            return rollout
        for _ in range(20):  # other completions than the first draw's (almost always at once)
            again = trainer.sample(rows)
            if again.completions != rollout.completions:
                break
        return again


class _FixedSampler:
    """``trainer.sample`` in the checks: the fixed rollout, then another one at every later call
    (sampling again draws other completions); counts the calls (in the judge, when judged
    apart: ``JUDGE_METHODS``)."""

    JUDGE_METHODS = ("__call__",)

    def __init__(self, first: CompletionGroups, again: CompletionGroups) -> None:
        self.first, self.again, self.calls = first, again, 0

    def __call__(self, _rows) -> CompletionGroups:
        self.calls += 1
        return copy.deepcopy(self.first if self.calls == 1 else self.again)


@functools.cache
def _nudged_state(nudge: int) -> dict[str, torch.Tensor]:
    """The policy's weights in a step check: the shipped model nudged with seed ``nudge``."""
    model, _ = tiny_model()
    _move_off_reference(model, nudge)
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


@functools.cache
def _step_models():
    """The policy module the step checks reuse (its weights, gradients and mode are reset before
    each step: a fresh copy per step would take as long as the step) and the frozen reference,
    the shipped model, as ``LMGRPOTrainer`` makes it."""
    policy, tokenizer = tiny_model()
    reference = copy.deepcopy(policy).requires_grad_(False).eval()
    return policy, reference, tokenizer, policy.training


def _intact(policy, reference) -> bool:
    """The shared modules are as built: float32 policy, reference equal to the shipped model."""
    shipped, _ = _tiny()
    return all(p.dtype == torch.float32 for p in policy.parameters()) and all(
        torch.equal(r, s) for r, s in zip(reference.parameters(), shipped.parameters(), strict=True)
    )


def step_trainer(
    settings: tuple = (), setup: StepSetup = PUBLIC_SETUP, sampler: Callable | None = None
) -> tuple[LMGRPOTrainer, list[dict]]:
    """A trainer in the state every step check starts from, and its rows; ``sample`` returns one
    seeded rollout (so the learner's step and the package's see the same tokens) and, if called
    again, other completions."""
    cfg = MathConfig(**{**STEP_SETTINGS, **dict(settings)})
    policy, reference, tokenizer, training = _step_models()
    if not _intact(policy, reference):  # a step changed the reference or the dtype: rebuild
        _step_models.cache_clear()
        policy, reference, tokenizer, training = _step_models()
    policy.load_state_dict(_nudged_state(setup.nudge))
    policy.requires_grad_(True).train(training).zero_grad(set_to_none=True)
    torch.manual_seed(cfg.seed)
    # built with beta=0 so that it does not copy the nudged policy as its reference; then the
    # config and the reference (the shipped model) that LMGRPOTrainer(cfg, ...) would hold
    trainer = LMGRPOTrainer(replace(cfg, beta=0.0), policy, tokenizer)
    trainer.cfg, trainer.reference = cfg, reference if cfg.beta > 0 else None
    trainer.sample = _fixed_sampler(setup, cfg.temperature) if sampler is None else sampler
    return trainer, setup.dataset_rows()


def _fixed_sampler(setup: StepSetup, temperature: float) -> _FixedSampler:
    return _FixedSampler(_fixed_rollout(setup, temperature), _fixed_rollout(setup, temperature, 1))


@dataclass
class _StepRun:
    """What one ``step(trainer, rows)`` did: its return value (or exception), the compared
    gradient, (largest weight change, learning rate after, steps counted), ``sample`` calls."""

    out: object
    error: Exception | None
    gradient: torch.Tensor | None
    optimizer: tuple[float, float, int]
    sample_calls: int


STALE_GRADIENTS = "gradients left by an earlier backward"
"""A step case's setting (not a ``MathConfig`` field): every parameter starts the step holding a
gradient, as after the previous step's backward, so a step that does not zero them first adds
the new gradient to the old one."""

STALE_GRADIENT = 0.25
"""The stale gradient of every entry: its norm over the model's parameters is far above the
clipping norm, so a step that keeps it moves the compared gradient far off."""

PLAIN_SGD = "plain SGD (lr 1000) in place of AdamW"
"""A step case's setting (not a ``MathConfig`` field): ``self.optimizer`` is SGD, whose update is
the gradient it is given. AdamW's first update is lr * sign(g) whatever g's scale, so clipping
after ``optimizer.step()`` (too late: the update has used the unclipped gradient) shows only with
an optimizer that follows the gradient's size, and a clip that acts (a small max_grad_norm)."""

SGD_RATE = 1000.0
"""Its learning rate: the public case's clipped gradient (norm 1e-3) moves the largest weight by
0.072 (measured), far above float32 rounding of the weights (1.2e-7 near 1), so the compared
change holds to its 1e-4 relative tolerance; clipped after the update instead, the unclipped
gradient moved it by 1,023 (measured)."""

CASE_ONLY_SETTINGS = (STALE_GRADIENTS, PLAIN_SGD)


def _config_settings(settings: tuple) -> tuple:
    """The settings that are ``MathConfig`` fields (not the case's own: ``CASE_ONLY_SETTINGS``)."""
    return tuple(kv for kv in settings if kv[0] not in CASE_ONLY_SETTINGS)


def _run_step(step: Callable, setup: StepSetup, settings: tuple) -> _StepRun:
    """``step`` on a trainer in the checks' start state, where ``step`` lives; the sampler that
    counts its calls stays here (the judge's, when judged apart)."""
    others = _config_settings(settings)
    sampler = _fixed_sampler(setup, MathConfig(**{**STEP_SETTINGS, **dict(others)}).temperature)
    out, gradient, optimizer, error = None, None, (0.0, 0.0, 0), None
    try:
        out, gradient, optimizer = beside(step, _step_and_measure, setup, settings, sampler)
    except Exception as raised_error:  # reported by every case of this run (run_cases)
        error = raised_error
    return _StepRun(out, error, gradient, optimizer, sampler.calls)


def _step_and_measure(step: Callable, setup: StepSetup, settings: tuple, sampler: Callable):
    """One ``step(trainer, rows)``: its return value, the compared gradient and (largest weight
    change, learning rate after, steps counted). Runs where ``step`` lives."""
    trainer, rows = step_trainer(_config_settings(settings), setup, sampler)
    if dict(settings).get(STALE_GRADIENTS, False):
        for parameter in trainer.model.parameters():
            parameter.grad = torch.full_like(parameter, STALE_GRADIENT)
    if dict(settings).get(PLAIN_SGD, False):
        trainer.optimizer = torch.optim.SGD(trainer.model.parameters(), lr=SGD_RATE)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = step(trainer, rows)
    grad = dict(trainer.model.named_parameters())[GRADIENT_OF].grad
    change = max(
        (p.detach() - b).abs().max().item()
        for p, b in zip(trainer.model.parameters(), before, strict=True)
    )
    optimizer = (change, trainer.scheduler.get_last_lr()[0], trainer.steps_done)
    return out, None if grad is None else grad.detach().clone(), optimizer


_PACKAGE_RUNS: dict[tuple, _StepRun] = {}
"""The package's step, run once per (setup, settings): the expected values of every check."""


def _step_view(step: Callable, runs: dict[tuple, _StepRun]) -> Callable:
    """``step`` run once per (setup, settings) (kept in ``runs``); each case reads one part."""

    def view(part: str, setup: StepSetup, settings: tuple):
        if (setup, settings) not in runs:
            runs[setup, settings] = _run_step(step, setup, settings)
        run = runs[setup, settings]
        if run.error is not None:
            raise run.error
        out = run.out
        if out is None or out is Ellipsis:
            return out
        if not isinstance(out, tuple | list) or len(out) != 2 or not isinstance(out[0], dict):
            raise TypeError(
                f"step must return (metrics, rollout) with metrics a dict, got {out!r:.80}"
            )
        if part == "rollout":
            calls = run.sample_calls
            return f"self.sample called {'once' if calls == 1 else f'{calls} times'}"
        if part == "loss":
            if "loss" not in out[0]:
                raise KeyError(f"metrics has no 'loss' (keys: {sorted(out[0])})")
            loss = out[0]["loss"]
            return float(loss.item() if isinstance(loss, torch.Tensor) else loss)
        if part == "gradient":
            if run.gradient is None:
                return f"no gradient in {GRADIENT_OF} (was loss.backward() called?)"
            return Gradient(GRADIENT_OF, run.gradient)
        return run.optimizer  # "optimizer"

    return view


LOSS_TOLERANCE = 64 * 4.0 * FLOAT32_ULP
"""A float32 sum of at most 64 per-token losses (8 rows x 5 tokens here) each below 4 in size
(|A| <= 1.5 for G = 4, plus beta * k3): its worst-case rounding, about 1.5e-5. Measured: 2e-8."""


def _step_close(got, expected) -> bool:
    """Float32 rounding, as the learner's log-probs may come from another pass than the
    package's (a pass per row or a shared prompt pass, position ids or not):

    - the loss: ``LOSS_TOLERANCE`` (its value depends on the log-probs' rounding only through
      the KL term: on-policy the ratio is exactly 1);
    - a gradient: 1e-4 of its largest entry (measured: below 1e-5 of it);
    - (largest weight change, learning rate, steps): 1e-4 relative (a first AdamW step moves the
      weights with a large gradient by the learning rate, whatever the gradient's rounding).
    """
    if isinstance(expected, Gradient):
        if not isinstance(got, Gradient) or got.value.shape != expected.value.shape:
            return False
        tolerance = 1e-4 * expected.value.abs().max().item() + 1e-12
        return torch.allclose(got.value.double(), expected.value.double(), rtol=0, atol=tolerance)
    if isinstance(expected, float):
        if not isinstance(got, float):
            return False
        return abs(got - expected) <= LOSS_TOLERANCE + 1e-6 * abs(expected)
    if isinstance(expected, tuple):
        if not isinstance(got, tuple) or len(got) != len(expected):
            return False
        return all(abs(g - e) <= 1e-4 * abs(e) for g, e in zip(got, expected, strict=True))
    return got == expected


_STEP_HINTS = {
    "rollout": "sample ONCE (rollout = self.sample(rows)), then score, compute the log-probs of "
    "and update on THOSE completions, and return that rollout: a second self.sample call draws "
    "new completions, which the rewards and advantages were not computed for",
    "loss": "rewards (score_completions with self.reward_funcs / self.reward_weights) -> "
    "advantages = group_advantages(rewards, G, cfg.scale_rewards) (positive above the group's "
    "mean) -> your completion_logps at cfg.temperature for the policy and, when beta > 0, for "
    "self.reference (no gradient) -> grpo_loss(logps, None, ref_logps, advantages, "
    "rollout.completion_mask, beta=..., epsilon=..., epsilon_high=..., loss_type=..., "
    "max_completion_length=..., use_bias_correction_kl=...) with the values of self.cfg and the "
    "rollout's own mask (EOS kept, padding out); metrics['loss'] = loss.item()",
    "stale": "self.optimizer.zero_grad() before loss.backward(): backward ADDS to the .grad "
    "the previous step left, so without it each update carries the old gradients too",
    "gradient": "zero the old gradients, loss.backward(), then clip the global norm to "
    "cfg.max_grad_norm (torch.nn.utils.clip_grad_norm_); pi_old is pi detached (old_logps=None), "
    "the advantages' sign is the reward's, and the mask keeps each completion's EOS",
    "clip": "clip the gradient (torch.nn.utils.clip_grad_norm_ to cfg.max_grad_norm) BEFORE "
    "self.optimizer.step(): clipped after it, the update has already used the unclipped "
    "gradient (AdamW's first update hides this: it is lr * sign(g) at any scale)",
    "optimizer": "after the backward pass: self.optimizer.step(), self.scheduler.step() (the "
    "learning rate falls linearly to 0 over max_steps), self.steps_done += 1",
}

_TEMPERATURE_STEP_HINT = (
    "the completions were sampled at cfg.temperature: compute BOTH log-probs, the policy's and "
    "the reference's (self.reference), with completion_logps(..., cfg.temperature); at the "
    "default 1.0 they are the log-probs of another distribution"
)


def _step_case(
    name: str, part: str, settings: dict, hint: str = "", setup: StepSetup = PUBLIC_SETUP
) -> Case:
    """A step case; a twin's name ends with its problems (the public cases' are STEP_ROWS)."""
    text = ", ".join(f"{k}={v!r}" for k, v in settings.items() if k not in CASE_ONLY_SETTINGS)
    text = (
        (text or "the lab's defaults")
        + (
            f"; every parameter's .grad holds {STALE_GRADIENT} when the step starts (an earlier "
            "backward's)"
            if settings.get(STALE_GRADIENTS)
            else ""
        )
        + (
            f"; self.optimizer is torch.optim.SGD(lr={SGD_RATE:g})"
            if settings.get(PLAIN_SGD)
            else ""
        )
    )
    prompts = [prompt for prompt, _ in setup.rows]
    where = "" if setup == PUBLIC_SETUP else f", problems {' '.join(prompts)}"
    return Case(
        f"{name}: {part}{where}",
        (part, setup, tuple(sorted(settings.items()))),
        show=f"step(trainer, rows): problems {prompts}, 4 fixed completions of each by the tiny "
        f"model, policy moved off the reference; MathConfig: {text}",
        hint=(hint + "; " if hint else "") + _STEP_HINTS[part],
    )


def _stale_case(setup: StepSetup = PUBLIC_SETUP) -> Case:
    """A step that starts with the gradients an earlier backward left: only the zeroing shows."""
    case = _step_case(STALE_GRADIENTS, "gradient", {STALE_GRADIENTS: True}, setup=setup)
    return replace(case, hint=_STEP_HINTS["stale"])


def _clip_case(max_norm: float, setup: StepSetup = PUBLIC_SETUP) -> Case:
    """A clip that acts, with an optimizer whose update follows the gradient's size."""
    case = _step_case(
        f"clipped to max_grad_norm={max_norm:g}, then {PLAIN_SGD}",
        "optimizer",
        {"max_grad_norm": max_norm, PLAIN_SGD: True},
        setup=setup,
    )
    return replace(case, hint=_STEP_HINTS["clip"])


LESSON = "the lesson's settings (dapo, beta=0.04)"

STEP_PUBLIC = [
    *(_step_case(LESSON, part, {}) for part in ("rollout", "loss", "gradient", "optimizer")),
    *(
        _step_case("temperature 0.7", part, {"temperature": 0.7}, _TEMPERATURE_STEP_HINT)
        for part in ("loss", "gradient")
    ),
    _stale_case(),
    _clip_case(1e-3),
]


def _mixed(rollout: CompletionGroups) -> bool:
    """Every group has right and wrong answers, and some completion ends before the others."""
    answers = [row["answer"] for row in rollout.rows]
    rewards = accuracy_reward(rollout.completions, answers)
    G = rollout.num_generations
    groups = [sum(rewards[i : i + G]) for i in range(0, len(rewards), G)]
    return all(0 < right < G for right in groups) and bool((rollout.completion_mask == 0).any())


@functools.cache
def _step_setup(seed: int) -> StepSetup:
    """Two problems, a nudge and a rollout drawn from ``seed`` such that, as in the public
    setup, both groups are mixed and some completion is padded (the first such draw)."""
    g = generator(seed)
    for _ in range(50):
        problems = [_addition(g, 2, 2) for _ in range(2)]
        seeds = torch.randint(0, 2**31 - 1, (2,), generator=g).tolist()
        rows = tuple((prompt, str(_gold(prompt))) for prompt in problems)
        setup = StepSetup(rows, nudge=seeds[0], sample=seeds[1])
        if _mixed(_fixed_rollout(setup)):
            break
    return setup


def step_twins(seed: int) -> list[Case]:
    """One case of every kind ``step`` is graded on, drawn from ``seed``: other problems and
    completions, another nudge off the reference, and drawn values of the settings each kind
    changes (temperature, beta, the schedule's length and learning rate)."""
    setup = _step_setup(seed)
    g = generator(seed + 1)
    T = _pick(g, (0.5, 0.6, 0.7, 0.8, 1.25, 1.5))
    beta = _pick(g, (0.5, 1.0, 2.0))
    steps, rate = draw_int(g, 2, 5), _pick(g, (2e-4, 3e-4, 5e-4))

    def case(name: str, part: str, settings: dict, hint: str = "") -> Case:
        return _step_case(name, part, settings, hint, setup)

    return [
        *(case(LESSON, part, {}) for part in ("rollout", "loss", "gradient", "optimizer")),
        case(f"temperature {T}", "loss", {"temperature": T}, _TEMPERATURE_STEP_HINT),
        case(f"temperature {T}", "gradient", {"temperature": T}, _TEMPERATURE_STEP_HINT),
        case("loss_type='grpo'", "loss", {"loss_type": "grpo"}, "use cfg.loss_type"),
        case("loss_type='grpo'", "gradient", {"loss_type": "grpo"}, "use cfg.loss_type"),
        case(
            "loss_type='dr_grpo'",
            "loss",
            {"loss_type": "dr_grpo"},
            "use cfg.loss_type: dr_grpo divides by rows x cfg.max_completion_length",
        ),
        case(
            "beta=0: no reference model",
            "loss",
            {"beta": 0.0},
            "self.reference is None: ref_logps=None",
        ),
        case(
            "beta=0: no reference model",
            "gradient",
            {"beta": 0.0},
            "self.reference is None: ref_logps=None",
        ),
        case(
            f"a strong KL term, beta={beta}",
            "loss",
            {"beta": beta},
            "k3 of log pi_ref - log pi, with log pi_ref from self.reference, times cfg.beta",
        ),
        case(
            f"beta={beta} and use_bias_correction_kl=True",
            "gradient",
            {"beta": beta, "use_bias_correction_kl": True},
            "pass cfg.use_bias_correction_kl to grpo_loss",
        ),
        case(
            "scale_rewards='none'",
            "gradient",
            {"scale_rewards": "none"},
            "pass cfg.scale_rewards to group_advantages",
        ),
        case(
            "max_grad_norm=0: no clipping",
            "gradient",
            {"max_grad_norm": 0.0},
            "max_grad_norm=0 means no clipping (an infinite max norm), not a zero gradient",
        ),
        case(
            f"a {steps}-step schedule, learning_rate={rate}",
            "optimizer",
            {"max_steps": steps, "learning_rate": rate},
        ),
        _stale_case(setup),
        _clip_case(_pick(g, (1e-3, 2e-3, 5e-3)), setup),
    ]


def check_step(fn: Callable, seed: int | None = None) -> None:
    """The learner's step against ``LMGRPOTrainer.step`` on the same fixed rollouts: the public
    cases and their drawn twins; with the grader's ``seed``, fresh twins only."""
    run_cases(
        _step_view(fn, {}) if callable(fn) else fn,
        "step",
        cases_for(STEP_PUBLIC, step_twins, seed),
        _step_view(LMGRPOTrainer.step, _PACKAGE_RUNS),
        compare=_step_close,
    )


# --- exercise 4: training with the learner's step -----------------------------------------------

TRAINING_STEPS = 150
"""GRPO steps of the lab's run (``GRPO_QUICK=1``: ``QUICK_TRAINING_STEPS``)."""
QUICK_TRAINING_STEPS = 60
MIN_RISE = 0.10
"""Held-out greedy accuracy must rise by this much (measurements: the module docstring)."""
QUICK_MIN_RISE = 0.05


def quick() -> bool:
    return os.environ.get("GRPO_QUICK") == "1"


def training_config(seed: int | None = None) -> MathConfig:
    """The lab's run: notebook 06's CPU settings, a shorter run (500 held-out problems). Its
    seed by default: the public one (``TRAINING_SEEDS``), or the graded one under ``lab grade``,
    where the notebook's own run, the public check and the hidden one then share one run."""
    if seed is None:
        seed = TRAINING_SEEDS["graded" if grading() else "public"]
    steps = QUICK_TRAINING_STEPS if quick() else TRAINING_STEPS
    return MathConfig(device="cpu", max_steps=steps, eval_every=0, eval_n=500, seed=seed)


@dataclass
class TrainingRun:
    """Held-out greedy accuracy before and after, and per step: the sampled reward, the metrics
    the step returned and its seconds; the trained weights."""

    cfg: MathConfig
    accuracy_before: float
    accuracy_after: float
    rewards: list[float]
    metrics: list[dict]
    seconds: float
    weights: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def rise(self) -> float:
        return self.accuracy_after - self.accuracy_before


def _fingerprint(fn: Callable, depth: int = 3) -> tuple:
    """``fn`` and the functions it calls by global name, as objects: redefining any of them (a
    fixed ``completion_logps``) gives a new fingerprint, so a cached run is never stale."""
    found: list = [fn]

    def visit(code: types.CodeType, globals_: dict, level: int) -> None:
        for name in code.co_names:
            value = globals_.get(name)
            if isinstance(value, types.FunctionType) and value not in found:
                found.append(value)
                if level < depth:
                    visit(value.__code__, value.__globals__, level + 1)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                visit(const, globals_, level)

    if isinstance(fn, types.FunctionType):
        visit(fn.__code__, fn.__globals__, 0)
    return tuple(found)


_RUNS: dict[tuple, TrainingRun | None] = {}


def train_with_step(
    step: Callable, cfg: MathConfig | None = None, progress: bool = False
) -> TrainingRun | None:
    """``cfg.max_steps`` GRPO steps of ``step(trainer, rows)`` from the shipped tiny model, as
    ``train_math`` runs them (same seed, same batches), and held-out greedy accuracy before and
    after. None when ``step`` returns nothing (not written yet). Runs are cached per ``step``
    (and the functions it calls) and ``cfg``: checking after the demo does not train twice."""
    cfg = training_config() if cfg is None else cfg
    if isinstance(step, InKernel):
        return _judged_training(step, cfg)
    key = (_fingerprint(step), tuple(sorted(cfg.to_dict().items())))
    if key not in _RUNS:
        _RUNS[key] = _train(step, cfg, progress)
    return _RUNS[key]


def _train(step: Callable, cfg: MathConfig, progress: bool) -> TrainingRun | None:
    set_seed(cfg.seed)
    model, tokenizer = load_model(cfg.model, CPU)
    train_rows, eval_rows = load_train_eval_rows(cfg.dataset, cfg.eval_split, cfg.eval_n)
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    before = evaluate_accuracy(model, tokenizer, eval_rows, cfg)[0]
    batches = training_batches(train_rows, cfg.prompts_per_step, cfg.seed)  # train_math's order
    rewards, metrics, seconds = [], [], 0.0
    for number in range(1, cfg.max_steps + 1):
        batch = next(batches)
        start = time.perf_counter()
        out = step(trainer, batch)
        seconds += time.perf_counter() - start
        if out is None or out is Ellipsis:
            return None
        record, rollout = out
        metrics.append(record)
        if isinstance(rollout, CompletionGroups):
            answers = [row["answer"] for row in rollout.rows]
            correct = accuracy_reward(rollout.completions, answers)
            rewards.append(sum(correct) / len(correct))
        if progress and (number % 25 == 0 or number == cfg.max_steps):
            recent = rewards[-25:]
            print(
                f"step {number:4d}/{cfg.max_steps}  {seconds:6.1f} s  sampled reward "
                f"{sum(recent) / max(len(recent), 1):.2f} (mean of the last 25 steps)"
            )
    after = evaluate_accuracy(trainer.model, tokenizer, eval_rows, cfg)[0]
    weights = {name: value.detach().clone() for name, value in trainer.model.state_dict().items()}
    return TrainingRun(cfg, before, after, rewards, metrics, seconds, weights)


def _trained(step: Callable, cfg: MathConfig) -> tuple[dict, list[float], float] | None:
    """Run where ``step`` lives (the measurer, when judged apart): the run's weights, sampled
    rewards and seconds. A run with the same ``step`` and ``cfg`` in that process is reused
    (``train_with_step``'s cache); the notebook's own run, in its kernel, is not."""
    run = train_with_step(step, cfg)
    return None if run is None else (run.weights, run.rewards, run.seconds)


_HELD_OUT_ACCURACY: dict[tuple, float] = {}


def _judged_training(step: InKernel, cfg: MathConfig) -> TrainingRun | None:
    """The learner's run trains where their step runs (the measurer); its weights come back as
    data and are scored here, in a fresh model of the shipped architecture: no accuracy reported
    from there counts."""
    trained = step.apply(_trained, cfg)
    if trained is None:
        return None
    weights, rewards, seconds = trained
    model, tokenizer = load_model(cfg.model, CPU)
    before = _held_out_accuracy(model, tokenizer, cfg)
    try:
        model.load_state_dict(weights)
    except Exception as error:  # not the tiny model's weights: the run's answer is unusable
        why = str(error)[:200]
        raise TypeError(f"the run's weights do not fit the tiny model: {why}") from None
    after = _held_out_accuracy(model, tokenizer, cfg)
    return TrainingRun(cfg, before, after, list(rewards), [], float(seconds), weights)


def _held_out_accuracy(model, tokenizer, cfg: MathConfig) -> float:
    """``evaluate_accuracy`` on ``cfg``'s held-out problems, once per weights and config: the
    public and the hidden check score the same run."""
    digest = hashlib.sha256()
    for name, value in model.state_dict().items():
        digest.update(name.encode() + value.detach().contiguous().numpy().tobytes())
    key = (digest.hexdigest(), tuple(sorted(cfg.to_dict().items())))
    if key not in _HELD_OUT_ACCURACY:
        _, eval_rows = load_train_eval_rows(cfg.dataset, cfg.eval_split, cfg.eval_n)
        _HELD_OUT_ACCURACY[key] = evaluate_accuracy(model, tokenizer, eval_rows, cfg)[0]
    return _HELD_OUT_ACCURACY[key]


TRAINING_SEEDS = {"public": 0, "graded": 1}
"""The training check's seeds: ``lab check`` trains from seed 0, grading trains again from seed 1
(whatever the grader's seed: the margins were measured for these, module docstring)."""


def check_training(fn: Callable, seed: int | None = None) -> None:
    """Held-out greedy accuracy after the lab's run with ``fn`` as the step must rise by at
    least ``MIN_RISE``. ``seed=None`` (``lab check``) trains from seed 0; any grader's seed
    trains again from seed 1 (``TRAINING_SEEDS``)."""
    if fn is None or fn is Ellipsis or not callable(fn):
        raise failure(
            "definition",
            "`step`",
            "a function named `step`",
            fn,
            "define `step` in exercise 3 and run it before this check",
        )
    graded = seed is not None or grading()  # under lab grade the public check trains as graded
    cfg = training_config(seed=TRAINING_SEEDS["graded" if graded else "public"])
    margin = QUICK_MIN_RISE if quick() else MIN_RISE
    what = f"{cfg.max_steps} steps of your step on the tiny model, seed {cfg.seed}"
    expected = f"held-out greedy accuracy up by at least {100 * margin:.0f} points"
    try:
        run = train_with_step(fn, cfg)
    except Exception as error:
        raise failure(
            "training run",
            what,
            expected,
            raised(error),
            "pass exercise 3's check first: the run calls step(trainer, rows) at every step",
        ) from None
    if run is None:
        raise failure(
            "training run", what, expected, None, "step returned nothing: write exercise 3 first"
        )
    if run.rise < margin:
        raise failure(
            "held-out accuracy rises",
            what,
            expected + f" ({cfg.eval_n} problems)",
            f"{run.accuracy_before:.1%} -> {run.accuracy_after:.1%} ({100 * run.rise:+.1f} points)",
            "a step that passes exercise 3's check learns: run that check first. A fall means "
            "the update goes the wrong way (the advantages' sign, or advantages applied to "
            "other completions than the ones scored); no change means no update at all",
        )
