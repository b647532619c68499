"""Lab 01: the reference passes, a delegate to the package passes, known mistakes fail."""

from __future__ import annotations

import pytest
import torch
from lab_helpers import assert_fails, assert_fails_somewhere, assert_passes

from grpo_minimal import advantages as package
from grpo_minimal.labs import advantages as checks
from grpo_minimal.labs.checking import CheckFailed


def reference_group(rewards, num_generations, scale_rewards="group", eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / (grouped.std() + eps)
    return centred.reshape(-1)


def population_std(rewards, num_generations, scale_rewards="group", eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + eps)).reshape(-1)


def no_eps(rewards, num_generations, scale_rewards="group", eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    return (
        (grouped - grouped.mean(dim=1, keepdim=True)) / grouped.std(dim=1, keepdim=True)
    ).reshape(-1)


def batch_mean(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """The seed-002 mistake: normalise over the whole batch, mixing prompts."""
    rewards = rewards.float()
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def ignores_scale(rewards, num_generations, scale_rewards="group", eps=1e-4):
    return reference_group(rewards, num_generations, "group", eps)


def hard_coded_eps(rewards, num_generations, scale_rewards="group", eps=1e-4):
    return reference_group(rewards, num_generations, scale_rewards, 1e-4)


GROUP_WRONG = [population_std, no_eps, batch_mean, ignores_scale]


def reference_rloo(rewards, num_generations):
    grouped = rewards.float().view(-1, num_generations)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - others).reshape(-1)


def rloo_divides_by_g(rewards, num_generations):
    grouped = rewards.float().view(-1, num_generations)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / num_generations
    return (grouped - others).reshape(-1)


def rloo_includes_self(rewards, num_generations):
    return package.group_advantages(rewards, num_generations, "none")


def rloo_sign(rewards, num_generations):
    return -reference_rloo(rewards, num_generations)


def rloo_whole_batch(rewards, num_generations):
    rewards = rewards.float()
    return rewards - (rewards.sum() - rewards) / (rewards.numel() - 1)


RLOO_WRONG = [rloo_divides_by_g, rloo_includes_self, rloo_sign, rloo_whole_batch]


@pytest.mark.parametrize("fn", [reference_group, package.group_advantages])
def test_group_reference_and_package_pass(fn):
    assert_passes(checks.check_group_advantages, fn)


@pytest.mark.parametrize("fn", GROUP_WRONG, ids=lambda f: f.__name__)
def test_group_mistakes_fail_public(fn):
    assert_fails(checks.check_group_advantages, fn)


def test_hard_coded_eps_fails_hidden():
    assert_fails_somewhere(checks.check_group_advantages, hard_coded_eps)


def test_population_std_feedback_names_the_seed_case():
    message = assert_fails(checks.check_group_advantages, population_std)
    assert "one group, G=4" in message and "0.865" in message


@pytest.mark.parametrize("fn", [reference_rloo, package.rloo_advantages])
def test_rloo_reference_and_package_pass(fn):
    assert_passes(checks.check_rloo_advantages, fn)


@pytest.mark.parametrize("fn", RLOO_WRONG, ids=lambda f: f.__name__)
def test_rloo_mistakes_fail(fn):
    assert_fails_somewhere(checks.check_rloo_advantages, fn)


def test_std_question():
    population = package.population_std_advantages(torch.tensor(checks.SEED_GROUP), 4)[0].item()
    checks.check_std_question(population, 0.5 / 1.0002)
    for wrong in [(0.5, 0.5), (population, population), (0.58, 0.5), (..., 0.5)]:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_std_question(*wrong)


def test_stub_gets_clear_feedback():
    def stub(rewards, num_generations, scale_rewards="group", eps=1e-4): ...

    message = assert_fails(checks.check_group_advantages, stub)
    assert "stub" in message
    assert "define `group_advantages`" in assert_fails(checks.check_group_advantages, None)
