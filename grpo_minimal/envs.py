"""The gymnasium side that GRPO (``gym_grpo.py``) and PPO (``ppo.py``) share.

- environments: ``make_env`` (refuses what a categorical MLP policy cannot act in) and
  ``make_vector_env`` (gymnasium's ``SyncVectorEnv``);
- what both configurations share (``EnvConfig``): the environment, the budget, the network
  width and the stopping rule;
- the policy: ``CategoricalPolicy``, pi(a | s) = softmax(MLP(s)), the actor of both trainers;
- greedy evaluation over many start states at once (``evaluate_policy``), the stopping check
  both trainers' loops run (``greedy_check``, ``stopping_check``) and the record of each
  update (``TrainingLog``, which decides nothing).

Start states come from four disjoint ranges of reset seeds, so that no number is judged on the
start states that decided it: training draws from ``[TRAIN_SEED_LOW, 2**31)``; the check that
decides to stop uses ``STOP_SEED, STOP_SEED + 1, ...``; "solved" must also hold on a second,
fresh set (``CONFIRM_SEED, ...``); reported ("held-out") figures use ``HELD_OUT_SEED, ...``,
which decide nothing.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .config import ValidatedConfig, check_range, option

STOP_SEED = 10_000
"""First reset seed of the greedy check that decides to stop (screen and full check)."""
CONFIRM_SEED = 20_000
"""First reset seed of the second, fresh check that "solved" must also pass."""
HELD_OUT_SEED = 100_000
"""First reset seed of reported evaluations: these start states decide nothing."""
TRAIN_SEED_LOW = 1_000_000
"""Training draws reset seeds from [TRAIN_SEED_LOW, 2**31): never an evaluation state."""
MAX_EVAL_EPISODES = CONFIRM_SEED - STOP_SEED
"""More greedy episodes than this would run the stopping range into the confirming one."""


@dataclass
class EnvConfig(ValidatedConfig):
    """The fields GRPO's ``CartPoleConfig`` and ``PPOConfig`` share, with the same meaning."""

    env_id: str = option("CartPole-v1", "gymnasium id of a discrete-action environment")
    total_env_steps: int = option(
        200_000, "training budget in environment steps (training stops earlier once solved)"
    )
    gamma: float = option(0.99, "discount factor, in (0, 1]")
    entropy_coef: float = option(0.01, "weight of the entropy bonus")
    hidden_size: int = option(
        64, "width of the two hidden layers of the policy MLP (and of PPO's critic)"
    )
    eval_episodes: int = option(100, "greedy episodes that decide whether the task is solved")
    solve_threshold: float = option(
        475.0, "mean greedy return that counts as solved (475 for CartPole-v1)"
    )
    stop_when_solved: bool = option(
        True, "stop training at the first greedy evaluation that reaches solve_threshold"
    )

    def validate(self) -> None:
        super().validate()
        check_range("total_env_steps", self.total_env_steps, 1)
        check_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_range("entropy_coef", self.entropy_coef, 0.0)
        check_range("hidden_size", self.hidden_size, 1)
        check_range("eval_episodes", self.eval_episodes, 1, MAX_EVAL_EPISODES)
        check_range("solve_threshold", self.solve_threshold)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (environment resets are seeded explicitly)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_env(env_id: str) -> gym.Env:
    """Make a gymnasium environment and refuse any whose actions are not ``Discrete``."""
    try:
        env = gym.make(env_id)
    except gym.error.Error as err:  # unknown id, version or namespace; a missing dependency
        raise ValueError(f"env_id={env_id!r}: {err} (e.g. CartPole-v1, Acrobot-v1)") from None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        env.close()
        raise ValueError(
            f"env_id={env_id!r} has action space {env.action_space}; this trainer needs a "
            "gymnasium.spaces.Discrete action space (a categorical policy), e.g. CartPole-v1"
        )
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        env.close()
        raise ValueError(
            f"env_id={env_id!r} has observation space {space}; "
            "this trainer needs a flat Box observation"
        )
    return env


def make_vector_env(env_id: str, num_envs: int) -> gym.vector.SyncVectorEnv:
    """``num_envs`` copies of ``make_env(env_id)`` stepped together.

    Autoreset happens in the same step (``AutoresetMode.SAME_STEP``): when an episode ends, the
    returned observation already belongs to the next episode and the last one is in
    ``info["final_obs"]``; so every step is a real transition.
    """
    return gym.vector.SyncVectorEnv(
        [functools.partial(make_env, env_id)] * num_envs,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )


def mlp(in_dim: int, hidden_size: int, out_dim: int) -> nn.Sequential:
    """Two tanh hidden layers of ``hidden_size`` units: the actor's and the critic's body."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_size),
        nn.Tanh(),
        nn.Linear(hidden_size, hidden_size),
        nn.Tanh(),
        nn.Linear(hidden_size, out_dim),
    )


class CategoricalPolicy(nn.Module):
    """pi(a | s): an MLP from a flat observation to the logits of a categorical distribution."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_size: int = 64) -> None:
        super().__init__()
        self.obs_dim, self.num_actions, self.hidden_size = obs_dim, num_actions, hidden_size
        self.net = mlp(obs_dim, hidden_size, num_actions)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def log_prob(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """log pi(a | s) by gather, and the logits (for the entropy)."""
        logits = self(obs)
        logps = torch.log_softmax(logits, dim=-1).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return logps, logits


@torch.no_grad()
def greedy_episodes(
    policy: CategoricalPolicy, env_id: str, episodes: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Greedy returns and lengths (steps) of ``episodes`` episodes, reset with seeds seed,
    seed+1, ..., all stepped together in one vector environment (an environment whose episode
    ended keeps stepping into a new one, which is not counted)."""
    envs = make_vector_env(env_id, episodes)
    obs, _ = envs.reset(seed=[seed + i for i in range(episodes)])
    returns = np.zeros(episodes)
    lengths = np.zeros(episodes, dtype=np.int64)
    running = np.ones(episodes, dtype=bool)
    while running.any():
        actions = policy(torch.as_tensor(obs, dtype=torch.float32)).argmax(dim=-1)
        obs, rewards, terminated, truncated, _ = envs.step(actions.numpy())
        returns += np.where(running, rewards, 0.0)
        lengths += running
        running &= ~(terminated | truncated)
    envs.close()
    return returns, lengths


def evaluate_policy(
    policy: CategoricalPolicy, env_id: str, episodes: int = 100, seed: int = HELD_OUT_SEED
) -> np.ndarray:
    """Greedy returns of ``episodes`` episodes (``greedy_episodes``).

    The default start states are the held-out ones (``HELD_OUT_SEED``): training never stops on
    them, so their mean is a fair report of the trained policy.
    """
    return greedy_episodes(policy, env_id, episodes, seed)[0]


def stopping_check(
    policy: CategoricalPolicy, env_id: str, eval_episodes: int, solve_threshold: float
) -> dict:
    """The greedy check both CartPole trainers use to decide whether to stop.

    10 episodes first (cheap while unsolved); if they reach the threshold, ``eval_episodes``
    episodes from ``STOP_SEED``; if those reach it too, ``eval_episodes`` fresh ones from
    ``CONFIRM_SEED``. Solved means both sets reach the threshold: a policy that passed the first
    set by luck (the best of many checks) must pass again on start states it was not selected on.
    Neither set is held out: both decide. Report ``evaluate_policy`` on ``HELD_OUT_SEED``.

    Returns ``{"eval_return", "confirm_return" (if run), "solved", "env_steps"}``.
    """
    screen, steps = greedy_episodes(policy, env_id, min(10, eval_episodes), STOP_SEED)
    result = {"eval_return": float(screen.mean()), "env_steps": int(steps.sum())}
    passed = result["eval_return"] >= solve_threshold
    if passed and eval_episodes > 10:
        full, steps = greedy_episodes(policy, env_id, eval_episodes, STOP_SEED)
        result["eval_return"] = float(full.mean())
        result["env_steps"] += int(steps.sum())
        passed = result["eval_return"] >= solve_threshold
    if passed:
        confirm, steps = greedy_episodes(policy, env_id, eval_episodes, CONFIRM_SEED)
        result["confirm_return"] = float(confirm.mean())
        result["env_steps"] += int(steps.sum())
        passed = result["confirm_return"] >= solve_threshold
    result["solved"] = passed
    return result


def greedy_check(policy: CategoricalPolicy, cfg: EnvConfig, sampled_return: float) -> dict:
    """``stopping_check`` once the sampled returns reach half the threshold, else ``{}``.

    Greedy episodes cost time; while the sampled (exploring) policy is far from the threshold
    the greedy one is too, so the check waits for it.
    """
    if sampled_return < 0.5 * cfg.solve_threshold:
        return {}
    return stopping_check(policy, cfg.env_id, cfg.eval_episodes, cfg.solve_threshold)


class TrainingLog:
    """Records what an update measured: the metrics list, the ``on_update`` callback, the
    progress bar. It decides nothing (the trainers' loops decide)."""

    def __init__(
        self, cfg: EnvConfig, name: str, progress: bool, on_update: Callable[[dict], None] | None
    ):
        self.cfg, self.on_update = cfg, on_update
        self.history: list[dict] = []
        self.start = time.perf_counter()
        self.bar = tqdm(
            total=cfg.total_env_steps, desc=f"{name} {cfg.env_id}", disable=not progress
        )

    def elapsed(self) -> float:
        return round(time.perf_counter() - self.start, 3)

    def add(self, record: dict, steps: int) -> None:
        """Keep ``record``, pass it to ``on_update``, advance the bar by ``steps`` env steps."""
        self.history.append(record)
        if self.on_update is not None:
            self.on_update(record)
        self.bar.update(min(steps, self.cfg.total_env_steps - self.bar.n))
        self.bar.set_postfix(
            ret=f"{record['return_mean']:.0f}", greedy=record.get("eval_return", "-")
        )

    def close(self) -> list[dict]:
        self.bar.close()
        return self.history
