"""GRPO for discrete-action gymnasium environments (CartPole-v1 by default).

One update, top to bottom (``train_cartpole``):

1. draw ``groups_per_batch`` reset seeds; every group is G episodes started from the same seed,
   so the group shares its start state, as G completions share one prompt;
2. roll them out with the current policy, remembering log pi_old(a_t | s_t);
3. turn per-step rewards into returns-to-go R_t (equation 4) and the returns into advantages,
   normalised within the group at each step t (equation 2', displayed in notebook 03, section 1;
   ``step_advantages``);
4. take ``num_iterations`` clipped gradient steps on the batch (``grpo_loss``), minus an entropy
   bonus, plus beta * k3 KL to a reference policy refreshed every ``ref_update_every`` updates;
5. when the sampled returns look good, evaluate the greedy policy; stop once solved
   (``envs.greedy_check``); ``envs.TrainingLog`` only records.

Start states, the policy network and greedy evaluation are shared with PPO (``envs.py``):
training groups draw their reset seeds from ``[TRAIN_SEED_LOW, 2**31)``, never an evaluation
start state.

Episodes end when the environment says ``terminated`` (failure: no future reward) or
``truncated`` (time limit). Both simply end the episode here: without a critic there is no value
to bootstrap from, and every episode of a group faces the same time limit.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .advantages import centre_and_scale, discounted_returns
from .config import ObjectiveConfig, check_choice, check_range, option, override
from .envs import (
    TRAIN_SEED_LOW,
    CategoricalPolicy,
    EnvConfig,
    TrainingLog,
    greedy_check,
    make_env,
    seed_everything,
)
from .losses import categorical_entropy, grpo_loss, masked_mean

ADVANTAGE_MODES = ("per_step", "all_steps", "episode")
BASELINES = ("mean", "rloo")


@dataclass
class CartPoleConfig(ObjectiveConfig, EnvConfig):
    """GRPO on a discrete-action gymnasium environment (CartPole-v1 by default).

    A group is ``num_generations`` episodes that start from the same reset seed. The defaults
    are the ones the benchmark in ``bench/cartpole.py`` measures. The environment, budget and
    stopping fields are ``envs.EnvConfig``'s, shared with PPO.
    """

    groups_per_batch: int = option(
        4, "start states (groups) per policy update; a batch holds groups_per_batch * G episodes"
    )
    advantage: str = option(
        "per_step",
        "per_step: normalise R_t across the group at each t; all_steps: over all steps of the "
        "group; episode: the episode's total return, broadcast to its steps (outcome reward)",
    )
    baseline: str = option(
        "mean",
        "mean: subtract the group mean (GRPO); rloo: subtract the mean of the other outputs, "
        "i.e. scale the centred value by n/(n-1) (equation 3)",
    )

    num_iterations: int = override(ObjectiveConfig, "num_iterations", 4)
    learning_rate: float = override(ObjectiveConfig, "learning_rate", 3e-3)
    max_grad_norm: float = override(ObjectiveConfig, "max_grad_norm", 0.5)
    loss_type: str = override(ObjectiveConfig, "loss_type", "bnpo")
    beta: float = override(ObjectiveConfig, "beta", 0.0)
    ref_update_every: int = override(ObjectiveConfig, "ref_update_every", 0)

    def validate(self) -> None:
        super().validate()
        check_range("groups_per_batch", self.groups_per_batch, 1)
        check_choice("advantage", self.advantage, ADVANTAGE_MODES)
        check_choice("baseline", self.baseline, BASELINES)


def episode_limit(env: gym.Env, cfg: CartPoleConfig) -> int | None:
    """The environment's time limit: dr_grpo's constant normaliser (batch * the longest possible
    episode), never this batch's padded length, which grows as the policy improves. An error
    for dr_grpo on an environment without one."""
    limit = env.spec.max_episode_steps if env.spec else None
    if cfg.loss_type == "dr_grpo" and not limit:
        raise ValueError(
            f"loss_type='dr_grpo' needs an environment with a time limit (its constant "
            f"normaliser is the longest episode); env_id={cfg.env_id!r} has none"
        )
    return limit


@dataclass
class EpisodeBatch:
    """N episodes padded to T steps; ``mask`` is 1 on real steps. Groups are consecutive blocks."""

    obs: torch.Tensor  # [N, T, obs_dim]
    actions: torch.Tensor  # [N, T]
    rewards: torch.Tensor  # [N, T]
    logps: torch.Tensor  # [N, T] log pi_old(a_t | s_t) at sampling time
    mask: torch.Tensor  # [N, T]
    terminated: torch.Tensor  # [N] True if the episode failed, False if truncated

    @property
    def returns(self) -> torch.Tensor:
        """Undiscounted episode returns [N]."""
        return (self.rewards * self.mask).sum(dim=1)

    @property
    def num_steps(self) -> int:
        return int(self.mask.sum().item())


@torch.no_grad()
def run_episodes(
    policy: CategoricalPolicy,
    envs: list[gym.Env],
    seeds: list[int],
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> EpisodeBatch:
    """Run one episode in each env (reset with its seed), batching the policy over live envs.

    Sampling uses the Gumbel-max trick with ``generator``, so it is reproducible and cheap.
    """
    n = len(envs)
    obs = [[] for _ in range(n)]
    actions = [[] for _ in range(n)]
    rewards = [[] for _ in range(n)]
    logps = [[] for _ in range(n)]
    terminated = [False] * n
    current = [env.reset(seed=int(s))[0] for env, s in zip(envs, seeds, strict=True)]
    alive = list(range(n))
    while alive:
        x = torch.as_tensor(np.stack([current[i] for i in alive]), dtype=torch.float32)
        log_probs = torch.log_softmax(policy(x), dim=-1)
        if greedy:
            chosen = log_probs.argmax(dim=-1)
        else:
            u = torch.rand(log_probs.shape, generator=generator).clamp_(1e-12, 1.0)
            chosen = (log_probs - torch.log(-torch.log(u))).argmax(dim=-1)
        chosen_logp = log_probs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
        still_alive = []
        for k, i in enumerate(alive):
            a = int(chosen[k])
            obs[i].append(current[i])
            actions[i].append(a)
            logps[i].append(float(chosen_logp[k]))
            current[i], r, term, trunc, _ = envs[i].step(a)
            rewards[i].append(float(r))
            if term or trunc:
                terminated[i] = bool(term)
            else:
                still_alive.append(i)
        alive = still_alive

    steps = max(len(a) for a in actions)
    obs_dim = len(obs[0][0])
    batch = EpisodeBatch(
        obs=torch.zeros(n, steps, obs_dim),
        actions=torch.zeros(n, steps, dtype=torch.long),
        rewards=torch.zeros(n, steps),
        logps=torch.zeros(n, steps),
        mask=torch.zeros(n, steps),
        terminated=torch.tensor(terminated),
    )
    for i in range(n):
        t = len(actions[i])
        batch.obs[i, :t] = torch.as_tensor(np.stack(obs[i]), dtype=torch.float32)
        batch.actions[i, :t] = torch.tensor(actions[i])
        batch.rewards[i, :t] = torch.tensor(rewards[i])
        batch.logps[i, :t] = torch.tensor(logps[i])
        batch.mask[i, :t] = 1.0
    return batch


def step_advantages(batch: EpisodeBatch, cfg: CartPoleConfig) -> torch.Tensor:
    """Per-step advantages [N, T] from returns-to-go, normalised within each group of G episodes.

    - ``per_step`` (the default): at each time t, (R_t - mean) / std over the group's episodes
      still running at t, equation (2') (notebook 03, section 1: the group advantage (2) taken
      at each step). Compares actions taken at the same depth into the episode.
    - ``all_steps``: (R_t - mean) / std over all steps of all the group's episodes. Early steps
      have large R_t, so they get positive advantages whatever the action was.
    - ``episode``: the episode's total return, group-normalised (equation 2) and given to every
      step: the outcome-reward setting of LLM GRPO.
    ``scale_rewards`` divides by the std of the compared values (``group``), of every value in
    the batch (``batch``) or not at all (``none``), with ``advantages.centre_and_scale``; ``baseline="rloo"`` multiplies the centred
    value by n / (n - 1) for n compared values, the leave-one-out baseline (3) over those values:
    for ``per_step`` and ``episode`` a value is an episode's, so each episode is left out of its
    own baseline; for ``all_steps`` a value is one step's, so only that step is left out.
    """
    G = cfg.num_generations
    n, steps = batch.mask.shape
    if cfg.advantage == "episode":
        values, mask, dim = batch.returns.view(-1, G, 1), torch.ones(n // G, G, 1), 1
    else:
        values = discounted_returns(batch.rewards, batch.mask, cfg.gamma).view(-1, G, steps)
        mask = batch.mask.view(-1, G, steps)
        dim = 1 if cfg.advantage == "per_step" else (1, 2)
    advantages, count = centre_and_scale(values, mask, dim, cfg.scale_rewards)
    if cfg.baseline == "rloo":  # r - mean(others) = n / (n - 1) * (r - mean(all))
        advantages = advantages * count / (count - 1).clamp(min=1)
    return advantages.reshape(n, -1) * batch.mask


def save_policy(
    policy: CategoricalPolicy, cfg: CartPoleConfig, path: str | os.PathLike, **extra
) -> None:
    """Write the policy, its config and any ``extra`` entries atomically (temp file, then
    rename). ``load_policy`` reads it back; PPO saves its actor the same way."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(
        {
            "state_dict": policy.state_dict(),
            "obs_dim": policy.obs_dim,
            "num_actions": policy.num_actions,
            "config": cfg.to_dict(),
            **extra,
        },
        tmp,
    )
    os.replace(tmp, path)


def load_policy(path: str | os.PathLike) -> tuple[CategoricalPolicy, CartPoleConfig]:
    """Load what ``save_policy`` wrote."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    cfg = CartPoleConfig(**ckpt["config"])
    policy = CategoricalPolicy(ckpt["obs_dim"], ckpt["num_actions"], cfg.hidden_size)
    policy.load_state_dict(ckpt["state_dict"])
    return policy, cfg


def train_cartpole(
    cfg: CartPoleConfig,
    progress: bool = True,
    on_update: Callable[[dict], None] | None = None,
) -> tuple[CategoricalPolicy, list[dict]]:
    """Train a categorical policy with GRPO. Returns the policy and one metrics dict per update."""
    seed_everything(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    G = cfg.num_generations
    envs = [make_env(cfg.env_id) for _ in range(cfg.groups_per_batch * G)]
    policy = CategoricalPolicy(
        envs[0].observation_space.shape[0], int(envs[0].action_space.n), cfg.hidden_size
    )
    max_episode_steps = episode_limit(envs[0], cfg)
    reference = copy.deepcopy(policy).requires_grad_(False) if cfg.beta > 0 else None
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)

    log = TrainingLog(cfg, "GRPO", progress, on_update)
    env_steps, eval_env_steps, update = 0, 0, 0
    while env_steps < cfg.total_env_steps:
        # 1-2. a batch of groups: G episodes per start state
        group_seeds = rng.integers(TRAIN_SEED_LOW, 2**31, size=cfg.groups_per_batch)
        batch = run_episodes(policy, envs, np.repeat(group_seeds, G).tolist(), generator=generator)
        env_steps += batch.num_steps
        # 3. advantages from discounted returns-to-go, normalised within each group
        advantages = step_advantages(batch, cfg)
        # 4. clipped epochs on this batch, KL to a periodically refreshed reference
        if reference is not None and cfg.ref_update_every and update % cfg.ref_update_every == 0:
            reference.load_state_dict(policy.state_dict())
        for _ in range(cfg.num_iterations):
            logps, logits = policy.log_prob(batch.obs, batch.actions)
            ref_logps = reference.log_prob(batch.obs, batch.actions)[0] if reference else None
            loss, metrics = grpo_loss(
                logps,
                batch.logps,
                ref_logps,
                advantages,
                batch.mask,
                beta=cfg.beta,
                epsilon=cfg.epsilon,
                epsilon_high=cfg.epsilon_high,
                loss_type=cfg.loss_type,
                max_completion_length=max_episode_steps,
                use_bias_correction_kl=cfg.use_bias_correction_kl,
            )
            entropy = masked_mean(categorical_entropy(logits), batch.mask)
            optimizer.zero_grad()
            (loss - cfg.entropy_coef * entropy).backward()
            if cfg.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optimizer.step()
        update += 1

        returns = batch.returns
        record = {
            "update": update,
            "env_steps": env_steps,
            "wall_s": log.elapsed(),
            "return_mean": returns.mean().item(),
            "return_min": returns.min().item(),
            "return_max": returns.max().item(),
            "entropy": entropy.item(),
            "frac_truncated": (~batch.terminated).float().mean().item(),  # hit the time limit
            **{k: metrics[k] for k in ("loss", "kl", "clip_fraction")},
        }
        # 5. greedy stopping check once the sampled returns reach half the threshold
        check = greedy_check(policy, cfg, record["return_mean"])
        eval_env_steps += check.pop("env_steps", 0)
        record.update(check, wall_s=log.elapsed(), eval_env_steps=eval_env_steps)
        log.add(record, batch.num_steps)
        if cfg.stop_when_solved and check.get("solved"):
            break
    for env in envs:
        env.close()
    return policy, log.close()
