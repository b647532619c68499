"""Configs refuse bad values with a message naming the field, the value and the range."""

import pytest

from grpo_minimal import ObjectiveConfig
from grpo_minimal.gym_grpo import CartPoleConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_generations", 1, r"num_generations must be in \[2, inf\), got 1"),
        ("epsilon", 0.0, r"epsilon must be in \(0.0, 1.0\), got 0.0"),
        ("epsilon", 1.0, r"epsilon must be in \(0.0, 1.0\)"),
        ("epsilon_high", -0.1, "epsilon_high"),
        ("beta", -0.01, r"beta must be in \[0.0, inf\), got -0.01"),
        ("num_iterations", 0, "num_iterations"),
        ("loss_type", "ppo", r"loss_type must be one of \('grpo', 'bnpo', 'dr_grpo', 'dapo'\)"),
        ("scale_rewards", True, "scale_rewards must be one of"),
        ("learning_rate", 0.0, "learning_rate"),
        ("learning_rate", float("nan"), "learning_rate"),
        ("num_generations", 4.5, "num_generations must be an integer"),
        ("num_generations", True, "num_generations must be an integer, got True"),
        ("use_bias_correction_kl", 1, "use_bias_correction_kl must be True or False, got 1"),
        ("ref_update_every", -1, "ref_update_every"),
    ],
)
def test_grpo_config_names_the_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        ObjectiveConfig(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gamma", 0.0),
        ("gamma", 1.5),
        ("advantage", "returns"),
        ("baseline", "critic"),
        ("groups_per_batch", 0),
        ("total_env_steps", 0),
        ("entropy_coef", -1.0),
        ("num_generations", 1),
    ],
)
def test_cartpole_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        CartPoleConfig(**{field: value})


def test_gamma_one_is_allowed_and_defaults_are_valid():
    assert CartPoleConfig(gamma=1.0).gamma == 1.0
    assert ObjectiveConfig().to_dict()["loss_type"] == "grpo"
