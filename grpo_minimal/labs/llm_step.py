"""Lab 06 checks: the LLM step (notebook 06, equations (2), (5)-(9), (15), (16)).

Exercises mirror ``grpo_minimal.lm_grpo`` with the same names and signatures:
``mask_after_eos`` (15), ``completion_logps`` (16) and ``LMGRPOTrainer.step`` (written as a plain
function ``step(self, rows)``); the last check trains the shipped tiny model with the learner's
step and asks that held-out greedy accuracy rise.

Every check runs on the shipped tiny model (``data/tiny_math_lm``, CPU, float32) and is seeded.
The step is compared with the package's on the same fixed rollout, so both see the same tokens.

The training check's margins were measured with ``train_with_step`` (``train_math``'s loop and
batches, 500 held-out problems, greedy accuracy 45.4% before), for seeds 0, 1, 2:

- 60 steps (``GRPO_QUICK=1``): +12.6, +15.2, +12.2 points with the package's step and the same
  with the lab's solution (its own log-prob pass); seeds 3, 4, 5 with the package's step: +17.8,
  +16.2, +10.6. The quick check asks for 5 points. (40 steps were not enough: +0.6 for seed 5.)
- 150 steps (the default): +21.0, +19.6, +19.6 points with either step. The check asks for 10.

A step with the advantages' sign flipped makes accuracy fall; one that never steps the optimizer
leaves it unchanged: both fail.
"""

from __future__ import annotations

import copy
import functools
import os
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from transformers import set_seed

from grpo_minimal import lm_grpo as package
from grpo_minimal.data import load_train_eval_rows
from grpo_minimal.labs.checking import Case, failure, run_cases
from grpo_minimal.lm_grpo import LMGRPOTrainer, Rollout, sample_completions
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig, evaluate_accuracy
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


def _random_ids(seed: int, rows: int, columns: int, eos_ids: Sequence[int]) -> torch.Tensor:
    """Digits with end tokens sprinkled in: some rows end early, some twice, some never."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 13, (rows, columns), generator=generator)
    ends = torch.rand(rows, columns, generator=generator) < 0.25
    which = torch.randint(0, len(eos_ids), (rows, columns), generator=generator)
    return torch.where(ends, torch.tensor(list(eos_ids))[which], ids)


MASK_HIDDEN = [
    Case(
        "two EOS with a token between them",
        (_ids([5, 1, 6, 1, 7], [1, 6, 1, 6, 1]), [EOS]),
        expected=_ids([1, 1, 0, 0, 0], [1, 0, 0, 0, 0]),
        hint="the FIRST EOS ends the completion, not the last",
    ),
    Case(
        "one token per completion",
        (_ids([1], [5], [1]), [EOS]),
        expected=_ids([1], [1], [1]),
        hint="with C = 1 every token is kept, EOS or not",
    ),
    Case(
        "eos_ids as a tuple",
        (_ids([5, 8, 1, 6], [8, 5, 5, 5]), (8, 1)),
        expected=_ids([1, 1, 0, 0], [1, 0, 0, 0]),
        hint="eos_ids may be any sequence of ints (a list or a tuple)",
    ),
    Case(
        "only the first end token of several, the others later",
        (_ids([5, 5, 5, 11, 5, 1, 5]), [1, 11]),
        expected=_ids([1, 1, 1, 1, 0, 0, 0]),
        hint="whichever end token comes first ends the completion",
    ),
    *(
        Case(
            f"random rows, {rows}x{columns}, eos_ids={eos}",
            (_random_ids(seed, rows, columns, eos), eos),
            hint="1 up to and including the first end token of each row, 0 after it",
        )
        for seed, (rows, columns, eos) in enumerate(
            [(8, 6, [1]), (16, 12, [1]), (12, 9, [1, 8]), (6, 30, [2, 1, 11])]
        )
    ),
]


def _same_mask(got, expected: torch.Tensor) -> bool:
    """Same shape and the same 0/1 values; any dtype (long, bool, float) is accepted."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    return torch.equal(got.detach().to(torch.float64), expected.to(torch.float64))


def check_mask_after_eos(fn: Callable, hidden: bool = False) -> None:
    """Equation (15) on hand-made rows (public) or random ones (hidden)."""
    run_cases(
        fn,
        "mask_after_eos",
        MASK_HIDDEN if hidden else MASK_PUBLIC,
        package.mask_after_eos,
        compare=_same_mask,
    )


# --- exercise 2: completion_logps, equation (16) --------------------------------------------------


def make_rollout(
    prompts: Sequence[str], completions: Sequence[str], num_generations: int
) -> Rollout:
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
    mask = package.mask_after_eos(ids, [tokenizer.eos_token_id])
    G = num_generations
    return Rollout(
        enc["input_ids"], enc["attention_mask"], ids, mask,
        prompts=[p for p in prompts for _ in range(G)],
        completions=[c.replace("$", "") for c in completions],
        rows=[{"prompt": p, "answer": ""} for p in prompts for _ in range(G)],
    )  # fmt: skip


def _gold(prompt: str) -> int:
    """The gold of an addition prompt ``"a+b="``."""
    a, b = prompt.rstrip("=").split("+")
    return int(a) + int(b)


@functools.cache
def sampled_rollout(seed: int, prompts: tuple[str, ...], num_generations: int, max_new_tokens: int,
                    temperature: float = 1.0) -> Rollout:  # fmt: skip
    """Completions sampled from the tiny model (seeded), as ``sample_completions`` returns them."""
    model, tokenizer = _tiny()
    rows = [{"prompt": p, "answer": str(_gold(p))} for p in prompts]
    torch.manual_seed(seed)
    return sample_completions(model, tokenizer, rows, list(prompts), num_generations=num_generations,
                              max_new_tokens=max_new_tokens, temperature=temperature)  # fmt: skip


def _describe(rollout: Rollout, temperature: float, extra: str = "") -> str:
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
        text = f"{shape[0] // G} prompts x {G} sampled completions"
    return f"model=tiny, rollout {text}, completion_ids {shape}, temperature={temperature}{extra}"


def _logps_view(fn: Callable) -> Callable:
    """Call ``fn`` like ``completion_logps`` and keep what the loss uses: the log-probs of the
    real completion tokens (padding after EOS set to 0), and with ``with_entropy`` the entropy
    stacked under them; ``requires_grad`` for the case that asks for it."""

    def view(model, rollout: Rollout, temperature: float = 1.0, with_entropy: bool = False,
             share_prompts: bool = True, part: str = "values"):  # fmt: skip
        out = fn(model, rollout, temperature, with_entropy, share_prompts)
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
            return bool(logps.requires_grad)
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


@functools.cache
def _logps_cases(hidden: bool) -> list[Case]:
    model, _ = _tiny()
    one = make_rollout(["23+45="], ["68$", "69$"], 2)
    two = make_rollout(["9+9=", "23+45="], ["18$", "1$", "68$", "681"], 2)
    if not hidden:
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
                "that the left padding of the shorter prompt is not attended to",
            ),
            Case(
                "temperature 0.7",
                (model, two, 0.7),
                show=_describe(two, 0.7),
                hint="divide the logits by the temperature before the log-softmax: the "
                "log-probs of the distribution the tokens were sampled from, equation (16)",
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
    prompts = ("7+56=", "23+45=", "9+9=")
    sampled = sampled_rollout(0, prompts, 4, 5)
    cold = sampled_rollout(1, prompts, 4, 5, 0.7)
    short = sampled_rollout(2, ("31+2=", "66+11="), 3, 1)
    return [
        Case(
            "sampled rollout, unequal prompt and completion lengths",
            (model, sampled, 1.0),
            show=_describe(sampled, 1.0),
            hint="position t of the completion is predicted by the logits one position "
            "earlier; mask the left padding; log-softmax over the vocabulary",
        ),
        Case(
            "sampled at temperature 0.7, with entropy",
            (model, cold, 0.7, True),
            show=_describe(cold, 0.7, ", with_entropy=True"),
            hint="z = logits / temperature for both the log-probs and the entropy",
        ),
        Case(
            "one new token per completion (C = 1)",
            (model, short, 1.0),
            show=_describe(short, 1.0),
            hint="with C = 1 only the last prompt position's logits are used",
        ),
        Case(
            "share_prompts=False is accepted (same numbers)",
            (model, two, 1.0, False, False),
            show=_describe(two, 1.0, ", with_entropy=False, share_prompts=False"),
            hint="share_prompts only chooses how the package computes the same logits",
        ),
    ]


def check_completion_logps(fn: Callable, hidden: bool = False) -> None:
    """Equation (16) against the package on hand-made (public) and sampled (hidden) rollouts."""
    run_cases(
        _logps_view(fn) if callable(fn) else fn,
        "completion_logps",
        _logps_cases(hidden),
        _logps_view(package.completion_logps),
        compare=_logps_close,
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


@functools.cache
def _fixed_rollout(settings: tuple) -> Rollout:
    """One seeded rollout of ``STEP_ROWS`` from the nudged policy, for both steps compared."""
    cfg = MathConfig(**{**STEP_SETTINGS, **dict(settings)})
    model, tokenizer = tiny_model()
    _move_off_reference(model)
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    torch.manual_seed(1)
    return trainer.sample(STEP_ROWS[: cfg.prompts_per_step])


def step_trainer(settings: tuple = ()) -> tuple[LMGRPOTrainer, list[dict]]:
    """A trainer in the state every step check starts from, and its rows; ``sample`` is fixed
    to one seeded rollout (so the learner's step and the package's see the same tokens)."""
    cfg = MathConfig(**{**STEP_SETTINGS, **dict(settings)})
    model, tokenizer = tiny_model()
    torch.manual_seed(cfg.seed)
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    _move_off_reference(trainer.model)
    rollout = _fixed_rollout(settings)
    trainer.sample = lambda _rows: copy.deepcopy(rollout)  # step 1, always these completions
    return trainer, STEP_ROWS[: cfg.prompts_per_step]


def _run_step(step: Callable, settings: tuple):
    """The trainer after ``step(trainer, rows)``, its weights before, and what step returned."""
    trainer, rows = step_trainer(settings)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = step(trainer, rows)
    return trainer, before, out


@functools.cache
def _package_step(step: Callable, settings: tuple):
    return _run_step(step, settings)


def _step_view(step: Callable, cached: bool = False) -> Callable:
    """Run ``step`` on the check's trainer and return one part of the result."""

    def run(part: str, settings: tuple):
        trainer, before, out = (_package_step if cached else _run_step)(step, settings)
        if out is None or out is Ellipsis:
            return out
        if part == "loss":
            if not isinstance(out, tuple | list) or len(out) != 2 or not isinstance(out[0], dict):
                raise TypeError(
                    f"step must return (metrics, rollout) with metrics a dict, got {out!r:.80}"
                )
            if "loss" not in out[0]:
                raise KeyError(f"metrics has no 'loss' (keys: {sorted(out[0])})")
            loss = out[0]["loss"]
            return float(loss.item() if isinstance(loss, torch.Tensor) else loss)
        if part == "gradient":
            grad = dict(trainer.model.named_parameters())[GRADIENT_OF].grad
            if grad is None:
                return f"no gradient in {GRADIENT_OF} (was loss.backward() called?)"
            return Gradient(GRADIENT_OF, grad.detach().clone())
        # "optimizer": the largest weight change, the learning rate after, the steps counted
        change = max(
            (p.detach() - b).abs().max().item()
            for p, b in zip(trainer.model.parameters(), before, strict=True)
        )
        return (change, trainer.scheduler.get_last_lr()[0], trainer.steps_done)

    return run


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
    "loss": "rewards (score_completions with self.reward_funcs / self.reward_weights) -> "
    "advantages = group_advantages(rewards, G, cfg.scale_rewards) (positive above the group's "
    "mean) -> your completion_logps at cfg.temperature for the policy and, when beta > 0, for "
    "self.reference (no gradient) -> grpo_loss(logps, None, ref_logps, advantages, "
    "rollout.completion_mask, beta=..., epsilon=..., epsilon_high=..., loss_type=..., "
    "max_completion_length=..., use_bias_correction_kl=...) with the values of self.cfg and the "
    "rollout's own mask (EOS kept, padding out); metrics['loss'] = loss.item()",
    "gradient": "zero the old gradients, loss.backward(), then clip the global norm to "
    "cfg.max_grad_norm (torch.nn.utils.clip_grad_norm_); pi_old is pi detached (old_logps=None), "
    "the advantages' sign is the reward's, and the mask keeps each completion's EOS",
    "optimizer": "after the backward pass: self.optimizer.step(), self.scheduler.step() (the "
    "learning rate falls linearly to 0 over max_steps), self.steps_done += 1",
}


def _step_case(name: str, part: str, settings: dict, hint: str = "") -> Case:
    text = ", ".join(f"{k}={v!r}" for k, v in settings.items()) or "the lab's defaults"
    return Case(
        f"{name}: {part}",
        (part, tuple(sorted(settings.items()))),
        show=f"step(trainer, rows): 2 prompts x 4 fixed completions of the tiny model, policy "
        f"moved off the reference; MathConfig: {text}",
        hint=(hint + "; " if hint else "") + _STEP_HINTS[part],
    )


STEP_PUBLIC = [
    _step_case("the lesson's settings (dapo, beta=0.04)", part, {})
    for part in ("loss", "gradient", "optimizer")
]

STEP_HIDDEN = [
    _step_case("loss_type='grpo'", "loss", {"loss_type": "grpo"}, "use cfg.loss_type"),
    _step_case("loss_type='grpo'", "gradient", {"loss_type": "grpo"}, "use cfg.loss_type"),
    _step_case(
        "loss_type='dr_grpo'",
        "loss",
        {"loss_type": "dr_grpo"},
        "dr_grpo divides by rows x cfg.max_completion_length",
    ),
    _step_case("beta=0: no reference model", "loss", {"beta": 0.0}, "ref_logps=None"),
    _step_case("beta=0: no reference model", "gradient", {"beta": 0.0}, "ref_logps=None"),
    _step_case(
        "a strong KL term, beta=1",
        "loss",
        {"beta": 1.0},
        "k3 of log pi_ref - log pi, with log pi_ref from self.reference",
    ),
    _step_case(
        "beta=1 and use_bias_correction_kl=True",
        "gradient",
        {"beta": 1.0, "use_bias_correction_kl": True},
        "pass cfg.use_bias_correction_kl to grpo_loss",
    ),
    _step_case("temperature 0.7", "gradient", {"temperature": 0.7}, "use cfg.temperature"),
    _step_case("scale_rewards='none'", "gradient", {"scale_rewards": "none"}),
    _step_case(
        "max_grad_norm=0: no clipping",
        "gradient",
        {"max_grad_norm": 0.0},
        "max_grad_norm=0 means no clipping (an infinite max norm), not a zero gradient",
    ),
    _step_case("a 3-step schedule", "optimizer", {"max_steps": 3, "learning_rate": 3e-4}),
]


def check_step(fn: Callable, hidden: bool = False) -> None:
    """The learner's step against ``LMGRPOTrainer.step`` on the same fixed rollout."""
    run_cases(
        _step_view(fn) if callable(fn) else fn,
        "step",
        STEP_HIDDEN if hidden else STEP_PUBLIC,
        _step_view(LMGRPOTrainer.step, cached=True),
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


def training_config(seed: int = 0) -> MathConfig:
    """The lab's run: notebook 06's CPU settings, a shorter run (500 held-out problems)."""
    steps = QUICK_TRAINING_STEPS if quick() else TRAINING_STEPS
    return MathConfig(device="cpu", max_steps=steps, eval_every=0, eval_n=500, seed=seed)


@dataclass
class TrainingRun:
    """Held-out greedy accuracy before and after, and per step: the sampled reward, the metrics
    the step returned and its seconds."""

    cfg: MathConfig
    accuracy_before: float
    accuracy_after: float
    rewards: list[float]
    metrics: list[dict]
    seconds: float

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
    generator = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []
    rewards, metrics, seconds = [], [], 0.0
    for number in range(1, cfg.max_steps + 1):
        while len(order) < cfg.prompts_per_step:  # shuffled passes, as train_math draws them
            order += torch.randperm(len(train_rows), generator=generator).tolist()
        batch = [train_rows[i] for i in order[: cfg.prompts_per_step]]
        del order[: cfg.prompts_per_step]
        start = time.perf_counter()
        out = step(trainer, batch)
        seconds += time.perf_counter() - start
        if out is None or out is Ellipsis:
            return None
        record, rollout = out
        metrics.append(record)
        if isinstance(rollout, Rollout):
            answers = [row["answer"] for row in rollout.rows]
            correct = accuracy_reward(rollout.completions, answers)
            rewards.append(sum(correct) / len(correct))
        if progress and (number % 25 == 0 or number == cfg.max_steps):
            recent = rewards[-25:]
            print(f"step {number:4d}/{cfg.max_steps}  {seconds:6.1f} s  sampled reward "
                  f"{sum(recent) / max(len(recent), 1):.2f} (mean of the last 25 steps)")  # fmt: skip
    after = evaluate_accuracy(trainer.model, tokenizer, eval_rows, cfg)[0]
    return TrainingRun(cfg, before, after, rewards, metrics, seconds)


def check_training(fn: Callable, hidden: bool = False) -> None:
    """Held-out greedy accuracy after the lab's run with ``fn`` as the step must rise by at
    least ``MIN_RISE`` (seed 0; the hidden check trains again from seed 1)."""
    if fn is None or fn is Ellipsis or not callable(fn):
        raise failure("definition", "`step`", "a function named `step`", fn,
                      "define `step` in exercise 3 and run it before this check")  # fmt: skip
    cfg = training_config(seed=1 if hidden else 0)
    margin = QUICK_MIN_RISE if quick() else MIN_RISE
    what = f"{cfg.max_steps} steps of your step on the tiny model, seed {cfg.seed}"
    expected = f"held-out greedy accuracy up by at least {100 * margin:.0f} points"
    try:
        run = train_with_step(fn, cfg)
    except Exception as error:
        raise failure("training run", what, expected, f"raised {type(error).__name__}: {error}",
                      "pass exercise 3's check first: the run calls step(trainer, rows) "
                      "at every step") from None  # fmt: skip
    if run is None:
        raise failure("training run", what, expected, None,
                      "step returned nothing: write exercise 3 first")  # fmt: skip
    if run.rise < margin:
        raise failure(
            "held-out accuracy rises",
            what,
            expected + f" ({cfg.eval_n} problems)",
            f"{run.accuracy_before:.1%} -> {run.accuracy_after:.1%} ({100 * run.rise:+.1f} points)",
            "a step that matches the package's (exercise 3) learns; a fall means the update "
            "goes the wrong way (the advantages' sign), no change means no update at all",
        )
