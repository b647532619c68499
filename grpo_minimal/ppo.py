"""PPO with a learned critic and GAE(lambda): the baseline GRPO is measured against.

GRPO (``gym_grpo.py``) compares G episodes from the same start state; PPO instead learns a value
function V(s) and compares each step with it. Symbols follow the notebooks; the numbering goes on
from ``advantages.py`` (1)-(4) and ``losses.py`` (5)-(9). For step t of one environment, with
reward r_t, next state s_{t+1}, term_t = 1 if the episode failed there (terminated) and
done_t = 1 if it ended there for any reason (terminated or truncated by the time limit):

    (10) TD error       delta_t = r_t + gamma * (1 - term_t) * V(s_{t+1}) - V(s_t)
    (11) GAE            A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}
    (12) value target   R_t = A_t + V(s_t)
    (13) value loss     L_V = 1/2 * max((V(s_t) - R_t)^2, (V_old + clip(V(s_t) - V_old, -eps, eps) - R_t)^2)
    (14) PPO loss       l = -L_clip(rho, A_norm) + c_V * L_V - c_H * H(pi)

L_clip is the clipped surrogate (6) of ``losses.py``, the very function GRPO uses, and H the same
``categorical_entropy``; A_norm is A normalised within the minibatch (the "batch" normalisation of
the classic comparison table, where GRPO normalises within a group).

Termination and truncation differ in (10): a failed episode has no future reward, so nothing is
bootstrapped; an episode cut by the time limit would have gone on, so its last step bootstraps
from V(s_final), the observation it was cut at. Both stop the recursion (11), since the next
transition in the same environment belongs to a new episode.

One update, top to bottom (``train_ppo``):

1. step ``num_envs`` environments (``gymnasium.vector.SyncVectorEnv``) ``num_steps`` times with
   the current actor, remembering s_t, a_t, log pi_old(a_t | s_t), r_t, term_t, done_t, s_{t+1};
2. evaluate the critic on s_t and s_{t+1}, then GAE (11) and targets (12) (``gae``);
3. take ``num_iterations`` epochs of ``num_minibatches`` clipped gradient steps on loss (14)
   (``ppo_update``), the learning rate decaying linearly to 0;
4. when the sampled returns look good, evaluate the greedy actor exactly as GRPO's trainer does
   (``envs.stopping_check``: 10 episodes, then 100, then 100 fresh ones); stop once solved.

The actor is an ``envs.CategoricalPolicy``, so evaluation, saving and the CLI treat a PPO policy
and a GRPO policy alike; the critic is the only extra network.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from .config import check_range, option, override
from .envs import (
    TRAIN_SEED_LOW,
    CategoricalPolicy,
    EnvConfig,
    TrainingLog,
    greedy_check,
    make_vector_env,
    mlp,
    seed_everything,
)
from .gym_grpo import CartPoleConfig, load_policy, save_policy
from .losses import categorical_entropy, clipped_surrogate, clipped_tokens, kl_k3, policy_ratio


@dataclass
class PPOConfig(EnvConfig):
    """PPO with a learned critic and GAE(lambda) on a discrete-action gymnasium environment.

    The defaults are the standard CartPole-v1 configuration of CleanRL's ``ppo.py`` (500k steps,
    4 envs x 128 steps, lr 2.5e-4 annealed, GAE 0.95, clip 0.2, 4 epochs x 4 minibatches), the
    PPO baseline that notebook 03 and ``bench/ppo_vs_grpo.py`` measure GRPO against. Fields that
    mean the same as in ``CartPoleConfig`` have the same name; the environment, budget and
    stopping fields are ``envs.EnvConfig``'s, shared with GRPO.
    """

    total_env_steps: int = override(EnvConfig, "total_env_steps", 500_000)
    num_envs: int = option(4, "environments stepped side by side (gymnasium.vector.SyncVectorEnv)")
    num_steps: int = option(
        128,
        "steps taken in each environment per rollout; a batch holds num_envs * num_steps "
        "transitions",
    )
    learning_rate: float = option(2.5e-4, "Adam step size at the start of training")
    anneal_lr: bool = option(True, "decay the learning rate linearly to 0 over total_env_steps")
    gae_lambda: float = option(
        0.95,
        "lambda of GAE (equation 11): 0 is the one-step TD error, 1 the Monte Carlo return minus V",
    )
    num_iterations: int = option(
        4,
        "epochs over each rollout (CleanRL's update_epochs; the same knob as GRPO's "
        "num_iterations)",
    )
    num_minibatches: int = option(
        4, "minibatches per epoch; each is num_envs * num_steps / num_minibatches transitions"
    )
    epsilon: float = option(
        0.2,
        "clip range: the ratio is clipped to [1 - epsilon, 1 + epsilon] (CleanRL's clip_coef); "
        "also the value clip range when clip_value_loss",
    )
    normalize_advantages: bool = option(
        True, "normalise the advantages within each minibatch to mean 0, std 1"
    )
    clip_value_loss: bool = option(
        True, "clip the value update around the rollout's value, equation (13)"
    )
    value_coef: float = option(0.5, "weight of the value loss")
    max_grad_norm: float = option(
        0.5, "clip the global gradient norm to this value; 0 disables clipping"
    )
    seed: int = option(0, "seed for random, numpy, torch and environment resets")

    def validate(self) -> None:
        """Check every field; a bad value raises ``ValueError`` naming the field."""
        super().validate()
        check_range("num_envs", self.num_envs, 1)
        check_range("num_steps", self.num_steps, 1)
        check_range("learning_rate", self.learning_rate, 0.0, low_open=True)
        check_range("gae_lambda", self.gae_lambda, 0.0, 1.0)
        check_range("num_iterations", self.num_iterations, 1)
        check_range("num_minibatches", self.num_minibatches, 1)
        batch = self.num_envs * self.num_steps
        if batch % self.num_minibatches:
            raise ValueError(
                f"num_minibatches must divide num_envs * num_steps = {batch}, "
                f"got {self.num_minibatches}"
            )
        check_range("epsilon", self.epsilon, 0.0, 1.0, low_open=True, high_open=True)
        check_range("value_coef", self.value_coef, 0.0)
        check_range("max_grad_norm", self.max_grad_norm, 0.0)
        check_range("seed", self.seed, 0)  # negative seeds would reach the evaluation seeds


def _orthogonal_init(net: nn.Sequential, last_gain: float) -> None:
    """CleanRL's initialisation: orthogonal weights (gain sqrt 2, last layer ``last_gain``), 0 bias."""
    linears = [m for m in net if isinstance(m, nn.Linear)]
    for layer in linears:
        gain = last_gain if layer is linears[-1] else math.sqrt(2.0)
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)


class ActorCritic(nn.Module):
    """An actor pi(a | s) (a ``CategoricalPolicy``) and a separate critic V(s) of the same width."""

    def __init__(self, obs_dim: int, num_actions: int, hidden_size: int = 64) -> None:
        super().__init__()
        self.actor = CategoricalPolicy(obs_dim, num_actions, hidden_size)
        self.critic = mlp(obs_dim, hidden_size, 1)
        _orthogonal_init(self.actor.net, 0.01)  # near-uniform policy at the start
        _orthogonal_init(self.critic, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(s), shape [...] for observations [..., obs_dim]."""
        return self.critic(obs).squeeze(-1)


@dataclass
class Transitions:
    """``num_steps`` transitions from each of ``num_envs`` environments, all tensors [T, N, ...]."""

    obs: torch.Tensor  # [T, N, obs_dim] s_t
    actions: torch.Tensor  # [T, N]
    logps: torch.Tensor  # [T, N] log pi_old(a_t | s_t)
    rewards: torch.Tensor  # [T, N]
    terminated: torch.Tensor  # [T, N] 1.0 where the episode failed at t
    dones: torch.Tensor  # [T, N] 1.0 where the episode ended at t (terminated or truncated)
    next_obs: torch.Tensor  # [T, N, obs_dim] s_{t+1}; the final observation where done


@torch.no_grad()
def collect_rollout(
    actor: CategoricalPolicy,
    envs: gym.vector.VectorEnv,
    obs: np.ndarray,
    num_steps: int,
    running_returns: np.ndarray,
    finished: list[float],
    generator: torch.Generator | None = None,
) -> tuple[Transitions, np.ndarray]:
    """Step the vector env ``num_steps`` times from ``obs``; returns the rollout and the last obs.

    ``running_returns`` (one per env) accumulates rewards in place; when an episode ends its
    undiscounted return is appended to ``finished``.
    """
    steps = {k: [] for k in ("obs", "actions", "logps", "rewards", "terminated", "dones", "next")}
    for _ in range(num_steps):
        x = torch.as_tensor(obs, dtype=torch.float32)
        log_probs = torch.log_softmax(actor(x), dim=-1)
        actions = torch.multinomial(log_probs.exp(), 1, generator=generator).squeeze(-1)
        next_obs, rewards, terminated, truncated, info = envs.step(actions.numpy())
        done = terminated | truncated
        true_next = np.array(next_obs, dtype=np.float32, copy=True)
        for i in np.flatnonzero(done):
            true_next[i] = info["final_obs"][i]  # s_{t+1} of the episode that just ended
        running_returns += rewards
        finished.extend(running_returns[done].tolist())
        running_returns[done] = 0.0
        steps["obs"].append(x)
        steps["actions"].append(actions)
        steps["logps"].append(log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1))
        steps["rewards"].append(torch.as_tensor(rewards, dtype=torch.float32))
        steps["terminated"].append(torch.as_tensor(terminated, dtype=torch.float32))
        steps["dones"].append(torch.as_tensor(done, dtype=torch.float32))
        steps["next"].append(torch.as_tensor(true_next))
        obs = next_obs
    stacked = {k: torch.stack(v) for k, v in steps.items()}
    rollout = Transitions(
        obs=stacked["obs"],
        actions=stacked["actions"],
        logps=stacked["logps"],
        rewards=stacked["rewards"],
        terminated=stacked["terminated"],
        dones=stacked["dones"],
        next_obs=stacked["next"],
    )
    return rollout, obs


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    dones: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation, equations (10)-(12). Returns ``(advantages, targets)``.

    All inputs are [T] or [T, N] (time first). ``values[t] = V(s_t)`` and
    ``next_values[t] = V(s_{t+1})``, where s_{t+1} is the observation the step returned, or the
    final observation when the episode ended at t. ``terminated[t]`` (failure) drops the
    bootstrap V(s_{t+1}); a step that was only truncated keeps it. ``dones[t]`` (either) stops
    the recursion. The last step of the rollout bootstraps from V(s_T) alone (A_T = 0).
    """
    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    running = torch.zeros_like(rewards[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[0])):
        delta = rewards[t] + gamma * (1.0 - terminated[t]) * next_values[t] - values[t]  # (10)
        running = delta + gamma * gae_lambda * (1.0 - dones[t]) * running  # (11)
        advantages[t] = running
    return advantages, advantages + values  # (12)


def explained_variance(
    values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None
) -> float:
    """1 - Var(target - V) / Var(target), over the entries ``mask`` keeps (all by default): 1 is
    a perfect critic, 0 one no better than a constant, below 0 worse."""
    if mask is not None:
        kept = mask.bool()
        values, targets = values[kept], targets[kept]
    return (1.0 - (targets - values).var() / targets.var().clamp(min=1e-8)).item()


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    targets: torch.Tensor,
    clip: float | None = None,
) -> torch.Tensor:
    """Equation (13): half the squared error to the targets, pessimistically clipped.

    With ``clip`` the new value may move at most ``clip`` away from the value the rollout saw
    (``old_values``) before it stops lowering the loss, as the ratio is clipped in (6).
    """
    unclipped = (values - targets) ** 2
    if clip is None:
        return 0.5 * unclipped.mean()
    moved = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max(unclipped, (moved - targets) ** 2).mean()


def ppo_update(
    agent: ActorCritic,
    optimizer: torch.optim.Optimizer,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    targets: torch.Tensor,
    old_values: torch.Tensor,
    cfg: PPOConfig,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """``num_iterations`` epochs of ``num_minibatches`` gradient steps on loss (14).

    Inputs are flat: one row per transition. Returns the metrics averaged over the steps.
    """
    size = obs.shape[0]
    minibatch = size // cfg.num_minibatches
    sums: dict[str, float] = {}
    for _ in range(cfg.num_iterations):
        order = torch.randperm(size, generator=generator)
        for start in range(0, size, minibatch):
            idx = order[start : start + minibatch]
            logps, logits = agent.actor.log_prob(obs[idx], actions[idx])
            ratio = policy_ratio(logps, old_logps[idx])  # (5)
            adv = advantages[idx]
            if cfg.normalize_advantages:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = -clipped_surrogate(ratio, adv, cfg.epsilon).mean()  # (6)
            v_loss = value_loss(
                agent.value(obs[idx]),
                old_values[idx],
                targets[idx],
                cfg.epsilon if cfg.clip_value_loss else None,
            )  # (13)
            entropy = categorical_entropy(logits).mean()
            loss = policy_loss + cfg.value_coef * v_loss - cfg.entropy_coef * entropy  # (14)
            optimizer.zero_grad()
            loss.backward()
            if cfg.max_grad_norm > 0:
                nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
            optimizer.step()
            with torch.no_grad():
                low, high = clipped_tokens(ratio, adv, cfg.epsilon)
                step = {
                    "loss": policy_loss.item(),
                    "value_loss": v_loss.item(),
                    "entropy": entropy.item(),
                    # KL(pi_old || pi) by the k3 estimator (7), on the rollout's actions
                    "approx_kl": kl_k3(old_logps[idx], logps).mean().item(),
                    "clip_fraction": (low | high).float().mean().item(),
                }
            for k, v in step.items():
                sums[k] = sums.get(k, 0.0) + v
    steps = cfg.num_iterations * cfg.num_minibatches
    return {k: v / steps for k, v in sums.items()}


def train_ppo(
    cfg: PPOConfig,
    progress: bool = True,
    on_update: Callable[[dict], None] | None = None,
) -> tuple[CategoricalPolicy, list[dict]]:
    """Train an actor-critic with PPO. Returns the actor and one metrics dict per update.

    The records have the keys of ``gym_grpo.train_cartpole``'s (``env_steps``, ``wall_s``,
    ``return_mean``/``min``/``max``, ``eval_return``, ``solved``, ...), so plots and benchmarks
    treat both alike, plus ``value_loss``, ``approx_kl``, ``explained_variance``,
    ``learning_rate`` and ``episodes``. ``return_*`` describe the training episodes that ended
    during the update's rollout; if none ended (long episodes), the previous update's are kept.
    """
    seed_everything(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    envs = make_vector_env(cfg.env_id, cfg.num_envs)
    agent = ActorCritic(
        envs.single_observation_space.shape[0], int(envs.single_action_space.n), cfg.hidden_size
    )
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)  # CleanRL
    batch_size = cfg.num_envs * cfg.num_steps
    num_updates = math.ceil(cfg.total_env_steps / batch_size)

    # training start states come from seeds no evaluation uses (see envs.TRAIN_SEED_LOW)
    obs, _ = envs.reset(seed=TRAIN_SEED_LOW + cfg.seed * cfg.num_envs)
    running_returns = np.zeros(cfg.num_envs)
    returns = [0.0]  # until the first episode ends
    log = TrainingLog(cfg, "PPO", progress, on_update)
    env_steps, eval_env_steps = 0, 0
    for update in range(1, num_updates + 1):
        lr = cfg.learning_rate * (1.0 - (update - 1) / num_updates if cfg.anneal_lr else 1.0)
        for group in optimizer.param_groups:
            group["lr"] = lr
        # 1. one rollout: num_steps steps in each of num_envs environments
        finished: list[float] = []
        rollout, obs = collect_rollout(
            agent.actor, envs, obs, cfg.num_steps, running_returns, finished, generator
        )
        env_steps += batch_size
        returns = finished or returns
        # 2. critic values, GAE (10)-(12)
        with torch.no_grad():
            values = agent.value(rollout.obs)
            advantages, targets = gae(
                rollout.rewards,
                values,
                agent.value(rollout.next_obs),
                rollout.terminated,
                rollout.dones,
                cfg.gamma,
                cfg.gae_lambda,
            )
        # 3. clipped epochs over minibatches, loss (14)
        metrics = ppo_update(
            agent,
            optimizer,
            rollout.obs.flatten(0, 1),
            rollout.actions.flatten(),
            rollout.logps.flatten(),
            advantages.flatten(),
            targets.flatten(),
            values.flatten(),
            cfg,
            generator,
        )

        record = {
            "update": update,
            "env_steps": env_steps,
            "wall_s": log.elapsed(),
            "return_mean": float(np.mean(returns)),
            "return_min": float(np.min(returns)),
            "return_max": float(np.max(returns)),
            "episodes": len(finished),
            "entropy": metrics["entropy"],
            "loss": metrics["loss"],
            "kl": 0.0,  # no reference policy (GRPO's beta * KL term); see approx_kl
            "clip_fraction": metrics["clip_fraction"],
            "value_loss": metrics["value_loss"],
            "approx_kl": metrics["approx_kl"],
            "explained_variance": explained_variance(values, targets),
            "learning_rate": lr,
        }
        # 4. greedy stopping check, GRPO's rule: once the sampled returns reach half the threshold
        check = greedy_check(agent.actor, cfg, record["return_mean"])
        eval_env_steps += check.pop("env_steps", 0)
        record.update(check, wall_s=log.elapsed(), eval_env_steps=eval_env_steps)
        log.add(record, batch_size)
        if cfg.stop_when_solved and check.get("solved"):
            break
    envs.close()
    return agent.actor, log.close()


def save_ppo_policy(policy: CategoricalPolicy, cfg: PPOConfig, path: str | os.PathLike) -> None:
    """Write the actor in the format ``gym_grpo.load_policy`` reads, plus the PPO config.

    ``config`` holds the shared fields (``EnvConfig``: env id, width, threshold, ...) as a
    ``CartPoleConfig``, so ``grpo-minimal evaluate cartpole`` loads PPO and GRPO policies alike;
    the full PPO configuration is under ``ppo_config``. Written atomically
    (``gym_grpo.save_policy``).
    """
    shared_fields = {name: getattr(cfg, name) for name in EnvConfig.__dataclass_fields__}
    shared = CartPoleConfig(seed=cfg.seed, **shared_fields)
    save_policy(policy, shared, path, algo="ppo", ppo_config=cfg.to_dict())


def load_ppo_policy(path: str | os.PathLike) -> tuple[CategoricalPolicy, PPOConfig]:
    """Load what ``save_ppo_policy`` wrote: the actor and its ``PPOConfig``."""
    policy, _ = load_policy(path)
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    if "ppo_config" not in ckpt:
        raise ValueError(f"{path} holds no PPO config; was it written by save_ppo_policy?")
    return policy, PPOConfig(**ckpt["ppo_config"])
