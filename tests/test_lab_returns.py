"""Lab 02: the reference passes, a delegate to the package passes, known mistakes fail."""

from __future__ import annotations

import re

import pytest
import torch
from lab_helpers import (
    assert_caught_publicly,
    assert_fails,
    assert_passes,
    assert_same_verdict,
)

from grpo_minimal import advantages as package
from grpo_minimal.labs import returns as checks
from grpo_minimal.labs.checking import CheckFailed


def reference_returns(rewards, mask, gamma):
    rewards = rewards * mask
    returns = torch.zeros(rewards.shape, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running * mask[:, t]
        returns[:, t] = running
    return returns


def float64_returns(rewards, mask, gamma):
    """A correct variant that computes in float64 (and returns float64)."""
    rewards, mask = rewards.double() * mask.double(), mask.double()
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=torch.float64)
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = rewards[:, t] + gamma * running * mask[:, t]
        returns[:, t] = running
    return returns


def vectorised_returns(rewards, mask, gamma):
    """A correct loop-free variant: R_t = sum_k gamma^(k-t) r_k over real steps k >= t."""
    steps = rewards.shape[1]
    t = torch.arange(steps, dtype=torch.float64)
    powers = torch.tensor(gamma, dtype=torch.float64) ** (t.unsqueeze(0) - t.unsqueeze(1))
    upper = torch.triu(powers)  # [t, k]: gamma^(k - t) for k >= t
    return (rewards.double() * mask.double()) @ upper.T * mask.double()


def mask_ignored(rewards, mask, gamma):
    return reference_returns(rewards, torch.ones_like(mask), gamma)


def mask_on_output_only(rewards, mask, gamma):
    """Padding gets 0, but its rewards still flow into the real steps before it."""
    return reference_returns(rewards, torch.ones_like(mask), gamma) * mask


def forward_accumulation(rewards, mask, gamma):
    rewards = rewards * mask
    returns = torch.zeros(rewards.shape, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32)
    for t in range(rewards.shape[1]):
        running = rewards[:, t] + gamma * running
        returns[:, t] = running
    return returns * mask


def gamma_on_current_reward(rewards, mask, gamma):
    """Off by one power: R_t = gamma * (r_t + R_{t+1})."""
    rewards = rewards * mask
    returns = torch.zeros(rewards.shape, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[1])):
        running = gamma * (rewards[:, t] + running) * mask[:, t]
        returns[:, t] = running
    return returns


def no_reset_between_episodes(rewards, mask, gamma):
    """One running return for the whole batch, carried from one row into the row above it."""
    rewards = rewards * mask
    returns = torch.zeros(rewards.shape, dtype=torch.float32)
    running = 0.0
    for i in reversed(range(rewards.shape[0])):
        for t in reversed(range(rewards.shape[1])):
            running = float(rewards[i, t]) + gamma * running * float(mask[i, t])
            returns[i, t] = running
    return returns


def undiscounted(rewards, mask, gamma):
    return reference_returns(rewards, mask, 1.0)


def hard_coded_gamma(rewards, mask, gamma):
    return reference_returns(rewards, mask, 0.99)


def edits_rewards_in_place(rewards, mask, gamma):
    rewards *= mask
    return reference_returns(rewards, mask, gamma)


def integer_result(rewards, mask, gamma):
    """The issue's variant: the mask cast to the rewards' dtype, the result made by zeros_like."""
    rewards = rewards * mask.to(rewards.dtype)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running * mask[:, t]
        returns[:, t] = running
    return returns


def integer_zeros_like(rewards, mask, gamma):
    """Right for float rewards; with int64 rewards the result is an int64 tensor."""
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        running = mask[:, t] * (rewards[:, t] + gamma * running)
        returns[:, t] = running
    return returns


def float32_only(rewards, mask, gamma):
    """Right for float inputs; `.float()` first is fine, so this must pass."""
    return reference_returns(rewards.float(), mask.float(), gamma)


WRONG = [
    mask_ignored,
    mask_on_output_only,
    forward_accumulation,
    gamma_on_current_reward,
    no_reset_between_episodes,
    undiscounted,
    hard_coded_gamma,
    edits_rewards_in_place,
    integer_result,
    integer_zeros_like,
]

CORRECT = [
    reference_returns,
    float64_returns,
    vectorised_returns,
    float32_only,
    package.discounted_returns,
]


@pytest.mark.parametrize("fn", CORRECT, ids=lambda f: f.__name__)
def test_correct_implementations_pass(fn):
    assert_passes(checks.check_discounted_returns, fn)


@pytest.mark.parametrize("fn", WRONG, ids=lambda f: f.__name__)
def test_mistakes_are_caught_by_lab_check(fn):
    """Each mistake fails ``lab check`` and loses the graded points too."""
    assert_caught_publicly(checks.check_discounted_returns, fn)


@pytest.mark.parametrize("fn", WRONG + CORRECT, ids=lambda f: f.__name__)
def test_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_discounted_returns, fn)


@pytest.mark.parametrize(
    ("fn", "case", "shown"),
    [
        (mask_ignored, "padding holds rewards that must be ignored", "mask"),
        (mask_on_output_only, "padding holds rewards that must be ignored", "leaks"),
        (forward_accumulation, "one episode, gamma=0.5", "backwards"),
        (gamma_on_current_reward, "one episode, gamma=0.5", "never r_t"),
        (no_reset_between_episodes, "each row is its own episode", "starts at 0 for every row"),
        (undiscounted, "one episode, gamma=0.5", "gamma (the argument)"),
        (hard_coded_gamma, "one episode, gamma=0.5", "gamma (the argument)"),
        (edits_rewards_in_place, "the inputs are left as they were", "rewards *= mask"),
        (integer_result, "integer rewards (int64)", "zeros_like(rewards) is an integer tensor"),
        (integer_zeros_like, "integer rewards (int64)", "zeros_like(rewards) is an integer tensor"),
    ],
)
def test_hint_points_at_the_mistake(fn, case, shown):
    """The first failure ``lab check`` details is the case that shows this mistake."""
    message = assert_fails(checks.check_discounted_returns, fn)
    first = message.split("also failing")[0]
    assert case in first and shown in first, message


def test_integer_mistakes_also_named_for_the_grader_seed():
    for fn in (integer_result, integer_zeros_like):
        message = assert_fails(checks.check_discounted_returns, fn, seed=12_345)
        assert "integer rewards (int64)" in message and "zeros_like" in message


def test_hidden_twins_are_fresh_values_of_the_public_kinds():
    """Same kinds (names up to the drawn numbers, dtypes) and other values for another seed."""

    def kind(case):
        return re.sub(r"-?[0-9.]+", "#", case.name), [
            a.dtype for a in case.args if isinstance(a, torch.Tensor)
        ]

    public, hidden = checks.returns_twins(0), checks.returns_twins(98_765)
    assert [kind(c) for c in public] == [kind(c) for c in hidden]
    assert any(
        p.args[0].shape != h.args[0].shape or not torch.equal(p.args[0], h.args[0])
        for p, h in zip(public, hidden, strict=True)
    )
    again = checks.returns_twins(0)  # the same seed draws the same values
    assert all(torch.equal(p.args[0], q.args[0]) for p, q in zip(public, again, strict=True))


def test_twins_keep_their_edges_for_every_seed():
    """Padding in every multi-step batch, integer rewards, one-step episodes: whatever the seed."""
    for seed in (0, 1, 2, 3, 12_345, 98_765):
        cases = {re.sub(r"-?[0-9.]+", "#", c.name): c for c in checks.returns_twins(seed)}
        for name, case in cases.items():
            rewards, mask, gamma = case.args
            assert 0 < gamma <= 1
            if rewards.shape[1] > 1:
                assert (mask == 0).any(), name
                assert (rewards[mask == 0] != 0).all(), name
        dtypes = {c.args[0].dtype for c in cases.values()}
        assert {torch.float32, torch.float64, torch.int64} <= dtypes


def test_feedback_names_the_case_and_the_values():
    message = assert_fails(checks.check_discounted_returns, mask_on_output_only)
    assert "padding holds rewards that must be ignored" in message
    assert "[204.0, 203.0, 0.0, 0.0]" in message and "[4.0, 3.0, 0.0, 0.0]" in message
    message = assert_fails(checks.check_discounted_returns, gamma_on_current_reward)
    assert "one episode, gamma=0.5" in message and "[0.875, 0.75, 0.5]" in message


def test_in_place_edit_is_reported():
    message = assert_fails(checks.check_discounted_returns, edits_rewards_in_place)
    assert "the inputs are left as they were" in message and "rewards *= mask" in message


def test_stub_gets_clear_feedback():
    def stub(rewards, mask, gamma): ...

    assert "stub" in assert_fails(checks.check_discounted_returns, stub)
    message = assert_fails(checks.check_discounted_returns, None)
    assert "define `discounted_returns`" in message


def test_rounding_bound_is_tight_enough_to_see_an_off_by_one_power():
    """The tolerance of the longest hidden case is far below the error of gamma^(k-t+1)."""
    rewards, mask = torch.ones(1, 500), torch.ones(1, 500)
    bound = checks._rounding_bound(rewards, mask, 0.99)
    right = package.discounted_returns(rewards, mask, 0.99)
    off_by_one = right * 0.99
    assert ((right - off_by_one).abs() > 10 * bound).all()


def _closed_form(gamma, steps):
    return (1 - gamma**steps) / (1 - gamma)


def test_truncated_episode_question():
    returns = package.discounted_returns(torch.ones(1, 500), torch.ones(1, 500), 0.99)
    checks.check_truncated_episode(returns[0, 0].item(), returns[0, -1].item())
    checks.check_truncated_episode(_closed_form(0.99, 500), 1.0)
    wrong = [
        (100.0, 1.0),  # the uncut return
        (_closed_form(0.99, 499), 1.0),  # one step short
        (_closed_form(0.99, 500), 0.0),  # last step given nothing
        (_closed_form(0.99, 500), 0.99),  # gamma on the current reward
        (..., 1.0),  # the stub
    ]
    for answers in wrong:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_truncated_episode(*answers)


def test_truncation_cost_question():
    shortfall_first = 100 - _closed_form(0.99, 500)
    checks.check_truncation_cost(shortfall_first, 99.0, 100.0)
    checks.check_truncation_cost(0.99**500 * 100, 100 - 1, 1 + 0.99 * 100)
    wrong = [
        (0.0, 0.0, 1.0),  # "truncation costs nothing"
        (shortfall_first, 99.0, 1.0),  # truncated treated as terminated: no bootstrap
        (shortfall_first, 0.0, 100.0),
        (99.0, 99.0, 100.0),  # the last step's shortfall given for R_0
        (shortfall_first, 99.0, ...),  # the stub
    ]
    for answers in wrong:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_truncation_cost(*answers)
