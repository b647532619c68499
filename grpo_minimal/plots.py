"""Matplotlib helpers shared by the notebooks and the command line."""

from __future__ import annotations

import os
from collections.abc import Sequence

import matplotlib

if os.environ.get("MPLBACKEND") is None and not os.environ.get("DISPLAY"):
    matplotlib.use("Agg")  # headless CLI / CI; notebooks set their own inline backend

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


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


def learning_curve(history: list[dict], path: str | os.PathLike | None = None, title: str = ""):
    """Sampled return per update and greedy evaluations; saved to ``path`` when given."""
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["env_steps"] for r in history]
    ax.plot(steps, [r["return_mean"] for r in history], label="sampled return (batch mean)")
    ax.fill_between(
        steps, [r["return_min"] for r in history], [r["return_max"] for r in history], alpha=0.2
    )
    evals = [(r["env_steps"], r["eval_return"]) for r in history if "eval_return" in r]
    if evals:
        ax.plot(*zip(*evals, strict=True), "o", label="greedy evaluation")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
        plt.close(fig)
    return fig


def plot_history(history: Sequence[dict], path: str | os.PathLike | None = None, title: str = ""):
    """LLM GRPO: reward, held-out accuracy and KL against training seconds (``train_math``'s
    history); saved to ``path`` if given."""
    steps = [r for r in history if "reward_mean" in r]
    evals = [r for r in history if "eval_accuracy" in r]
    x = [r["train_s"] for r in steps]
    window = max(1, len(steps) // 20)

    def smooth(values: list[float]) -> list[float]:
        return [sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
                for i in range(len(values))]  # fmt: skip

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, label in ((axes[0], "reward_mean", "mean reward (sampled)"),
                           (axes[2], "kl", "KL to the reference (k3)")):  # fmt: skip
        values = [r[key] for r in steps]
        ax.plot(x, values, alpha=0.3, label="per step")
        ax.plot(x, smooth(values), label=f"mean of {window} steps")
        ax.set_ylabel(label)
        ax.legend(loc="upper left", fontsize="small")
    axes[1].plot([r["train_s"] for r in evals], [r["eval_accuracy"] for r in evals], "o-")
    axes[1].set_ylabel("held-out greedy accuracy")
    for ax in axes:
        ax.set_xlabel("training seconds")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


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
    ax.errorbar(means, y, xerr=[means - low, high - means], fmt="o", color="C0", capsize=3,
                label="mean, 95% bootstrap interval")  # fmt: skip
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
