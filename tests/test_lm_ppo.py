"""PPO on a causal LM (``lm_ppo.py``): each equation against a hand computation, the EOS mask,
the critic kept apart from the policy, the config's rules and the command line."""

from __future__ import annotations

import json

import pytest
import torch

from grpo_minimal.cli import main
from grpo_minimal.completions import mask_after_eos
from grpo_minimal.lm_ppo import (
    LMPPOConfig,
    LMPPOTrainer,
    completion_values,
    explained_variance,
    ppo_lm_loss,
    token_gae,
    token_rewards,
    whiten,
)
from grpo_minimal.lm_train import MathConfig, setup
from grpo_minimal.lm_trainer import completion_logps
from grpo_minimal.ppo import gae

F64 = torch.float64


def test_token_gae_matches_a_hand_computation():
    """gamma = 1, lambda = 0.5; rewards (0, 0, 1), values (0.5, 0.6, 0.7), the last token ends it:
    deltas 0.1, 0.1, 0.3; A_2 = 0.3, A_1 = 0.1 + 0.5 * 0.3 = 0.25, A_0 = 0.1 + 0.5 * 0.25 = 0.225.
    A second row ends after two tokens: its padding (value 9) must not leak into it.
    ``ppo.gae`` works in float32, so the bound is a few float32 roundings of numbers near 1."""
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]], dtype=F64)
    values = torch.tensor([[0.5, 0.6, 0.7], [1.0, 1.5, 9.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages, targets = token_gae(rewards, values, mask, gae_lambda=0.5)
    # row 2: delta_1 = 2 - 1.5 = 0.5 (terminal: no V after it), delta_0 = 1.5 - 1.0 = 0.5,
    # A_0 = 0.5 + 0.5 * 0.5 = 0.75
    expected = torch.tensor([[0.225, 0.25, 0.3], [0.75, 0.5, 0.0]], dtype=F64)
    torch.testing.assert_close(advantages.to(F64), expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(targets.to(F64), (expected + values) * mask, rtol=0, atol=1e-6)


def test_token_gae_is_ppo_gae_on_the_same_numbers():
    """One completion is one CartPole-style episode of ``ppo.gae`` (time first, gamma 1, ended
    by termination at its last token)."""
    generator = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(2, 7, 1, generator=generator, dtype=F64)
    ended = torch.zeros(7, 1, dtype=F64)
    ended[-1] = 1.0
    next_values = torch.cat([values[1:], torch.zeros(1, 1, dtype=F64)])
    want_a, want_t = gae(rewards, values, next_values, ended, ended, 1.0, 0.8)
    got_a, got_t = token_gae(rewards.T, values.T, torch.ones(1, 7), gae_lambda=0.8)
    torch.testing.assert_close(got_a, want_a.T.to(got_a.dtype), rtol=0, atol=1e-6)
    torch.testing.assert_close(got_t, want_t.T.to(got_t.dtype), rtol=0, atol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_token_gae_endpoints(lam):
    """lambda = 0: the one-step TD error; lambda = 1: the return to the end minus V."""
    generator = torch.Generator().manual_seed(1)
    rewards, values = torch.randn(2, 3, 5, generator=generator, dtype=F64)
    advantages, _ = token_gae(rewards, values, torch.ones(3, 5), gae_lambda=lam)
    if lam == 0.0:
        next_values = torch.cat([values[:, 1:], torch.zeros(3, 1, dtype=F64)], dim=1)
        expected = rewards + next_values - values
    else:
        expected = rewards.flip(1).cumsum(1).flip(1) - values
    torch.testing.assert_close(advantages.to(F64), expected, rtol=0, atol=1e-5)


def test_token_rewards_put_the_kl_on_every_token_and_the_score_on_the_last():
    """(22) by hand: beta 0.1, k1 = log pi_old - log pi_ref = (0.5, 0, -1); the completion ends
    at its second token (the EOS), so the score 1 lands there and the third token gets 0."""
    old = torch.tensor([[-1.0, -2.0, -3.0]], dtype=F64)
    ref = torch.tensor([[-1.5, -2.0, -2.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0]])
    rewards = token_rewards(torch.tensor([1.0]), old, ref, mask, beta=0.1)
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 1.0, 0.0]], dtype=F64))
    no_reference = token_rewards(torch.tensor([1.0]), old, None, mask, beta=0.1)
    torch.testing.assert_close(no_reference, torch.tensor([[0.0, 1.0, 0.0]], dtype=F64))
    unscored = token_rewards(torch.tensor([float("nan")]), old, ref, mask, beta=0.1)
    torch.testing.assert_close(unscored, torch.tensor([[-0.05, 0.0, 0.0]], dtype=F64))


def test_the_eos_mask_decides_where_the_episode_ends():
    """Tokens after the first EOS (15) get no reward, no advantage and no loss: changing the
    log-probs or values there changes nothing."""
    eos = 2
    ids = torch.tensor([[5, 6, eos, 7, 8], [5, 6, 7, 8, 9]])
    mask = mask_after_eos(ids, [eos])
    generator = torch.Generator().manual_seed(2)
    old, values = torch.randn(2, 2, 5, generator=generator, dtype=F64)
    rewards = token_rewards(torch.tensor([1.0, 0.0]), old, old - 0.3, mask, beta=0.1)
    assert rewards[0, 3:].abs().sum() == 0 and rewards[0, 2] == pytest.approx(1.0 - 0.03)
    assert rewards[1, 4] == pytest.approx(-0.03)  # truncated: the last token is scored
    advantages, targets = token_gae(rewards, values, mask, 0.95)
    assert advantages[0, 3:].abs().sum() == 0 and targets[0, 3:].abs().sum() == 0
    advantages = whiten(advantages, mask)

    def loss_of(logps, new_values):
        return ppo_lm_loss(
            logps,
            old,
            advantages,
            new_values,
            values,
            targets,
            mask,
            epsilon=0.2,
            epsilon_high=None,
            value_clip=0.2,
            value_coef=0.5,
            loss_type="dapo",
            max_completion_length=5,
        )[0]

    logps = (old + 0.05).requires_grad_(True)
    new_values = (values + 0.1).requires_grad_(True)
    loss = loss_of(logps, new_values)
    loss.backward()
    assert logps.grad[0, 3:].abs().sum() == 0 and new_values.grad[0, 3:].abs().sum() == 0
    changed = logps.detach().clone(), new_values.detach().clone()
    changed[0][0, 3:] += 5.0
    changed[1][0, 3:] -= 5.0
    assert loss_of(*changed).item() == pytest.approx(loss.item(), abs=1e-12)


def test_value_clipping_by_hand():
    """(13): old value 0, target 1, new value 0.5, clip 0.2: unclipped (0.5 - 1)^2 = 0.25, clipped
    (0.2 - 1)^2 = 0.64; the loss is 0.5 * max = 0.32 and the value gets no gradient (the clipped
    term does not depend on it). Without the clip: 0.125, gradient 0.5 * 2 * (0.5 - 1) = -0.5."""
    one = torch.ones(1, 1, dtype=F64)
    for clip, want_loss, want_grad in ((0.2, 0.32, 0.0), (0.0, 0.125, -0.5)):
        values = (0.5 * one).requires_grad_(True)
        loss, metrics = ppo_lm_loss(
            0 * one,
            0 * one,
            0 * one,
            values,
            0 * one,
            one,
            one,
            epsilon=0.2,
            epsilon_high=None,
            value_clip=clip,
            value_coef=1.0,
            loss_type="dapo",
            max_completion_length=1,
        )
        loss.backward()
        assert metrics["value_loss"] == pytest.approx(want_loss, abs=1e-12)
        assert values.grad.item() == pytest.approx(want_grad, abs=1e-12)


def test_whitening_over_the_kept_tokens():
    """(24): mean 0 and sample variance 1 over the kept entries, 0 elsewhere, whatever the
    padding holds; by hand, (1, 2, 3) -> (-1, 0, 1) (sample variance 1)."""
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, -50.0, 7.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(
        whiten(values, mask, eps=0.0),
        torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=F64),
        rtol=0,
        atol=1e-12,
    )
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(4, 6, generator=generator, dtype=F64) * 5 + 3
    mask = (torch.rand(4, 6, generator=generator) > 0.3).long()
    out = whiten(values, mask, eps=0.0)[mask.bool()]
    assert out.mean().item() == pytest.approx(0.0, abs=1e-12)
    assert out.var().item() == pytest.approx(1.0, abs=1e-12)
    assert explained_variance(values, values, mask) == pytest.approx(1.0)


@pytest.fixture(scope="module")
def tiny_trainer():
    cfg = LMPPOConfig.for_device("cpu", prompts_per_step=4, max_steps=2)
    model, tokenizer = setup(cfg)
    return LMPPOTrainer(cfg, model, tokenizer)


def test_the_critic_is_its_own_model(tiny_trainer):
    """The value loss moves only the critic and the policy loss only the policy: no parameter
    is shared (a critic built on the policy's own body would fail the first check)."""
    trainer = tiny_trainer
    rows = [{"prompt": "12+34=", "answer": "46"}, {"prompt": "5+6=", "answer": "11"}]
    rollout = trainer.sample(rows)
    torch.nn.init.normal_(trainer.critic.head.weight)  # a zero head passes no gradient back
    mask = rollout.completion_mask
    for part in ("value", "policy"):
        trainer.optimizer.zero_grad(set_to_none=True)
        logps, _ = completion_logps(trainer.model, rollout)
        values = completion_values(trainer.critic, rollout)
        advantages = torch.zeros_like(logps) if part == "value" else torch.ones_like(logps)
        loss, _ = ppo_lm_loss(
            logps,
            logps.detach() - 0.01,
            advantages,
            values,
            values.detach(),
            values.detach() + 1.0,
            mask,
            epsilon=0.2,
            epsilon_high=None,
            value_clip=0.0,
            value_coef=1.0 if part == "value" else 0.0,
            loss_type="dapo",
            max_completion_length=5,
        )
        loss.backward()
        policy = [
            p.grad.abs().sum().item() for p in trainer.model.parameters() if p.grad is not None
        ]
        critic = [
            p.grad.abs().sum().item() for p in trainer.critic.parameters() if p.grad is not None
        ]
        if part == "value":
            assert sum(policy) == 0 and sum(critic) > 0, (sum(policy), sum(critic))
        else:
            assert sum(critic) == 0 and sum(policy) > 0, (sum(policy), sum(critic))
    assert not {p.data_ptr() for p in trainer.model.parameters()} & {
        p.data_ptr() for p in trainer.critic.parameters()
    }


def test_a_step_moves_policy_and_critic_and_logs_the_split(tiny_trainer):
    trainer = tiny_trainer
    before = [
        p.detach().clone() for p in (*trainer.model.parameters(), *trainer.critic.parameters())
    ]
    rows = [{"prompt": f"{a}+{a}=", "answer": str(2 * a)} for a in (11, 22, 33, 44)]
    record, rollout = trainer.step(rows)
    after = [p.detach() for p in (*trainer.model.parameters(), *trainer.critic.parameters())]
    n_policy = len(list(trainer.model.parameters()))
    assert any(
        not torch.equal(a, b) for a, b in zip(before[:n_policy], after[:n_policy], strict=True)
    )
    assert any(
        not torch.equal(a, b) for a, b in zip(before[n_policy:], after[n_policy:], strict=True)
    )
    assert len(rollout.completions) == 4 and rollout.num_generations == 1
    for key in ("sample_s", "critic_s", "update_s", "value_loss", "explained_variance", "kl"):
        assert key in record and record[key] == record[key], key  # present, not NaN


def test_config_rules():
    tiny = LMPPOConfig.for_device("cpu")
    grpo = MathConfig.for_device("cpu")
    assert (tiny.num_generations, tiny.prompts_per_step) == (
        1,
        grpo.prompts_per_step * grpo.num_generations,
    )
    assert tiny.to_dict()["algo"] == "ppo"
    assert LMPPOConfig.for_device("cpu", model="smollm2-135m").prompts_per_step == 16  # 2 x 8
    with pytest.raises(ValueError, match="num_generations"):
        MathConfig(num_generations=1)  # GRPO still needs a group
    with pytest.raises(ValueError, match="scale_rewards is a GRPO setting"):
        LMPPOConfig(scale_rewards="batch")
    with pytest.raises(ValueError, match="num_minibatches must divide"):
        LMPPOConfig(prompts_per_step=6, num_minibatches=4)
    with pytest.raises(ValueError, match="gae_lambda"):
        LMPPOConfig(gae_lambda=1.5)


def test_cli_trains_ppo_and_evaluate_reads_its_checkpoint(tmp_path, capsys):
    out = tmp_path / "ppo"
    main(
        [
            "math",
            "--algo",
            "ppo",
            "--max-steps",
            "2",
            "--prompts-per-step",
            "8",
            "--eval-n",
            "20",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["algo"] == "ppo" and summary["steps"] == 2
    assert json.loads((out / "grpo_config.json").read_text())["algo"] == "ppo"
    main(["evaluate", "math", "--model", str(out), "--n", "20"])
    result = json.loads(capsys.readouterr().out)
    assert result["n"] == 20 and result["accuracy"] == summary["accuracy_after"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--backend", "trl"], "TRL removed its PPOTrainer in 2026-09 (huggingface/trl PR #7020)"),
        (["--use-bias-correction-kl", "true"], "use_bias_correction_kl is a GRPO setting"),
        (["--value-clip", "-1"], "value_clip must be in"),
    ],
)
def test_bad_ppo_flags_are_one_line(flags, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["math", "--algo", "ppo", *flags, "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
