"""grpo_minimal: one small, readable GRPO core shared by every notebook of the course.

``import grpo_minimal`` gives the math every trainer shares (advantages, losses,
``ObjectiveConfig``); the trainers are modules of their own: ``gym_grpo`` (and ``ppo``) for gymnasium environments,
``lm_grpo`` and ``lm_train`` for language models. The reading guide in docs/architecture.md gives the order.
"""

from .advantages import (
    centre_and_scale,
    discounted_returns,
    group_advantages,
    masked_mean_std,
    rloo_advantages,
)
from .config import ObjectiveConfig
from .losses import (
    aggregate_loss,
    categorical_entropy,
    categorical_kl,
    clipped_surrogate,
    clipped_tokens,
    expected_kl_loss_gradient,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    policy_ratio,
)

__all__ = [
    "ObjectiveConfig",
    "aggregate_loss",
    "categorical_entropy",
    "categorical_kl",
    "clipped_surrogate",
    "clipped_tokens",
    "discounted_returns",
    "expected_kl_loss_gradient",
    "group_advantages",
    "grpo_loss",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean",
    "centre_and_scale",
    "masked_mean_std",
    "policy_ratio",
    "rloo_advantages",
]
__version__ = "0.1.0"
