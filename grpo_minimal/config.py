"""Dataclass configurations, validated when they are built.

Names follow TRL's ``GRPOConfig`` where the idea is the same (``num_generations``, ``beta``,
``epsilon``, ``epsilon_high``, ``loss_type``, ``scale_rewards``, ``num_iterations``), so that what
a learner sets here means the same thing in TRL. A bad value raises ``ValueError`` naming the
field, the value and what is allowed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from .advantages import SCALE_REWARDS
from .losses import LOSS_TYPES


def check_range(
    name: str,
    value: float,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ``ValueError`` unless ``value`` lies in the interval; the message names the field."""
    bad = not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value)
    if not bad and low is not None:
        bad = value <= low if low_open else value < low
    if not bad and high is not None:
        bad = value >= high if high_open else value > high
    if bad:
        left = "-inf" if low is None else f"{low}"
        right = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{left}, {right}{')' if high_open or high is None else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


class ValidatedConfig:
    """What every config dataclass shares: validation on construction, field types, ``to_dict``."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check that int and bool fields hold values of their type (``True`` is not an int)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool)):
                raise ValueError(f"{f.name} must be an integer, got {value!r}")
            if f.type in ("bool", bool) and not isinstance(value, bool):
                raise ValueError(f"{f.name} must be True or False, got {value!r}")

    def to_dict(self) -> dict:
        """Plain dict of the fields (for JSON metrics and checkpoints)."""
        return asdict(self)


@dataclass
class GRPOConfig(ValidatedConfig):
    """The GRPO objective's knobs, shared by every trainer in the course."""

    num_generations: int = 8
    """G: outputs (episodes, completions) sampled per prompt / start state; the group size"""
    beta: float = 0.0
    """weight of the k3 KL penalty to the reference policy; 0 disables the reference"""
    epsilon: float = 0.2
    """lower clip range: the ratio is clipped below at 1 - epsilon"""
    epsilon_high: float | None = None
    """upper clip range (DAPO clip-higher); None means the same as epsilon"""
    loss_type: str = "grpo"
    """how per-token losses are averaged: grpo, bnpo, dr_grpo or dapo"""
    scale_rewards: str = "group"
    """divide centred rewards by the std of the group, of the batch, or not at all (none)"""
    num_iterations: int = 1
    """clipped optimisation epochs over each sampled batch (mu in the GRPO paper)"""
    ref_update_every: int = 0
    """copy the policy into the reference every this many iterations; 0 keeps it frozen"""
    use_bias_correction_kl: bool = False
    """multiply the KL term by the ratio (TRL 1.16's default); False is the classic objective"""
    learning_rate: float = 1e-6
    """AdamW step size"""
    max_grad_norm: float = 1.0
    """clip the global gradient norm to this value; 0 disables clipping"""
    seed: int = 0
    """seed for random, numpy, torch and environment resets"""

    def validate(self) -> None:
        """Check every field; subclasses extend this and call ``super().validate()``."""
        super().validate()
        check_range("num_generations", self.num_generations, 2)
        check_range("beta", self.beta, 0.0)
        check_range("epsilon", self.epsilon, 0.0, 1.0, low_open=True, high_open=True)
        if self.epsilon_high is not None:
            check_range("epsilon_high", self.epsilon_high, 0.0, low_open=True)
        check_choice("loss_type", self.loss_type, LOSS_TYPES)
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_range("num_iterations", self.num_iterations, 1)
        check_range("ref_update_every", self.ref_update_every, 0)
        check_range("learning_rate", self.learning_rate, 0.0, low_open=True)
        check_range("max_grad_norm", self.max_grad_norm, 0.0)
        check_range("seed", self.seed, 0)  # negative seeds would reach the evaluation seeds


# CartPole start states come from four disjoint ranges of reset seeds (see control.py)
STOP_SEED = 10_000
"""First reset seed of the greedy check that decides to stop (screen and full check)."""
CONFIRM_SEED = 20_000
"""First reset seed of the second, fresh check that "solved" must also pass."""
HELD_OUT_SEED = 100_000
"""First reset seed of reported evaluations: these start states decide nothing."""
TRAIN_SEED_LOW = 1_000_000
"""Training groups draw reset seeds from [TRAIN_SEED_LOW, 2**31): never an evaluation state."""
MAX_EVAL_EPISODES = CONFIRM_SEED - STOP_SEED
"""More greedy episodes than this would run the stopping range into the confirming one."""

ADVANTAGE_MODES = ("per_step", "all_steps", "episode")
BASELINES = ("mean", "rloo")


@dataclass
class CartPoleConfig(GRPOConfig):
    """GRPO on a discrete-action gymnasium environment (CartPole-v1 by default).

    A group is ``num_generations`` episodes that start from the same reset seed. The defaults
    are the ones the benchmark in ``bench/cartpole.py`` measures.
    """

    env_id: str = "CartPole-v1"
    """gymnasium id of a discrete-action environment"""
    groups_per_batch: int = 4
    """start states (groups) per policy update; a batch holds groups_per_batch * G episodes"""
    total_env_steps: int = 200_000
    """training budget in environment steps (training stops earlier once solved)"""
    gamma: float = 0.99
    """discount factor of the returns-to-go, in (0, 1]"""
    advantage: str = "per_step"
    """per_step: normalise R_t across the group at each t; all_steps: over all steps of the
    group; episode: the episode's total return, broadcast to its steps (outcome reward)"""
    baseline: str = "mean"
    """mean: subtract the group mean (GRPO); rloo: subtract the mean of the other outputs,
    i.e. scale the centred value by n/(n-1) (equation 3)"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    hidden_size: int = 64
    """width of the two hidden layers of the policy MLP"""
    eval_episodes: int = 100
    """greedy episodes that decide whether the task is solved"""
    solve_threshold: float = 475.0
    """mean greedy return that counts as solved (475 for CartPole-v1)"""
    stop_when_solved: bool = True
    """stop training at the first greedy evaluation that reaches solve_threshold"""

    num_iterations: int = 4
    learning_rate: float = 3e-3
    max_grad_norm: float = 0.5
    loss_type: str = "bnpo"
    beta: float = 0.0
    ref_update_every: int = 0

    def validate(self) -> None:
        super().validate()
        check_range("groups_per_batch", self.groups_per_batch, 1)
        check_range("total_env_steps", self.total_env_steps, 1)
        check_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
        check_choice("advantage", self.advantage, ADVANTAGE_MODES)
        check_choice("baseline", self.baseline, BASELINES)
        check_range("entropy_coef", self.entropy_coef, 0.0)
        check_range("hidden_size", self.hidden_size, 1)
        check_range("eval_episodes", self.eval_episodes, 1, MAX_EVAL_EPISODES)


@dataclass
class PPOConfig(ValidatedConfig):
    """PPO with a learned critic and GAE(lambda) on a discrete-action gymnasium environment.

    The defaults are the standard CartPole-v1 configuration of CleanRL's ``ppo.py`` (500k steps,
    4 envs x 128 steps, lr 2.5e-4 annealed, GAE 0.95, clip 0.2, 4 epochs x 4 minibatches), the
    PPO baseline that notebook 03 and ``bench/ppo_vs_grpo.py`` measure GRPO against. Fields that
    mean the same as in ``CartPoleConfig`` have the same name.
    """

    env_id: str = "CartPole-v1"
    """gymnasium id of a discrete-action environment"""
    total_env_steps: int = 500_000
    """training budget in environment steps (training stops earlier once solved)"""
    num_envs: int = 4
    """environments stepped side by side (gymnasium.vector.SyncVectorEnv)"""
    num_steps: int = 128
    """steps taken in each environment per rollout; a batch holds num_envs * num_steps
    transitions"""
    learning_rate: float = 2.5e-4
    """Adam step size at the start of training"""
    anneal_lr: bool = True
    """decay the learning rate linearly to 0 over total_env_steps"""
    gamma: float = 0.99
    """discount factor, in (0, 1]"""
    gae_lambda: float = 0.95
    """lambda of GAE (equation 11): 0 is the one-step TD error, 1 the Monte Carlo return minus V"""
    num_iterations: int = 4
    """epochs over each rollout (CleanRL's update_epochs; the same knob as GRPO's num_iterations)"""
    num_minibatches: int = 4
    """minibatches per epoch; each is num_envs * num_steps / num_minibatches transitions"""
    epsilon: float = 0.2
    """clip range: the ratio is clipped to [1 - epsilon, 1 + epsilon] (CleanRL's clip_coef); also
    the value clip range when clip_value_loss"""
    normalize_advantages: bool = True
    """normalise the advantages within each minibatch to mean 0, std 1"""
    clip_value_loss: bool = True
    """clip the value update around the rollout's value, equation (13)"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    value_coef: float = 0.5
    """weight of the value loss"""
    max_grad_norm: float = 0.5
    """clip the global gradient norm to this value; 0 disables clipping"""
    hidden_size: int = 64
    """width of the two hidden layers of the actor and of the critic"""
    eval_episodes: int = 100
    """greedy episodes that decide whether the task is solved"""
    solve_threshold: float = 475.0
    """mean greedy return that counts as solved (475 for CartPole-v1)"""
    stop_when_solved: bool = True
    """stop training at the first greedy evaluation that reaches solve_threshold"""
    seed: int = 0
    """seed for random, numpy, torch and environment resets"""

    def validate(self) -> None:
        """Check every field; a bad value raises ``ValueError`` naming the field."""
        super().validate()
        check_range("total_env_steps", self.total_env_steps, 1)
        check_range("num_envs", self.num_envs, 1)
        check_range("num_steps", self.num_steps, 1)
        check_range("learning_rate", self.learning_rate, 0.0, low_open=True)
        check_range("gamma", self.gamma, 0.0, 1.0, low_open=True)
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
        check_range("entropy_coef", self.entropy_coef, 0.0)
        check_range("value_coef", self.value_coef, 0.0)
        check_range("max_grad_norm", self.max_grad_norm, 0.0)
        check_range("seed", self.seed, 0)  # negative seeds would reach the evaluation seeds
        check_range("hidden_size", self.hidden_size, 1)
        check_range("eval_episodes", self.eval_episodes, 1, MAX_EVAL_EPISODES)
        check_range("solve_threshold", self.solve_threshold)


PROMPT_TEMPLATES = ("plain", "r1", "boxed")


@dataclass
class MathConfig(GRPOConfig):
    """GRPO on a causal language model with verifiable math rewards (``grpo_minimal/lm.py``).

    The defaults are the CPU lesson of notebook 06: the shipped tiny model (``data/tiny_math_lm``)
    learns two-digit addition from the accuracy reward. ``MathConfig.for_device()`` returns them
    on a CPU and the real-model settings of ``GPU_DEFAULTS`` (Qwen2.5-0.5B-Instruct on GSM8K) on a
    CUDA GPU; keyword arguments override either. Names follow TRL's ``GRPOConfig`` where the idea
    is the same (``max_completion_length``, ``temperature``, ``top_p``, ``max_steps``,
    ``gradient_accumulation_steps``, ``gradient_checkpointing``); one step samples
    ``prompts_per_step * num_generations`` completions, TRL's ``per_device_train_batch_size``.
    ``beta`` defaults to 0.04 (DeepSeekMath's value; TRL's default is 0) so that the lesson can
    show the KL to the reference model.
    """

    model: str = "tiny"
    """a local Hugging Face model folder or a Hub id; tiny means the shipped data/tiny_math_lm"""
    dataset: str = "arithmetic"
    """arithmetic, arithmetic_mix, gsm8k (Hub), gsm8k_sample or a .jsonl file with prompt and
    answer fields"""
    eval_split: str = "test"
    """split used for held-out accuracy (train or test), or a .jsonl file of held-out problems"""
    prompt_template: str = "plain"
    """plain: the dataset prompt as it is; r1: the chat template with a system prompt asking for
    <think>...</think><answer>...</answer>; boxed: the chat template, asking for \\boxed{answer}"""
    prompts_per_step: int = 8
    """distinct prompts per step; each gets num_generations completions"""
    max_completion_length: int = 5
    """new tokens sampled per completion at most (a completion also ends at EOS)"""
    temperature: float = 1.0
    """sampling temperature; log-probs are computed at the same temperature, as in TRL"""
    top_p: float = 1.0
    """nucleus sampling: keep the smallest set of tokens with this much probability; 1 keeps all"""
    max_steps: int = 600
    """GRPO steps (one sampled batch each)"""
    time_budget_s: float = 0.0
    """stop once training has run this many seconds; 0 means no limit"""
    gradient_accumulation_steps: int = 1
    """split each batch into this many micro-batches of whole groups (one backward each) before
    the optimizer step: the same update with less memory; must divide prompts_per_step"""
    gradient_checkpointing: bool = False
    """recompute activations in the backward pass instead of storing them (less GPU memory)"""
    weight_decay: float = 0.0
    """AdamW weight decay (TRL's default is 0)"""
    lr_scheduler_type: str = "linear"
    """linear: decay the learning rate to 0 over max_steps (TRL's default); constant"""
    format_weight: float = 0.0
    """reward = accuracy + format_weight * format (format_reward: the strict <think>/<answer>
    form); 0 uses the accuracy reward alone"""
    eval_n: int = 500
    """held-out problems for greedy accuracy (the first eval_n of the split)"""
    allow_eval_overlap: bool = False
    """measure "held-out" accuracy even when evaluation prompts are also training prompts (the
    overlap is counted and logged); False refuses such a run"""
    eval_every: int = 100
    """also measure held-out accuracy every this many steps (0: only before and after)"""
    save_every: int = 0
    """write a checkpoint to the output folder every this many steps (0: only at the end)"""
    device: str = "auto"
    """auto (CUDA if available, else CPU), cpu, cuda or cuda:N"""
    dtype: str = "auto"
    """compute precision: auto (bfloat16 on GPUs that support it, else float16; float32 on CPU),
    float32, bfloat16 or float16; weights stay float32"""

    num_generations: int = 8
    loss_type: str = "dapo"
    beta: float = 0.04
    learning_rate: float = 1e-4

    # Not fields (no annotation): the real-model configuration used on a CUDA GPU.
    GPU_DEFAULTS = {
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "dataset": "gsm8k",
        "prompt_template": "r1",
        "format_weight": 0.2,
        "max_completion_length": 256,
        "prompts_per_step": 8,
        "num_generations": 8,
        "gradient_accumulation_steps": 8,
        "gradient_checkpointing": True,
        "learning_rate": 1e-6,
        "beta": 0.04,
        "temperature": 0.9,
        "max_steps": 200,
        "eval_n": 200,
        "eval_every": 50,
    }

    @classmethod
    def for_device(cls, device: str = "auto", **overrides) -> MathConfig:
        """The CPU defaults, or ``GPU_DEFAULTS`` when ``device`` is (or auto-detects) CUDA.

        Asking for the shipped tiny model (``model="tiny"``) keeps the CPU lesson's settings on
        any device: the real-model settings (chat template, long completions) do not fit it.
        """
        import torch

        cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
        real_model = overrides.get("model", cls.GPU_DEFAULTS.get("model")) != "tiny"
        values = dict(cls.GPU_DEFAULTS) if cuda and real_model else {}
        values.update(overrides)
        return cls(device=device, **values)

    def validate(self) -> None:
        super().validate()
        from .device import DEVICE_NAMES, DTYPE_NAMES

        for name in ("model", "dataset", "eval_split"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        check_choice("prompt_template", self.prompt_template, PROMPT_TEMPLATES)
        check_range("prompts_per_step", self.prompts_per_step, 1)
        check_range("max_completion_length", self.max_completion_length, 1)
        check_range("temperature", self.temperature, 0.0, low_open=True)
        check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_range("max_steps", self.max_steps, 1)
        check_range("time_budget_s", self.time_budget_s, 0.0)
        check_range("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        if self.prompts_per_step % self.gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps must divide prompts_per_step={self.prompts_per_step}"
                f" (a micro-batch holds whole groups), got {self.gradient_accumulation_steps}"
            )
        check_range("weight_decay", self.weight_decay, 0.0)
        check_choice("lr_scheduler_type", self.lr_scheduler_type, ("linear", "constant"))
        check_range("format_weight", self.format_weight, 0.0)
        check_range("eval_n", self.eval_n, 1)
        check_range("eval_every", self.eval_every, 0)
        check_range("save_every", self.save_every, 0)
        if self.device not in DEVICE_NAMES and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be one of {DEVICE_NAMES} or cuda:N, got {self.device!r}")
        check_choice("dtype", self.dtype, DTYPE_NAMES)
        if not isinstance(self.gradient_checkpointing, bool):
            raise ValueError(
                f"gradient_checkpointing must be True or False, got {self.gradient_checkpointing!r}"
            )
