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


def option(default: Any, help: str) -> Any:
    """A dataclass field with its help text (``metadata["help"]``, as ``HfArgumentParser`` reads)."""
    return field(default=default, metadata={"help": help})


def override(base: type, name: str, default: Any) -> Any:
    """A new default for a field ``base`` defines, keeping the field's help text."""
    return field(default=default, metadata=base.__dataclass_fields__[name].metadata)


class ValidatedConfig:
    """What every config dataclass shares: validation on construction, field types, ``to_dict``."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check that int and bool fields hold values of their type (``True`` is not an int)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be True or False, got {value!r}")

    def to_dict(self) -> dict:
        """Plain dict of the fields (for JSON metrics and checkpoints)."""
        return asdict(self)


@dataclass
class ObjectiveConfig(ValidatedConfig):
    """The GRPO objective's knobs, shared by every trainer in the course."""

    MIN_GENERATIONS = 2  # a group of one has no baseline; PPO's config (lm_ppo.py) allows 1

    num_generations: int = option(
        8, "G: outputs (episodes, completions) sampled per prompt / start state; the group size"
    )
    beta: float = option(
        0.0, "weight of the k3 KL penalty to the reference policy; 0 disables the reference"
    )
    epsilon: float = option(0.2, "lower clip range: the ratio is clipped below at 1 - epsilon")
    epsilon_high: float | None = option(
        None, "upper clip range (DAPO clip-higher); None means the same as epsilon"
    )
    loss_type: str = option(
        "grpo", "how per-token losses are averaged: grpo, bnpo, dr_grpo or dapo"
    )
    scale_rewards: str = option(
        "group",
        "divide centred rewards by the std of the group, of the batch, or not at all (none)",
    )
    num_iterations: int = option(
        1, "clipped optimisation epochs over each sampled batch (mu in the GRPO paper)"
    )
    ref_update_every: int = option(
        0,
        "copy the policy into the reference every this many training steps (one sampled batch "
        "and its num_iterations updates); 0 keeps it frozen",
    )
    use_bias_correction_kl: bool = option(
        False,
        "multiply the KL term by the ratio (TRL 1.16's default); False is the classic objective",
    )
    learning_rate: float = option(1e-6, "AdamW step size")
    max_grad_norm: float = option(
        1.0, "clip the global gradient norm to this value; 0 disables clipping"
    )
    seed: int = option(0, "seed for random, numpy, torch and environment resets")

    def validate(self) -> None:
        """Check every field; subclasses extend this and call ``super().validate()``."""
        super().validate()
        check_range("num_generations", self.num_generations, self.MIN_GENERATIONS)
        check_range("beta", self.beta, 0.0)
        check_range("epsilon", self.epsilon, 0.0, 1.0, low_open=True, high_open=True)
        if self.epsilon_high is not None:
            check_range("epsilon_high", self.epsilon_high, 0.0, low_open=True)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_range("num_iterations", self.num_iterations, 1)
        check_range("ref_update_every", self.ref_update_every, 0)
        check_range("learning_rate", self.learning_rate, 0.0, low_open=True)
        check_range("max_grad_norm", self.max_grad_norm, 0.0)
        check_range("seed", self.seed, 0)  # negative seeds would reach the evaluation seeds
