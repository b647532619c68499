"""The same run in TRL: map a ``MathConfig`` onto TRL's ``GRPOConfig`` and ``GRPOTrainer``.

When a learner outgrows one machine, the reward functions and data of this course plug into
TRL unchanged; this module shows which TRL setting matches which of ours, and is what the
benchmark, the parity tests and notebook 06 use to run TRL "with the same settings".

Settings that differ from TRL's defaults, and why:

- ``bf16=False``: on a CPU, TRL otherwise autocasts to bfloat16 (log-probs then differ from
  float32 by about 0.03, and a step is several times slower);
- ``gradient_checkpointing`` as ours (TRL's default is True), ``lr_scheduler_type`` and
  ``weight_decay`` as ours, no warm-up: the same update rule;
- ``max_steps = max_steps * num_iterations`` and ``ref_model_sync_steps = ref_update_every *
  num_iterations``: TRL counts optimizer steps, we count sampled batches (each gives
  ``num_iterations`` optimizer steps);
- ``generation_batch_size = prompts_per_step * num_generations``, split into
  ``gradient_accumulation_steps`` micro-batches: one TRL optimizer step samples and learns from
  the same batch as one of ours.

Needs ``trl`` (in the ``dev`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .lm_train import MathConfig


def trl_grpo_config(cfg: MathConfig, output_dir: str, **overrides):
    """A ``trl.GRPOConfig`` with the meaning of ``cfg`` (see the module docstring)."""
    import torch
    from trl import GRPOConfig as TRLGRPOConfig

    cpu = cfg.device == "cpu" or (cfg.device == "auto" and not torch.cuda.is_available())
    auto_gpu = cfg.dtype == "auto" and not cpu
    bf16 = cfg.dtype == "bfloat16" or (auto_gpu and torch.cuda.is_bf16_supported())
    fp16 = cfg.dtype == "float16" or (auto_gpu and not bf16)
    batch = cfg.prompts_per_step * cfg.num_generations  # completions sampled per step
    values = dict(
        output_dir=output_dir,
        use_cpu=cpu,
        bf16=bf16,
        fp16=fp16,
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_steps=cfg.max_steps * cfg.num_iterations,  # TRL counts optimizer steps
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=0,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm if cfg.max_grad_norm > 0 else 1e9,
        per_device_train_batch_size=batch // cfg.gradient_accumulation_steps,
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
        ref_model_mixup_alpha=1.0,
        disable_dropout=True,
        report_to="none",
        save_strategy="no",
        logging_steps=10,  # TRL's default; metrics are in trainer.state.log_history
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    values.update(overrides)
    return TRLGRPOConfig(**values)


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
    """A TRL ``GRPOTrainer`` on ``train_rows`` with our settings; returns (trainer, clock)."""
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOTrainer

    from .lm_model import quiet_transformers
    from .rewards import reward_functions

    if reward_funcs is None:
        reward_funcs, weights = reward_functions(format_weight=cfg.format_weight)
        overrides.setdefault("reward_weights", weights)
    clock = make_trl_callbacks(time_budget_s)
    with quiet_transformers():  # TRL loads a reference model when beta > 0
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=list(reward_funcs),
            args=trl_grpo_config(cfg, output_dir, **overrides),
            train_dataset=Dataset.from_list([dict(r) for r in train_rows]),
            processing_class=tokenizer,
            callbacks=[clock],
        )
    trainer.remove_callback(PrinterCallback)  # metrics stay in trainer.state.log_history
    return trainer, clock
