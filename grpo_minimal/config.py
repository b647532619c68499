"""Dataclass configurations, validated when they are built.

Names follow TRL's ``GRPOConfig`` where the idea is the same (``num_generations``, ``beta``,
``epsilon``, ``epsilon_high``, ``loss_type``, ``scale_rewards``, ``num_iterations``), so that what
a learner sets here means the same thing in TRL. A bad value raises ``ValueError`` naming the
field, the value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

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


@dataclass
class GRPOConfig:
    """The GRPO objective's knobs, shared by every trainer in the course."""

    num_generations: int = 8
    """G: outputs (episodes, completions) sampled per prompt / start state; the group size"""
    beta: float = 0.0
    """weight of the k3 KL penalty to the reference policy; 0 disables the reference"""
    epsilon: float = 0.2
    """lower clip range: the ratio is clipped below at 1 - epsilon"""
    epsilon_high: float | None = None
    """upper clip range (DAPO clip-higher); None means the same as epsilon"""
    loss_type: str = "grpo"
    """how per-token losses are averaged: grpo, bnpo, dr_grpo or dapo"""
    scale_rewards: str = "group"
    """divide centred rewards by the std of the group, of the batch, or not at all (none)"""
    num_iterations: int = 1
    """clipped optimisation epochs over each sampled batch (mu in the GRPO paper)"""
    ref_update_every: int = 0
    """copy the policy into the reference every this many iterations; 0 keeps it frozen"""
    use_bias_correction_kl: bool = False
    """multiply the KL term by the ratio (TRL 1.16's default); False is the classic objective"""
    learning_rate: float = 1e-6
    """AdamW step size"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this value; 0 disables clipping"""
    seed: int = 0
    """seed for random, numpy, torch and environment resets"""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field; subclasses extend this and call ``super().validate()``."""
        check_range("num_generations", self.num_generations, 2)
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
        for f in fields(self):
            if f.type in ("int", int) and not isinstance(getattr(self, f.name), int):
                raise ValueError(f"{f.name} must be an integer, got {getattr(self, f.name)!r}")

    def to_dict(self) -> dict:
        """Plain dict of the fields (for JSON metrics and checkpoints)."""
        return asdict(self)


ADVANTAGE_MODES = ("per_step", "all_steps", "episode")
BASELINES = ("mean", "rloo")


@dataclass
class CartPoleConfig(GRPOConfig):
    """GRPO on a discrete-action gymnasium environment (CartPole-v1 by default).

    A group is ``num_generations`` episodes that start from the same reset seed. The defaults
    are the ones the benchmark in ``bench/cartpole.py`` measures.
    """

    env_id: str = "CartPole-v1"
    """gymnasium id of a discrete-action environment"""
    groups_per_batch: int = 4
    """start states (groups) per policy update; a batch holds groups_per_batch * G episodes"""
    total_env_steps: int = 200_000
    """training budget in environment steps (training stops earlier once solved)"""
    gamma: float = 0.99
    """discount factor of the returns-to-go, in (0, 1]"""
    advantage: str = "per_step"
    """per_step: normalise R_t across the group at each t; all_steps: over all steps of the
    group; episode: the episode's total return, broadcast to its steps (outcome reward)"""
    baseline: str = "mean"
    """mean: subtract the group mean (GRPO); rloo: subtract the mean of the other outputs,
    i.e. scale the centred value by n/(n-1) (equation 3)"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    hidden_size: int = 64
    """width of the two hidden layers of the policy MLP"""
    eval_episodes: int = 100
    """greedy episodes that decide whether the task is solved"""
    solve_threshold: float = 475.0
    """mean greedy return that counts as solved (475 for CartPole-v1)"""
    stop_when_solved: bool = True
    """stop training at the first greedy evaluation that reaches solve_threshold"""

    num_iterations: int = 4
    learning_rate: float = 3e-3
    max_grad_norm: float = 0.5
    loss_type: str = "bnpo"
    beta: float = 0.0
    ref_update_every: int = 0

    def validate(self) -> None:
        super().validate()
        check_range("groups_per_batch", self.groups_per_batch, 1)
        check_range("total_env_steps", self.total_env_steps, 1)
        check_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_choice("advantage", self.advantage, ADVANTAGE_MODES)
        check_choice("baseline", self.baseline, BASELINES)
        check_range("entropy_coef", self.entropy_coef, 0.0)
        check_range("hidden_size", self.hidden_size, 1)
        check_range("eval_episodes", self.eval_episodes, 1)
