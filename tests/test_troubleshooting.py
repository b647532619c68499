"""The problems of docs/troubleshooting.md, each shown on the shipped tiny model: the symptom, the
metric that shows it, and what the knob changes."""

from __future__ import annotations

import pytest
import torch
from test_lm import fresh_trainer, position_reward

from grpo_minimal.completions import truncated_fraction
from grpo_minimal.data import load_math_rows
from grpo_minimal.lm_train import MathConfig
from grpo_minimal.rewards import accuracy_reward, format_reward, score_completions

ROWS = load_math_rows("arithmetic", "train")[:8]
FLOAT32_EPS = torch.finfo(torch.float32).eps


def test_the_loss_is_zero_but_the_gradient_is_not():
    """One update per batch: the ratio is exactly 1 and a group's advantages sum to 0, so the
    `grpo` loss is 0 up to rounding; its gradient, sum_i A_i grad log pi(o_i), is not."""
    trainer = fresh_trainer(reward_funcs=[position_reward], beta=0.0, loss_type="grpo")
    record, _ = trainer.step(ROWS[:2])
    # 8 advantages of size <= 2 summed in float32
    assert abs(record["loss"]) <= 8 * 2 * FLOAT32_EPS
    assert record["grad_norm"] > 0.1


def test_cut_completions_flatten_the_reward():
    """Two-digit sums need three tokens with the EOS: at max_completion_length=2 every completion
    is cut, every reward is 0, every group is flat and the gradient is exactly 0."""
    cut = fresh_trainer(beta=0.0, max_completion_length=2, prompts_per_step=8, num_generations=8)
    record, _ = cut.step(ROWS)
    assert record["truncated_fraction"] == 1.0
    assert record["reward_mean"] == 0.0 and record["frac_zero_std"] == 1.0
    assert record["grad_norm"] == 0.0
    room = fresh_trainer(beta=0.0, max_completion_length=5, prompts_per_step=8, num_generations=8)
    record, _ = room.step(ROWS)  # the lesson's length: most completions end, rewards vary
    assert record["truncated_fraction"] < 0.5 and record["frac_zero_std"] < 1.0
    assert record["grad_norm"] > 0


def test_truncated_fraction_by_hand():
    ids = torch.tensor([[5, 6, 2], [5, 2, 0], [5, 6, 7], [2, 0, 0]])  # EOS = 2
    assert truncated_fraction(ids, [2]) == 0.25
    assert truncated_fraction(ids, [2, 7]) == 0.0  # chat models end on any of several ids


def test_a_batch_that_does_not_split_is_refused():
    with pytest.raises(ValueError, match="gradient_accumulation_steps must divide"):
        MathConfig(prompts_per_step=6, gradient_accumulation_steps=4)
    from trl import GRPOConfig as TRLGRPOConfig

    with pytest.raises(ValueError, match="divisible by num_generations"):
        TRLGRPOConfig(
            output_dir="unused",
            use_cpu=True,
            per_device_train_batch_size=6,
            num_generations=4,
            report_to="none",
        )


def test_bf16_on_a_cpu_changes_the_log_probs():
    """bf16 keeps 8 bits of mantissa: log-probs move by up to a few hundredths, so a ratio of
    bf16 and float32 log-probs is not 1 (on a CPU bf16 is also no faster: bench/llm_step.py)."""
    exact = fresh_trainer(prompts_per_step=8, num_generations=8)
    rounded = fresh_trainer(prompts_per_step=8, num_generations=8, dtype="bfloat16")
    rollout = exact.sample(ROWS)
    mask = rollout.completion_mask.bool()
    gap = exact.frozen_logps(rollout) - rounded.frozen_logps(rollout)
    gap = gap.abs()[mask]
    assert gap.max() > 2**-10  # far above float32 rounding (~1e-7 relative)
    assert gap.max() < 0.5  # and still the same model


def test_a_chat_template_that_opens_think_breaks_the_format_reward():
    """DeepSeek-R1-style templates end the prompt with `<think>`: the completion then starts
    inside the block, and the strict format reward scores every completion 0 (flat)."""
    completion = "2 plus 3 is 5</think><answer>5</answer>"
    assert format_reward([completion]) == [0.0]
    assert format_reward(["<think>" + completion]) == [1.0]  # score what the model saw + wrote


def test_reward_functions_need_kwargs_and_conversational_completions():
    """TRL calls reward functions with keywords (prompts, completions and every dataset column);
    a function without **kwargs fails on the first call, with its name in the error."""

    def strict(completions):
        return [1.0] * len(completions)

    with pytest.raises(RuntimeError, match="reward function 'strict' raised.*prompts"):
        score_completions([strict], [1.0], ["1+1="], ["2"], [{"prompt": "1+1=", "answer": "2"}])
    conversational = [[{"role": "assistant", "content": "<answer>2</answer>"}]]
    assert accuracy_reward(conversational, answer=["2"]) == [1.0]


def test_an_fp16_gradient_overflow_skips_the_step_and_lowers_the_scale():
    """fp16 (a T4's precision) tops out at 65504. When the scaled gradients overflow, the step
    logs a non-finite ``grad_norm``, leaves the weights as they were, and the loss scale halves;
    the next step runs at the lower scale. A scale far too high forces it here."""
    trainer = fresh_trainer(dtype="float16", beta=0.0, learning_rate=1e-3)
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**60)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    record, _ = trainer.step(ROWS[:2])
    assert not torch.isfinite(torch.tensor(record["grad_norm"]))
    assert all(torch.equal(a, p) for a, p in zip(before, trainer.model.parameters(), strict=True))
    assert trainer.scaler.get_scale() == 2.0**59
