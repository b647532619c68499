"""Hand-computed values and properties of equations (1)-(4)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_minimal import (
    discounted_returns,
    group_advantages,
    masked_mean_std,
    population_std_advantages,
    rloo_advantages,
)


def t(values):
    return torch.tensor(values, dtype=torch.float32)


def test_seed_example_2_plus_2():
    # "2 + 2 = ?": rewards +1, -1, +1, -1; mean 0, unbiased std sqrt(4/3)
    adv = group_advantages(t([1, -1, 1, -1]), 4)
    expected = 1 / math.sqrt(4 / 3)
    assert torch.allclose(adv, t([expected, -expected, expected, -expected]), atol=1e-4)


def test_seed_example_15_plus_27_unbiased_vs_population():
    # "15 + 27 = ?": rewards 1, 1, 0, 1; mean 0.75
    rewards = t([1, 1, 0, 1])
    unbiased = group_advantages(rewards, 4)  # std = 0.5
    population = population_std_advantages(rewards, 4)  # std = sqrt(0.1875) = 0.433
    assert torch.allclose(unbiased, t([0.5, 0.5, -1.5, 0.5]), atol=1e-3)
    assert torch.allclose(population, t([0.577, 0.577, -1.732, 0.577]), atol=1e-3)


def test_eps_is_added_to_std():
    adv = group_advantages(t([0, 2]), 2, eps=1.0)  # std = sqrt(2); (2 - 1) / (sqrt 2 + 1)
    assert adv[1].item() == pytest.approx(1 / (math.sqrt(2) + 1), rel=1e-6)


def test_scale_none_only_centres():
    assert torch.equal(group_advantages(t([1, 1, 0, 1]), 4, "none"), t([0.25, 0.25, -0.75, 0.25]))


def test_scale_batch_uses_group_mean_and_batch_std():
    rewards = t([0, 1, 10, 12])  # groups [0, 1] and [10, 12]
    std = rewards.std().item()  # unbiased std of all four: 6.0277
    adv = group_advantages(rewards, 2, "batch")
    assert torch.allclose(adv, t([-0.5, 0.5, -1.0, 1.0]) / (std + 1e-4))


def test_zero_variance_group_gives_zeros_not_nan():
    adv = group_advantages(t([1, 1, 1, 1, 0, 1, 0, 1]), 4)
    assert torch.equal(adv[:4], torch.zeros(4))
    assert torch.isfinite(adv).all()


def test_rloo_hand_computed():
    # 15 + 27: r_3 = 0, the others average 1 -> -1; r_1 = 1, the others average 2/3 -> 1/3
    assert torch.allclose(rloo_advantages(t([1, 1, 0, 1]), 4), t([1 / 3, 1 / 3, -1, 1 / 3]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(rewards=t([1, 2, 3]), num_generations=2), "not a multiple"),
        (dict(rewards=t([1, 2]), num_generations=1), "num_generations must be >= 2"),
        (dict(rewards=t([1, float("nan")]), num_generations=2), "NaN"),
        (dict(rewards=t([[1, 2]]), num_generations=2), "1-D"),
        (dict(rewards=t([1, 2]), num_generations=2, scale_rewards="std"), "scale_rewards"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(**kwargs)


def test_discounted_returns_hand_computed():
    rewards = t([[1, 1, 1], [1, 1, 0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    returns = discounted_returns(rewards, mask, gamma=0.5)
    # episode 1: 1 + .5 + .25, 1 + .5, 1; episode 2 ends after two steps
    assert torch.allclose(returns, t([[1.75, 1.5, 1.0], [1.5, 1.0, 0.0]]))


def test_discounted_returns_ignores_rewards_on_padding():
    returns = discounted_returns(t([[2, 5, 7]]), t([[1, 0, 0]]), gamma=1.0)
    assert torch.equal(returns, t([[2, 0, 0]]))


@pytest.mark.parametrize("gamma", [0.0, -0.1, 1.01, float("nan")])
def test_discounted_returns_refuses_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns(t([[1.0]]), t([[1.0]]), gamma)


def test_masked_mean_std_ignores_masked_entries():
    mean, std, count = masked_mean_std(t([[1, 3, 100]]), t([[1, 1, 0]]), dim=1)
    assert (mean.item(), std.item(), count.item()) == pytest.approx((2.0, math.sqrt(2), 2.0))


# ---- properties -------------------------------------------------------------------------

group_sizes = st.integers(min_value=2, max_value=8)
reward_values = st.floats(min_value=-100, max_value=100, allow_nan=False, width=32)


@st.composite
def grouped_rewards(draw):
    G = draw(group_sizes)
    groups = draw(st.integers(min_value=1, max_value=4))
    values = draw(st.lists(reward_values, min_size=G * groups, max_size=G * groups))
    return torch.tensor(values, dtype=torch.float64), G


@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]))
def test_advantages_sum_to_zero_per_group(data, scale):
    rewards, G = data
    adv = group_advantages(rewards, G, scale).view(-1, G)
    scale_of = 1 + rewards.abs().max().item()
    assert torch.allclose(adv.sum(dim=1), torch.zeros(adv.shape[0]), atol=1e-3 * scale_of)


@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.floats(-50, 50), st.floats(0.5, 20))
def test_group_scaling_is_shift_and_scale_invariant(data, shift, scale):
    rewards, G = data
    rewards = rewards.round()  # distinct-or-equal values, so eps does not dominate
    a = group_advantages(rewards, G, eps=1e-9).view(-1, G)
    b = group_advantages(rewards * scale + shift, G, eps=1e-9).view(-1, G)
    spread = rewards.view(-1, G).std(dim=1) > 0.5
    assert torch.allclose(a[spread], b[spread], atol=1e-3)


@settings(max_examples=200, deadline=None)
@given(grouped_rewards())
def test_rloo_is_rescaled_mean_centring(data):
    rewards, G = data
    centred = group_advantages(rewards, G, "none")
    assert torch.allclose(rloo_advantages(rewards, G), G / (G - 1) * centred, atol=1e-3)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.floats(0.01, 1.0))
def test_discounted_returns_match_the_recursion(episodes, steps, gamma):
    g = torch.Generator().manual_seed(episodes * 100 + steps)
    rewards = torch.randn(episodes, steps, generator=g)
    lengths = torch.randint(1, steps + 1, (episodes,), generator=g)
    mask = (torch.arange(steps) < lengths.unsqueeze(1)).float()
    returns = discounted_returns(rewards, mask, gamma)
    for i in range(episodes):
        running = 0.0
        for k in reversed(range(int(lengths[i]))):
            running = rewards[i, k].item() + gamma * running
            assert returns[i, k].item() == pytest.approx(running, abs=1e-4)
        assert torch.all(returns[i, int(lengths[i]) :] == 0)
