"""Training a causal LM with GRPO or PPO: the run's inputs, the loop, evaluation, checkpoints.

``train_math`` draws ``prompts_per_step`` rows per step from shuffled passes over the training
data, runs the config's trainer (``trainer_for``: ``LMGRPOTrainer.step``, ``lm_grpo.py``, or
``LMPPOTrainer.step``, ``lm_ppo.py``), measures held-out greedy accuracy before the first step
and after the last (``evaluate_greedy``), and writes metrics and
atomic Hugging Face checkpoints (``save_checkpoint``). ``MathConfig`` (``math_config.py``) holds
every setting; ``checked_rows`` checks the run's inputs in one place.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import set_seed

from .completions import CompletionGroups, sample_completions
from .data import check_held_out, check_rows, load_eval_rows, load_math_rows
from .device import autocast, peak_memory_mb, pick_device, pick_dtype
from .lm_grpo import LMGRPOTrainer
from .lm_model import (
    check_prompt_lengths,
    eos_token_ids,
    format_prompt,
    load_model,
    quiet_transformers,
)
from .lm_ppo import LMPPOConfig, LMPPOTrainer
from .lm_trainer import LMTrainer
from .math_config import MathConfig
from .r1_format import reasoning_rate
from .rewards import RewardFunc, accuracy_reward, extract_value, parse_gold
from .sampling_metrics import majority_vote, pass_at_k
from .vlm import check_image_rows


def setup(cfg: MathConfig):
    """Seed, pick device and dtype, load the model and tokenizer: ``(model, tokenizer)``."""
    set_seed(cfg.seed)
    device = pick_device(cfg.device)
    pick_dtype(device, cfg.dtype)  # validates the dtype for this device early
    return load_model(cfg.model, device)


def check_prompts(rows: Sequence[dict], tokenizer, model, cfg: MathConfig) -> list[str]:
    """The rows' prompts as the model reads them (``cfg.prompt_template``), refused when one
    cannot be read or leaves no room for ``max_completion_length`` new tokens
    (``lm_model.check_prompt_lengths``)."""
    prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in rows]
    check_prompt_lengths(prompts, tokenizer, model, cfg.max_completion_length)
    return prompts


def checked_rows(
    cfg: MathConfig,
    model,
    tokenizer,
    train_rows: Sequence[dict] | None = None,
    eval_rows: Sequence[dict] | None = None,
    needs_answer: bool = True,
) -> tuple[Sequence[dict], list[dict], int]:
    """A run's training rows, its first ``eval_n`` held-out rows and their overlap count, every
    check in one place (``train_math``, ``trl_bridge.train_math_trl`` and the CLI run it):

    rows given, or loaded from ``cfg.dataset`` / ``cfg.eval_split``; fields present
    (``data.check_rows``; training rows need an ``answer`` only for the default rewards, as
    ``needs_answer`` says); evaluation prompts not seen in training (``data.check_held_out``,
    unless ``allow_eval_overlap``); every prompt readable and short enough (``check_prompts``).
    """
    if train_rows is None:
        train_rows = load_math_rows(cfg.dataset, "train")
    if eval_rows is None:
        eval_rows = load_eval_rows(cfg.dataset, cfg.eval_split, cfg.eval_n)[1]
    check_rows(train_rows, "training", needs_answer=needs_answer)
    check_rows(eval_rows, "evaluation", needs_answer=True)
    eval_rows = list(eval_rows)[: cfg.eval_n]
    where = f" (dataset={cfg.dataset!r}, eval_split={cfg.eval_split!r})"
    overlap = check_held_out(train_rows, eval_rows, cfg.allow_eval_overlap, where)
    for rows, name in ((train_rows, "training"), (eval_rows, "evaluation")):
        check_image_rows(rows, model, name, tokenizer)  # a VLM: one image per row
        check_prompts(rows, tokenizer, model, cfg)
    return train_rows, eval_rows, overlap


def trainer_for(cfg: MathConfig) -> type[LMTrainer]:
    """The trainer a config asks for: PPO for an ``LMPPOConfig``, GRPO otherwise."""
    return LMPPOTrainer if isinstance(cfg, LMPPOConfig) else LMGRPOTrainer


def training_batches(
    rows: Sequence[dict], prompts_per_step: int, seed: int
) -> Iterator[list[dict]]:
    """The rows of each step, ``prompts_per_step`` at a time, from fresh shuffled passes over
    ``rows`` (a pass's leftover rows open the next step): the order of every run with this seed."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    while True:
        while len(order) < prompts_per_step:
            order += torch.randperm(len(rows), generator=generator).tolist()
        yield [rows[i] for i in order[:prompts_per_step]]
        del order[:prompts_per_step]


def train_math(
    cfg: MathConfig,
    model=None,
    tokenizer=None,
    train_rows: Sequence[dict] | None = None,
    eval_rows: Sequence[dict] | None = None,
    reward_funcs: Sequence[RewardFunc] | None = None,
    reward_weights: Sequence[float] | None = None,
    out_dir: str | os.PathLike | None = None,
    progress: bool = True,
    on_step: Callable[[dict, CompletionGroups | None], None] | None = None,
    trainer_cls: type[LMTrainer] | None = None,
) -> tuple[LMTrainer, list[dict]]:
    """Train with GRPO (or PPO, for an ``LMPPOConfig``); returns the trainer (``.model``) and one
    metrics dict per step.

    Held-out greedy accuracy is measured before the first step and after the last (and every
    ``eval_every`` steps); evaluation time is not counted in ``train_s``. With ``out_dir`` the
    model is saved there (every ``save_every`` steps and at the end) with ``metrics.jsonl``.
    ``on_step(record, rollout)`` sees each record as it is logged, with the step's rollout
    (None for the evaluation before the first step): observers add their own fields to the
    record there. ``trainer_cls`` swaps the algorithm (``course.rft.RFTTrainer``); by default
    it follows the config (``trainer_for``).
    """
    if model is None or tokenizer is None:
        model, tokenizer = setup(cfg)
    else:
        set_seed(cfg.seed)
    train_rows, eval_rows, overlap = checked_rows(
        cfg, model, tokenizer, train_rows, eval_rows, needs_answer=reward_funcs is None
    )
    trainer = (trainer_cls or trainer_for(cfg))(cfg, model, tokenizer, reward_funcs, reward_weights)
    model = trainer.model  # with LoRA, the model wrapped with its adapters (saved as an adapter)

    metrics_file = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        metrics_file = (Path(out_dir) / "metrics.jsonl").open("w")
    history: list[dict] = []

    def log(record: dict, rollout: CompletionGroups | None = None) -> None:
        if on_step is not None:  # first: an observer's fields are logged with the record
            on_step(record, rollout)
        history.append(record)
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()

    def evaluate() -> dict[str, float]:  # not counted as training time
        metrics = evaluate_greedy(model, tokenizer, eval_rows, cfg)[0]
        return {f"eval_{name}": value for name, value in metrics.items()}

    log(
        {"step": 0, "train_s": 0.0, **evaluate(), "eval_n": len(eval_rows), "eval_overlap": overlap}
    )
    batches = training_batches(train_rows, cfg.prompts_per_step, cfg.seed)
    train_s = 0.0
    name = getattr(trainer, "name", "GRPO")
    if progress:  # the resolved settings first, as CleanRL prints its arguments
        tqdm.write(f"{name} settings: {cfg.summary()}", file=sys.stderr)
    bar = tqdm(total=cfg.max_steps, desc=f"{name} {Path(cfg.model).name}", disable=not progress)
    try:
        for step in range(1, cfg.max_steps + 1):
            record, rollout = trainer.step(next(batches))
            train_s += record["step_s"]
            record["train_s"] = round(train_s, 3)
            stop = cfg.time_budget_s > 0 and train_s >= cfg.time_budget_s
            if step == cfg.max_steps or stop or (cfg.eval_every and step % cfg.eval_every == 0):
                record.update(evaluate())
            record["peak_memory_mb"] = round(peak_memory_mb(trainer.device), 1)
            log(record, rollout)
            if out_dir is not None and cfg.save_every and step % cfg.save_every == 0:
                save_checkpoint(model, tokenizer, out_dir, cfg.to_dict())
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward_mean']:.2f}", kl=f"{record['kl']:.3f}")
            if stop:
                break
    finally:
        bar.close()
        if metrics_file is not None:
            metrics_file.close()
    if out_dir is not None:
        save_checkpoint(model, tokenizer, out_dir, cfg.to_dict())
    return trainer, history


def _completions_of(model, tokenizer, rows, cfg: MathConfig, batch_size: int, samples: int):
    """Yield (rows, rollout) in chunks: one greedy completion per row, or ``samples`` sampled at
    ``cfg.temperature`` / ``top_p``; prompts formatted and checked as in training."""
    check_rows(rows, "evaluation", needs_answer=True)
    device = next(model.parameters()).device
    amp = autocast(device, pick_dtype(device, cfg.dtype))
    eos_ids = eos_token_ids(model, tokenizer)
    per_call = max(1, batch_size // max(samples, 1))
    for start in range(0, len(rows), per_call):
        chunk = list(rows[start : start + per_call])
        prompts = check_prompts(chunk, tokenizer, model, cfg)
        yield (
            chunk,
            sample_completions(
                model,
                tokenizer,
                chunk,
                prompts,
                num_generations=max(samples, 1),
                max_new_tokens=cfg.max_completion_length,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                do_sample=samples > 0,
                eos_ids=eos_ids,
                amp=amp,
            ),
        )


@torch.no_grad()
def evaluate_greedy(
    model, tokenizer, rows: Sequence[dict], cfg: MathConfig, batch_size: int = 256
) -> tuple[dict[str, float], list[str]]:
    """One greedy completion per row, and what they show: ``accuracy`` (the share correct,
    ``accuracy_reward``), ``completion_length`` (mean tokens, EOS included) and
    ``reasoning_rate`` (the share with a non-empty ``<think>`` block, ``r1_format.py``).
    Prompts are formatted and cut as in training (``cfg``)."""
    completions: list[str] = []
    correct, tokens = 0.0, 0.0
    for chunk, rollout in _completions_of(model, tokenizer, rows, cfg, batch_size, samples=0):
        completions += rollout.completions
        correct += sum(accuracy_reward(rollout.completions, [r["answer"] for r in chunk]))
        tokens += rollout.completion_mask.sum().item()
    metrics = {
        "accuracy": correct / len(rows),
        "completion_length": tokens / len(rows),
        "reasoning_rate": reasoning_rate(completions),
    }
    return metrics, completions


def evaluate_accuracy(
    model, tokenizer, rows: Sequence[dict], cfg: MathConfig, batch_size: int = 256
) -> tuple[float, list[str]]:
    """Fraction of ``rows`` whose greedy completion is correct, and the completions
    (``evaluate_greedy``)."""
    metrics, completions = evaluate_greedy(model, tokenizer, rows, cfg, batch_size)
    return metrics["accuracy"], completions


@torch.no_grad()
def evaluate_samples(
    model,
    tokenizer,
    rows: Sequence[dict],
    cfg: MathConfig,
    samples: int,
    batch_size: int = 256,
    ks: Sequence[int] | None = None,
) -> dict[str, float]:
    """pass@1, pass@N and maj@N (``sampling_metrics``) of N = ``samples`` completions per row,
    sampled as in training (``cfg.temperature``, ``cfg.top_p``), averaged over the rows.

    With ``ks`` (each in 1..N): pass@k (the unbiased estimator, from all N samples) and maj@k
    (the vote of each row's first k samples) for every k instead.
    """
    if samples < 1:
        raise ValueError(f"samples must be at least 1, got {samples}")
    bad = [k for k in ks or () if not (isinstance(k, int) and 1 <= k <= samples)]
    if bad:
        raise ValueError(f"ks must be integers in 1..samples={samples}, got {bad}")
    pass_ks, maj_ks = (sorted({1, samples}), [samples]) if ks is None else (list(ks), list(ks))
    passes: dict[int, list[float]] = {k: [] for k in pass_ks}
    votes: dict[int, list[bool]] = {k: [] for k in maj_ks}
    for _, rollout in _completions_of(model, tokenizer, rows, cfg, batch_size, samples):
        correct = accuracy_reward(rollout.completions, [r["answer"] for r in rollout.rows])
        for start in range(0, len(correct), samples):
            c = int(sum(correct[start : start + samples]))
            values = [extract_value(t) for t in rollout.completions[start : start + samples]]
            gold = parse_gold(rollout.rows[start]["answer"])
            for k in pass_ks:
                passes[k].append(pass_at_k(samples, c, k))
            for k in maj_ks:
                vote = majority_vote(values[:k])
                votes[k].append(vote is not None and vote == gold)
    return {f"pass@{k}": statistics.fmean(v) for k, v in passes.items()} | {
        f"maj@{k}": statistics.fmean(v) for k, v in votes.items()
    }


def save_checkpoint(
    model,
    tokenizer,
    out_dir: str | os.PathLike,
    config: dict | None = None,
    state_dict: dict | None = None,
):
    """Write a Hugging Face checkpoint (safetensors, config, tokenizer) into ``out_dir``;
    ``state_dict`` replaces the model's own (a full one gathered from ZeRO-3 / FSDP shards).

    Every file is first written (and fsynced) to a temporary folder inside ``out_dir``, then
    moved into place with ``os.replace`` (atomic on one file system): a reader never sees a
    half-written file, and a save interrupted while writing leaves the previous checkpoint
    intact. The moves are atomic file by file, not as a set; the weights move last, and within
    one run they are the only file whose content changes between saves.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".saving-", dir=out))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp, state_dict=state_dict)
            tokenizer.save_pretrained(tmp)
        if config is not None:
            (tmp / "grpo_config.json").write_text(json.dumps(config, indent=2) + "\n")
        for path in tmp.iterdir():  # on disk before any old file is replaced
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        # weights last: within a run only they (and nothing the loader reads first) change
        for path in sorted(tmp.iterdir(), key=lambda p: p.suffix == ".safetensors"):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_merged(adapter_dir: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """``--merge``: the LoRA checkpoint in ``adapter_dir`` written as one ordinary model (the
    adapter merged into its base's weights, ``lora.load_adapter_merged``) with its tokenizer,
    into ``out_dir``: a folder any transformers code loads, without peft."""
    model, tokenizer = load_model(str(adapter_dir), torch.device("cpu"))
    save_checkpoint(model, tokenizer, out_dir)
    return Path(out_dir)
