"""Comparisons over seeds: a percentile bootstrap interval for a statistic or a ratio of two,
Student's t interval for the mean of a few seeds' paired differences (notebook 11), and Wilson's
interval for a share of a few yes/no outcomes (notebook 11's probe).

With a handful of seeds per method, a difference in medians means little without an interval.
Notebook 03 and ``bench/ppo_vs_grpo.py`` report every GRPO / PPO ratio with one (equations
(40)-(41) of notebook 03). Notebooks 03, 07 and 08, ``bench/`` and the README read every
comparison with one decision rule, written in ``bootstrap_ci``'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def bootstrap_ci(
    values: Sequence[float],
    baseline: Sequence[float] | None = None,
    *,
    stat: Callable[..., np.ndarray] = np.median,
    difference: bool = False,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Percentile bootstrap over seeds: ``(estimate, low, high)``.

    The estimate is ``stat(values)``, or ``stat(values) / stat(baseline)`` when ``baseline`` is
    given (``stat(values) - stat(baseline)`` with ``difference``). Each sample is resampled with replacement ``resamples`` times, independently (runs of
    two methods are not paired), and the interval is the central ``confidence`` quantile range of
    the resampled estimates (a resampled ratio 0 / 0 is dropped). ``stat`` must accept ``axis``
    (``np.median``, ``np.mean``, ...).

    The course's decision rule: a ratio whose interval contains 1 (for a difference of two
    statistics, 0) is "not resolved" with these seeds; one whose interval lies wholly above or
    below 1 is resolved in that direction ("higher" / "lower"). Whether the two methods' own
    intervals overlap decides nothing. With few seeds (5) percentile intervals tend to be too
    narrow, so "resolved" is evidence at that number of seeds, not a proof.
    """
    if len(values) == 0 or (baseline is not None and len(baseline) == 0):
        raise ValueError("bootstrap_ci needs at least one value in values and in baseline")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    x = np.asarray(values, dtype=float)
    estimate = stat(x)
    boot = stat(x[rng.integers(0, len(x), size=(resamples, len(x)))], axis=1)
    if baseline is not None:
        y = np.asarray(baseline, dtype=float)
        boot_y = stat(y[rng.integers(0, len(y), size=(resamples, len(y)))], axis=1)
        if difference:
            estimate, boot = estimate - stat(y), boot - boot_y
        else:
            with np.errstate(divide="ignore", invalid="ignore"):  # a ratio over 0: inf or nan
                estimate, boot = estimate / stat(y), boot / boot_y
    boot = boot[~np.isnan(boot)]  # a resampled ratio 0 / 0 is undefined: dropped
    if boot.size == 0:
        return float(estimate), float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore"):  # inf - inf when interpolating between infinite ratios
        low, high = np.quantile(boot, [tail, 1.0 - tail])
    return float(estimate), float(low), float(high)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom.

    With ``t = sqrt(df) * tan(phi)`` the angle ``phi`` has density proportional to
    ``cos(phi)^(df-1)`` on (-pi/2, pi/2), so for t >= 0
    ``P(T > t) = integral_0^theta sin(u)^(df-1) du / (2 W(df-1))`` with
    ``theta = arctan(sqrt(df) / t)`` and ``W(n) = integral_0^(pi/2) sin(u)^n du`` (Wallis). The
    integral is Simpson's rule on 2,000 intervals; the quantile is found by bisection.
    ``t_quantile(0.975, 2)`` is 4.303, as in every t table.
    """
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)

    def upper_tail(t: float) -> float:
        theta = np.arctan(np.sqrt(df) / t) if t > 0 else np.pi / 2
        u = np.linspace(0.0, theta, 2001)
        f = np.sin(u) ** (df - 1)
        integral = (u[1] - u[0]) / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
        return integral / (2.0 * _wallis(df - 1))

    low, high = 0.0, 1.0
    while upper_tail(high) > 1.0 - p:
        high *= 2.0
    for _ in range(60):
        mid = (low + high) / 2.0
        low, high = (mid, high) if upper_tail(mid) > 1.0 - p else (low, mid)
    return (low + high) / 2.0


def _wallis(n: int) -> float:
    """``integral_0^(pi/2) sin(u)^n du``: pi/2 or 1, times (k-1)/k for k = n, n-2, ... > 1."""
    value = np.pi / 2 if n % 2 == 0 else 1.0
    for k in range(n % 2 + 2, n + 1, 2):
        value *= (k - 1) / k
    return float(value)


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``values`` and its Student-t interval,
    ``mean +- t_quantile((1 + confidence) / 2, n - 1) * sd / sqrt(n)`` (sd with n - 1).

    For a few seeds' paired differences (accuracy after minus before, one per seed): with
    3 seeds the factor is 4.303, so an interval that excludes 0 needs the seeds to agree.
    """
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        raise ValueError(f"t_interval needs at least 2 values, got {x.size}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(x.mean())
    half = t_quantile((1.0 + confidence) / 2.0, x.size - 1) * float(x.std(ddof=1)) / np.sqrt(x.size)
    return mean, mean - half, mean + half


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """``(share, low, high)``: the share ``p = successes / n`` of yes/no outcomes and its Wilson
    score interval (Wilson, 1927), with ``z`` the normal quantile at ``(1 + confidence) / 2``:

        (p + z^2 / 2n  +-  z sqrt(p (1 - p) / n + z^2 / 4n^2)) / (1 + z^2 / n)

    For a share of a few problems (16 a cell in notebook 11's probe): where a percentile
    bootstrap collapses to a point at 0 or n successes, this does not (0 of 16: [0, 0.194]).
    """
    from statistics import NormalDist

    if not 0 <= successes <= n or n < 1:
        raise ValueError(f"wilson_interval needs 0 <= successes <= n, n >= 1; got {successes}, {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf((1.0 + confidence) / 2.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else float(centre - half)  # exactly, where rounding would not
    high = 1.0 if successes == n else float(centre + half)
    return p, low, high
