"""CartPole GRPO: rollouts, advantages, refusal of other action spaces, and learning."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from grpo_minimal import CartPoleConfig
from grpo_minimal.control import (
    CategoricalPolicy,
    EpisodeBatch,
    evaluate_policy,
    load_policy,
    make_env,
    run_episodes,
    save_policy,
    step_advantages,
    train_cartpole,
)


def test_non_discrete_action_space_is_refused():
    with pytest.raises(ValueError, match="Discrete action space"):
        make_env("MountainCarContinuous-v0")


def test_a_group_shares_its_start_state_and_rollouts_are_reproducible():
    torch.manual_seed(0)
    policy = CategoricalPolicy(4, 2)
    envs = [make_env("CartPole-v1") for _ in range(4)]
    seeds = [7, 7, 8, 8]
    a = run_episodes(policy, envs, seeds, generator=torch.Generator().manual_seed(1))
    b = run_episodes(policy, envs, seeds, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a.obs[0, 0], a.obs[1, 0]) and not torch.equal(a.obs[0, 0], a.obs[2, 0])
    assert torch.equal(a.actions, b.actions) and torch.equal(a.mask, b.mask)
    # every real step of CartPole pays 1; padding pays nothing
    assert torch.equal(a.rewards, a.mask) and torch.equal(a.returns, a.mask.sum(1))
    # a random policy fails: terminated, not truncated
    assert a.terminated.all()


def test_truncated_episode_is_not_marked_terminated():
    # a 3-step time limit: the pole cannot fall that fast, so the episode is truncated
    env = gym.wrappers.TimeLimit(make_env("CartPole-v1").unwrapped, max_episode_steps=3)
    batch = run_episodes(CategoricalPolicy(4, 2), [env], [0], generator=torch.Generator())
    assert batch.num_steps == 3 and not batch.terminated[0]


def _batch(returns_per_episode, G):
    """A fake batch of CartPole-like episodes (reward 1 per step) of the given lengths."""
    lengths = returns_per_episode
    steps = max(lengths)
    mask = (torch.arange(steps) < torch.tensor(lengths).unsqueeze(1)).float()
    n = len(lengths)
    return EpisodeBatch(
        obs=torch.zeros(n, steps, 4),
        actions=torch.zeros(n, steps, dtype=torch.long),
        rewards=mask.clone(),
        logps=torch.zeros(n, steps),
        mask=mask,
        terminated=torch.ones(n, dtype=torch.bool),
    )


def test_step_advantages_hand_computed():
    batch = _batch([3, 1], G=2)
    # gamma = 1: returns-to-go [[3, 2, 1], [1, 0, 0]]
    per_step = step_advantages(
        batch, CartPoleConfig(num_generations=2, gamma=1.0, scale_rewards="none")
    )
    # at t=0 the group mean is 2; at t>0 only episode 1 runs, so it is its own baseline
    assert torch.allclose(per_step, torch.tensor([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]))
    all_steps = step_advantages(
        batch,
        CartPoleConfig(num_generations=2, gamma=1.0, scale_rewards="none", advantage="all_steps"),
    )
    # mean over the four real steps: (3 + 2 + 1 + 1) / 4 = 1.75
    assert torch.allclose(all_steps, torch.tensor([[1.25, 0.25, -0.75], [-0.75, 0.0, 0.0]]))
    episode = step_advantages(
        batch,
        CartPoleConfig(num_generations=2, gamma=1.0, scale_rewards="none", advantage="episode"),
    )
    assert torch.allclose(episode, torch.tensor([[1.0, 1.0, 1.0], [-1.0, 0.0, 0.0]]))
    rloo = step_advantages(
        batch, CartPoleConfig(num_generations=2, gamma=1.0, scale_rewards="none", baseline="rloo")
    )
    assert torch.allclose(rloo, 2 * per_step)


def test_all_steps_favours_early_steps_whatever_the_action():
    # two equal episodes: every action is equally good, yet early steps get positive advantages
    batch = _batch([5, 5], G=2)
    adv = step_advantages(batch, CartPoleConfig(num_generations=2, advantage="all_steps"))
    assert (adv[:, 0] > 0).all() and (adv[:, -1] < 0).all()
    per_step = step_advantages(batch, CartPoleConfig(num_generations=2, advantage="per_step"))
    assert torch.equal(per_step, torch.zeros_like(per_step))


def test_grpo_learns_cartpole_with_a_small_budget(tmp_path):
    """A learning test: 20k environment steps must lift the return far above random (~22)."""
    cfg = CartPoleConfig(seed=1, total_env_steps=20_000, stop_when_solved=False)
    policy, history = train_cartpole(cfg, progress=False)
    assert history[0]["return_mean"] < 50
    greedy = evaluate_policy(policy, cfg.env_id, episodes=20, seed=123)
    assert greedy.mean() > 150, greedy.mean()
    # the trained policy round-trips through the checkpoint
    save_policy(policy, cfg, tmp_path / "policy.pt")
    loaded, loaded_cfg = load_policy(tmp_path / "policy.pt")
    assert loaded_cfg == cfg
    assert np.array_equal(evaluate_policy(loaded, cfg.env_id, 20, 123), greedy)


def test_training_is_reproducible():
    cfg = CartPoleConfig(seed=3, total_env_steps=3_000, stop_when_solved=False)
    first = [r["return_mean"] for r in train_cartpole(cfg, progress=False)[1]]
    second = [r["return_mean"] for r in train_cartpole(cfg, progress=False)[1]]
    assert first == second


def test_kl_to_a_refreshed_reference_is_reported():
    cfg = CartPoleConfig(
        seed=0, total_env_steps=3_000, beta=0.04, ref_update_every=2, stop_when_solved=False
    )
    history = train_cartpole(cfg, progress=False)[1]
    assert all(r["kl"] >= 0 for r in history) and any(r["kl"] > 0 for r in history)
