"""What every configuration shares: validation, documented fields, and GRPO's own knobs.

Each trainer's configuration lives beside the code it configures, CleanRL-style, and extends
``ObjectiveConfig`` (or ``ValidatedConfig``): ``CartPoleConfig`` in ``gym_grpo.py``, ``PPOConfig`` in
``ppo.py``, ``MathConfig`` in ``math_config.py``. Names follow TRL's ``GRPOConfig`` where the idea
is the same (``num_generations``, ``beta``, ``epsilon``, ``epsilon_high``, ``loss_type``,
``scale_rewards``, ``num_iterations``), so that what a learner sets here means the same thing in
TRL. A bad value raises ``ValueError`` naming the field, the value and what is allowed. Each
field carries its help text (``option``), which ``grpo-minimal --help`` shows through
transformers' ``HfArgumentParser``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .advantages import SCALE_REWARDS
from .losses import LOSS_TYPES


def check_range(
    name: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``value`` lies in the interval; the message names the field."""
    bad = not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value)
    if not bad and low is not None:
        bad = value <= low if low_open else value < low
    if not bad and high is not None:
        bad = value >= high if high_open else value > high
    if bad:
        left = "-inf" if low is None else f"{low}"
        right = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{left}, {right}{')' if high_open or high is None else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def option(
    default: Any,
    help: str,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A dataclass field with its help text (``metadata["help"]``, as ``HfArgumentParser`` reads)
    and the values it takes: the interval from ``low`` to ``high`` (an end is left out with
    ``*_open``), or one of ``choices``. ``ValidatedConfig.validate`` checks them; None passes
    for a field whose default is None."""
    allowed = {"low": low, "high": high, "low_open": low_open, "high_open": high_open}
    if choices is not None:
        allowed = {"choices": tuple(choices)}
    elif low is None and high is None:
        allowed = {}
    return field(default=default, metadata={"help": help, "allowed": allowed})


def override(base: type, name: str, default: Any) -> Any:
    """A new default for a field ``base`` defines, keeping its help text and allowed values."""
    return field(default=default, metadata=base.__dataclass_fields__[name].metadata)


def check_allowed(f, value: Any) -> None:
    """Raise ``ValueError`` unless ``value`` is one of the values field ``f`` allows (``option``)."""
    allowed = f.metadata.get("allowed") or {}
    if value is None and f.default is None:
        return
    if "choices" in allowed:
        check_choice(f.name, value, allowed["choices"])
    elif allowed:  # bounds written as the field's type: [1, inf) for an int, [0.0, inf) for a float
        kind = int if f.type in ("int", int) else float
        bounds = {
            k: kind(v) if k in ("low", "high") and v is not None else v for k, v in allowed.items()
        }
        check_range(f.name, value, **bounds)


class ValidatedConfig:
    """What every config dataclass shares: validation on construction, field types, ``to_dict``."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check each field on its own: int and bool fields hold values of their type (``True``
        is not an int), every field a value its ``option`` allows. A subclass adds the rules
        that tie fields together and calls ``super().validate()`` first."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be True or False, got {value!r}")
            allowed = f.metadata.get("allowed") or {}
            plain_str = f.type in ("str", str) and "choices" not in allowed
            if plain_str and not (isinstance(value, str) and value.strip()):
                raise ValueError(f"{f.name} must be a non-empty string, got {value!r}")
            check_allowed(f, value)

    def to_dict(self) -> dict:
        """Plain dict of the fields (for JSON metrics and checkpoints)."""
        return asdict(self)


@dataclass
class ObjectiveConfig(ValidatedConfig):
    """The GRPO objective's knobs, shared by every trainer in the course."""

    # a group of one has no baseline: at least 2 (PPO's config, lm_ppo.py, allows 1)
    num_generations: int = option(
        8,
        "G: outputs (episodes, completions) sampled per prompt / start state; the group size",
        low=2,
    )
    beta: float = option(
        0.0,
        "weight of the k3 KL penalty to the reference policy; 0 disables the reference",
        low=0.0,
    )
    epsilon: float = option(
        0.2,
        "lower clip range: the ratio is clipped below at 1 - epsilon",
        low=0.0,
        high=1.0,
        low_open=True,
        high_open=True,
    )
    epsilon_high: float | None = option(
        None,
        "upper clip range (DAPO clip-higher); None means the same as epsilon",
        low=0.0,
        low_open=True,
    )
    loss_type: str = option(
        "grpo", "how per-token losses are averaged: grpo, bnpo, dr_grpo or dapo", choices=LOSS_TYPES
    )
    scale_rewards: str = option(
        "group",
        "divide centred rewards by the std of the group, of the batch, or not at all (none)",
        choices=SCALE_REWARDS,
    )
    num_iterations: int = option(
        1, "clipped optimisation epochs over each sampled batch (mu in the GRPO paper)", low=1.0
    )
    ref_update_every: int = option(
        0,
        "copy the policy into the reference every this many training steps (one sampled batch "
        "and its num_iterations updates); 0 keeps it frozen",
        low=0.0,
    )
    use_bias_correction_kl: bool = option(
        False,
        "multiply the KL term by the ratio (TRL 1.16's default); False is the classic objective",
    )
    learning_rate: float = option(1e-6, "AdamW step size", low=0.0, low_open=True)
    max_grad_norm: float = option(
        1.0, "clip the global gradient norm to this value; 0 disables clipping", low=0.0
    )
    # negative seeds would reach the evaluation seeds
    seed: int = option(0, "seed for random, numpy, torch and environment resets", low=0.0)
