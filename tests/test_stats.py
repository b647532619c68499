"""The intervals used for comparisons over seeds: the bootstrap, and Student's t for a few seeds."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_minimal.course.stats import bootstrap_ci, t_interval, t_quantile, wilson_interval


def test_constant_samples_give_a_point_interval():
    assert bootstrap_ci([3.0] * 5) == (3.0, 3.0, 3.0)
    assert bootstrap_ci([6.0] * 5, [2.0] * 4) == (3.0, 3.0, 3.0)


def test_two_values_hand_computed():
    # resampled medians of [0, 1] are 0, 0.5 or 1 with probability 1/4, 1/2, 1/4: the central
    # 40% range is [0.5, 0.5] (quantiles 0.3 and 0.7), the central 90% range [0, 1]
    assert bootstrap_ci([0.0, 1.0], confidence=0.4, resamples=40_000)[1:] == (0.5, 0.5)
    assert bootstrap_ci([0.0, 1.0], confidence=0.9, resamples=40_000)[1:] == (0.0, 1.0)


def test_mean_interval_covers_the_normal_interval_roughly():
    rng = np.random.default_rng(1)
    x = rng.normal(10.0, 2.0, size=400)
    est, low, high = bootstrap_ci(x, stat=np.mean)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))  # the textbook interval, same data
    assert est == pytest.approx(x.mean())
    assert low == pytest.approx(est - half, abs=0.25 * half)
    assert high == pytest.approx(est + half, abs=0.25 * half)


def test_seeded_and_refuses_bad_input():
    assert bootstrap_ci([1, 5, 2, 8], [3, 4, 2]) == bootstrap_ci([1, 5, 2, 8], [3, 4, 2])
    with pytest.raises(ValueError, match="at least one value"):
        bootstrap_ci([])
    with pytest.raises(ValueError, match="confidence must be in"):
        bootstrap_ci([1.0, 2.0], confidence=1.0)


@given(
    st.lists(st.floats(0.1, 1e6), min_size=1, max_size=8),
    st.lists(st.floats(0.1, 1e6), min_size=1, max_size=8),
)
def test_the_interval_lies_within_the_resampled_range(values, baseline):
    est, low, high = bootstrap_ci(values, baseline, resamples=500)
    lowest, highest = min(values) / max(baseline), max(values) / min(baseline)
    assert lowest * (1 - 1e-12) <= low <= high <= highest * (1 + 1e-12)
    assert lowest * (1 - 1e-12) <= est <= highest * (1 + 1e-12)


def test_difference_of_two_samples_by_hand():
    """With ``difference`` the estimate is stat(values) - stat(baseline); a resample of [0, 1]
    has mean 0, 0.5 or 1, so the difference from a constant 0.25 lies in [-0.25, 0.75]."""
    assert bootstrap_ci([1.0, 1.0], [0.25, 0.25], stat=np.mean, difference=True) == (
        0.75,
        0.75,
        0.75,
    )
    estimate, low, high = bootstrap_ci([0.0, 1.0], [0.25] * 3, stat=np.mean, difference=True)
    assert estimate == pytest.approx(0.25) and low == pytest.approx(-0.25)
    assert high == pytest.approx(0.75)
    ratio = bootstrap_ci([1.0, 1.0], [0.25, 0.25], stat=np.mean)
    assert ratio == (4.0, 4.0, 4.0)  # the default is still the ratio


# --- Student's t: a few seeds' paired differences ------------------------------------------------


@pytest.mark.parametrize(
    "p, df, table",  # two-sided 95% and one-sided 95% critical values of any t table
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 4, 2.776),
        (0.975, 10, 2.228),
        (0.975, 30, 2.042),
        (0.95, 1, 6.314),
        (0.95, 5, 2.015),
        (0.995, 3, 5.841),
    ],
)
def test_t_quantile_matches_the_tables(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=6e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-t_quantile(p, df))


def test_t_quantile_tends_to_the_normal_and_refuses_nonsense():
    assert t_quantile(0.975, 1000) == pytest.approx(1.962, abs=1e-3)  # z = 1.960 in the limit
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(p, df)


def test_t_interval_by_hand():
    # mean 0.2; sd (n - 1) 0.1; standard error 0.1 / sqrt(3) = 0.057735; t(0.975, 2) = 4.302653
    mean, low, high = t_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2)
    assert (low, high) == pytest.approx((0.2 - 0.248414, 0.2 + 0.248414), abs=1e-5)
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([0.5])


@given(st.lists(st.floats(-1, 1), min_size=2, max_size=8), st.floats(0.5, 0.99))
def test_t_interval_holds_its_mean_and_widens_with_confidence(values, confidence):
    mean, low, high = t_interval(values, confidence)
    assert low <= mean <= high
    wider = t_interval(values, (1 + confidence) / 2)
    assert wider[1] <= low + 1e-12 and high <= wider[2] + 1e-12


def test_wilson_interval_hand_computed():
    # z = 1.959964, z^2 / n = 0.240091 for n = 16. 0 of 16: centre = (z^2 / 32) / 1.240091 =
    # 0.096805 and half = (z / 1.240091) sqrt(z^2 / 1024) = 0.096805. 8 of 16: centre 0.5 and
    # half = 1.580502 * sqrt(1 / 64 + z^2 / 1024) = 0.220004
    share, low, high = wilson_interval(0, 16)
    assert (share, low) == (0.0, 0.0) and high == pytest.approx(0.193610, abs=1e-5)
    share, low, high = wilson_interval(8, 16)
    assert share == 0.5
    assert (low, high) == pytest.approx((0.279996, 0.720004), abs=1e-5)
    assert wilson_interval(16, 16)[1] == pytest.approx(1 - 0.193610, abs=1e-5)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_holds_its_share_and_stays_in_0_1(counts):
    share, low, high = wilson_interval(*counts)
    assert 0.0 <= low <= share <= high <= 1.0
    assert low < high  # never a point, even at 0 or n successes
