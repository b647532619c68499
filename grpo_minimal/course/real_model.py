"""A real model on a laptop (notebook 11, ``bench/real_model.py``): SmolLM2-135M-Instruct,
fetched by ``grpo-minimal fetch smollm2-135m``, trained on ``chat_arithmetic`` on a CPU.

``run`` trains one seed on one backend from the fetched model and scores it on the held-out
rows; ``scored`` is that score (greedy accuracy, each row's verdict, the first completions as
text); ``summary`` reads the committed runs: per backend, the accuracy before and after, and the
paired difference over seeds with its Student-t interval (``stats.t_interval``);
``lora_comparison`` reads ``bench/lora.py``'s runs (LoRA against a full fine-tune);
``gguf_tensor_types`` reads what a GGUF file stores each tensor as, from its tensor table.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence

import numpy as np
import torch

from ..device import reset_peak_memory
from ..lm_model import load_model
from ..lm_train import evaluate_greedy, train_math
from ..math_config import MathConfig
from ..rewards import accuracy_reward
from .stats import t_interval

MODEL = "smollm2-135m"
SHOWN = 8
"""Completions kept as text per run: those of the first ``SHOWN`` held-out problems."""

KEPT = (
    "step",
    "train_s",
    "step_s",
    "reward_mean",
    "frac_zero_std",
    "completion_length",
    "truncated_fraction",
    "eval_accuracy",
    "peak_memory_mb",
)
"""The history fields a run keeps (one record per step)."""


def gguf_tensor_types(path) -> dict[str, dict]:
    """What a GGUF file stores its tensors as, read from the file's tensor table with the
    ``gguf`` package (the ``fetch`` extra): per storage type (``Q4_1``, ``Q8_0``, ``F32``, ...)
    the number of tensors, of parameters and of bytes, the share of all parameters, the bits
    stored per parameter, and the names of the first tensors. A GGUF file's name says its main
    type only: the types differ per tensor."""
    import gguf

    table: dict[str, dict] = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        row = table.setdefault(
            tensor.tensor_type.name, {"tensors": 0, "parameters": 0, "bytes": 0, "names": []}
        )
        row["tensors"] += 1
        row["parameters"] += int(tensor.n_elements)
        row["bytes"] += int(tensor.n_bytes)
        if len(row["names"]) < 3:
            row["names"].append(tensor.name)
    total = sum(row["parameters"] for row in table.values())
    for row in table.values():
        row["share"] = row["parameters"] / total
        row["bits_per_parameter"] = 8 * row["bytes"] / row["parameters"]
    return dict(sorted(table.items(), key=lambda item: -item[1]["parameters"]))


def scored(model, tokenizer, rows: Sequence[dict], cfg: MathConfig) -> dict:
    """Greedy accuracy on ``rows`` (``evaluate_greedy``), each row's verdict (1 right, 0 not),
    the first ``SHOWN`` completions, and the seconds it took."""
    start = time.perf_counter()
    metrics, completions = evaluate_greedy(model, tokenizer, rows, cfg)
    verdicts = accuracy_reward(completions, [row["answer"] for row in rows])
    return {
        "accuracy": metrics["accuracy"],
        "completion_length": metrics["completion_length"],
        "correct": [int(v) for v in verdicts],
        "completions": completions[:SHOWN],
        "eval_s": round(time.perf_counter() - start, 1),
    }


def run(backend: str, cfg: MathConfig, train_rows: Sequence[dict], held_out: Sequence[dict]):
    """Train the fetched model with ``cfg`` on ``backend`` (``grpo_minimal`` or ``trl``), then
    score it on ``held_out``: ``(record, model, tokenizer)``. The record holds the run's
    settings, its history (``KEPT``) and the score (``after``)."""
    reset_peak_memory(torch.device("cpu"))  # this run's peak, not the process's so far
    model, tokenizer = load_model(MODEL, torch.device("cpu"))
    if backend == "trl":
        from ..trl_bridge import train_math_trl

        with tempfile.TemporaryDirectory() as out:  # TRL writes a checkpoint; not kept
            trainer, history = train_math_trl(
                cfg, model, tokenizer, train_rows, held_out, out, progress=False
            )
    elif backend == "grpo_minimal":
        trainer, history = train_math(cfg, model, tokenizer, train_rows, held_out, progress=False)
    else:
        raise ValueError(f"backend must be 'grpo_minimal' or 'trl', got {backend!r}")
    model = trainer.model
    record = {
        "backend": backend,
        "seed": cfg.seed,
        "max_steps": cfg.max_steps,
        "steps": history[-1]["step"],
        "train_s": history[-1]["train_s"],
        "time_budget_s": cfg.time_budget_s,
        "history": [{k: r[k] for k in KEPT if k in r} for r in history],
        "after": scored(model, tokenizer, held_out, cfg),
    }
    return record, model, tokenizer


def seeds_and_problems_interval(
    after: np.ndarray,
    before: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the accuracy gained, ``after[s, i] - before[i]`` (1 right, 0
    wrong; seeds s, held-out problems i), with a percentile bootstrap that resamples the seeds
    and the problems together: the test set is a sample of problems too, which an interval over
    seeds alone (``t_interval``) does not see."""
    gain = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)[None, :]
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, gain.shape[0], size=(resamples, gain.shape[0]))
    problems = rng.integers(0, gain.shape[1], size=(resamples, gain.shape[1]))
    boot = gain[seeds[:, :, None], problems[:, None, :]].mean(axis=(1, 2))
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [tail, 1.0 - tail])
    return float(gain.mean()), float(low), float(high)


def summary(results: dict) -> dict[str, dict]:
    """Per backend, over the runs of the committed configuration's ``max_steps``: the start's
    accuracy, each seed's accuracy after, and the gain (after minus before; the start is one
    greedy model, the same for every seed) with two 95% intervals: Student's t over seeds
    (``difference``) and a bootstrap over seeds and problems (``difference_problems``), each
    once there are 2 seeds or more."""
    start = results["start"]
    steps = results.get("config", {}).get("max_steps")
    out = {}
    for backend in ("grpo_minimal", "trl"):
        runs = sorted(
            (
                r
                for r in results["runs"]
                if r["backend"] == backend and steps in (None, r["max_steps"])
            ),
            key=lambda r: r["seed"],
        )
        if not runs:
            continue
        after = [r["after"]["accuracy"] for r in runs]
        row = {
            "seeds": [r["seed"] for r in runs],
            "before": start["accuracy"],
            "after": after,
            "steps": [r["steps"] for r in runs],
            "train_s": [r["train_s"] for r in runs],
        }
        if len(runs) >= 2:
            row["difference"] = t_interval(np.asarray(after) - start["accuracy"])
            verdicts = np.array([r["after"]["correct"] for r in runs])
            row["difference_problems"] = seeds_and_problems_interval(
                verdicts, np.array(start["correct"])
            )
        out[backend] = row
    return out


def lora_comparison(results: dict) -> dict:
    """``bench/lora.py``'s results: per method (``full``, ``lora``) the scored runs' seeds, test
    accuracy, trained and total parameters, mean seconds per step and peak memory; LoRA - full
    test accuracy and LoRA / full seconds per step, paired by seed, each with its 95% Student-t
    interval (``stats.t_interval``, once there are 2 seeds or more); and the peak memory of the
    short runs with a reference (``beta > 0``), per method."""
    out: dict = {"start": results["start"]["accuracy"], "reference_peak_mb": {}}
    for method in ("full", "lora"):
        runs = sorted(
            (r for r in results["runs"] if r["method"] == method and "after" in r),
            key=lambda r: r["seed"],
        )
        out[method] = {
            "seeds": [r["seed"] for r in runs],
            "accuracy": [r["after"]["accuracy"] for r in runs],
            "trainable_parameters": runs[0]["trainable_parameters"],
            "parameters": runs[0]["parameters"],
            "learning_rate": runs[0]["learning_rate"],
            "steps": runs[0]["steps"],
            "step_s": [r["mean_step_s"] for r in runs],
            "peak_memory_mb": [r["peak_memory_mb"] for r in runs],
        }
        for r in results["runs"]:
            if r["method"] == method and r["beta"] > 0:
                out["reference_peak_mb"][method] = r["peak_memory_mb"]
    full, lora = out["full"], out["lora"]
    if full["seeds"] != lora["seeds"]:
        raise ValueError(f"seeds differ: full {full['seeds']}, lora {lora['seeds']}")
    if len(full["seeds"]) >= 2:
        out["difference"] = t_interval(np.subtract(lora["accuracy"], full["accuracy"]))
        out["step_ratio"] = t_interval(np.divide(lora["step_s"], full["step_s"]))
    return out


def plot_reward_curves(results: dict, ax, window: int = 5) -> None:
    """Each committed run's training reward (the mean over its batch) per step, as a moving
    average over ``window`` steps: one line per seed, solid for grpo_minimal, dashed for TRL."""
    styles = {"grpo_minimal": "-", "trl": "--"}
    for r in sorted(results["runs"], key=lambda r: (r["backend"], r["seed"])):
        steps = [h["step"] for h in r["history"] if "reward_mean" in h]
        rewards = np.array([h["reward_mean"] for h in r["history"] if "reward_mean" in h])
        if len(rewards) < window:
            continue
        smooth = np.convolve(rewards, np.ones(window) / window, mode="valid")
        ax.plot(
            steps[window - 1 :],
            smooth,
            styles[r["backend"]],
            color=f"C{r['seed']}",
            label=f"{r['backend']}, seed {r['seed']}",
        )
    ax.set_xlabel("step")
    ax.set_ylabel(f"training reward (mean of {window} steps)")
    ax.legend(fontsize="small")
