"""Hand-computed values and properties of equations (1)-(4).

Tolerances come from the arithmetic, not from trial and error. ``group_advantages`` and
``rloo_advantages`` compute in float32 whatever the input dtype (``rewards.float()``), so the
bounds below are in units of float32's unit roundoff ``U32 = 2**-24``, using the standard bound
for a sum of n terms in any order, |error| <= (n - 1) * U32 * sum |x_i| (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., section 4.2). References are computed in float64 or
with ``statistics`` (exact rational arithmetic inside), independently of torch's reductions.

Tests marked ``numerics`` compare floats produced by reductions (mean, std, sum), whose rounding
depends on the summation order; ``.ci/run`` repeats them with one thread.
"""

import math
import statistics

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from grpo_minimal import (
    discounted_returns,
    group_advantages,
    masked_mean_std,
    rloo_advantages,
)
from grpo_minimal.advantages import population_std_advantages

U32 = 2.0**-24  # unit roundoff of float32
TINY = 2.0**-149  # float32's smallest subnormal: the absolute error floor of one operation
EPS = 1e-4  # group_advantages' default eps, as in TRL


def t(values):
    return torch.tensor(values, dtype=torch.float32)


# ---- error bounds -------------------------------------------------------------------------


def centring_error(n: int, max_abs: float) -> float:
    """Bound on |computed (r_i - mean) - exact| in float32 for n values with |r| <= max_abs.

    The sum of n terms errs by at most (n - 1) U32 n max_abs, so the mean by (n - 1) U32 max_abs;
    dividing by n and subtracting add one rounding each.
    """
    return (n + 2) * (U32 * max_abs + TINY)


def scaled_advantage_error(adv: float, std: float, n_std: int, delta: float, eps: float) -> float:
    """Bound on the float32 error of A = centred / (std + eps), equation (2).

    ``delta`` bounds the error of the centred value; the std over ``n_std`` values (computed by
    torch with its own mean) errs by at most about 2 * delta + (n_std + 2) U32 std; the division
    and the addition of eps round once each. A factor 2 of slack covers the first-order expansion.
    """
    std_error = 2 * delta + (n_std + 2) * U32 * std
    return 2 * (
        delta / (std + eps) + abs(adv) * std_error / (std + eps) + 2 * U32 * abs(adv) + TINY
    )


def reference_advantages(rewards: list[float], G: int, scale: str, eps: float = EPS):
    """Equations (1) and (2) in exact-ish arithmetic: ``statistics`` means and sample stds.

    Returns the advantages, the denominator's std for each value and the number of values that
    std was taken over, for the error bounds.
    """
    groups = [rewards[k : k + G] for k in range(0, len(rewards), G)]
    batch_std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    out, stds, counts = [], [], []
    for group in groups:
        mean = statistics.fmean(group)
        if scale == "group":
            std, n = statistics.stdev(group), G
        elif scale == "batch":
            std, n = batch_std, len(rewards)
        else:
            std, n = None, 0
        for r in group:
            out.append(r - mean if std is None else (r - mean) / (std + eps))
            stds.append(std)
            counts.append(n)
    return out, stds, counts


# ---- hand-computed values ---------------------------------------------------------------


@pytest.mark.numerics
def test_seed_example_2_plus_2():
    # "2 + 2 = ?": rewards +1, -1, +1, -1; mean 0 exactly, unbiased std sqrt(4/3) (population: 1)
    adv = group_advantages(t([1, -1, 1, -1]), 4)
    expected = 1 / (math.sqrt(4 / 3) + EPS)
    # centred values are exact; sqrt, + eps and / round once each, the variance sum a few times
    assert adv.tolist() == pytest.approx([expected, -expected, expected, -expected], rel=8 * U32)


@pytest.mark.numerics
def test_seed_example_15_plus_27_unbiased_vs_population():
    # "15 + 27 = ?": rewards 1, 1, 0, 1; mean 0.75; every intermediate value is dyadic
    rewards = t([1, 1, 0, 1])
    unbiased = group_advantages(rewards, 4)  # std = sqrt(0.75 / 3) = 0.5 exactly
    population = population_std_advantages(rewards, 4)  # std = sqrt(0.75 / 4) = 0.4330
    std_u, std_p = 0.5, math.sqrt(0.75 / 4)
    expected_u = [c / (std_u + EPS) for c in (0.25, 0.25, -0.75, 0.25)]
    expected_p = [c / (std_p + EPS) for c in (0.25, 0.25, -0.75, 0.25)]
    assert unbiased.tolist() == pytest.approx(expected_u, rel=4 * U32)
    assert population.tolist() == pytest.approx(expected_p, rel=8 * U32)
    # the figures the notebook quotes: +0.5 / -1.5 (TRL) against +0.58 / -1.73 (population)
    assert [round(a, 2) for a in unbiased.tolist()] == [0.5, 0.5, -1.5, 0.5]
    assert [round(a, 2) for a in population.tolist()] == [0.58, 0.58, -1.73, 0.58]


@pytest.mark.numerics
def test_eps_is_added_to_std():
    adv = group_advantages(t([0, 2]), 2, eps=1.0)  # std = sqrt(2); (2 - 1) / (sqrt 2 + 1)
    assert adv[1].item() == pytest.approx(1 / (math.sqrt(2) + 1), rel=8 * U32)


@pytest.mark.numerics
def test_scale_none_only_centres():
    # dyadic values: the mean and the differences are exact in any summation order
    assert torch.equal(group_advantages(t([1, 1, 0, 1]), 4, "none"), t([0.25, 0.25, -0.75, 0.25]))


@pytest.mark.numerics
def test_scale_batch_uses_group_mean_and_batch_std():
    rewards = [0.0, 1.0, 10.0, 12.0]  # groups [0, 1] and [10, 12]
    std = statistics.stdev(rewards)  # unbiased std of all four: 6.0277 (per group: 0.71, 1.41)
    adv = group_advantages(t(rewards), 2, "batch")
    expected = [c / (std + EPS) for c in (-0.5, 0.5, -1.0, 1.0)]
    # centred values exact; the batch std errs by <= (4 + 2) U32 std; + eps and / round once each
    assert adv.tolist() == pytest.approx(expected, rel=2 * (6 + 2) * U32)


@pytest.mark.numerics
def test_scale_batch_differs_from_group_when_group_stds_differ():
    rewards = t([0, 1, 10, 12])
    group = group_advantages(rewards, 2, "group", eps=0.0)
    batch = group_advantages(rewards, 2, "batch", eps=0.0)
    # per group each pair is +-sqrt(1/2) (0.5 / sqrt(0.5) and 1 / sqrt(2)): the groups look alike
    assert group[:2].tolist() == pytest.approx(group[2:].tolist(), rel=8 * U32)
    # with one batch std the second group's larger spread survives: exactly twice the first's
    assert batch[3].item() == 2 * batch[1].item()


@pytest.mark.numerics
def test_zero_variance_group_gives_zeros_not_nan():
    adv = group_advantages(t([1, 1, 1, 1, 0, 1, 0, 1]), 4)
    assert torch.equal(adv[:4], torch.zeros(4))
    assert torch.isfinite(adv).all()


@pytest.mark.numerics
def test_rloo_hand_computed():
    # 15 + 27: r_3 = 0, the others average 1 -> -1; r_1 = 1, the others average 2/3 -> 1/3
    adv = rloo_advantages(t([1, 1, 0, 1]), 4)
    # sums of dyadic values are exact; dividing by 3 and subtracting round once each
    assert adv.tolist() == pytest.approx([1 / 3, 1 / 3, -1.0, 1 / 3], abs=4 * U32)


def test_rloo_g_equals_2_is_the_difference():
    # G = 2: the leave-one-out baseline is the other reward, so A = (r1 - r2, r2 - r1) exactly
    assert torch.equal(rloo_advantages(t([3, 1, 5, 5]), 2), t([2, -2, 0, 0]))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(rewards=t([1, 2, 3]), num_generations=2), "not a multiple"),
        (dict(rewards=t([1, 2]), num_generations=1), "num_generations must be >= 2"),
        (dict(rewards=t([1, float("inf")]), num_generations=2), "inf"),
        (dict(rewards=t([[1, 2]]), num_generations=2), "1-D"),
        (dict(rewards=t([1, 2]), num_generations=2, scale_rewards="std"), "scale_rewards"),
    ],
)
def test_bad_input_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        group_advantages(**kwargs)


def test_unscored_rewards_leave_their_group_and_get_advantage_zero():
    """NaN = every reward function returned None: left out of the group's mean and std."""
    nan = float("nan")
    # group [1, nan, 0, 1]: scored mean 2/3, unbiased std of [1, 0, 1] = sqrt(1/3)
    centred = t([1 - 2 / 3, 0.0, -2 / 3, 1 - 2 / 3])
    rewards = t([1, nan, 0, 1])
    torch.testing.assert_close(group_advantages(rewards, 4, "none"), centred)
    torch.testing.assert_close(group_advantages(rewards, 4), centred / ((1 / 3) ** 0.5 + 1e-4))
    # batch scale: the std of every scored reward in the batch, [1, 0, 1, 3, 3]
    batch = t([1, nan, 0, 1, 3, 3, nan, nan])
    std = torch.tensor([1.0, 0, 1, 3, 3]).std()
    expected = t([1 - 2 / 3, 0, -2 / 3, 1 - 2 / 3, 0, 0, 0, 0]) / (std + 1e-4)
    torch.testing.assert_close(group_advantages(batch, 4, "batch"), expected)
    # one scored reward: no spread, advantage 0; none scored: all 0, never NaN
    assert torch.equal(group_advantages(t([nan, 5, nan, nan]), 4), torch.zeros(4))
    assert torch.equal(group_advantages(torch.full((4,), nan), 4), torch.zeros(4))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.one_of(st.floats(-100, 100, allow_nan=False, width=32), st.just(float("nan"))),
        min_size=4,
        max_size=4,
    ),
    st.sampled_from(["group", "none"]),
)
def test_unscored_rewards_change_nothing_for_the_scored(values, scale):
    """The scored rewards' advantages are those of the scored rewards alone (when >= 2)."""
    rewards = torch.tensor(values, dtype=torch.float32)
    scored = ~torch.isnan(rewards)
    assume(scored.sum() >= 2)
    ours = group_advantages(rewards, 4, scale)
    assert torch.equal(ours[~scored], torch.zeros(int((~scored).sum())))
    alone = rewards[scored].double()
    expected = alone - alone.mean()
    if scale == "group":
        expected = expected / (alone.std() + 1e-4)
    # float32 rounding of a mean and std of <= 4 values of size <= 100, over a std >= 0
    spread = alone.std().item() + 1e-4 if scale == "group" else 1.0
    bound = 64 * 2**-24 * (alone.abs().max().item() + 1) / spread
    torch.testing.assert_close(ours[scored].double(), expected, rtol=0, atol=bound)


def test_discounted_returns_hand_computed():
    rewards = t([[1, 1, 1], [1, 1, 0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    returns = discounted_returns(rewards, mask, gamma=0.5)
    # episode 1: 1 + .5 + .25, 1 + .5, 1; episode 2 ends after two steps. gamma = 0.5 and the
    # rewards are dyadic, so every product and sum is exact
    assert torch.equal(returns, t([[1.75, 1.5, 1.0], [1.5, 1.0, 0.0]]))


def test_discounted_returns_ignores_rewards_on_padding():
    returns = discounted_returns(t([[2, 5, 7]]), t([[1, 0, 0]]), gamma=1.0)
    assert torch.equal(returns, t([[2, 0, 0]]))


def test_discounted_returns_do_not_bootstrap_past_the_end():
    # the last real step's return is its own reward, whatever lies after it (padding with large
    # rewards) and whatever gamma is: no value is carried across the end of an episode
    rewards = t([[1, 3, 100, 100], [4, 100, 100, 100]])
    mask = t([[1, 1, 0, 0], [1, 0, 0, 0]])
    returns = discounted_returns(rewards, mask, gamma=1.0)
    assert torch.equal(returns, t([[4, 3, 0, 0], [4, 0, 0, 0]]))


@pytest.mark.parametrize("gamma", [0.0, -0.1, 1.01, float("nan")])
def test_discounted_returns_refuses_gamma(gamma):
    with pytest.raises(ValueError, match="gamma"):
        discounted_returns(t([[1.0]]), t([[1.0]]), gamma)


@pytest.mark.numerics
def test_masked_mean_std_ignores_masked_entries():
    mean, std, count = masked_mean_std(t([[1, 3, 100]]), t([[1, 1, 0]]), dim=1)
    # 1 and 3: mean 2 and variance 2 are exact; only the square root rounds
    assert (mean.item(), count.item()) == (2.0, 2.0)
    assert std.item() == pytest.approx(math.sqrt(2), rel=2 * U32)


# ---- properties -------------------------------------------------------------------------

group_sizes = st.integers(min_value=2, max_value=8)
reward_values = st.floats(min_value=-100, max_value=100, allow_nan=False, width=32)


@st.composite
def grouped_rewards(draw):
    G = draw(group_sizes)
    groups = draw(st.integers(min_value=1, max_value=4))
    values = draw(st.lists(reward_values, min_size=G * groups, max_size=G * groups))
    return torch.tensor(values, dtype=torch.float64), G


@pytest.mark.numerics
@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]))
def test_advantages_match_the_equations(data, scale):
    # against equations (1)-(2) written out with `statistics` (sample std, the group's own mean):
    # catches a population std, a batch std taken per group, or a batch mean in place of the group's
    rewards, G = data
    values = rewards.tolist()  # float32-representable (width=32), so the cast to float32 is exact
    adv = group_advantages(rewards, G, scale).tolist()
    expected, stds, counts = reference_advantages(values, G, scale)
    for k, (a, e, std, n) in enumerate(zip(adv, expected, stds, counts, strict=True)):
        group = values[k - k % G : k - k % G + G]
        delta = centring_error(G, max(abs(v) for v in group))
        bound = delta if std is None else scaled_advantage_error(e, std, n, delta, EPS)
        assert abs(a - e) <= bound, (k, a, e, bound)


@pytest.mark.numerics
@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]))
def test_advantages_sum_to_zero_per_group(data, scale):
    rewards, G = data
    adv = group_advantages(rewards, G, scale).view(-1, G).double()  # sum the float32 values exactly
    _, stds, _ = reference_advantages(rewards.tolist(), G, scale)
    for k, group in enumerate(rewards.view(-1, G)):
        # exact centred values sum to 0; the computed mean errs by <= G U32 max|r|, which the G
        # centred values carry G times; each subtraction and division rounds once more
        max_abs = group.abs().max().item()
        denominator = 1.0 if stds[k * G] is None else stds[k * G] + EPS
        bound = 2 * G * G * (U32 * max_abs + TINY) / denominator
        bound += 2 * (2 * U32 * adv[k].abs().sum().item() + G * TINY)
        assert abs(adv[k].sum().item()) <= bound


@pytest.mark.numerics
@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.floats(-50, 50), st.floats(0.5, 20))
def test_group_scaling_is_shift_and_scale_invariant(data, shift, scale):
    rewards, G = data
    rewards = rewards.round()  # distinct-or-equal values, so eps does not dominate
    moved = rewards * scale + shift  # rounded to float32 inside group_advantages: U32 |r'| each
    eps = 1e-9
    a = group_advantages(rewards, G, eps=eps).view(-1, G)
    b = group_advantages(moved, G, eps=eps).view(-1, G)
    for k in range(a.shape[0]):
        std = rewards.view(-1, G)[k].std().item()
        if std <= 0.5:
            continue
        # both sides err from the exact (shift- and scale-free) advantages by the bound of
        # equation (2); the moved rewards add one input rounding to the centring error
        max_a = rewards.view(-1, G)[k].abs().max().item()
        max_b = moved.view(-1, G)[k].abs().max().item()
        delta_a = centring_error(G, max_a)
        delta_b = centring_error(G, max_b) + 2 * (U32 * max_b + TINY)
        for i in range(G):
            e = a[k, i].item()
            bound = scaled_advantage_error(e, std, G, delta_a, eps)
            bound += scaled_advantage_error(e, std * scale, G, delta_b, eps)
            assert abs(a[k, i].item() - b[k, i].item()) <= bound


@pytest.mark.numerics
@settings(max_examples=200, deadline=None)
@given(grouped_rewards())
def test_rloo_is_rescaled_mean_centring(data):
    rewards, G = data
    centred = group_advantages(rewards, G, "none")
    rloo = rloo_advantages(rewards, G)
    for k in range(rewards.numel() // G):
        max_abs = rewards[k * G : (k + 1) * G].abs().max().item()
        # RLOO: a sum of G terms, a subtraction, a division by G-1 and a subtraction; the other
        # side: the centring error times G/(G-1) <= 2, and one multiplication
        bound = 2 * ((G + 7) * (U32 * max_abs + TINY) + 2 * centring_error(G, max_abs))
        expected = G / (G - 1) * centred[k * G : (k + 1) * G]
        assert (rloo[k * G : (k + 1) * G] - expected).abs().max().item() <= bound


@pytest.mark.numerics
@settings(max_examples=200, deadline=None)
@given(grouped_rewards())
def test_rloo_matches_leave_one_out_means(data):
    # equation (3) from its definition: each reward minus the mean of the G-1 others
    rewards, G = data
    values = rewards.tolist()
    rloo = rloo_advantages(rewards, G).tolist()
    for k, a in enumerate(rloo):
        start = k - k % G
        others = values[start:k] + values[k + 1 : start + G]
        expected = values[k] - statistics.fmean(others)
        max_abs = max(abs(v) for v in values[start : start + G])
        assert abs(a - expected) <= 2 * (G + 5) * (U32 * max_abs + TINY)


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
            # float32 recursion (gamma rounded to float32 too): each of the <= T steps adds at
            # most three roundings of size U32 * sum |r| to the float64 reference
            tail = rewards[i, k : int(lengths[i])].abs().sum().item()
            assert returns[i, k].item() == pytest.approx(running, abs=3 * steps * U32 * tail)
        assert torch.all(returns[i, int(lengths[i]) :] == 0)


def test_centre_and_scale_by_hand():
    """Equations (1) / (2) over the masked entries of each row: values 1, 2, 3 (and a masked 9)
    have mean 2 and sample std 1; the masked entry gets 0 and is not counted."""
    from grpo_minimal import centre_and_scale

    values = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    group, count = centre_and_scale(values, mask, 1)
    expected = torch.tensor([[-1 / 1.0001, 0.0, 1 / 1.0001, 0.0], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(group, expected)
    assert count.flatten().tolist() == [3.0, 2.0]
    none, _ = centre_and_scale(values, mask, 1, "none")
    torch.testing.assert_close(none, torch.tensor([[-1.0, 0.0, 1.0, 0.0], [0.0] * 4]))
    # batch: the std of all five masked values 1, 2, 3, 4, 4 (mean 2.8, sample var 1.7)
    batch, _ = centre_and_scale(values, mask, 1, "batch")
    torch.testing.assert_close(batch, none / (1.7**0.5 + 1e-4))
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        centre_and_scale(values, mask, 1, "std")
