"""R1-Zero in miniature: the GRPO runs of notebook 10 and ``bench/reasoning.py``.

DeepSeek-R1-Zero (arXiv 2501.12948v1, section 2.2) trains with rule-based rewards only (accuracy
and format, section 2.2.2) and reports that the average response length grows over RL steps
while accuracy climbs (figures 2 and 3; the numbers are v1's, not those of v2, the rewritten
Nature version). Here the same question is asked of a 0.8M-parameter
model on three-digit addition (``reasoning.py``): starting from a cold start that writes its
column sums in a minority of completions (``data/make_reasoning_model.py``), does an outcome
reward alone make it write them more often, and longer, while its accuracy rises?

``run_variant(name, seed)`` trains one of ``VARIANTS`` from its cold start with
``MathConfig.PRESETS["reasoning"]`` and returns the per-step curves and the held-out evaluations.
The reward is the accuracy reward alone, without R1's format reward: the format reward pays a
think block for itself (``rewards.format_reward``), and the question is whether reasoning pays
for itself.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

from ..lm_train import setup, train_math
from ..math_config import MathConfig
from ..rewards import accuracy_reward
from .reasoning import log_reasoning, make_length_penalty
from .stats import bootstrap_ci

__all__ = [
    "CURVES",
    "EVALS",
    "LENGTH_PENALTY",
    "VARIANTS",
    "completions_explorer",
    "completions_text",
    "final_intervals",
    "plot_emergence",
    "run_variant",
]

LENGTH_PENALTY = 0.02
"""A flat deduction per completion token (EOS not counted) in the ``length_penalty`` variant,
never a payment: over the reasoning test problems a written solution (28.0 tokens on average)
loses 0.56, a direct answer (5.6 tokens) 0.11. The difference, 0.45, is more than writing gained
the cold start on its 300 held-back problems (forced greedy, 64.3% against 34.0% right: 0.30): at
the start, the penalty outweighs what writing earns. Notebook 10 prints these figures; this one
rate is the only one its runs test."""

VARIANTS: dict[str, dict] = {
    "grpo": {},  # the cold start with a minority of written solutions; accuracy reward; grpo
    "no_steps": {"model": "tiny-direct"},  # a cold start that never writes steps
    "length_penalty": {"length_penalty": LENGTH_PENALTY},  # each token costs LENGTH_PENALTY
    # Dr. GRPO's aggregation instead of GRPO's; scale_rewards stays "group" (Dr. GRPO also drops
    # the std), so this measures the token sum over a constant against the per-sequence mean
    "dr_grpo": {"loss_type": "dr_grpo"},
}
"""Notebook 10's runs: each changes one thing of ``MathConfig.PRESETS["reasoning"]``."""

CURVES = ("reward_mean", "reasoning_rate", "completion_length", "steps_right", "train_s")
"""Per-step metrics of the sampled completions kept by ``run_variant``."""

EVALS = ("eval_accuracy", "eval_reasoning_rate", "eval_completion_length")
"""Held-out greedy metrics, every ``eval_every`` steps and at both ends."""


def run_variant(
    name: str,
    seed: int,
    eval_rows: Sequence[dict] | None = None,
    progress: bool = False,
    sample_every: int = 0,
    **overrides,
) -> dict:
    """Train variant ``name`` with ``seed`` from its cold start. ``eval_rows`` default to the
    first ``eval_n`` of the reasoning test split. ``overrides`` change ``MathConfig`` fields
    (``max_steps``, ...). With ``sample_every`` the first group's completions are kept every
    that many steps (``samples``: step, prompt, completions, rewards)."""
    settings = VARIANTS[name] | overrides
    per_token = settings.pop("length_penalty", 0.0)
    cfg = MathConfig.for_device("cpu", dataset="reasoning", seed=seed, **settings)
    model, tokenizer = setup(cfg)
    rewards = None
    if per_token:
        rewards = [accuracy_reward, make_length_penalty(tokenizer, per_token)]

    samples: list[dict] = []

    def observe(record: dict, rollout) -> None:
        log_reasoning(record, rollout)
        step = record["step"]
        if rollout is not None and sample_every and (step == 1 or step % sample_every == 0):
            first = rollout.completions[: cfg.num_generations]
            samples.append(
                {"step": step, "prompt": rollout.rows[0]["prompt"], "completions": first}
            )

    _, history = train_math(
        cfg,
        model,
        tokenizer,
        eval_rows=eval_rows,
        reward_funcs=rewards,
        progress=progress,
        on_step=observe,
    )
    steps = history[1:]
    return {
        "variant": name,
        "seed": seed,
        "steps": len(steps),
        "model": cfg.model,
        "loss_type": cfg.loss_type,
        "length_penalty": per_token,
        "curves": {key: [_round(r.get(key)) for r in steps] for key in CURVES},
        "evals": [
            {"step": r["step"], **{key: _round(r[key]) for key in EVALS}}
            for r in history
            if "eval_accuracy" in r
        ],
        "samples": samples,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# --- reading the runs: intervals, curves, completions ---------------------------------------------


def final_intervals(runs: Sequence[dict], metric: str, baseline: str = "grpo") -> list[dict]:
    """Per variant, the held-out ``metric`` (one of ``EVALS``) before and after training: the
    mean over seeds with its 95% bootstrap interval (``stats.bootstrap_ci``), and the change
    of the mean from ``baseline``'s with its interval (runs are not paired across variants)."""
    rows = []
    base = [r["evals"][-1][metric] for r in runs if r["variant"] == baseline]
    for name in dict.fromkeys(r["variant"] for r in runs):
        mine = [r for r in runs if r["variant"] == name]
        before = [r["evals"][0][metric] for r in mine]
        after = [r["evals"][-1][metric] for r in mine]
        row = {
            "variant": name,
            "seeds": len(mine),
            "before": bootstrap_ci(before, stat=np.mean),
            "after": bootstrap_ci(after, stat=np.mean),
        }
        if name != baseline and base:
            row["minus_baseline"] = bootstrap_ci(after, base, stat=np.mean, difference=True)
        rows.append(row)
    return rows


def plot_emergence(runs: Sequence[dict], variants: Sequence[str] = ("grpo",), live=None):
    """The R1-Zero figures in miniature: held-out accuracy, the share of completions that write
    steps, and the mean completion length against the training step. Each variant is the mean
    over its seeds with the min-max band; ``live`` (a ``run_variant`` result) is drawn dashed."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    panels = [
        ("eval_accuracy", "held-out accuracy (greedy)", True),
        ("reasoning_rate", "completions writing steps (sampled)", False),
        ("completion_length", "mean completion length, tokens (sampled)", False),
    ]
    for index, name in enumerate(variants):
        mine = [r for r in runs if r["variant"] == name]
        for ax, (key, title, is_eval) in zip(axes, panels, strict=True):
            x, ys = _series(mine, key, is_eval)
            label = f"{name} ({len(mine)} seeds)"
            ax.plot(x, ys.mean(axis=0), color=f"C{index}", label=label)
            ax.fill_between(x, ys.min(axis=0), ys.max(axis=0), color=f"C{index}", alpha=0.2)
            ax.set_title(title, fontsize="medium")
    if live is not None:
        for ax, (key, _, is_eval) in zip(axes, panels, strict=True):
            x, ys = _series([live], key, is_eval)
            ax.plot(x, ys[0], "k--", lw=1, label=f"this notebook's run (seed {live['seed']})")
    for ax in axes:
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    return fig


def _series(runs: Sequence[dict], key: str, is_eval: bool, window: int = 10):
    """x and one row per run: evaluations as logged, per-step curves as a trailing mean."""
    if is_eval:
        x = [e["step"] for e in runs[0]["evals"]]
        return np.array(x), np.array([[e[key] for e in r["evals"]] for r in runs])
    curves = np.array([r["curves"][key] for r in runs], dtype=float)
    kernel = np.ones(window) / window
    smooth = np.array([np.convolve(c, kernel, mode="valid") for c in curves])
    return np.arange(window, curves.shape[1] + 1), smooth


def completions_text(samples: Sequence[dict], steps: Sequence[int] | None = None) -> str:
    """The kept groups (``run_variant(sample_every=...)``) as text: the prompt, then each
    completion marked by whether its answer is right, and whether it writes steps (written) or
    not (direct)."""
    from ..rewards import accuracy_reward
    from .reasoning import operands, writes_steps

    lines = []
    for sample in samples:
        if steps is not None and sample["step"] not in steps:
            continue
        gold = str(sum(operands(sample["prompt"])))
        right = accuracy_reward(sample["completions"], [gold] * len(sample["completions"]))
        lines.append(f"step {sample['step']}: {sample['prompt']}  (answer {gold})")
        for text, r in zip(sample["completions"], right, strict=True):
            kind = "written" if writes_steps(text) else "direct "
            lines.append(f"  {'right' if r else 'wrong'}, {kind}  {text}")
    return "\n".join(lines)


def completions_explorer(samples: Sequence[dict]):
    """A step slider over the kept groups (``completions_text`` of the chosen step)."""
    import ipywidgets as widgets

    steps = [s["step"] for s in samples]
    slider = widgets.SelectionSlider(
        options=steps, value=steps[0], description="GRPO step", continuous_update=False
    )
    text = widgets.HTML()

    def show(change=None) -> None:
        body = completions_text(samples, [slider.value])
        text.value = f"<pre style='font-size:12px'>{html.escape(body)}</pre>"

    slider.observe(show, names="value")
    show()
    return widgets.VBox([slider, text])
