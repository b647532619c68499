"""Lab 02 checks: discounted returns-to-go with masks, terminated vs truncated (notebook 02).

The exercise mirrors ``grpo_minimal.advantages.discounted_returns(rewards, mask, gamma)``: the
same name and signature, rewards and mask of shape [episodes, T], mask 1 on real steps and 0 on
the padding after an episode ended. Two questions follow: the returns of a 500-step CartPole
episode cut by the time limit, and what that cut costs compared with an episode that went on.

The package computes in float32; a learner may compute in float32 or float64. Returns are
compared within a bound on float32 rounding of the recursion (``_rounding_bound``), not with a
fixed tolerance, so long episodes and near-zero returns are judged fairly.

``lab check`` runs the hand-written cases and ``returns_twins(PUBLIC_SEED)``; grading runs
``returns_twins(seed)`` with the grader's seed: the same kinds (float32, float64 and integer
rewards, long episodes, gamma = 1, gamma near 1, a small gamma, one-step episodes), other values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from grpo_minimal import advantages as package
from grpo_minimal.labs.checking import (
    Case,
    cases_for,
    check_answer,
    draw_int,
    failure,
    generator,
    raised,
    run_all,
    run_cases,
)

U32 = 2.0**-24  # float32 unit roundoff


def _t(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def _prefix_mask(lengths: list[int], steps: int) -> torch.Tensor:
    """1 on the first ``lengths[i]`` steps of row i, 0 on the padding after them."""
    return (torch.arange(steps) < torch.tensor(lengths).unsqueeze(1)).float()


RETURNS_PUBLIC = [
    Case(
        "one episode, gamma=0.5",
        (_t([[1, 1, 1]]), _t([[1, 1, 1]]), 0.5),
        expected=[[1.75, 1.5, 1.0]],
        hint="work backwards from the last step: R_2 = r_2 = 1, R_1 = r_1 + 0.5 * R_2 = 1.5, "
        "R_0 = r_0 + 0.5 * R_1 = 1.75; gamma (the argument) multiplies R_{t+1}, never r_t",
    ),
    Case(
        "gamma=1: returns-to-go are plain sums of the rewards from t on",
        (_t([[1, 2, 3, 4]]), _t([[1, 1, 1, 1]]), 1.0),
        expected=[[10.0, 9.0, 7.0, 4.0]],
        hint="R_t = r_t + R_{t+1}: the reward of step t counts in full, the later ones are added; "
        "accumulate from the end, not from the start",
    ),
    Case(
        "each row is its own episode",
        (_t([[1, 2], [3, 4]]), _t([[1, 1], [1, 1]]), 0.5),
        expected=[[2.0, 2.0], [5.0, 4.0]],
        hint="rows are separate episodes: the running return starts at 0 for every row, nothing "
        "flows from one row into another",
    ),
    Case(
        "two episodes, the second padded after two steps",
        (_t([[1, 1, 1], [1, 1, 0]]), _t([[1, 1, 1], [1, 1, 0]]), 0.5),
        expected=[[1.75, 1.5, 1.0], [1.5, 1.0, 0.0]],
        hint="a padded step (mask 0) gets return 0; the last real step's return is its own reward",
    ),
    Case(
        "padding holds rewards that must be ignored",
        (_t([[1, 3, 100, 100], [4, 100, 100, 100]]), _t([[1, 1, 0, 0], [1, 0, 0, 0]]), 1.0),
        expected=[[4.0, 3.0, 0.0, 0.0], [4.0, 0.0, 0.0, 0.0]],
        hint="multiply the rewards by the mask: what lies after an episode's end neither gets a "
        "return nor leaks into the returns of the steps before it",
    ),
    Case(
        "three episodes of lengths 5, 2 and 4, gamma=0.9",
        (
            _t([[1, 0, 2, 0, 1], [3, -1, 7, 7, 7], [0, 0, 0, 5, 9]]),
            _prefix_mask([5, 2, 4], 5),
            0.9,
        ),
        hint="R_t = r_t + gamma * R_{t+1} * mask_t, from t = T-1 down to 0, for every row at once",
    ),
    Case(
        "integer rewards (int64), a float mask",
        (torch.tensor([[1, 0, 2], [3, 1, 0]]), _t([[1, 1, 1], [1, 1, 0]]), 0.5),
        expected=[[1.5, 1.0, 2.0], [3.5, 1.0, 0.0]],
        hint="the rewards are integers but the returns are not: a result tensor made with "
        "zeros_like(rewards) is an integer tensor and drops the 0.5s. Create the returns as a "
        "float tensor, e.g. torch.zeros(rewards.shape, dtype=torch.float32)",
    ),
]


def _draw_batch(
    g: torch.Generator, episodes: int, steps: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random rewards [episodes, steps] and a prefix mask: row 0 runs the full length, every
    other row ends early (2 to steps - 1 real steps), so each batch has padding.

    The padding holds random rewards too, so a function that ignores the mask gets it wrong.
    """
    rewards = torch.randn(episodes, steps, generator=g, dtype=torch.float64) * 2 + 0.5
    lengths = torch.randint(2, steps, (episodes,), generator=g)
    lengths[0] = steps
    return rewards.to(dtype), _prefix_mask(lengths.tolist(), steps).to(dtype)


def _pick(g: torch.Generator, options: list) -> Any:
    return options[int(torch.randint(len(options), (1,), generator=g))]


RANDOM_HINT = (
    "compare with equation (4') step by step from the end of each row; the padding holds "
    "random rewards"
)


def returns_twins(seed: int) -> list[Case]:
    """One case of every kind ``discounted_returns`` is graded on, with values drawn from ``seed``.

    Kinds: random float32 batches (a discount below 1 and gamma = 1), a float64 batch, a long
    CartPole-like batch of +1 rewards, gamma close to 1 over 200 steps, a small gamma, episodes of
    one step, and integer (int64) rewards.
    """
    g = generator(seed)
    episodes, steps = draw_int(g, 3, 6), draw_int(g, 8, 30)
    gamma = _pick(g, [0.9, 0.95, 0.97, 0.98, 0.99])
    long_length, short_length = draw_int(g, 300, 500), draw_int(g, 50, 250)
    near_one = _pick(g, [0.995, 0.998, 0.999])
    small = _pick(g, [0.1, 0.2, 0.3])
    integer_rewards = torch.randint(1, 4, (3, 5), generator=g)
    integer_mask = _prefix_mask([5, 4, draw_int(g, 2, 3)], 5)
    return [
        Case(
            f"random float32 batch of {episodes} episodes, up to {steps} steps, gamma={gamma}",
            (*_draw_batch(g, episodes, steps), gamma),
            hint=RANDOM_HINT,
        ),
        Case(
            f"random float32 batch of {episodes + 2} episodes, up to {steps} steps, gamma=1",
            (*_draw_batch(g, episodes + 2, steps), 1.0),
            hint="with gamma=1 the return is the plain sum of the real rewards from t on; "
            + RANDOM_HINT,
        ),
        Case(
            f"random float64 batch of {episodes} episodes, up to {steps + 10} steps, gamma={gamma}",
            (*_draw_batch(g, episodes, steps + 10, torch.float64), gamma),
            hint="float64 rewards and mask: compute in float32 or float64, return floats; "
            + RANDOM_HINT,
        ),
        Case(
            f"CartPole-like: episodes of {long_length} and {short_length} steps, reward 1 per "
            "step, gamma=0.99",
            (
                torch.ones(2, long_length),
                _prefix_mask([long_length, short_length], long_length),
                0.99,
            ),
            hint=f"reward 1 on every real step; the padding of the {short_length}-step episode "
            "must stay 0",
        ),
        Case(
            f"gamma close to 1 ({near_one}), 200 steps",
            (*_draw_batch(g, 3, 200), near_one),
            hint="gamma multiplies the return of the NEXT step, never the reward of the current one",
        ),
        Case(
            f"a small gamma ({small}): each return is nearly its own reward",
            (*_draw_batch(g, 2, 4), small),
            hint=f"R_t = r_t + {small} * R_(t+1), and 0 on padding",
        ),
        Case(
            "episodes of one step",
            (torch.randn(2, 1, generator=g) * 2, torch.ones(2, 1), gamma),
            hint="an episode of one step has return r_0: nothing follows it",
        ),
        Case(
            "integer rewards (int64), a float mask, gamma=0.5",
            (integer_rewards, integer_mask, 0.5),
            hint="the rewards are integers but the returns are not: a result tensor made with "
            "zeros_like(rewards) is an integer tensor too, and storing the returns in it drops "
            "their fractions. Create the returns as a float tensor, e.g. "
            "torch.zeros(rewards.shape, dtype=torch.float32)",
        ),
    ]


def _rounding_bound(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """How far a float32 recursion may be from the exact returns, per step [episodes, T].

    With D_t = sum_{k>=t} gamma^(k-t) |r_k| over real steps (the returns of |r|): the rounding
    of step k (at most 2 * U32 * D_k) reaches R_t discounted by gamma^(k-t), and
    gamma^(k-t) * D_k <= D_t, so the T - t steps add at most 2 (T - t) U32 D_t; rounding gamma to
    float32 (|d gamma| <= U32 gamma) moves R_t by at most sum_k (k-t) gamma^(k-t) |d gamma / gamma|
    |r_k| <= (T - t) U32 D_t; inputs rounded to float32 add U32 D_t. The learner's result and the
    package's may both carry that error: 2 (3T + 1) U32 D_t <= 8 T U32 D_t, plus 1e-6 for zeros.
    """
    absolute = (rewards.double() * mask.double()).abs()
    tail = torch.zeros_like(absolute)
    running = torch.zeros(absolute.shape[0], dtype=torch.float64)
    for t in reversed(range(absolute.shape[1])):
        running = absolute[:, t] + gamma * running
        tail[:, t] = running
    return 8 * absolute.shape[1] * U32 * tail + 1e-6


def _compare_within(bound: torch.Tensor) -> Callable[[object, torch.Tensor], bool]:
    def compare(got: object, expected: object) -> bool:
        if not isinstance(expected, torch.Tensor):
            expected = torch.tensor(expected, dtype=torch.float64)
        if not isinstance(got, torch.Tensor) or not got.is_floating_point():
            return False
        if got.shape != expected.shape:
            return False
        return bool(((got.double() - expected.double()).abs() <= bound).all())

    return compare


# the input-mutation check: padding rewards are non-zero, so `rewards *= mask` changes them
INPLACE_CASE = Case(
    "the inputs are left as they were",
    (_t([[1, 2, 5, 5], [3, 5, 5, 5]]), _t([[1, 1, 0, 0], [1, 0, 0, 0]]), 0.5),
)


def _check_inputs_unchanged(fn: Callable) -> None:
    rewards, mask, gamma = INPLACE_CASE.args
    mine = {"rewards": rewards.clone(), "mask": mask.clone()}
    try:
        fn(mine["rewards"], mine["mask"], gamma)
    except Exception as error:  # reported like any other case
        raise failure(
            INPLACE_CASE,
            INPLACE_CASE.describe_input(),
            "returns, inputs unchanged",
            raised(error),
            "your function raised on an ordinary padded float32 batch: see the error and the "
            "line above",
        ) from None
    for label, original in (("rewards", rewards), ("mask", mask)):
        if not torch.equal(original, mine[label]):
            raise failure(
                INPLACE_CASE,
                INPLACE_CASE.describe_input(),
                original,
                mine[label],
                f"expected and got are `{label}` before and after your call: your function "
                f"changed its `{label}` argument in place (e.g. `rewards *= mask` or "
                "`rewards[:, t] = ...`), and the caller's tensor is not yours to edit. Write "
                "`rewards = rewards * mask`, which makes a new tensor",
            )


def check_discounted_returns(fn: Callable, seed: int | None = None) -> None:
    """The public cases and their twins (``seed=None``, what ``lab check`` runs) or, with the
    grader's ``seed``, fresh twins. First of all: the inputs are left unchanged.

    Each case is compared within its own float32 rounding bound; every failing case is named.
    """

    def check(case: Case) -> Callable[[], None]:
        compare = _compare_within(_rounding_bound(*case.args))
        return lambda: run_cases(
            fn, "discounted_returns", [case], package.discounted_returns, compare
        )

    cases = cases_for(RETURNS_PUBLIC, returns_twins, seed)
    # first: an in-place edit also breaks cases below (`rewards *= mask` on int64 rewards)
    checks = [(INPLACE_CASE.name, lambda: _check_inputs_unchanged(fn))]
    run_all("discounted_returns", fn, checks + [(case.name, check(case)) for case in cases])


# --- questions: a CartPole-v1 episode that reached the time limit ------------------------------

GAMMA = 0.99  # CartPoleConfig's default (envs.EnvConfig.gamma)
LIMIT = 500  # CartPole-v1's max_episode_steps: gymnasium's TimeLimit truncates there


def check_truncated_episode(return_first: float, return_last: float) -> None:
    """R_0 and R_499 of a 500-step episode, +1 per step, as ``discounted_returns`` computes them."""
    check_answer(
        "R_0 of a 500-step episode (gamma=0.99)",
        return_first,
        (1 - GAMMA**LIMIT) / (1 - GAMMA),
        "R_0 = 1 + 0.99 + 0.99**2 + ..., one term per step of the episode: sum the geometric "
        "series, or run your discounted_returns on torch.ones(1, 500)",
        rtol=1e-5,  # float32 lands 1e-4 from it; 499 terms instead of 500 are 7e-3 off
    )
    check_answer(
        "R_499, the last step of the 500-step episode",
        return_last,
        1.0,
        "the last real step's return is its own reward: nothing is added after the end",
    )


def check_truncation_cost(
    shortfall_first: float, shortfall_last: float, ppo_target_last: float
) -> None:
    """What the cut at 500 costs, against a policy that would earn +1 forever, and PPO's target."""
    forever = 1 / (1 - GAMMA)  # sum_k gamma^k = 100
    check_answer(
        "shortfall of R_0 against the uncut return",
        shortfall_first,
        forever - (1 - GAMMA**LIMIT) / (1 - GAMMA),
        "uncut, R_0 = 1 + 0.99 + 0.99**2 + ... (forever) = 1 / (1 - 0.99) = 100; the package's "
        "R_0 is your answer to exercise 2",
    )
    check_answer(
        "shortfall of R_499 against the uncut return",
        shortfall_last,
        forever - 1.0,
        "uncut, the last step's return-to-go would also be 100; the package's R_499 is your "
        "answer to exercise 2",
    )
    check_answer(
        "PPO's TD target at the truncated last step",
        ppo_target_last,
        1.0 + GAMMA * forever,
        "equation (10) of ppo.py: r + gamma * (1 - term) * V(s_final); a truncated step has "
        "term = 0, so the critic's V = 100 is kept",
    )
