"""The same run in TRL: map a ``MathConfig`` onto TRL's ``GRPOConfig`` and ``GRPOTrainer``.

When a learner outgrows one machine, the reward functions and data of this course plug into
TRL unchanged; this module shows which TRL setting matches which of ours, and is what the
benchmark, the parity tests and notebook 06 use to run TRL "with the same settings".

Settings that differ from TRL's defaults, and why:

- ``bf16`` / ``fp16`` from ``device.pick_dtype``, the rule our trainer uses: float32 on a CPU
  (TRL otherwise autocasts to bfloat16 there: log-probs then differ from float32 by about 0.03,
  and a step is several times slower), bfloat16 on GPUs that compute in it natively, float16
  with loss scaling on the others (a T4, a V100);
- ``gradient_checkpointing`` as ours (TRL's default is True), ``lr_scheduler_type`` and
  ``weight_decay`` as ours, no warm-up: the same update rule;
- ``max_steps = max_steps * num_iterations`` and ``ref_model_sync_steps = ref_update_every *
  num_iterations``: TRL counts optimizer steps, we count sampled batches (each gives
  ``num_iterations`` optimizer steps);
- ``generation_batch_size = prompts_per_step * num_generations``, split into
  ``gradient_accumulation_steps`` micro-batches: one TRL optimizer step samples and learns from
  the same batch as one of ours.

TRL samples from the chat-formatted prompt (``cfg.prompt_template``); the reward functions see
the dataset's own prompt (``with_dataset_prompts``), as they do in our trainer. Every setting
derived here is refused by ``--trl`` (``COURSE_SETTINGS``), so the two can never disagree.

``train_math_trl`` is ``lm_train.train_math`` on TRL: the same rows, rewards, held-out accuracy,
``metrics.jsonl`` and checkpoint, so ``grpo-minimal math --backend trl`` can be launched with
``torchrun --nproc_per_node N`` for data parallelism (one rank per process; gloo on a CPU).

Needs ``trl`` (in the ``dev`` extra).
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from .math_config import MathConfig


def world_size() -> int:
    """Processes in this run: ``WORLD_SIZE`` as set by ``torchrun`` (1 when not launched by it)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main_process() -> bool:
    """Rank 0 (or no launcher): the process that evaluates, writes files and prints."""
    return int(os.environ.get("RANK", "0")) == 0


def end_process_group() -> None:
    """Every rank, once training is done: wait for the others, then destroy the process group.
    A rank that exits with its gloo group alive can abort at interpreter shutdown ("terminate
    called without an active exception", SIGABRT: a gloo worker thread still holds work; see
    pytorch/pytorch#190489). It did, once, in this project's CI, failing a finished run."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def per_device_batch_size(cfg: MathConfig, processes: int) -> int:
    """Completions in one micro-batch of one process. TRL's ``generation_batch_size`` is global
    (all processes): each step's ``prompts_per_step * num_generations`` completions are split
    into ``gradient_accumulation_steps`` micro-batches on each of the ``processes``."""
    batch = cfg.prompts_per_step * cfg.num_generations
    if batch % (cfg.gradient_accumulation_steps * processes):
        raise ValueError(
            f"prompts_per_step x num_generations = {batch} completions per step must split into "
            f"gradient_accumulation_steps ({cfg.gradient_accumulation_steps}) x processes "
            f"({processes}) equal micro-batches"
        )
    return batch // (cfg.gradient_accumulation_steps * processes)


def trl_config_values(cfg: MathConfig, output_dir: str, processes: int | None = None) -> dict:
    """The TRL ``GRPOConfig`` settings that carry the meaning of ``cfg`` (module docstring), for
    ``processes`` data-parallel ranks (``world_size()`` unless given).

    Every key here is decided by the course (the ``MathConfig`` or the command line), so
    ``--trl`` refuses it (``check_trl_overrides``): the two can never disagree.
    """
    from .device import pick_device, pick_dtype
    from .rewards import reward_functions

    device = pick_device(cfg.device)
    dtype = pick_dtype(device, cfg.dtype)  # the same precision rule as our trainer
    batch = cfg.prompts_per_step * cfg.num_generations  # completions sampled per step
    return dict(
        output_dir=output_dir,
        use_cpu=device.type == "cpu",
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,  # the Trainer then scales the loss, as grad_scaler does
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_steps=cfg.max_steps * cfg.num_iterations,  # TRL counts optimizer steps
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=0,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm if cfg.max_grad_norm > 0 else 1e9,
        per_device_train_batch_size=per_device_batch_size(cfg, processes or world_size()),
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        generation_batch_size=batch,
        activation_checkpointing=cfg.gradient_checkpointing,
        num_generations=cfg.num_generations,
        max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        loss_type=cfg.loss_type,
        scale_rewards=cfg.scale_rewards,
        num_iterations=cfg.num_iterations,
        use_bias_correction_kl=cfg.use_bias_correction_kl,
        sync_ref_model=cfg.ref_update_every > 0 and cfg.beta > 0,
        # TRL counts optimizer steps: num_iterations of them per sampled batch
        ref_model_sync_steps=max(cfg.ref_update_every, 1) * cfg.num_iterations,
        ref_model_mixup_alpha=1.0,  # the reference becomes a copy of the policy, as ours
        reward_weights=reward_functions(format_weight=cfg.format_weight)[1],
        # the course's models run without dropout (lm_model.load_model); only LoRA's own, when
        # lora_dropout asks for it, stays on, as on the grpo_minimal backend
        disable_dropout=not (cfg.lora_r and cfg.lora_dropout > 0),
        logging_steps=cfg.num_iterations,  # one log per sampled batch, as our steps
        disable_tqdm=True,
    )


# our defaults for TRL settings the course has no name for: --trl may change them
TRL_ONLY_DEFAULTS = {"report_to": "none", "save_strategy": "no", "dataloader_num_workers": 0}


# settings derived above or set from the command line (--no-progress): --trl refuses them
COURSE_SETTINGS = frozenset(trl_config_values(MathConfig(device="cpu"), "", processes=1)) | {
    "gradient_checkpointing",  # activation_checkpointing's other name in TRL
    "steps_per_generation",  # derived by TRL from generation_batch_size
}


def trl_grpo_config(cfg: MathConfig, output_dir: str, **overrides):
    """A ``trl.GRPOConfig`` with the meaning of ``cfg``; ``overrides`` are TRL-only settings
    (``use_vllm``, ...), or course settings where a caller replaces one knowingly
    (``logging_steps``, ``disable_tqdm``, ``reward_weights`` for its own reward functions)."""
    from trl import GRPOConfig as TRLGRPOConfig

    return TRLGRPOConfig(**{**TRL_ONLY_DEFAULTS, **trl_config_values(cfg, output_dir), **overrides})


def make_trl_callbacks(time_budget_s: float = 0.0):
    """A callback that records the wall time of every step and stops after ``time_budget_s``."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        """``step_s``: seconds of each training step; stops once their sum passes the budget."""

        def __init__(self) -> None:
            self.step_s: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.step_s.append(time.perf_counter() - self._start)
            if time_budget_s > 0 and sum(self.step_s) >= time_budget_s:
                control.should_training_stop = True

    return StepClock()


DATASET_PROMPT = "dataset_prompt"
"""The column that carries each row's own prompt beside the chat-formatted one TRL samples from."""


def with_dataset_prompts(func):
    """``func`` called with the dataset's prompts, as our trainer calls it (``rewards.
    score_completions``), not the chat-formatted text TRL's ``prompt`` column holds."""

    @functools.wraps(func)
    def call(prompts, completions, **kwargs):
        return func(prompts=kwargs.pop(DATASET_PROMPT, prompts), completions=completions, **kwargs)

    return call


def make_trl_trainer(
    cfg: MathConfig,
    model,
    tokenizer,
    train_rows: Sequence[dict],
    output_dir: str,
    reward_funcs=None,
    time_budget_s: float = 0.0,
    **overrides,
):
    """A TRL ``GRPOTrainer`` on ``train_rows`` with our settings; returns (trainer, clock).

    Prompts are formatted with ``cfg.prompt_template`` (TRL samples from that text) and reward
    functions see the dataset's own prompts, as in ``lm_grpo``. A vision-language model's rows
    (``tokenizer`` is its processor) go as TRL takes them: the prompt a one-turn conversation,
    the ``image`` column beside it; TRL then encodes both with the processor. Without ``reward_funcs``: ours
    (``rewards.reward_functions``, weighted by ``cfg.format_weight``); given ones weigh 1 each.
    """
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    from .lm_model import format_prompt, quiet_transformers
    from .lora import lora_config
    from .rewards import reward_functions
    from .vlm import is_processor

    if reward_funcs is None:
        reward_funcs = reward_functions(format_weight=cfg.format_weight)[0]
    else:
        overrides.setdefault("reward_weights", None)  # TRL's default: 1 each
    funcs = [
        f if isinstance(f, (str, torch.nn.Module)) else with_dataset_prompts(f)
        for f in reward_funcs
    ]
    if is_processor(tokenizer) and cfg.prompt_template != "plain":
        raise ValueError(
            "prompt_template: on the TRL backend a vision-language model's prompt is one chat "
            f"turn with its image (TRL applies the processor's template); use plain, got "
            f"{cfg.prompt_template!r}"
        )
    rows = [
        {
            **row,
            # a VLM: the conversation TRL asks for, TRL puts the row's "image" before the text
            "prompt": [{"role": "user", "content": row["prompt"]}]
            if is_processor(tokenizer)
            else format_prompt(row["prompt"], tokenizer, cfg.prompt_template),
            DATASET_PROMPT: row["prompt"],
        }
        for row in train_rows
    ]
    clock = make_trl_callbacks(time_budget_s)
    # LoRA: TRL wraps the model with the same peft adapters, and with beta > 0 computes the
    # reference with them disabled, as lm_grpo does (lora.py)
    peft_config = (
        lora_config(cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout, cfg.lora_target_modules)
        if cfg.lora_r
        else None
    )
    with quiet_transformers():  # TRL loads a reference model when beta > 0
        trainer = GRPOTrainer(
            model=model,
            peft_config=peft_config,
            reward_funcs=funcs,
            args=trl_grpo_config(cfg, output_dir, **overrides),
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[clock],
        )
    trainer.remove_callback(PrinterCallback)  # metrics stay in trainer.state.log_history
    return trainer, clock


def check_trl_overrides(overrides: dict) -> dict:
    """Refuse settings that are not TRL ``GRPOConfig`` fields, or that the course decides
    (``COURSE_SETTINGS``: a setting the course has a name for is given by that name, ``--beta``,
    so the two can never disagree)."""
    import dataclasses

    from trl import GRPOConfig as TRLGRPOConfig

    fields = {f.name for f in dataclasses.fields(TRLGRPOConfig)}
    for key in overrides:
        if key not in fields:
            raise ValueError(f"--trl {key}: not a field of TRL's GRPOConfig")
        if key in COURSE_SETTINGS:
            raise ValueError(
                f"--trl {key}: set by grpo-minimal from the MathConfig (or --no-progress); "
                "use its grpo-minimal flag instead"
            )
    return overrides


def parse_trl_overrides(pairs: Sequence[str]) -> dict:
    """``["use_vllm=true", "vllm_mode=colocate"]`` -> ``{"use_vllm": True, "vllm_mode": ...}``,
    checked by ``check_trl_overrides``. Values are JSON (``true``, ``0.3``, ``null``) or else
    strings."""
    overrides = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--trl takes KEY=VALUE (a TRL GRPOConfig field), got {pair!r}")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return check_trl_overrides(overrides)


# TRL's logged name -> ours (lm_grpo.LMGRPOTrainer.step), for metrics.jsonl and plot_history
TRL_METRIC_NAMES = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_zero_std",
    "kl": "kl",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "entropy": "entropy",
    "clip_ratio/region_mean": "clip_fraction",
    "completions/mean_length": "completion_length",
    "completions/clipped_ratio": "truncated_fraction",
}


def train_math_trl(
    cfg: MathConfig,
    model,
    tokenizer,
    train_rows: Sequence[dict],
    eval_rows: Sequence[dict],
    out_dir: str | os.PathLike,
    progress: bool = True,
    **overrides,
) -> tuple[object, list[dict]]:
    """``lm_train.train_math`` on TRL's ``GRPOTrainer``: returns (trainer, history).

    Held-out greedy accuracy before the first step and after the last (and every ``eval_every``
    steps), one ``metrics.jsonl`` record per sampled batch (TRL's names mapped to ours by
    ``TRL_METRIC_NAMES``) and an atomic checkpoint with ``grpo_config.json`` (also every
    ``save_every`` steps), all written by rank 0 only. Under ``torchrun`` every rank trains on
    its share of each batch (DDP: gradients averaged across ranks). The evaluations during
    training run on rank 0's own model: right in one process and under DDP; under ZeRO-3 or
    FSDP, whose ranks hold shards, set ``eval_every=0`` (the final accuracy is measured on the
    saved checkpoint).
    ``overrides`` are TRL ``GRPOConfig`` settings with no ``MathConfig`` name (``use_vllm``, ...).
    """
    from transformers import TrainerCallback

    from .lm_model import load_model
    from .lm_train import checked_rows, evaluate_greedy, save_checkpoint

    def evaluate(policy) -> dict[str, float]:  # held-out greedy metrics, as train_math logs them
        metrics = evaluate_greedy(policy, tokenizer, eval_rows, cfg)[0]
        return {f"eval_{name}": value for name, value in metrics.items()}

    check_trl_overrides(overrides)
    main = is_main_process()
    train_rows, eval_rows, overlap = checked_rows(cfg, model, tokenizer, train_rows, eval_rows)
    before = evaluate(model) if main else {"eval_accuracy": None}
    trainer, clock = make_trl_trainer(
        cfg,
        model,
        tokenizer,
        train_rows,
        str(out_dir),
        time_budget_s=cfg.time_budget_s,
        **overrides,
        disable_tqdm=not (progress and main),
    )
    evals: dict[int, dict[str, float]] = {}

    class EveryFewSteps(TrainerCallback):
        """``eval_every`` and ``save_every``, in our steps (TRL takes ``num_iterations``
        optimizer steps per sampled batch); the last step's are done after training. Runs after
        the step clock, so evaluation and saving are not training time."""

        def on_step_end(self, args, state, control, **kwargs):
            step, rest = divmod(state.global_step, cfg.num_iterations)
            if rest or step >= cfg.max_steps or control.should_training_stop:
                return
            if cfg.save_every and step % cfg.save_every == 0:  # every rank gathers its shards
                state_dict = trainer.accelerator.get_state_dict(trainer.model_wrapped)
                if main:
                    save_checkpoint(trainer.model, tokenizer, out_dir, cfg.to_dict(), state_dict)
            if cfg.eval_every and step % cfg.eval_every == 0 and main:
                evals[step] = evaluate(trainer.model)

    trainer.add_callback(EveryFewSteps())
    trainer.train()
    history = [
        {"step": 0, "train_s": 0.0, **before, "eval_n": len(eval_rows), "eval_overlap": overlap}
    ]
    for entry in trainer.state.log_history:
        if "reward" not in entry:  # the end-of-training summary
            continue
        optimizer_steps = entry["step"]
        record = {"step": optimizer_steps // cfg.num_iterations}
        record.update(
            {ours: entry[name] for name, ours in TRL_METRIC_NAMES.items() if name in entry}
        )
        record["train_s"] = round(sum(clock.step_s[:optimizer_steps]), 3)
        record.update(evals.get(record["step"], {}))
        history.append(record)
    # Every rank takes part: ZeRO-3 and FSDP gather their shards into one full state dict here.
    state = trainer.accelerator.get_state_dict(trainer.model_wrapped)
    if not main:
        return trainer, history
    out = Path(out_dir)
    save_checkpoint(trainer.model, tokenizer, out, cfg.to_dict(), state_dict=state)
    # Held-out accuracy of the checkpoint as written (trainer.model may hold only shards)
    saved, _ = load_model(str(out), next(model.parameters()).device)
    history[-1].update(evaluate(saved))
    with (out / "metrics.jsonl").open("w") as fh:
        fh.writelines(json.dumps(record) + "\n" for record in history)
    return trainer, history
