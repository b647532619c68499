"""Lab 01: the reference passes, a delegate to the package passes, known mistakes fail."""

from __future__ import annotations

import pytest
import torch
from lab_helpers import (
    GRADER_SEEDS,
    assert_caught_publicly,
    assert_fails,
    assert_passes,
    assert_same_verdict,
    assert_told,
)

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


def no_float(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """Integer rewards kept as integers: torch refuses their mean."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / (grouped.std() + eps)
    return centred.reshape(-1)


def eps_inside_the_sqrt(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """(r - mean) / sqrt(var + eps): close to the right value at eps=1e-4, far at eps=0.5."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / torch.sqrt(grouped.var(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / torch.sqrt(grouped.var() + eps)
    return centred.reshape(-1)


GROUP_WRONG = [
    population_std,
    no_eps,
    batch_mean,
    ignores_scale,
    hard_coded_eps,
    no_float,
    eps_inside_the_sqrt,
]


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
def test_group_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_group_advantages, fn)


@pytest.mark.parametrize("fn", GROUP_WRONG + [reference_group], ids=lambda f: f.__name__)
def test_group_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_group_advantages, fn)


def test_integer_rewards_mistake_shows_the_learners_line():
    message = assert_fails(checks.check_group_advantages, no_float)
    assert "integer rewards" in message and "raised RuntimeError" in message
    assert "line" in message and "grouped.mean(dim=1, keepdim=True)" in message


def test_each_mistake_is_told_its_own_hint():
    """A hint per mistake made, not per case that caught it: eps inside the square root fails
    the eps=... case, whose own hint (a hard-coded eps) would mislead."""
    message = assert_fails(checks.check_group_advantages, eps_inside_the_sqrt)
    hint = message.split("  hint:", 1)[1]
    assert "outside the square root" in hint and "hard-code" not in hint, message
    assert "hard-code" in assert_fails(checks.check_group_advantages, hard_coded_eps)


def test_population_std_feedback_names_the_seed_case():
    message = assert_fails(checks.check_group_advantages, population_std)
    assert "one group, G=4" in message and "0.865" in message


@pytest.mark.parametrize("fn", [reference_rloo, package.rloo_advantages])
def test_rloo_reference_and_package_pass(fn):
    assert_passes(checks.check_rloo_advantages, fn)


@pytest.mark.parametrize("fn", RLOO_WRONG, ids=lambda f: f.__name__)
def test_rloo_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_rloo_advantages, fn)
    assert_same_verdict(checks.check_rloo_advantages, fn)


def test_hidden_twins_are_fresh_values_of_the_public_kinds():
    """Same kinds (names up to the drawn numbers, dtypes) and other values for another seed."""
    import re

    def kind(case):
        return re.sub(r"-?[0-9.]+", "#", case.name), [
            a.dtype for a in case.args if isinstance(a, torch.Tensor)
        ]

    for twins in (checks.group_twins, checks.rloo_twins):
        public, hidden = twins(0), twins(98_765)
        assert [kind(c) for c in public] == [kind(c) for c in hidden]
        assert any(
            not torch.equal(p.args[0], h.args[0]) for p, h in zip(public, hidden, strict=True)
        )


def test_std_question():
    population = package.population_std_advantages(torch.tensor(checks.SEED_GROUP), 4)[0].item()
    checks.check_std_question(population, 0.5 / 1.0002)
    for wrong in [(0.5, 0.5), (population, population), (0.58, 0.5), (..., 0.5)]:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_std_question(*wrong)


@pytest.mark.parametrize(
    "answers, hint",
    [
        ((0.5 / 1.0002, 0.5 / 1.0002), "the other std: swap"),
        ((torch.tensor([0.577, 0.577, -1.73, 0.577]), 0.5), "one float is asked for"),
        ((-1.732, 0.5), "its advantage is positive"),
        ((0.25, 0.5), "r - mean alone"),
    ],
)
def test_std_question_hint_points_at_the_slip(answers, hint):
    population = package.population_std_advantages(torch.tensor(checks.SEED_GROUP), 4)[0].item()
    answers = (population if answers[0] is None else answers[0], answers[1])
    with pytest.raises(CheckFailed, match=hint):
        checks.check_std_question(*answers)


def test_stub_gets_clear_feedback():
    def stub(rewards, num_generations, scale_rewards="group", eps=1e-4): ...

    message = assert_fails(checks.check_group_advantages, stub)
    assert "stub" in message
    assert "define `group_advantages`" in assert_fails(checks.check_group_advantages, None)


# --- mistakes learners write, each told the hint that names it (public cases and graded twins) ---


def not_flattened(rewards, num_generations, scale_rewards="group", eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / (rewards.float().std() + eps)
    return centred  # forgot .flatten()


def over_dim_0(rewards, num_generations, scale_rewards="group", eps=1e-4):
    table = rewards.float().reshape(-1, num_generations)
    mean, std = table.mean(0), table.std(0)  # dim 0: down the columns, across groups
    if scale_rewards == "none":
        return (table - mean).reshape(-1)
    if scale_rewards == "batch":
        return ((table - mean) / (rewards.float().std() + eps)).reshape(-1)
    return ((table - mean) / (std + eps)).reshape(-1)


def batch_std_in_group_mode(rewards, num_generations, scale_rewards="group", eps=1e-4):
    flat = rewards.float()
    means = flat.reshape(-1, num_generations).mean(1).repeat_interleave(num_generations)
    if scale_rewards == "none":
        return flat - means
    return (flat - means) / (flat.std() + eps)  # the batch's std, whatever the mode


def filled_zeros_like(rewards, num_generations, scale_rewards="group", eps=1e-4):
    out = torch.zeros_like(rewards)  # int64 for integer rewards
    out[:] = package.group_advantages(rewards.float(), num_generations, scale_rewards, eps)
    return out


def no_keepdim(rewards, num_generations, scale_rewards="group", eps=1e-4):
    table = rewards.float().view(-1, num_generations)
    centred = (table.T - table.mean(dim=1)).T  # a transpose instead of keepdim, one place only
    if scale_rewards == "group":
        centred = centred / (table.std(dim=1) + eps)  # [B/G] across the rows: keepdim missing
    elif scale_rewards == "batch":
        centred = centred / (rewards.float().std() + eps)
    return centred.reshape(-1)


def rloo_no_keepdim(rewards, num_generations):
    grouped = rewards.float().view(-1, num_generations)
    return (grouped - (grouped.sum(1) - grouped) / (num_generations - 1)).reshape(-1)


def rloo_not_flattened(rewards, num_generations):
    grouped = rewards.float().view(-1, num_generations)
    return grouped - (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)


NAMED_MISTAKES = [
    (checks.check_group_advantages, not_flattened, "the shape is [B/G, G]"),
    (checks.check_group_advantages, over_dim_0, "not dim=0"),
    (checks.check_group_advantages, batch_std_in_group_mode, "its OWN std"),
    (checks.check_group_advantages, filled_zeros_like, "advantages are floats"),
    (checks.check_rloo_advantages, rloo_not_flattened, "the shape is [B/G, G]"),
    (checks.check_group_advantages, no_keepdim, "keepdim=True"),
    (checks.check_rloo_advantages, rloo_no_keepdim, "keepdim=True"),
]


@pytest.mark.parametrize(
    "check, fn, hint", NAMED_MISTAKES, ids=lambda v: getattr(v, "__name__", "")
)
@pytest.mark.parametrize("seed", [None, GRADER_SEEDS[0]])
def test_a_mistake_is_told_the_hint_that_names_it(check, fn, hint, seed):
    assert_told(check, fn, hint, seed)
