"""grpo_minimal: one small, readable GRPO core shared by every notebook of the course."""

from .advantages import (
    discounted_returns,
    group_advantages,
    masked_mean_std,
    population_std_advantages,
    rloo_advantages,
)
from .config import CartPoleConfig, GRPOConfig, PPOConfig
from .losses import (
    aggregate_loss,
    categorical_entropy,
    categorical_kl,
    clipped_surrogate,
    expected_kl_loss_gradient,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    policy_ratio,
)

__all__ = [
    "CartPoleConfig",
    "GRPOConfig",
    "PPOConfig",
    "aggregate_loss",
    "categorical_entropy",
    "categorical_kl",
    "clipped_surrogate",
    "discounted_returns",
    "expected_kl_loss_gradient",
    "group_advantages",
    "grpo_loss",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "masked_mean_std",
    "policy_ratio",
    "population_std_advantages",
    "rloo_advantages",
]
__version__ = "0.1.0"
