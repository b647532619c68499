"""What matters in GRPO: variants of ``MathConfig()`` on the tiny model, at an equal budget.

Used by ``bench/ablations.py`` (the full sweep, results in ``bench/results/ablations.json``) and
notebook 07 (the plots and a live slice). A run trains the shipped model with one variant's
overrides for a budget of sampled completions (``max_steps = completions / (prompts_per_step x
num_generations)``) or of training seconds, then measures greedy accuracy on a **validation**
split carved from the arithmetic train split. The test split is never read here, so that what
these runs decide (defaults, say) can be reported once on problems that decided nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..data import problem_key
from ..lm_train import MathConfig, train_math
from ..shipped import results_dir
from .stats import bootstrap_ci

RESULTS = results_dir() / "ablations.json"
"""Where ``bench/ablations.py`` writes the sweep (committed) and notebook 07 reads it (in an
installed wheel, the package's copy of ``bench/results/``: ``grpo_minimal.shipped``)."""


def load_results(path: str | os.PathLike) -> dict:
    """A results file of the tiny-model benchmarks (``{"runs": [...]}``), empty if absent."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else {"runs": []}


def append_result(path: str | os.PathLike, data: dict, record: dict) -> dict:
    """Stamp ``record`` with the machine, date and torch threads, append it to ``data["runs"]``
    (the file's top-level ``machine`` and ``date`` become the latest run's) and rewrite ``path``
    atomically, so that a sweep interrupted later loses nothing already written."""
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}"
    today = datetime.date.today().isoformat()
    record = record | {"threads": torch.get_num_threads(), "machine": machine, "date": today}
    data["runs"].append(record)
    data["machine"], data["date"] = machine, today
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return record


VARIANTS: dict[str, dict] = {
    "default": {},  # G 8 x 8 prompts, scale group, beta 0.04, dapo, 1 iteration, lr 1e-4
    # group size at 64 completions a step
    "G2_P32": {"num_generations": 2, "prompts_per_step": 32},
    "G4_P16": {"num_generations": 4, "prompts_per_step": 16},
    "G16_P4": {"num_generations": 16, "prompts_per_step": 4},
    # advantage scaling
    "scale_batch": {"scale_rewards": "batch"},
    "scale_none": {"scale_rewards": "none"},
    # KL: none, or a reference refreshed to the policy every 50 steps
    "beta0": {"beta": 0.0},
    "ref_refresh50": {"ref_update_every": 50},
    # loss aggregation
    "loss_grpo": {"loss_type": "grpo"},
    "loss_bnpo": {"loss_type": "bnpo"},
    "loss_dr_grpo": {"loss_type": "dr_grpo"},
    # updates per sampled batch (the same completions, more compute)
    "iterations2": {"num_iterations": 2},
    "iterations4": {"num_iterations": 4},
    # learning rate and its schedule
    "lr3e-5": {"learning_rate": 3e-5},
    "lr3e-4": {"learning_rate": 3e-4},
    "lr3e-4_beta0": {"learning_rate": 3e-4, "beta": 0.0},
    "constant_lr": {"lr_scheduler_type": "constant"},
}
"""Overrides of ``MathConfig()``, by name."""

NOTEBOOK_07 = [name for name in VARIANTS if name not in ("lr3e-4_beta0", "constant_lr")]
"""The variants of notebook 07's sweep."""

SEED_TABLE = {
    "Full GRPO": 51.7,
    "- Group normalization (no std division)": 49.2,
    "- KL penalty (no reference model)": 47.8,
    "Group size 2": 50.1,
    "Group size 8": 52.0,
}
"""The ablation table of seed 000 (section 7.4, lines 666-673; MATH accuracy in %, no source given)."""


def validation_split(rows: Sequence[dict], size: int) -> tuple[list[dict], list[dict]]:
    """Training rows and validation rows: the last ``size`` rows, minus any problem whose swapped
    twin (``a+b`` / ``b+a``) stays in training."""
    if not 0 < size < len(rows):
        raise ValueError(f"size must be in 1..{len(rows) - 1} (rows to carve out), got {size}")
    train, candidates = list(rows[:-size]), rows[-size:]
    seen = {problem_key(r["prompt"]) for r in train}
    return train, [r for r in candidates if problem_key(r["prompt"]) not in seen]


def variant_config(
    name: str, seed: int, completions: int = 0, budget_s: float = 0.0, **overrides
) -> MathConfig:
    """``MathConfig()`` with variant ``name``'s overrides on the CPU, for ``completions`` sampled
    completions (exactly: it sets ``max_steps``) or at most ``budget_s`` seconds of training."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {name!r}")
    if (completions > 0) == (budget_s > 0):
        raise ValueError(
            f"give one budget: completions > 0 or budget_s > 0, got {completions}, {budget_s}"
        )
    values = {**VARIANTS[name], **overrides}
    if completions:
        per_step = values.get("prompts_per_step", MathConfig.prompts_per_step) * values.get(
            "num_generations", MathConfig.num_generations
        )
        if completions % per_step:
            raise ValueError(
                f"completions must be a multiple of {per_step} for {name!r}, got {completions}"
            )
        values["max_steps"] = completions // per_step
    else:
        values["time_budget_s"] = budget_s
    return MathConfig(device="cpu", seed=seed, eval_every=0, **values)


def run_variant(
    name: str,
    seed: int,
    train_rows: Sequence[dict],
    validation_rows: Sequence[dict],
    completions: int = 0,
    budget_s: float = 0.0,
    **overrides,
) -> dict:
    """Train one variant from the shipped model; returns the record the sweep stores."""
    cfg = variant_config(
        name, seed, completions, budget_s, eval_n=len(validation_rows), **overrides
    )
    _, history = train_math(cfg, train_rows=train_rows, eval_rows=validation_rows, progress=False)
    return {
        "variant": name,
        "overrides": VARIANTS[name] | overrides,
        "seed": seed,
        "budget_s": budget_s or None,
        "completions": completions or None,
        "steps": history[-1]["step"],
        "train_s": history[-1]["train_s"],
        "validation_before": history[0]["eval_accuracy"],
        "validation_accuracy": history[-1]["eval_accuracy"],
        "validation_n": len(validation_rows),
    }


def budget_of(record: dict) -> str:
    """The budget a run was given, as a label: ``"12800 completions"`` or ``"60 s"``."""
    if record.get("completions"):
        return f"{record['completions']} completions"
    return f"{record['budget_s']:.0f} s"


def summarize(runs: Sequence[dict], names: Sequence[str]) -> list[dict]:
    """Per variant (in the order of ``names``; absent ones skipped): seeds, median steps, mean
    validation accuracy, the seeds' range, and a 95% percentile bootstrap interval of the mean
    (``stats.bootstrap_ci``) from 5 seeds on; ``interval`` is None with fewer."""
    rows = []
    for name in names:
        acc = [r["validation_accuracy"] for r in runs if r["variant"] == name]
        if not acc:
            continue
        interval = bootstrap_ci(acc, stat=np.mean)[1:] if len(acc) >= 5 else None
        steps = statistics.median(r["steps"] for r in runs if r["variant"] == name)
        rows.append(
            {
                "variant": name,
                "seeds": len(acc),
                "steps": steps,
                "accuracy": statistics.fmean(acc),
                "low": min(acc),
                "high": max(acc),
                "interval": interval,
            }
        )
    return rows
