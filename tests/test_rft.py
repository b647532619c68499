"""Rejection-sampling fine-tuning (grpo_minimal/course/rft.py) as GRPO's step with another stage 4 (the advantages)."""

import pytest
import torch

from grpo_minimal.course.rft import RFTTrainer
from grpo_minimal.data import load_math_rows
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig, train_math
from grpo_minimal.losses import grpo_loss

RFT = dict(device="cpu", beta=0.0, loss_type="dapo")


def test_the_masked_dapo_surrogate_is_the_mean_nll_of_the_correct_completions():
    """L_RFT by hand, float64: -(sum of log pi over correct tokens) / their count has the same
    gradient (the surrogate's value is -1: ratio 1 times -A); wrong completions get none."""
    logps = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    logps.requires_grad_(True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    correct = torch.tensor([1.0, 0.0, 1.0, 0.0])
    kept = mask * correct[:, None].long()
    loss, _ = grpo_loss(
        logps,
        None,
        None,
        torch.ones(4, dtype=torch.float64),
        kept,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
    )
    loss.backward()
    by_hand = logps.detach().clone().requires_grad_(True)
    nll = -(by_hand * kept).sum() / 5  # 3 + 2 tokens in the two correct completions
    nll.backward()
    assert loss.item() == -1.0
    torch.testing.assert_close(logps.grad, by_hand.grad, rtol=1e-12, atol=0)
    assert logps.grad[1].abs().sum() == 0 and logps.grad[3].abs().sum() == 0


def test_advantages_keep_only_correct_completions():
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    trainer = RFTTrainer(MathConfig(**RFT, num_generations=4), model, tokenizer)
    rows = load_math_rows("arithmetic", "train")[:2]
    rollout = trainer.sample(rows)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    advantages, mask = trainer.advantages(rewards, rollout)
    assert torch.equal(advantages, torch.ones(8))
    assert torch.equal(mask[rewards == 1], rollout.completion_mask[rewards == 1])
    assert mask[rewards == 0].sum() == 0


def test_refuses_settings_that_would_change_the_loss():
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    for bad in ({"beta": 0.04}, {"loss_type": "grpo"}, {"num_iterations": 2}):
        with pytest.raises(ValueError, match="RFTTrainer needs beta=0.0"):
            RFTTrainer(MathConfig(**{**RFT, **bad}), model, tokenizer)


def test_a_short_rft_run_trains_through_train_math():
    rows = load_math_rows("arithmetic", "train")
    cfg = MathConfig(**RFT, max_steps=3, eval_every=0, eval_n=8)
    trainer, history = train_math(
        cfg, train_rows=rows[8:], eval_rows=rows[:8], progress=False, trainer_cls=RFTTrainer
    )
    assert isinstance(trainer, RFTTrainer) and len(history) == 4
    assert all(h["kl"] == 0.0 and h["grad_norm"] >= 0 for h in history[1:])
