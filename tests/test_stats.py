"""The bootstrap interval used for every comparison over seeds."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_minimal.course.stats import bootstrap_ci


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


@given(st.lists(st.floats(0.1, 1e6), min_size=1, max_size=8),
       st.lists(st.floats(0.1, 1e6), min_size=1, max_size=8))  # fmt: skip
def test_the_interval_lies_within_the_resampled_range(values, baseline):
    est, low, high = bootstrap_ci(values, baseline, resamples=500)
    lowest, highest = min(values) / max(baseline), max(values) / min(baseline)
    assert lowest * (1 - 1e-12) <= low <= high <= highest * (1 + 1e-12)
    assert lowest * (1 - 1e-12) <= est <= highest * (1 + 1e-12)


def test_difference_of_two_samples_by_hand():
    """With ``difference`` the estimate is stat(values) - stat(baseline); a resample of [0, 1]
    has mean 0, 0.5 or 1, so the difference from a constant 0.25 lies in [-0.25, 0.75]."""
    assert bootstrap_ci([1.0, 1.0], [0.25, 0.25], stat=np.mean, difference=True) == (
        0.75, 0.75, 0.75)  # fmt: skip
    estimate, low, high = bootstrap_ci([0.0, 1.0], [0.25] * 3, stat=np.mean, difference=True)
    assert estimate == pytest.approx(0.25) and low == pytest.approx(-0.25)
    assert high == pytest.approx(0.75)
    ratio = bootstrap_ci([1.0, 1.0], [0.25, 0.25], stat=np.mean)
    assert ratio == (4.0, 4.0, 4.0)  # the default is still the ratio
