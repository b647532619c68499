"""PPO baseline: GAE by hand (termination vs truncation), the shared loss code, config checks,
rollouts from the vector env, a small learning run, and the CLI with --algo ppo."""

from __future__ import annotations

import json
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_minimal import losses
from grpo_minimal import ppo as ppo_module
from grpo_minimal.advantages import discounted_returns
from grpo_minimal.cli import main
from grpo_minimal.device import torch_threads
from grpo_minimal.envs import CategoricalPolicy, evaluate_policy
from grpo_minimal.gym_grpo import load_policy
from grpo_minimal.ppo import (
    ActorCritic,
    PPOConfig,
    collect_rollout,
    gae,
    load_ppo_policy,
    make_vector_env,
    ppo_update,
    save_ppo_policy,
    train_ppo,
    value_loss,
)


@pytest.fixture
def one_thread():
    """Tiny networks run fastest on one thread, and a shared 2-core machine stalls on two."""
    with torch_threads(1):
        yield


# ---------------------------------------------------------------- GAE, equations (10)-(12)

GAMMA, LAM = 0.9, 0.8  # gamma * lambda = 0.72


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_gae_truncated_episode_bootstraps_from_final_value():
    # three steps, the episode is cut by the time limit at t=2; V(s_final) = 2.0
    rewards, values, next_values = _t(1, 1, 1), _t(0.5, 0.4, 0.3), _t(0.4, 0.3, 2.0)
    adv, targets = gae(rewards, values, next_values, _t(0, 0, 0), _t(0, 0, 1), GAMMA, LAM)
    # delta_2 = 1 + 0.9 * 2.0 - 0.3 = 2.5        A_2 = 2.5
    # delta_1 = 1 + 0.9 * 0.3 - 0.4 = 0.87       A_1 = 0.87 + 0.72 * 2.5 = 2.67
    # delta_0 = 1 + 0.9 * 0.4 - 0.5 = 0.86       A_0 = 0.86 + 0.72 * 2.67 = 2.7824
    torch.testing.assert_close(adv, _t(2.7824, 2.67, 2.5))
    torch.testing.assert_close(targets, _t(3.2824, 3.07, 2.8))


def test_gae_terminated_episode_does_not_bootstrap():
    # the same steps, but the pole fell at t=2: V(s_final) must be ignored
    rewards, values, next_values = _t(1, 1, 1), _t(0.5, 0.4, 0.3), _t(0.4, 0.3, 2.0)
    adv, targets = gae(rewards, values, next_values, _t(0, 0, 1), _t(0, 0, 1), GAMMA, LAM)
    # delta_2 = 1 - 0.3 = 0.7                    A_2 = 0.7
    # A_1 = 0.87 + 0.72 * 0.7 = 1.374            A_0 = 0.86 + 0.72 * 1.374 = 1.84928
    torch.testing.assert_close(adv, _t(1.84928, 1.374, 0.7))
    torch.testing.assert_close(targets, adv + values)
    # and the value of the final state truly plays no part
    other, _ = gae(rewards, values, _t(0.4, 0.3, -50.0), _t(0, 0, 1), _t(0, 0, 1), GAMMA, LAM)
    torch.testing.assert_close(adv, other)


def test_gae_truncation_mid_rollout_stops_the_recursion():
    # an episode is truncated at t=1 (V(s_final) = 3.0); a new one starts at t=2 and is still
    # running when the rollout ends, so t=3 bootstraps from V(s_4) = 0.8
    rewards, values = _t(1, 1, 1, 1), _t(0.5, 0.4, 0.6, 0.7)
    next_values = _t(0.4, 3.0, 0.7, 0.8)
    adv, _ = gae(rewards, values, next_values, _t(0, 0, 0, 0), _t(0, 1, 0, 0), GAMMA, LAM)
    # A_3 = 1 + 0.72 - 0.7 = 1.02;  A_2 = 1 + 0.63 - 0.6 + 0.72 * 1.02 = 1.7644
    # A_1 = 1 + 2.7 - 0.4 = 3.3 (nothing from the next episode); A_0 = 0.86 + 0.72 * 3.3 = 3.236
    torch.testing.assert_close(adv, _t(3.236, 3.3, 1.7644, 1.02))


def test_gae_batches_environments_along_the_second_dimension():
    g = torch.Generator().manual_seed(0)
    rewards, values, next_values = (torch.rand(6, 3, generator=g) for _ in range(3))
    terminated = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0], [0, 1, 0]])
    dones = terminated.clone()
    dones[2, 1] = 1  # a truncation
    adv, _ = gae(rewards, values, next_values, terminated.float(), dones.float(), 0.99, 0.95)
    for n in range(3):
        col, _ = gae(
            rewards[:, n],
            values[:, n],
            next_values[:, n],
            terminated[:, n].float(),
            dones[:, n].float(),
            0.99,
            0.95,
        )
        torch.testing.assert_close(adv[:, n], col)


def test_gae_with_lambda_one_and_no_critic_is_the_discounted_return():
    # lambda = 1, V = 0, one terminated episode: A_t = R_t, the returns GRPO uses (equation 4)
    rewards = torch.tensor([1.0, 2.0, 0.5, 1.0])
    zeros = torch.zeros(4)
    dones = torch.tensor([0.0, 0.0, 0.0, 1.0])
    adv, targets = gae(rewards, zeros, zeros, dones, dones, 0.9, 1.0)
    expected = discounted_returns(rewards[None], torch.ones(1, 4), 0.9)[0]
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(targets, expected)


def test_value_loss_clipping_is_pessimistic():
    targets, old = _t(1.0), _t(0.0)
    # the new value moved 0.5 towards the target; with clip 0.2 the loss sees 0.2 of it
    assert value_loss(_t(0.5), old, targets).item() == pytest.approx(0.5 * 0.25)
    assert value_loss(_t(0.5), old, targets, clip=0.2).item() == pytest.approx(0.5 * 0.64)
    # moving away from the target is never hidden by the clip
    assert value_loss(_t(-0.5), old, targets, clip=0.2).item() == pytest.approx(0.5 * 2.25)


# ---------------------------------------------------------------- one shared loss code


def test_ppo_policy_loss_is_the_clipped_surrogate_by_hand():
    """One epoch, one minibatch: the logged policy loss is -mean(min(rho A, clip(rho) A)),
    computed here by hand from the probabilities (a sign, ratio or clip error changes it)."""
    torch.manual_seed(0)
    cfg = PPOConfig(
        num_envs=1,
        num_steps=6,
        num_minibatches=1,
        num_iterations=1,
        normalize_advantages=False,
        epsilon=0.2,
    )
    agent = ActorCritic(4, 2, 8)
    obs, actions = torch.randn(6, 4), torch.tensor([0, 1, 0, 1, 1, 0])
    advantages = torch.tensor([1.0, -1.0, 2.0, -0.5, 0.5, -2.0])
    with torch.no_grad():
        probs = torch.softmax(agent.actor(obs), -1).gather(1, actions[:, None]).squeeze(1)
        values = agent.value(obs)
    # the data was sampled by policies that gave these probabilities: ratios 0.5 ... 1.5
    old_probs = probs / torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1, 0.9])
    rho = probs / old_probs
    expected = []
    for r, a in zip(rho.tolist(), advantages.tolist(), strict=True):
        clipped = min(max(r, 0.8), 1.2)
        expected.append(-min(r * a, clipped * a))
    optimizer = torch.optim.SGD(agent.parameters(), lr=0.0)
    metrics = ppo_update(
        agent, optimizer, obs, actions, old_probs.log(), advantages, values, values, cfg
    )
    assert metrics["loss"] == pytest.approx(sum(expected) / 6, rel=1e-5)
    # ratios 1.5 (A>0), 0.5 (A<0) are clipped; 1.5 (A<0) and 0.5 (A>0) are not
    assert metrics["clip_fraction"] == pytest.approx(2 / 6)


def test_ppo_update_calls_the_shared_surrogate(monkeypatch):
    calls = []

    def spy(*args, **kwargs):
        calls.append(args)
        return losses.clipped_surrogate(*args, **kwargs)

    monkeypatch.setattr(ppo_module, "clipped_surrogate", spy)
    torch.manual_seed(0)
    cfg = PPOConfig(num_envs=2, num_steps=8, num_minibatches=2, num_iterations=3)
    agent = ActorCritic(4, 2, 16)
    optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
    obs, actions = torch.randn(16, 4), torch.randint(0, 2, (16,))
    with torch.no_grad():
        old_logps = agent.actor.log_prob(obs, actions)[0]
        old_values = agent.value(obs)
    metrics = ppo_update(
        agent,
        optimizer,
        obs,
        actions,
        old_logps,
        torch.randn(16),
        torch.randn(16),
        old_values,
        cfg,
    )
    assert len(calls) == cfg.num_iterations * cfg.num_minibatches
    assert calls[0][2] == cfg.epsilon
    assert set(metrics) >= {"loss", "value_loss", "entropy", "approx_kl", "clip_fraction"}
    assert all(np.isfinite(v) for v in metrics.values())


def test_actor_is_a_categorical_policy_with_a_separate_critic():
    agent = ActorCritic(4, 2, 64)
    assert isinstance(agent.actor, CategoricalPolicy)
    actor = sum(p.numel() for p in agent.actor.parameters())
    critic = sum(p.numel() for p in agent.critic.parameters())
    assert (actor, critic) == (
        4 * 64 + 64 + 64 * 64 + 64 + 64 * 2 + 2,
        4 * 64 + 64 + 64 * 64 + 64 + 65,
    )


# ---------------------------------------------------------------- PPOConfig


def test_ppo_config_defaults_are_the_standard_cartpole_setting():
    cfg = PPOConfig()
    assert (cfg.total_env_steps, cfg.num_envs, cfg.num_steps) == (500_000, 4, 128)
    assert (cfg.learning_rate, cfg.anneal_lr, cfg.gamma, cfg.gae_lambda) == (
        2.5e-4,
        True,
        0.99,
        0.95,
    )
    assert (cfg.epsilon, cfg.num_iterations, cfg.num_minibatches) == (0.2, 4, 4)
    assert (cfg.entropy_coef, cfg.value_coef, cfg.max_grad_norm) == (0.01, 0.5, 0.5)
    assert cfg.to_dict()["gae_lambda"] == 0.95


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("total_env_steps", 0),
        ("num_envs", 0),
        ("num_steps", 1.5),
        ("learning_rate", 0.0),
        ("anneal_lr", "yes"),
        ("gamma", 1.5),
        ("gae_lambda", -0.1),
        ("num_iterations", 0),
        ("num_minibatches", 3),  # does not divide 4 * 128
        ("epsilon", 1.0),
        ("entropy_coef", -0.01),
        ("value_coef", float("nan")),
        ("max_grad_norm", -1.0),
        ("hidden_size", 0),
        ("eval_episodes", 0),
    ],
)
def test_ppo_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        PPOConfig(**{field: value})


def test_vector_env_refuses_continuous_actions():
    with pytest.raises(ValueError, match="Discrete"):
        make_vector_env("Pendulum-v1", 2)


# ---------------------------------------------------------------- rollouts


def test_rollout_keeps_the_final_observation_of_a_truncated_episode():
    gym.register(
        "ShortCartPole-v0",
        entry_point="gymnasium.envs.classic_control:CartPoleEnv",
        max_episode_steps=5,
    )
    try:
        envs = make_vector_env("ShortCartPole-v0", 2)
        obs, _ = envs.reset(seed=3)
        running, finished = np.zeros(2), []
        torch.manual_seed(0)
        actor = CategoricalPolicy(4, 2, 8)
        rollout, last = collect_rollout(actor, envs, obs, 12, running, finished)
        envs.close()
    finally:
        gym.registry.pop("ShortCartPole-v0")
    assert rollout.obs.shape == (12, 2, 4) and rollout.actions.shape == (12, 2)
    # a random policy does not drop the pole in 5 steps: episodes end by truncation only
    assert rollout.terminated.sum() == 0
    assert rollout.dones[:, 0].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0]
    assert finished == [5.0] * 4 and running.tolist() == [2.0, 2.0]
    for t in range(11):
        if rollout.dones[t, 0]:  # s_{t+1} is the final obs; the next s_t starts a new episode
            assert not torch.equal(rollout.next_obs[t, 0], rollout.obs[t + 1, 0])
        else:
            assert torch.equal(rollout.next_obs[t, 0], rollout.obs[t + 1, 0])
    assert np.array_equal(rollout.next_obs[-1].numpy(), last)


# ---------------------------------------------------------------- training


def test_ppo_learns_cartpole_on_a_small_budget(one_thread):
    cfg = PPOConfig(seed=0, total_env_steps=20_480, anneal_lr=False, stop_when_solved=False)
    policy, history = train_ppo(cfg, progress=False)
    assert history[-1]["env_steps"] == 20_480
    greedy = evaluate_policy(policy, cfg.env_id, episodes=20, seed=777).mean()
    assert greedy > 150, f"greedy return {greedy:.1f} after 20k steps (random is about 22)"
    keys = {
        "update",
        "env_steps",
        "wall_s",
        "return_mean",
        "return_min",
        "return_max",
        "entropy",
        "loss",
        "kl",
        "clip_fraction",
        "eval_env_steps",
    }
    assert all(keys <= set(r) for r in history)
    assert all(set(r) >= {"eval_return", "solved"} for r in history if "eval_return" in r)


def test_ppo_is_reproducible_and_anneals_the_learning_rate(one_thread):
    cfg = PPOConfig(seed=3, total_env_steps=2048, num_steps=64)
    _, first = train_ppo(cfg, progress=False)
    _, second = train_ppo(cfg, progress=False)
    assert len(first) == 8
    strip = [{k: v for k, v in r.items() if k != "wall_s"} for r in first]
    assert strip == [{k: v for k, v in r.items() if k != "wall_s"} for r in second]
    assert first[0]["learning_rate"] == cfg.learning_rate
    assert first[-1]["learning_rate"] == pytest.approx(cfg.learning_rate / 8)


def test_greedy_evaluation_does_not_change_the_training_trajectory(one_thread):
    # notebook 03 and the bench replay runs without evaluation to time training alone
    cfg = PPOConfig(seed=4, total_env_steps=2048, solve_threshold=20.0, stop_when_solved=False)
    _, evaluated = train_ppo(cfg, progress=False)
    _, replayed = train_ppo(replace(cfg, solve_threshold=float("inf")), progress=False)
    assert sum("eval_return" in r for r in evaluated) >= 2
    assert not any("eval_return" in r for r in replayed)
    dropped = ("wall_s", "eval_return", "confirm_return", "solved", "eval_env_steps")
    strip = lambda h: [{k: v for k, v in r.items() if k not in dropped} for r in h]  # noqa: E731
    assert strip(evaluated) == strip(replayed)


def test_saved_ppo_policy_loads_as_a_cartpole_policy(tmp_path, one_thread):
    cfg = PPOConfig(seed=1, total_env_steps=512, hidden_size=16)
    policy, _ = train_ppo(cfg, progress=False)
    save_ppo_policy(policy, cfg, tmp_path / "policy.pt")
    loaded, eval_cfg = load_policy(tmp_path / "policy.pt")
    assert (eval_cfg.env_id, eval_cfg.hidden_size) == (cfg.env_id, 16)
    x = torch.randn(5, 4)
    torch.testing.assert_close(loaded(x), policy(x))
    again, ppo_cfg = load_ppo_policy(tmp_path / "policy.pt")
    assert ppo_cfg == cfg
    torch.testing.assert_close(again(x), policy(x))


def test_cli_trains_ppo_and_evaluates_its_policy(tmp_path, capsys, one_thread):
    out = tmp_path / "run"
    main(
        [
            "cartpole",
            "--algo",
            "ppo",
            "--total-env-steps",
            "1024",
            "--num-steps",
            "64",
            "--gae-lambda",
            "0.9",
            "--seed",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["algo"] == "ppo" and summary["env_steps"] == 1024 and summary["updates"] == 4
    assert {p.name for p in out.iterdir()} >= {"metrics.jsonl", "policy.pt", "learning_curve.png"}
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4
    assert load_ppo_policy(out / "policy.pt")[1].gae_lambda == 0.9

    main(["evaluate", "cartpole", "--policy", str(out / "policy.pt"), "--episodes", "3"])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["episodes"] == 3 and result["mean_return"] > 0


def test_cli_help_lists_the_chosen_algorithms_flags(capsys):
    with pytest.raises(SystemExit):
        main(["cartpole", "--algo", "ppo", "--help"])
    text = capsys.readouterr().out
    assert "--gae-lambda" in text and "--num-generations" not in text
    with pytest.raises(SystemExit):
        main(["cartpole", "--help"])
    text = capsys.readouterr().out
    assert "--num-generations" in text and "--gae-lambda" not in text


def test_cli_rejects_a_bad_ppo_value_naming_the_field(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["cartpole", "--algo", "ppo", "--num-minibatches", "3", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "num_minibatches" in capsys.readouterr().err


def test_ppo_trains_on_start_states_no_evaluation_uses(monkeypatch):
    """PPO's vector environments reset from TRAIN_SEED_LOW on, and a seed cannot be negative
    (it would move them into the evaluation ranges)."""
    from grpo_minimal.envs import TRAIN_SEED_LOW

    seeds, original = [], ppo_module.make_vector_env

    def recording(*args, **kwargs):
        envs = original(*args, **kwargs)
        reset = envs.reset

        def reset_recorded(*a, seed=None, **k):
            seeds.append(seed)
            return reset(*a, seed=seed, **k)

        envs.reset = reset_recorded
        return envs

    monkeypatch.setattr(ppo_module, "make_vector_env", recording)
    train_ppo(PPOConfig(seed=0, total_env_steps=512, stop_when_solved=False), progress=False)
    assert seeds == [TRAIN_SEED_LOW]
    with pytest.raises(ValueError, match="seed must be in"):
        PPOConfig(seed=-1)
