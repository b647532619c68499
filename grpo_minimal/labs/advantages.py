"""Lab 01 checks: group-relative advantages (notebook 01, equations (1)-(3)).

Exercises mirror ``grpo_minimal.advantages``: ``group_advantages`` and ``rloo_advantages`` with
the same names and signatures; a question on the population vs the sample (Bessel-corrected) std.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from grpo_minimal import advantages as package
from grpo_minimal.labs.checking import (
    Case,
    Mistake,
    cases_for,
    check_answer,
    draw_int,
    generator,
    run_cases,
)


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


GROUP_PUBLIC = [
    Case(
        "one group, G=4",
        (_t(1, 0, 0, 1), 4),
        hint="subtract the group mean, divide by the group's sample std (torch.std, G-1) + eps",
    ),
    Case(
        "the seed's group: three right, one wrong",
        (_t(1, 1, 0, 1), 4),
        expected=[0.25 / (0.5 + 1e-4)] * 2 + [-0.75 / (0.5 + 1e-4), 0.25 / (0.5 + 1e-4)],
        hint="mean 0.75, sample std 0.5: the correct answers get 0.25/(0.5+eps) = +0.5, not +0.58",
    ),
    Case(
        "zero-variance group",
        (_t(1, 1, 1, 1), 4),
        expected=[0.0] * 4,
        hint="all rewards equal: every advantage is 0 / (0 + eps) = 0, never NaN",
    ),
    Case(
        "two groups are normalised separately",
        (_t(1, 0, 0, 0, 5, 3, 4, 4), 4),
        hint="view the flat rewards as [B/G, G]: consecutive blocks of G are one group",
    ),
    Case(
        "scale_rewards='none' only centres",
        (_t(1, 0, 0, 0, 5, 3, 4, 4), 4, "none"),
        hint="'none' is equation (1): r_i - mean(group), no division (Dr. GRPO)",
    ),
    Case(
        "scale_rewards='batch' divides by the batch std",
        (_t(1, 0, 0, 0, 5, 3, 4, 4), 4, "batch"),
        hint="'batch': centre by the group mean, divide by the std of all rewards in the batch",
    ),
]


def _draw(g: torch.Generator, groups: int, size: int, kind: str) -> torch.Tensor:
    """Flat rewards [groups * size]: binary, normal (float32) or small integers (int64)."""
    if kind == "binary":
        return torch.randint(0, 2, (groups * size,), generator=g).float()
    if kind == "integer":
        return torch.randint(0, 5, (groups * size,), generator=g)
    return torch.randn(groups * size, generator=g) * 3 + 1


def group_twins(seed: int) -> list[Case]:
    """One case of every kind ``group_advantages`` is graded on, with values drawn from ``seed``."""
    g = generator(seed)
    size = draw_int(g, 3, 8)
    constant = float(torch.randint(-3, 4, (1,), generator=g))
    flat = torch.full((size,), constant)
    eps = [0.5, 0.1, 1.0][draw_int(g, 0, 2)]
    return [
        Case(
            f"binary rewards, 3 groups of {size}",
            (_draw(g, 3, size, "binary"), size),
            hint="equation (2) for each group of G consecutive rewards",
        ),
        Case(
            "normal rewards, groups of 2",
            (_draw(g, 4, 2, "normal"), 2),
            hint="with G=2 each group's two advantages are +-(r1-r2)/2 / (std + eps)",
        ),
        Case(
            f"a zero-variance group of {size}, every reward {constant:g}",
            (flat, size),
            expected=[0.0] * size,
            hint="all rewards equal: every advantage is 0 / (0 + eps) = 0, never NaN",
        ),
        Case(
            f"normal rewards, scale_rewards='batch', groups of {size}",
            (_draw(g, 2, size, "normal"), size, "batch"),
            hint="'batch': centre by the group mean, divide by the std of all rewards in the batch",
        ),
        Case(
            f"binary rewards, scale_rewards='none', groups of {size}",
            (_draw(g, 3, size, "binary"), size, "none"),
            hint="'none' is equation (1): r_i - mean(group), no division (Dr. GRPO)",
        ),
        Case(
            "integer rewards (int64), groups of 4",
            (_draw(g, 2, 4, "integer"), 4),
            hint="integer tensors have no mean or std: convert the rewards to float first",
        ),
        Case(
            f"eps={eps} passed by keyword",
            (_draw(g, 1, 4, "normal"), 4),
            {"scale_rewards": "group", "eps": eps},
            hint="use the eps argument, do not hard-code 1e-4",
        ),
        Case(
            "scale_rewards='batch' with a zero-variance group",
            (torch.cat([torch.full((4,), constant), _draw(g, 1, 4, "binary")]), 4, "batch"),
            hint="the batch std pools every reward; the flat group's advantages are still 0",
        ),
    ]


RLOO_PUBLIC = [
    Case(
        "one group, G=4",
        (_t(1, 0, 0, 1), 4),
        hint="each reward minus the mean of the OTHER G-1 rewards, equation (3)",
    ),
    Case(
        "zero-variance group",
        (_t(2, 2, 2), 3),
        expected=[0.0] * 3,
        hint="all equal: each reward equals the mean of the others",
    ),
    Case(
        "two groups",
        (_t(1, 0, 0, 0, 5, 3, 4, 4), 4),
        hint="the leave-one-out mean uses only the rewards of the same group",
    ),
]


def rloo_twins(seed: int) -> list[Case]:
    """One case of every kind ``rloo_advantages`` is graded on, with values drawn from ``seed``."""
    g = generator(seed)
    size = draw_int(g, 3, 8)
    return [
        Case(
            f"normal rewards, 3 groups of {size}",
            (_draw(g, 3, size, "normal"), size),
            hint="baseline_i = (sum(group) - r_i) / (G - 1)",
        ),
        Case(
            "G=2",
            (_draw(g, 2, 2, "normal"), 2),
            hint="with G=2 the mean of the others is the other reward",
        ),
        Case(
            "integer rewards (int64), groups of 4",
            (_draw(g, 2, 4, "integer"), 4),
            hint="convert integer rewards to float before dividing",
        ),
    ]


def _eps_inside_the_sqrt(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: (r - mean) / sqrt(var + eps) instead of (r - mean) / (std + eps)."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "none":
        return centred.flatten()
    var = grouped.var(dim=1, keepdim=True) if scale_rewards == "group" else rewards.float().var()
    return (centred / torch.sqrt(var + eps)).flatten()


def _not_flat(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: the right values, left in the [B/G, G] view of the groups."""
    return package.group_advantages(rewards, num_generations, scale_rewards, eps).view(
        -1, num_generations
    )


def _over_dim_0(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: the mean and std taken over dim=0 (across groups) of the [B/G, G] view."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=0, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=0, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / (rewards.float().std() + eps)
    return centred.flatten()


def _batch_std_for_groups(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: each group's own mean, but the whole batch's std in 'group' mode."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards != "none":
        centred = centred / (rewards.float().std() + eps)
    return centred.flatten()


def _without_keepdim(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: each group's mean and std as a [B/G] vector (no keepdim), which broadcasts
    along the rows of the [B/G, G] view instead of down each one."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=1) + eps)
    elif scale_rewards == "batch":
        centred = centred / (rewards.float().std() + eps)
    return centred.flatten()


def _rloo_without_keepdim(rewards, num_generations):
    """A mistake: each group's sum as a [B/G] vector (no keepdim), broadcast along the rows."""
    grouped = rewards.float().view(-1, num_generations)
    return (grouped - (grouped.sum(dim=1) - grouped) / (num_generations - 1)).flatten()


def _cast_back(rewards, num_generations, scale_rewards="group", eps=1e-4):
    """A mistake: the advantages cast back to the rewards' dtype (integers for int64)."""
    return package.group_advantages(rewards, num_generations, scale_rewards, eps).to(rewards.dtype)


NOT_FLAT_HINT = (
    "the values are right but the shape is [B/G, G]: return one advantage per completion, flat "
    "[B] (.flatten() or .reshape(-1)), in the order of the rewards"
)


def _keepdim_hint(reduction: str) -> str:
    """The hint for a group's ``reduction`` (mean, sum) taken without keepdim."""
    return (
        f"keepdim=True: grouped.{reduction}(dim=1) alone is a [B/G] vector, which broadcasts "
        "along each ROW of the [B/G, G] view, across the groups (an error when B/G != G, wrong "
        "values when they are equal); with keepdim=True it is a [B/G, 1] column, one value per "
        "group"
    )


CAST_BACK_HINT = (
    "advantages are floats even for integer rewards: do not cast them back to rewards.dtype, "
    "and do not fill a torch.zeros_like(rewards) (an int64 tensor) with them"
)

GROUP_MISTAKES = [
    Mistake(
        _eps_inside_the_sqrt,
        "eps goes outside the square root: divide by (std + eps), not sqrt(var + eps); the "
        "two differ little at eps=1e-4 and a lot at a larger eps",
    ),
    Mistake(_not_flat, NOT_FLAT_HINT),
    Mistake(
        _over_dim_0,
        "in the [B/G, G] view a group is a ROW: take the mean and std over dim=1 (its G "
        "rewards, keepdim=True), not dim=0 (across groups)",
    ),
    Mistake(
        _batch_std_for_groups,
        "with scale_rewards='group' each group is divided by its OWN std, grouped.std(dim=1, "
        "keepdim=True), not by the std of the whole batch",
    ),
    Mistake(_without_keepdim, _keepdim_hint("mean")),
    Mistake(_cast_back, CAST_BACK_HINT),
]

RLOO_MISTAKES = [
    Mistake(
        lambda rewards, num_generations: package.rloo_advantages(rewards, num_generations).view(
            -1, num_generations
        ),
        NOT_FLAT_HINT,
    ),
    Mistake(
        lambda rewards, num_generations: package.rloo_advantages(rewards, num_generations).to(
            rewards.dtype
        ),
        CAST_BACK_HINT,
    ),
    Mistake(_rloo_without_keepdim, _keepdim_hint("sum")),
]


def check_group_advantages(fn: Callable, seed: int | None = None) -> None:
    """The public cases and their twins; with the grader's ``seed``, fresh twins only."""
    cases = cases_for(GROUP_PUBLIC, group_twins, seed)
    run_cases(fn, "group_advantages", cases, package.group_advantages, mistakes=GROUP_MISTAKES)


def check_rloo_advantages(fn: Callable, seed: int | None = None) -> None:
    cases = cases_for(RLOO_PUBLIC, rloo_twins, seed)
    run_cases(fn, "rloo_advantages", cases, package.rloo_advantages, mistakes=RLOO_MISTAKES)


# The seed's worked example ("15 + 27", seed 000 lines 609-621): rewards [1, 1, 0, 1].
SEED_GROUP = (1.0, 1.0, 0.0, 1.0)


def check_std_question(advantage_population: float, advantage_sample: float) -> None:
    """The advantage of a correct answer in SEED_GROUP with each std (eps = 1e-4): one float each."""
    rewards = torch.tensor(SEED_GROUP)
    population = package.population_std_advantages(rewards, 4)[0].item()
    sample = package.group_advantages(rewards, 4)[0].item()
    for name, got, expected, other, hint in [
        (
            "advantage of a correct answer, population std",
            advantage_population,
            population,
            sample,
            "the population std divides the squared deviations by G: "
            "torch.std(..., unbiased=False)",
        ),
        (
            "advantage of a correct answer, sample std",
            advantage_sample,
            sample,
            population,
            "the sample (Bessel-corrected) std divides by G-1, as torch.std and TRL do",
        ),
    ]:
        check_answer(name, got, expected, _std_hint(got, other) or hint)


def _std_hint(got, other: float) -> str | None:
    """A hint for the usual slips: a tensor, the other std, the wrong answer's sign, no std."""
    if isinstance(got, torch.Tensor) and got.numel() != 1:
        return (
            "one float is asked for: the advantage of one correct answer, e.g. `result[0].item()`"
        )
    if isinstance(got, int | float | torch.Tensor) and not isinstance(got, bool):
        value = float(got)
        if math.isclose(value, other, rel_tol=1e-3):
            return "this is the value with the other std: swap the two answers"
        if value < 0:
            return "a correct answer (reward 1) is above the mean: its advantage is positive"
        if math.isclose(value, 0.25, rel_tol=1e-3):
            return "that is r - mean alone: divide by the std (+ eps)"
    return None
