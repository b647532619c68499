"""CartPole GRPO: rollouts, advantages, refusal of other action spaces, and learning."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv

from grpo_minimal import envs, gym_grpo
from grpo_minimal.envs import (
    CONFIRM_SEED,
    HELD_OUT_SEED,
    STOP_SEED,
    TRAIN_SEED_LOW,
    CategoricalPolicy,
    evaluate_policy,
    make_env,
)
from grpo_minimal.gym_grpo import (
    CartPoleConfig,
    EpisodeBatch,
    load_policy,
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


def _short_cartpole(steps: int = 3) -> str:
    """A CartPole whose time limit is ``steps``: the pole cannot fall that fast (truncation)."""
    env_id = f"CartPoleShort{steps}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=CartPoleEnv, max_episode_steps=steps)
    return env_id


def test_truncated_episodes_are_counted_as_truncated():
    env = make_env(_short_cartpole())
    batch = run_episodes(CategoricalPolicy(4, 2), [env], [0], generator=torch.Generator())
    assert batch.num_steps == 3 and not batch.terminated[0]
    # training reports the share of episodes cut by the time limit (all of them here)
    cfg = CartPoleConfig(env_id=_short_cartpole(), total_env_steps=60, stop_when_solved=False)
    history = train_cartpole(cfg, progress=False)[1]
    assert [r["frac_truncated"] for r in history] == [1.0] * len(history)
    random_policy = CartPoleConfig(total_env_steps=60, stop_when_solved=False)
    assert train_cartpole(random_policy, progress=False)[1][0]["frac_truncated"] == 0.0


def test_dr_grpo_divides_by_the_longest_possible_episode(monkeypatch):
    """dr_grpo's normaliser is batch * max_episode_steps, a constant, not the padded length."""
    seen, original = [], gym_grpo.grpo_loss

    def spy(*args, **kwargs):
        seen.append((kwargs["max_completion_length"], args[0].shape[1]))
        return original(*args, **kwargs)

    monkeypatch.setattr(gym_grpo, "grpo_loss", spy)
    cfg = CartPoleConfig(loss_type="dr_grpo", total_env_steps=300, stop_when_solved=False)
    train_cartpole(cfg, progress=False)
    assert seen and all(limit == 500 for limit, _ in seen)  # CartPole-v1's time limit
    assert all(padded < 500 for _, padded in seen)  # a random policy's episodes are shorter
    # an environment without a time limit has no constant to divide by: a clear error
    env_id = "CartPoleNoLimit-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=CartPoleEnv)
    with pytest.raises(ValueError, match="dr_grpo.*time limit"):
        train_cartpole(CartPoleConfig(env_id=env_id, loss_type="dr_grpo"), progress=False)


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


def test_stopping_confirming_and_held_out_start_states_are_disjoint(monkeypatch):
    """Held out means never used to decide: record every reset seed of a run that stops."""
    used: dict[str, set[int]] = {"train": set(), "decide": set(), "report": set()}
    original_run, original_vector = gym_grpo.run_episodes, envs.make_vector_env

    def recording_run(policy, env_list, seeds, greedy=False, generator=None):
        used["train"].update(int(s) for s in seeds)
        return original_run(policy, env_list, seeds, greedy=greedy, generator=generator)

    def recording_vector(*args, **kwargs):  # greedy evaluation resets one vector env
        vector = original_vector(*args, **kwargs)
        reset = vector.reset

        def reset_recorded(*a, seed=None, **k):
            used["decide"].update(int(s) for s in seed)
            return reset(*a, seed=seed, **k)

        vector.reset = reset_recorded
        return vector

    monkeypatch.setattr(gym_grpo, "run_episodes", recording_run)
    monkeypatch.setattr(envs, "make_vector_env", recording_vector)

    class LowestSeeds:  # draws the lowest seed the trainer allows: the edge of its range
        def __init__(self, seed):
            pass

        def integers(self, low, high, size):
            return np.full(size, low)

    monkeypatch.setattr(gym_grpo.np.random, "default_rng", LowestSeeds)
    # a threshold a random policy reaches, so that the stopping check runs and passes
    cfg = CartPoleConfig(seed=0, solve_threshold=5.0, eval_episodes=30, total_env_steps=5_000)
    policy, history = train_cartpole(cfg, progress=False)
    assert history[-1]["solved"] and "confirm_return" in history[-1]
    stop = set(range(STOP_SEED, STOP_SEED + 30))
    confirm = set(range(CONFIRM_SEED, CONFIRM_SEED + 30))
    assert used["decide"] == stop | confirm  # the screen (10) lies inside the stopping set
    assert min(used["train"]) >= TRAIN_SEED_LOW
    decided = set(used["decide"])
    used["decide"].clear()
    evaluate_policy(policy, cfg.env_id, 100)  # the default: the reported, held-out states
    reported = used["decide"]
    assert reported == set(range(HELD_OUT_SEED, HELD_OUT_SEED + 100))
    assert not reported & decided and not reported & used["train"]


def test_solved_must_hold_on_fresh_start_states(monkeypatch):
    """A pass on the stopping set alone is not "solved": the confirming set must pass too."""
    returns = {STOP_SEED: 500.0, CONFIRM_SEED: 400.0}

    def fake_greedy(policy, env_id, episodes, seed):  # CartPole: one reward per step
        return np.full(episodes, returns[seed]), np.full(episodes, int(returns[seed]))

    monkeypatch.setattr(envs, "greedy_episodes", fake_greedy)
    check = envs.stopping_check(CategoricalPolicy(4, 2), "CartPole-v1", 100, 475.0)
    assert check == {
        "eval_return": 500.0,
        "confirm_return": 400.0,
        "solved": False,
        "env_steps": 10 * 500 + 100 * 500 + 100 * 400,
    }
    returns[CONFIRM_SEED] = 480.0
    assert envs.stopping_check(CategoricalPolicy(4, 2), "CartPole-v1", 100, 475.0)["solved"]
    returns[STOP_SEED] = 470.0  # the screen fails: nothing more is run
    assert envs.stopping_check(CategoricalPolicy(4, 2), "CartPole-v1", 100, 475.0) == {
        "eval_return": 470.0,
        "env_steps": 4700,
        "solved": False,
    }


def test_evaluation_episodes_cannot_run_into_the_next_seed_range():
    with pytest.raises(ValueError, match="eval_episodes must be in"):
        CartPoleConfig(eval_episodes=CONFIRM_SEED - STOP_SEED + 1)


def test_greedy_evaluation_over_a_vector_env_is_one_episode_per_start_state():
    """``evaluate_policy`` steps all episodes together in one vector env (finished ones keep
    stepping into new episodes, which must not count): its returns equal those of greedy
    episodes run one start state at a time."""
    torch.manual_seed(3)
    policy = CategoricalPolicy(4, 2, 8)  # an untrained policy: episodes of unequal length
    seeds = [HELD_OUT_SEED + i for i in range(12)]
    one_by_one = [
        run_episodes(policy, [make_env("CartPole-v1")], [s], greedy=True).returns.item()
        for s in seeds
    ]
    together = evaluate_policy(policy, "CartPole-v1", 12)
    assert len(set(one_by_one)) > 1  # the lengths really differ
    assert together.tolist() == one_by_one


def test_evaluation_counts_steps_not_rewards():
    """Acrobot pays -1 a step: the stopping check's ``env_steps`` is the episodes' length,
    counted one start state at a time, never the (negative) sum of rewards."""
    torch.manual_seed(0)
    policy = CategoricalPolicy(6, 3, 8)
    check = envs.stopping_check(policy, "Acrobot-v1", 10, solve_threshold=-1e9)  # both sets
    lengths = [
        int(run_episodes(policy, [make_env("Acrobot-v1")], [seed], greedy=True).mask.sum())
        for start in (STOP_SEED, CONFIRM_SEED)
        for seed in range(start, start + 10)
    ]
    assert check["env_steps"] == sum(lengths) > 0


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_the_loop_decides_when_to_check_and_stop(monkeypatch, algo):
    """Both loops: no greedy check while the sampled returns are under half the threshold; once
    checked, "solved" stops training only with stop_when_solved, and eval_env_steps counts the
    check's episodes."""
    from grpo_minimal.ppo import PPOConfig, train_ppo

    calls = []

    def fake_check(policy, env_id, episodes, threshold):
        calls.append(threshold)
        return {"eval_return": 1.0, "env_steps": 7, "solved": len(calls) >= 2}

    monkeypatch.setattr(envs, "stopping_check", fake_check)
    config, train = (PPOConfig, train_ppo) if algo == "ppo" else (CartPoleConfig, train_cartpole)
    small = dict(num_envs=2, num_steps=16) if algo == "ppo" else dict(groups_per_batch=1)
    budget = 100 if algo == "ppo" else 450  # 4 PPO updates of 32 steps; 3 of 8 short episodes
    _, history = train(config(total_env_steps=budget, solve_threshold=1e9, **small), False)
    assert calls == [] and all("solved" not in r for r in history)
    _, history = train(config(total_env_steps=budget, solve_threshold=0.0, **small), False)
    assert len(history) == 2 and history[-1]["solved"] and history[-1]["eval_env_steps"] == 14
    calls.clear()
    cfg = config(total_env_steps=budget, solve_threshold=0.0, stop_when_solved=False, **small)
    _, history = train(cfg, False)
    assert history[-1]["env_steps"] >= budget and len(calls) == len(history) > 2
