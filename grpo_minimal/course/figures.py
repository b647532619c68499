"""Figures over seeds and variants for the notebooks: a mean curve with a min-max band over
seeds (notebooks 02 and 03) and the ablation table's intervals (notebook 07). The plots of one
run are the core's (``grpo_minimal/plots.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np


def curve_band(
    histories: list[list[dict]], x: str = "env_steps", y: str = "return_mean", points: int = 100
):
    """Interpolate several runs onto one x grid: returns (grid, mean, min, max).

    A run that stopped early (solved) is held at its last value, so the band covers all runs.
    """
    xs = [np.array([r[x] for r in h], dtype=float) for h in histories]
    ys = [np.array([r[y] for r in h], dtype=float) for h in histories]
    grid = np.linspace(0.0, max(v[-1] for v in xs), points)
    curves = np.stack([np.interp(grid, xv, yv) for xv, yv in zip(xs, ys, strict=True)])
    return grid, curves.mean(axis=0), curves.min(axis=0), curves.max(axis=0)


def plot_runs(
    runs: dict[str, list[list[dict]]],
    x: str = "env_steps",
    y: str = "return_mean",
    ax=None,
    title: str | None = None,
):
    """Mean curve with a min-max band for each labelled set of runs (one history per seed)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for label, histories in runs.items():
        grid, mean, low, high = curve_band(histories, x, y)
        ax.plot(grid, mean, label=f"{label} (n={len(histories)})")
        if len(histories) > 1:
            ax.fill_between(grid, low, high, alpha=0.2)
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    return ax


def plot_intervals(rows: Sequence[dict], runs: Sequence[dict] = (), ax=None, reference: str = ""):
    """One line per variant of ``ablations.summarize``: the mean (bar end), its 95% bootstrap
    interval (whisker) and each seed's value (dots, from ``runs``); the ``reference`` variant's
    interval is shaded across the plot so that overlaps are easy to read."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1))
    names = [r["variant"] for r in rows]
    y = np.arange(len(rows))[::-1]
    means = np.array([r["accuracy"] for r in rows])
    low = np.array([r["interval"][0] if r["interval"] else r["accuracy"] for r in rows])
    high = np.array([r["interval"][1] if r["interval"] else r["accuracy"] for r in rows])
    ax.errorbar(
        means,
        y,
        xerr=[means - low, high - means],
        fmt="o",
        color="C0",
        capsize=3,
        label="mean, 95% bootstrap interval",
    )
    for yi, name in zip(y, names, strict=True):
        seeds = [r["validation_accuracy"] for r in runs if r["variant"] == name]
        ax.plot(seeds, [yi - 0.2] * len(seeds), "|", color="grey", ms=6)
    if reference in names:
        row = rows[names.index(reference)]
        if row["interval"]:
            ax.axvspan(*row["interval"], color="C1", alpha=0.15, label=f"{reference}'s interval")
    ax.set_yticks(y, names)
    ax.set_xlabel("validation greedy accuracy (grey ticks: seeds)")
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    return ax
