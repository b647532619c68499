"""Parity with TRL 1.16's GRPOTrainer on the shipped tiny model (fp32, CPU, no download).

- Loss: the same hand-made batch (prompts, completions with EOS and padding, old and reference
  log-probs that differ from the current ones so that clipping and KL act) goes through
  ``grpo_loss`` on our per-token log-probs and through TRL's ``_compute_loss`` with the model in
  eval mode (so TRL's gradient-accumulation normaliser is 1). TRL computes log-probs in float32
  whatever the model's dtype (its chunked log-prob kernel), so both run in float32 and losses and
  gradients must agree within the worst-case float32 error of their sums, scaled to their size
  (``numerics.py``), for every loss type, with beta 0 and > 0, epsilon_high set, and
  use_bias_correction_kl both ways, on any CPU and thread count.
- Advantages: TRL generates and scores a batch with a reward function that hands out known
  rewards; its advantages equal ``group_advantages`` (scale group / batch / none), and with a
  ``None`` reward they equal ours (that completion is ignored).

Skipped when TRL (the dev extra) is not installed.
"""

from __future__ import annotations

import itertools

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers 5 renames in TRL

from numerics import assert_close_float32_sums  # noqa: E402

from grpo_minimal import group_advantages, grpo_loss  # noqa: E402
from grpo_minimal.completions import CompletionGroups, mask_after_eos  # noqa: E402
from grpo_minimal.lm_model import TINY_MODEL, load_model  # noqa: E402
from grpo_minimal.lm_train import MathConfig  # noqa: E402
from grpo_minimal.lm_trainer import completion_logps  # noqa: E402
from grpo_minimal.trl_bridge import make_trl_trainer  # noqa: E402

MAX_COMPLETION = 5
ROWS = [{"prompt": p, "answer": "0"} for p in ("3+4=", "12+30=", "99+99=", "5+61=")]


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_model(str(TINY_MODEL), torch.device("cpu"))
    return model.eval(), tokenizer


def trl_trainer(tiny, tmp_path_factory, reward_funcs=None, **cfg_overrides):
    model, tokenizer = tiny
    cfg = MathConfig(
        model=str(TINY_MODEL),
        device="cpu",
        max_completion_length=MAX_COMPLETION,
        prompts_per_step=2,
        num_generations=4,
        **cfg_overrides,
    )
    trl_model, _ = load_model(str(TINY_MODEL), torch.device("cpu"))
    trainer, _ = make_trl_trainer(
        cfg,
        trl_model,
        tokenizer,
        ROWS,
        str(tmp_path_factory.mktemp("trl")),
        reward_funcs=reward_funcs or [lambda completions, **kw: [0.0] * len(completions)],
    )
    trainer.model.eval()  # eval mode: no gradient-accumulation scaling inside _compute_loss
    return trainer


@pytest.fixture(scope="module")
def batch(tiny):
    """8 completions of 4 prompts (G=2): different lengths, EOS, padding after EOS; seeded.

    ``rollout`` is our form (each prompt once); the rest is TRL's (a prompt row per completion).
    """
    model, tokenizer = tiny
    gen = torch.Generator().manual_seed(0)
    enc = tokenizer(
        [r["prompt"] for r in ROWS], return_tensors="pt", padding=True, add_special_tokens=False
    )
    digits = torch.tensor(tokenizer.convert_tokens_to_ids(list("0123456789")))
    completion = digits[torch.randint(0, 10, (8, MAX_COMPLETION), generator=gen)]
    for row, eos_at in enumerate([1, 2, 3, 4, 4, 2, 3, 4]):  # EOS position; one row has none
        if row != 3:
            completion[row, eos_at] = tokenizer.eos_token_id
    mask = mask_after_eos(completion, [tokenizer.eos_token_id])
    completion = completion.masked_fill(mask == 0, tokenizer.pad_token_id)
    rollout = CompletionGroups(enc["input_ids"], enc["attention_mask"], completion, mask)
    with torch.no_grad():
        logps, _ = completion_logps(model, rollout)
    noise = lambda scale: scale * torch.randn(logps.shape, generator=gen)  # noqa: E731
    return {
        "rollout": rollout,
        "prompt_ids": enc["input_ids"].repeat_interleave(2, 0),
        "prompt_mask": enc["attention_mask"].repeat_interleave(2, 0),
        "completion_ids": completion,
        "completion_mask": mask,
        "advantages": torch.randn(8, generator=gen),
        # old and reference log-probs away from the current ones: ratios up to ~exp(0.5)
        "old_per_token_logps": (logps + noise(0.3)) * mask,
        "ref_per_token_logps": (logps + noise(0.5)) * mask,
        "num_items_in_batch": mask.sum(),
    }


def our_loss(model, batch, cfg: dict, share_prompts: bool):
    model.zero_grad()
    logps, _ = completion_logps(model, batch["rollout"], share_prompts=share_prompts)
    loss, _ = grpo_loss(
        logps,
        batch["old_per_token_logps"],
        batch["ref_per_token_logps"] if cfg["beta"] > 0 else None,
        batch["advantages"],
        batch["completion_mask"],
        beta=cfg["beta"],
        epsilon=0.2,
        epsilon_high=cfg["epsilon_high"],
        loss_type=cfg["loss_type"],
        max_completion_length=MAX_COMPLETION,
        num_items_in_batch=batch["num_items_in_batch"],
        use_bias_correction_kl=cfg["use_bias_correction_kl"],
    )
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def trl_loss(trainer, batch):
    trainer.model.zero_grad()
    inputs = {k: v for k, v in batch.items() if k != "rollout"}
    if trainer.beta == 0:
        inputs.pop("ref_per_token_logps")
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in trainer.model.parameters()]


CASES = [
    dict(loss_type=lt, beta=beta, epsilon_high=eh, use_bias_correction_kl=bc)
    for lt, (beta, bc), eh in itertools.product(
        ("grpo", "bnpo", "dr_grpo", "dapo"),
        ((0.0, False), (0.04, False), (0.04, True)),
        (None, 0.28),
    )
]


@pytest.fixture(scope="module")
def trl_trainers(tiny, tmp_path_factory):
    """One TRL trainer per (beta > 0, use_bias_correction_kl); the loss type and clip range are
    read by ``_compute_loss`` from attributes, set per case below."""
    return {
        (beta, bc): trl_trainer(tiny, tmp_path_factory, beta=beta, use_bias_correction_kl=bc)
        for beta, bc in ((0.0, False), (0.04, False), (0.04, True))
    }


@pytest.mark.numerics
@pytest.mark.parametrize("share_prompts", [True, False], ids=["shared-prompt", "per-row"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_loss_and_gradient_match_trl(case, share_prompts, tiny, batch, trl_trainers):
    trainer = trl_trainers[(case["beta"], case["use_bias_correction_kl"])]
    trainer.loss_type = trainer.args.loss_type = case["loss_type"]
    trainer.epsilon_low = 0.2
    trainer.epsilon_high = 0.2 if case["epsilon_high"] is None else case["epsilon_high"]
    # TRL's model is a separate copy of the same weights (TRL patches its forward)
    model = tiny[0]
    for p, q in zip(model.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(p, q)
    ours, our_grads = our_loss(model, batch, case, share_prompts)
    theirs, their_grads = trl_loss(trainer, batch)
    # TRL computes log-probs in float32 with its own kernel, so compare as float32 sums: every
    # value here sums over the batch's completion tokens, each through hidden_size products
    terms = int(batch["completion_mask"].sum()) * model.config.hidden_size
    assert_close_float32_sums(ours, theirs, terms)
    for g, h in zip(our_grads, their_grads, strict=True):
        assert_close_float32_sums(g, h, terms)


@pytest.mark.numerics
def test_dapo_divides_by_the_global_token_count_like_trl(tiny, batch, trl_trainers):
    """With one micro-batch dapo equals bnpo; with gradient accumulation it divides by the
    tokens of the whole batch (``num_items_in_batch``), as TRL does."""
    trainer = trl_trainers[(0.0, False)]
    trainer.loss_type = trainer.args.loss_type = "dapo"
    trainer.epsilon_low = trainer.epsilon_high = 0.2
    global_batch = {**batch, "num_items_in_batch": 3 * batch["completion_mask"].sum()}
    case = dict(loss_type="dapo", beta=0.0, epsilon_high=None, use_bias_correction_kl=False)
    ours, our_grads = our_loss(tiny[0], global_batch, case, True)
    theirs, their_grads = trl_loss(trainer, global_batch)
    terms = int(batch["completion_mask"].sum()) * tiny[0].config.hidden_size
    assert_close_float32_sums(ours, theirs, terms)
    for g, h in zip(our_grads, their_grads, strict=True):
        assert_close_float32_sums(g, h, terms)
    bnpo, _ = our_loss(tiny[0], batch, {**case, "loss_type": "bnpo"}, True)
    torch.testing.assert_close(3 * ours, bnpo)  # a third of the tokens: a third of the loss


def test_clipping_and_kl_are_active_in_the_batch(tiny, batch):
    """Guard against a vacuous parity test: the ratio pi / pi_old itself leaves [0.8, 1.2] and
    [0.8, 1.28] on both sides, and the KL to the reference is far from 0."""
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        logps, _ = completion_logps(tiny[0], batch["rollout"])
    ratio = torch.exp(logps - batch["old_per_token_logps"])[mask]
    assert (
        (ratio < 0.8).sum() >= 2 and (ratio > 1.28).sum() >= 2 and ((ratio - 1).abs() < 0.2).any()
    )
    kl = (
        torch.exp(batch["ref_per_token_logps"] - logps) - (batch["ref_per_token_logps"] - logps) - 1
    )
    assert kl[mask].mean() > 0.05


def recorded_rewards(values):
    """A reward function returning ``values`` in order, as TRL calls it (one call per batch)."""

    def reward(completions, **kwargs):
        return list(values[: len(completions)])

    return reward


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_advantages_match_trl(scale_rewards, tiny, tmp_path_factory):
    gen = torch.Generator().manual_seed(1)
    rewards = torch.randint(0, 3, (8,), generator=gen).float()
    rewards[4:] = 1.0  # the second group has zero std: advantages 0, never NaN
    trainer = trl_trainer(
        tiny, tmp_path_factory, [recorded_rewards(rewards.tolist())], scale_rewards=scale_rewards
    )
    inputs = [ROWS[i // 4] for i in range(8)]  # TRL's order: consecutive groups of G=4
    out = trainer._generate_and_score_completions(inputs)
    ours = group_advantages(rewards, 4, scale_rewards)
    torch.testing.assert_close(out["advantages"], ours, rtol=0, atol=1e-6)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_none_rewards_are_ignored_like_trl(scale_rewards, tiny, tmp_path_factory):
    values = [1.0, None, 0.0, 1.0, 0.5, 0.5, None, 2.0]
    trainer = trl_trainer(
        tiny, tmp_path_factory, [recorded_rewards(values)], scale_rewards=scale_rewards
    )
    out = trainer._generate_and_score_completions([ROWS[i // 4] for i in range(8)])
    rewards = torch.tensor([float("nan") if v is None else v for v in values])
    ours = group_advantages(rewards, 4, scale_rewards)
    assert ours[1] == 0 and ours[6] == 0
    torch.testing.assert_close(out["advantages"], ours, rtol=0, atol=1e-6)


def test_trl_config_has_our_settings(tmp_path):
    from grpo_minimal.trl_bridge import trl_grpo_config

    cfg = MathConfig(
        device="cpu",
        gradient_accumulation_steps=4,
        num_iterations=2,
        beta=0.1,
        epsilon_high=0.28,
        loss_type="bnpo",
        use_bias_correction_kl=True,
        ref_update_every=3,
    )
    args = trl_grpo_config(cfg, str(tmp_path))
    # TRL counts optimizer steps (num_iterations per sampled batch): the reference is refreshed
    # every 3 of our steps = every 6 of TRL's
    assert args.sync_ref_model and args.ref_model_sync_steps == 6
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (16, 4)
    assert args.generation_batch_size == 64 and args.max_steps == 2 * cfg.max_steps
    assert (args.beta, args.epsilon, args.epsilon_high, args.loss_type) == (0.1, 0.2, 0.28, "bnpo")
    assert args.use_bias_correction_kl and args.num_iterations == 2 and not args.bf16
    assert args.learning_rate == cfg.learning_rate and args.lr_scheduler_type == "linear"
    assert args.max_completion_length == 5 and args.temperature == 1.0
