"""The plots of one run, written by the command line (``learning_curve.png``, the LLM run's
curves) and drawn by notebooks 02 and 06. Plots over seeds and variants are course tooling:
``course/figures.py``."""

from __future__ import annotations

import os
from collections.abc import Sequence

import matplotlib

if os.environ.get("MPLBACKEND") is None and not os.environ.get("DISPLAY"):
    matplotlib.use("Agg")  # headless CLI / CI; notebooks set their own inline backend

import matplotlib.pyplot as plt  # noqa: E402


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
        return [
            sum(values[max(0, i - window + 1) : i + 1])
            / len(values[max(0, i - window + 1) : i + 1])
            for i in range(len(values))
        ]

    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    for ax, key, label in (
        (axes[0], "reward_mean", "mean reward (sampled)"),
        (axes[2], "kl", "KL to the reference (k3)"),
    ):
        ax.set_ylabel(label)
        if not steps or any(key not in r for r in steps):  # TRL logs no KL when beta = 0
            ax.text(
                0.5,
                0.5,
                "not logged (beta = 0: no reference model)",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            continue
        values = [r[key] for r in steps]
        ax.plot(x, values, alpha=0.3, label="per step")
        ax.plot(x, smooth(values), label=f"mean of {window} steps")
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
