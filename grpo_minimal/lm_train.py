"""Training a causal LM with GRPO: the run's configuration, the loop, evaluation, checkpoints.

``train_math`` draws ``prompts_per_step`` rows per step from shuffled passes over the training
data, runs ``LMGRPOTrainer.step`` (``lm_grpo.py``, the algorithm), measures held-out greedy
accuracy before the first step and after the last (``evaluate_accuracy``), and writes metrics and
atomic Hugging Face checkpoints (``save_checkpoint``). ``MathConfig`` holds every setting.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import set_seed

from .config import GRPOConfig, check_choice, check_range, option, override
from .data import check_held_out, check_rows, load_eval_rows, load_math_rows
from .device import DEVICE_NAMES, DTYPE_NAMES, autocast, peak_memory_mb, pick_device, pick_dtype
from .lm_grpo import LMGRPOTrainer, sample_completions
from .lm_model import (
    check_prompt_lengths,
    eos_token_ids,
    format_prompt,
    load_model,
    quiet_transformers,
)
from .rewards import RewardFunc, accuracy_reward, extract_value, parse_gold
from .sampling_metrics import majority_vote, pass_at_k

PROMPT_TEMPLATES = ("plain", "r1", "boxed")


@dataclass
class MathConfig(GRPOConfig):
    """GRPO on a causal LM with verifiable math rewards (``lm_grpo.py``, ``lm_train.py``).

    The defaults are the CPU lesson of notebook 06: the shipped tiny model (``data/tiny_math_lm``)
    learns two-digit addition from the accuracy reward. ``MathConfig.for_device()`` returns them
    on a CPU and the real-model settings of ``GPU_DEFAULTS`` (Qwen2.5-0.5B-Instruct on GSM8K) on a
    CUDA GPU; keyword arguments override either. Names follow TRL's ``GRPOConfig`` where the idea
    is the same (``max_completion_length``, ``temperature``, ``top_p``, ``max_steps``,
    ``gradient_accumulation_steps``, ``gradient_checkpointing``); one step samples
    ``prompts_per_step * num_generations`` completions, TRL's ``per_device_train_batch_size``.
    ``beta`` defaults to 0.04 (DeepSeekMath's value; TRL's default is 0) so that the lesson can
    show the KL to the reference model.
    """

    model: str = option(
        "tiny",
        "a local Hugging Face model folder or a Hub id; tiny means the shipped data/tiny_math_lm",
    )
    dataset: str = option(
        "arithmetic",
        "arithmetic, arithmetic_mix, gsm8k (Hub), gsm8k_sample or a .jsonl file with prompt and"
        " answer fields",
    )
    eval_split: str = option(
        "test",
        "split used for held-out accuracy (train or test), or a .jsonl file of held-out problems",
    )
    prompt_template: str = option(
        "plain",
        "plain: the dataset prompt as it is; r1: the chat template with a system prompt asking "
        "for <think>...</think><answer>...</answer>; boxed: the chat template, asking for "
        "\\boxed{answer}",
    )
    prompts_per_step: int = option(
        8, "distinct prompts per step; each gets num_generations completions"
    )
    max_completion_length: int = option(
        5, "new tokens sampled per completion at most (a completion also ends at EOS)"
    )
    temperature: float = option(
        1.0, "sampling temperature; log-probs are computed at the same temperature, as in TRL"
    )
    top_p: float = option(
        1.0,
        "nucleus sampling: keep the smallest set of tokens with this much probability; 1 keeps all",
    )
    max_steps: int = option(600, "GRPO steps (one sampled batch each)")
    time_budget_s: float = option(
        0.0, "stop once training has run this many seconds; 0 means no limit"
    )
    gradient_accumulation_steps: int = option(
        1,
        "split each batch into this many micro-batches of whole groups (one backward each) "
        "before the optimizer step: the same update with less memory; must divide "
        "prompts_per_step",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute activations in the backward pass instead of storing them (less GPU memory)",
    )
    weight_decay: float = option(0.0, "AdamW weight decay (TRL's default is 0)")
    lr_scheduler_type: str = option(
        "linear", "linear: decay the learning rate to 0 over max_steps (TRL's default); constant"
    )
    format_weight: float = option(
        0.0,
        "reward = accuracy + format_weight * format (format_reward: the strict <think>/<answer>"
        " form); 0 uses the accuracy reward alone",
    )
    eval_n: int = option(
        500, "held-out problems for greedy accuracy (the first eval_n of the split)"
    )
    allow_eval_overlap: bool = option(
        False,
        'measure "held-out" accuracy even when evaluation prompts are also training prompts '
        "(the overlap is counted and logged); False refuses such a run",
    )
    eval_every: int = option(
        100, "also measure held-out accuracy every this many steps (0: only before and after)"
    )
    save_every: int = option(
        0, "write a checkpoint to the output folder every this many steps (0: only at the end)"
    )
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu, cuda or cuda:N")
    dtype: str = option(
        "auto",
        "compute precision: auto (bfloat16 on GPUs that support it, else float16; float32 on "
        "CPU), float32, bfloat16 or float16; weights stay float32",
    )

    num_generations: int = override(GRPOConfig, "num_generations", 8)
    loss_type: str = override(GRPOConfig, "loss_type", "dapo")
    beta: float = override(GRPOConfig, "beta", 0.04)
    learning_rate: float = override(GRPOConfig, "learning_rate", 1e-4)

    # Not fields (no annotation): the real-model configuration used on a CUDA GPU.
    GPU_DEFAULTS = {
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "dataset": "gsm8k",
        "prompt_template": "r1",
        "format_weight": 0.2,
        "max_completion_length": 256,
        "prompts_per_step": 8,
        "num_generations": 8,
        "gradient_accumulation_steps": 8,
        "gradient_checkpointing": True,
        "learning_rate": 1e-6,
        "beta": 0.04,
        "temperature": 0.9,
        "max_steps": 200,
        "eval_n": 200,
        "eval_every": 50,
    }

    @classmethod
    def for_device(cls, device: str = "auto", **overrides) -> MathConfig:
        """The CPU defaults, or ``GPU_DEFAULTS`` when ``device`` is (or auto-detects) CUDA.

        Asking for the shipped tiny model (``model="tiny"``) keeps the CPU lesson's settings on
        any device: the real-model settings (chat template, long completions) do not fit it.
        """
        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        real_model = overrides.get("model", cls.GPU_DEFAULTS.get("model")) != "tiny"
        values = dict(cls.GPU_DEFAULTS) if cuda and real_model else {}
        values.update(overrides)
        return cls(device=device, **values)

    def validate(self) -> None:
        super().validate()
        for name in ("model", "dataset", "eval_split"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        check_choice("prompt_template", self.prompt_template, PROMPT_TEMPLATES)
        check_range("prompts_per_step", self.prompts_per_step, 1)
        check_range("max_completion_length", self.max_completion_length, 1)
        check_range("temperature", self.temperature, 0.0, low_open=True)
        check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_range("max_steps", self.max_steps, 1)
        check_range("time_budget_s", self.time_budget_s, 0.0)
        check_range("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        if self.prompts_per_step % self.gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps must divide prompts_per_step={self.prompts_per_step}"
                f" (a micro-batch holds whole groups), got {self.gradient_accumulation_steps}"
            )
        check_range("weight_decay", self.weight_decay, 0.0)
        check_choice("lr_scheduler_type", self.lr_scheduler_type, ("linear", "constant"))
        check_range("format_weight", self.format_weight, 0.0)
        check_range("eval_n", self.eval_n, 1)
        check_range("eval_every", self.eval_every, 0)
        check_range("save_every", self.save_every, 0)
        if self.device not in DEVICE_NAMES and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be one of {DEVICE_NAMES} or cuda:N, got {self.device!r}")
        check_choice("dtype", self.dtype, DTYPE_NAMES)
        if not isinstance(self.gradient_checkpointing, bool):
            raise ValueError(
                f"gradient_checkpointing must be True or False, got {self.gradient_checkpointing!r}"
            )


def setup(cfg: MathConfig):
    """Seed, pick device and dtype, load the model and tokenizer: ``(model, tokenizer)``."""
    set_seed(cfg.seed)
    device = pick_device(cfg.device)
    pick_dtype(device, cfg.dtype)  # validates the dtype for this device early
    return load_model(cfg.model, device)


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
    on_step: Callable[[dict], None] | None = None,
    trainer_cls: type[LMGRPOTrainer] = LMGRPOTrainer,
) -> tuple[LMGRPOTrainer, list[dict]]:
    """Train with GRPO; returns the trainer (``.model``) and one metrics dict per step.

    Held-out greedy accuracy is measured before the first step and after the last (and every
    ``eval_every`` steps); evaluation time is not counted in ``train_s``. With ``out_dir`` the
    model is saved there (every ``save_every`` steps and at the end) with ``metrics.jsonl``.
    ``trainer_cls`` swaps the step (``rft.RFTTrainer``: rejection-sampling fine-tuning).
    """
    if model is None or tokenizer is None:
        model, tokenizer = setup(cfg)
    else:
        set_seed(cfg.seed)
    if train_rows is None:
        train_rows = load_math_rows(cfg.dataset, "train")
    if eval_rows is None:
        eval_rows = load_eval_rows(cfg.dataset, cfg.eval_split, cfg.eval_n)[1]
    check_rows(train_rows, "training", needs_answer=reward_funcs is None)
    check_rows(eval_rows, "evaluation", needs_answer=True)
    eval_rows = list(eval_rows)[: cfg.eval_n]
    overlap = check_held_out(train_rows, eval_rows, cfg.allow_eval_overlap)
    trainer = trainer_cls(cfg, model, tokenizer, reward_funcs, reward_weights)
    prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in train_rows]
    check_prompt_lengths(prompts, tokenizer, model, cfg.max_completion_length)

    metrics_file = None
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        metrics_file = (Path(out_dir) / "metrics.jsonl").open("w")
    history: list[dict] = []

    def log(record: dict) -> None:
        history.append(record)
        if metrics_file is not None:
            metrics_file.write(json.dumps(record) + "\n")
            metrics_file.flush()
        if on_step is not None:
            on_step(record)

    def evaluate() -> float:  # held-out greedy accuracy; its time is not training time
        return evaluate_accuracy(model, tokenizer, eval_rows, cfg)[0]

    log({"step": 0, "train_s": 0.0, "eval_accuracy": evaluate(), "eval_n": len(eval_rows),
         "eval_overlap": overlap})  # fmt: skip
    generator = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []
    train_s = 0.0
    bar = tqdm(total=cfg.max_steps, desc="GRPO " + Path(cfg.model).name, disable=not progress)
    try:
        for step in range(1, cfg.max_steps + 1):
            while len(order) < cfg.prompts_per_step:  # fresh shuffled passes over the data
                order += torch.randperm(len(train_rows), generator=generator).tolist()
            batch = [train_rows[i] for i in order[: cfg.prompts_per_step]]
            del order[: cfg.prompts_per_step]
            record, _ = trainer.step(batch)
            train_s += record["step_s"]
            record["train_s"] = round(train_s, 3)
            if cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.max_steps:
                record["eval_accuracy"] = evaluate()
            stop = cfg.time_budget_s > 0 and train_s >= cfg.time_budget_s
            if step == cfg.max_steps or stop:
                record["eval_accuracy"] = evaluate()
            record["peak_memory_mb"] = round(peak_memory_mb(trainer.device), 1)
            log(record)
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
        prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in chunk]
        check_prompt_lengths(prompts, tokenizer, model, cfg.max_completion_length)
        yield chunk, sample_completions(
            model, tokenizer, chunk, prompts, num_generations=max(samples, 1),
            max_new_tokens=cfg.max_completion_length, temperature=cfg.temperature,
            top_p=cfg.top_p, do_sample=samples > 0, eos_ids=eos_ids, amp=amp,
        )  # fmt: skip


@torch.no_grad()
def evaluate_accuracy(
    model, tokenizer, rows: Sequence[dict], cfg: MathConfig, batch_size: int = 256
) -> tuple[float, list[str]]:
    """Fraction of ``rows`` whose greedy completion is correct (``accuracy_reward``), and the
    completions. Prompts are formatted and cut as in training (``cfg``)."""
    completions: list[str] = []
    correct = 0.0
    for chunk, rollout in _completions_of(model, tokenizer, rows, cfg, batch_size, samples=0):
        completions += rollout.completions
        correct += sum(accuracy_reward(rollout.completions, [r["answer"] for r in chunk]))
    return correct / len(rows), completions


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
