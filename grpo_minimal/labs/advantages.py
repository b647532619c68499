"""Lab 01 checks: group-relative advantages (notebook 01, equations (1)-(3)).

Exercises mirror ``grpo_minimal.advantages``: ``group_advantages`` and ``rloo_advantages`` with
the same names and signatures; a question on the population vs the unbiased std.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from grpo_minimal import advantages as package
from grpo_minimal.labs.checking import Case, check_answer, run_cases


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


GROUP_PUBLIC = [
    Case(
        "one group, G=4",
        (_t(1, 0, 0, 1), 4),
        hint="subtract the group mean, divide by the group's unbiased std (torch.std) + eps",
    ),
    Case(
        "the seed's group: three right, one wrong",
        (_t(1, 1, 0, 1), 4),
        expected=[0.25 / (0.5 + 1e-4)] * 2 + [-0.75 / (0.5 + 1e-4), 0.25 / (0.5 + 1e-4)],
        hint="mean 0.75, unbiased std 0.5: the correct answers get 0.25/(0.5+eps) = +0.5, not +0.58",
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


def _random_rewards(seed: int, groups: int, size: int, kind: str) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if kind == "binary":
        return torch.randint(0, 2, (groups * size,), generator=generator).float()
    return torch.randn(groups * size, generator=generator) * 3 + 1


GROUP_HIDDEN = [
    *(
        Case(
            f"random {kind} rewards, {groups} groups of {size}, scale={scale}",
            (_random_rewards(seed, groups, size, kind), size, scale),
            hint="compare each step with equations (1)-(2) of notebook 01",
        )
        for seed, (groups, size, kind, scale) in enumerate(
            [
                (3, 8, "binary", "group"),
                (5, 2, "normal", "group"),
                (4, 16, "normal", "batch"),
                (6, 3, "binary", "none"),
                (2, 5, "normal", "group"),
                (3, 4, "binary", "batch"),
            ]
        )
    ),
    Case(
        "integer rewards",
        (torch.tensor([2, 0, 1, 1]), 4),
        hint="integer tensors have no std: convert the rewards to float first",
    ),
    Case(
        "a larger eps",
        (_t(3, 1, 2, 2), 4),
        {"scale_rewards": "group", "eps": 0.5},
        hint="use the eps argument, do not hard-code 1e-4",
    ),
    Case(
        "batch scale with a zero-variance group",
        (_t(1, 1, 1, 1, 0, 1, 0, 0), 4, "batch"),
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

RLOO_HIDDEN = [
    Case(
        f"random rewards, {groups} groups of {size}",
        (_random_rewards(100 + seed, groups, size, "normal"), size),
        hint="baseline_i = (sum(group) - r_i) / (G - 1)",
    )
    for seed, (groups, size) in enumerate([(3, 2), (2, 5), (4, 8)])
] + [
    Case(
        "G=2",
        (_t(3, 1), 2),
        expected=[2.0, -2.0],
        hint="with G=2 the other mean is the other reward",
    )
]


def check_group_advantages(fn: Callable, hidden: bool = False) -> None:
    """Public cases, or the hidden ones used for grading."""
    run_cases(
        fn, "group_advantages", GROUP_HIDDEN if hidden else GROUP_PUBLIC, package.group_advantages
    )


def check_rloo_advantages(fn: Callable, hidden: bool = False) -> None:
    run_cases(
        fn, "rloo_advantages", RLOO_HIDDEN if hidden else RLOO_PUBLIC, package.rloo_advantages
    )


# The seed's worked example ("15 + 27", seed 000 lines 609-621): rewards [1, 1, 0, 1].
SEED_GROUP = (1.0, 1.0, 0.0, 1.0)


def check_std_question(advantage_population: float, advantage_unbiased: float) -> None:
    """The advantage of a correct answer in SEED_GROUP with each std (eps = 1e-4)."""
    rewards = torch.tensor(SEED_GROUP)
    check_answer(
        "advantage of a correct answer, population std",
        advantage_population,
        package.population_std_advantages(rewards, 4)[0].item(),
        "population std divides the squared deviations by G: torch.std(..., unbiased=False)",
    )
    check_answer(
        "advantage of a correct answer, unbiased std",
        advantage_unbiased,
        package.group_advantages(rewards, 4)[0].item(),
        "the unbiased (sample) std divides by G-1, as TRL does",
    )
