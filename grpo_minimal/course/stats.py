"""Comparisons over seeds: a percentile bootstrap interval for a statistic or a ratio of two.

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
