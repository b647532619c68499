"""Lab 05 checks: find the bugs in a small GRPO trainer built from the seeds' own mistakes.

The trainer is five functions, one GRPO step in the order it runs; each exercise starts from the
version in ``SeedTrainer``, which carries one bug copied from the course's seed documents:

    sample_group      step 1, one ``generate`` call for the batch    (seed 000 lines 279-289 loop)
    make_rollout      steps 1-3 on the SAME completions               (seed 001 lines 91-102 resample)
    group_advantages  equation (2), the sample std                    (seed 000 lines 609-621: population)
    kl_penalty        equation (7), k3, with its gradient             (seed 002 lines 49-53: detached)
    grpo_update       equations (5)-(8), pi_old = the sampling policy (seed 001 lines 107-110: pi_ref)

The policy is a toy, not an LLM, with an LLM's interface (``generate`` token by token, ``logps``
per token), so every check runs on the CPU in well under a second. The checks measure what each
fix changes, not the source text: the number of ``generate`` calls, which completions the reward
function scored, the gradient the KL term gives, the ratio over several updates on one batch.
``make_rollout`` and ``grpo_update`` are checked with the reference versions of the other
exercises bound in their place (``bind``), so each check measures one fix.

Each exercise has hand-written public cases and a ``*_twins(seed)`` function that draws one case
of every kind it is graded on (``checking.cases_for``): ``lab check`` runs both (the twins with
``PUBLIC_SEED``), grading runs the twins of the grader's seed only.
"""

from __future__ import annotations

import copy
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from grpo_minimal import advantages as package
from grpo_minimal.device import torch_threads  # one thread: the toy's tensors are tiny
from grpo_minimal.labs import advantages as lab01_checks
from grpo_minimal.labs.checking import (
    Case,
    InKernel,
    Mistake,
    beside,
    cases_for,
    close,
    draw_int,
    generator,
    require_function,
    run_cases,
)

VOCAB = 4  # the tokens are the digits 0..3
LENGTH = 3  # every completion has 3 tokens: no padding, no EOS, no mask
TARGETS = 10  # a prompt is a target sum 0..9 (3 digits of at most 3 add up to at most 9)

RewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reward_fn(prompts [P], completions [P*G, L]) -> rewards [P*G]``."""


class ToyPolicy(torch.nn.Module):
    """A tiny autoregressive policy over digit tokens, with the interface of an LM.

    The logits of token t are a table entry for (prompt, t) plus one for the previous token (a
    start token before the first). ``generate`` samples token by token, like an LM's decode;
    ``logps`` scores given completions in one pass, like a forward over prompt + completion.
    Completions of a batch come in consecutive blocks of G per prompt (TRL's order, and what
    ``generate(..., num_return_sequences=G)`` returns in transformers).
    """

    def __init__(
        self,
        seed: int = 0,
        scale: float = 0.0,
        vocab: int = VOCAB,
        length: int = LENGTH,
        num_prompts: int = TARGETS,
    ) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.vocab, self.length = vocab, length
        self.prompt_logits = torch.nn.Parameter(
            scale * torch.randn(num_prompts, length, vocab, generator=generator)
        )
        # row `vocab` is the start token, seen before the first token
        self.next_logits = torch.nn.Parameter(
            scale * torch.randn(vocab + 1, vocab, generator=generator)
        )

    @torch.no_grad()
    def generate(self, prompts: torch.Tensor, num_return_sequences: int = 1) -> torch.Tensor:
        """Sample ``num_return_sequences`` completions of each prompt: [P * G, L] token ids."""
        rows = prompts.repeat_interleave(num_return_sequences)
        tokens = torch.full((rows.shape[0], 1), self.vocab, dtype=torch.long)
        for t in range(self.length):  # one decoding step at a time, as an LM decodes
            logits = self.prompt_logits[rows, t] + self.next_logits[tokens[:, -1]]
            tokens = torch.cat([tokens, torch.multinomial(torch.softmax(logits, -1), 1)], dim=1)
        return tokens[:, 1:]

    def logps(self, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
        """log pi(o_t | q, o_<t) of every completion token, [P * G, L] (equation (16))."""
        if completions.shape[0] % prompts.shape[0]:
            raise ValueError(
                f"{completions.shape[0]} completions is not a multiple of {prompts.shape[0]} "
                "prompts: completion i answers prompt i // G"
            )
        rows = prompts.repeat_interleave(completions.shape[0] // prompts.shape[0])
        start = torch.full((completions.shape[0], 1), self.vocab, dtype=torch.long)
        previous = torch.cat([start, completions[:, :-1]], dim=1)
        logits = self.prompt_logits[rows] + self.next_logits[previous]
        return torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)


def sum_reward(prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """The verifiable reward: 1.0 where a completion's digits add up to its prompt, else 0.0."""
    targets = prompts.repeat_interleave(completions.shape[0] // prompts.shape[0])
    return (completions.sum(dim=1) == targets).float()


def distance_reward(prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """A denser reward for the checks: minus the distance of the digit sum to the target."""
    targets = prompts.repeat_interleave(completions.shape[0] // prompts.shape[0])
    return -(completions.sum(dim=1) - targets).abs().float()


@dataclass
class Rollout:
    """One batch: P prompts x G completions, scored; completion i answers prompt i // G."""

    prompts: torch.Tensor  # [P] target sums, one per distinct prompt
    completions: torch.Tensor  # [P*G, L] token ids
    rewards: torch.Tensor  # [P*G], reward_fn(prompts, completions)
    advantages: torch.Tensor  # [P*G], equation (2) within each group of G

    @property
    def num_generations(self) -> int:
        return self.completions.shape[0] // self.prompts.shape[0]


def all_completions(policy: ToyPolicy) -> torch.Tensor:
    """Every possible completion, [V^L, L]: the toy is small enough to sum over them exactly."""
    digits = [torch.arange(policy.vocab)] * policy.length
    return torch.cartesian_prod(*digits).view(-1, policy.length)


@torch.no_grad()
def expected_reward(policy: ToyPolicy, prompts: torch.Tensor | None = None) -> float:
    """sum_o pi(o | q) * sum_reward(q, o), averaged over the prompts (all targets by default)."""
    prompts = torch.arange(TARGETS) if prompts is None else prompts
    every = all_completions(policy).repeat(prompts.shape[0], 1)
    probs = policy.logps(prompts, every).sum(dim=1).exp()
    return (probs * sum_reward(prompts, every)).sum().item() / prompts.shape[0]


@torch.no_grad()
def exact_kl(policy: ToyPolicy, ref_policy: ToyPolicy, prompts: torch.Tensor) -> float:
    """KL(pi || pi_ref) over whole completions, summed exactly, averaged over the prompts."""
    every = all_completions(policy).repeat(prompts.shape[0], 1)
    logp = policy.logps(prompts, every).sum(dim=1)
    ref_logp = ref_policy.logps(prompts, every).sum(dim=1)
    return (logp.exp() * (logp - ref_logp)).sum().item() / prompts.shape[0]


# ---------------------------------------------------------------------------------------------
# The reference trainer: the five exercises, fixed.


def sample_group(policy: ToyPolicy, prompts: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Step 1: G completions of every prompt, [P*G, L], in ONE batched ``generate`` call."""
    return policy.generate(prompts, num_return_sequences=num_generations)


def make_rollout(
    policy: ToyPolicy, prompts: torch.Tensor, reward_fn: RewardFn, num_generations: int
) -> Rollout:
    """Steps 1-3: sample a group per prompt, score it, group advantages (equation (2))."""
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    advantages = group_advantages(rewards, num_generations)
    return Rollout(prompts, completions, rewards, advantages)


def group_advantages(
    rewards: torch.Tensor, num_generations: int, eps: float = 1e-4
) -> torch.Tensor:
    """Equation (2) with the sample (G-1) std: flat rewards [P*G] -> flat advantages [P*G]."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + eps)).reshape(-1)


def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Equation (7): k3 = exp(x) - x - 1 with x = log pi_ref - log pi, averaged over tokens.

    ``logps`` keeps its graph: the penalty's gradient is what pulls pi back towards pi_ref.
    """
    log_ratio = ref_logps - logps
    return (torch.exp(log_ratio) - log_ratio - 1).mean()


def grpo_update(
    policy: ToyPolicy,
    ref_policy: ToyPolicy,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    num_iterations: int = 1,
    beta: float = 0.04,
    epsilon: float = 0.2,
) -> list[torch.Tensor]:
    """Equations (5)-(8): ``num_iterations`` optimizer steps on one rollout.

    log pi_old is the policy that sampled the rollout, evaluated once before the first step
    and then fixed; log pi_ref is the frozen reference. Returns the ratio of every token at
    each step (detached, [P*G, L] per step), for logging.
    """
    prompts, completions = rollout.prompts, rollout.completions
    with torch.no_grad():
        old_logps = policy.logps(prompts, completions)
        ref_logps = ref_policy.logps(prompts, completions)
    advantages = rollout.advantages.unsqueeze(1)
    ratios = []
    for _ in range(num_iterations):
        logps = policy.logps(prompts, completions)
        ratio = torch.exp(logps - old_logps)  # (5)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
        surrogate = torch.min(ratio * advantages, clipped * advantages)  # (6)
        loss = -surrogate.mean() + beta * kl_penalty(logps, ref_logps)  # (8)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ratios.append(ratio.detach())
    return ratios


# ---------------------------------------------------------------------------------------------
# The trainer as the seeds wrote it: the starting code of the exercises (the same code as the
# lab notebook's exercise cells; tests/test_lab_bugs.py compares them).


class SeedTrainer:
    """The five functions with the seeds' bugs, one each. Each calls the others by their plain
    names, so ``bind`` decides which versions it runs with (``SEED_TRAINER`` binds these)."""

    @staticmethod
    def sample_group(
        policy: ToyPolicy, prompts: torch.Tensor, num_generations: int
    ) -> torch.Tensor:
        """Step 1: G completions of every prompt, [P*G, L], in consecutive blocks of G."""
        completions = []
        for prompt in prompts:  # seed 000, lines 345-347: one prompt at a time
            for _ in range(num_generations):  # seed 000, lines 279-289: one sample at a time
                completions.append(policy.generate(prompt.view(1), num_return_sequences=1))
        return torch.cat(completions)

    @staticmethod
    def make_rollout(
        policy: ToyPolicy, prompts: torch.Tensor, reward_fn: RewardFn, num_generations: int
    ) -> Rollout:
        """Steps 1-3: sample a group per prompt, score it, group advantages (equation (2))."""
        completions = sample_group(policy, prompts, num_generations)
        rewards = reward_fn(prompts, completions)
        advantages = group_advantages(rewards, num_generations)
        # the responses whose log-probs the update uses (seed 001, line 102)
        completions = sample_group(policy, prompts, num_generations)
        return Rollout(prompts, completions, rewards, advantages)

    @staticmethod
    def group_advantages(
        rewards: torch.Tensor, num_generations: int, eps: float = 1e-4
    ) -> torch.Tensor:
        """Equation (2): flat rewards [P*G] -> flat advantages [P*G]."""
        grouped = rewards.float().view(-1, num_generations)
        centred = grouped - grouped.mean(dim=1, keepdim=True)
        # seed 000, lines 613-614: "std = sqrt(variance) ≈ 0.43" for the group [1, 1, 0, 1]
        std = grouped.std(dim=1, unbiased=False, keepdim=True)
        return (centred / (std + eps)).reshape(-1)

    @staticmethod
    def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
        """Equation (7): k3 = exp(x) - x - 1 with x = log pi_ref - log pi, mean over tokens."""
        log_ratio = ref_logps - logps.detach()  # seed 002, lines 51-53
        kl_div = torch.exp(log_ratio) - log_ratio - 1
        return torch.relu(kl_div.mean())

    @staticmethod
    def grpo_update(
        policy: ToyPolicy,
        ref_policy: ToyPolicy,
        optimizer: torch.optim.Optimizer,
        rollout: Rollout,
        num_iterations: int = 1,
        beta: float = 0.04,
        epsilon: float = 0.2,
    ) -> list[torch.Tensor]:
        """Equations (5)-(8): num_iterations optimizer steps on one rollout; returns the ratio
        of every token at each step, for logging."""
        prompts, completions = rollout.prompts, rollout.completions
        with torch.no_grad():
            old_logps = ref_policy.logps(prompts, completions)  # seed 001, lines 107-110
            ref_logps = ref_policy.logps(prompts, completions)
        advantages = rollout.advantages.unsqueeze(1)
        ratios = []
        for _ in range(num_iterations):
            logps = policy.logps(prompts, completions)
            ratio = torch.exp(logps - old_logps)  # (5)
            clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
            surrogate = torch.min(ratio * advantages, clipped * advantages)  # (6)
            loss = -surrogate.mean() + beta * kl_penalty(logps, ref_logps)  # (8)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ratios.append(ratio.detach())
        return ratios


EXERCISES = ("sample_group", "make_rollout", "group_advantages", "kl_penalty", "grpo_update")
REFERENCE_TRAINER = {name: globals()[name] for name in EXERCISES}
SEED_TRAINER = {name: getattr(SeedTrainer, name) for name in EXERCISES}


def bind(fn: Callable, helpers: Mapping[str, Callable]) -> Callable:
    """``fn`` with the trainer's names (``EXERCISES``) it calls looked up in ``helpers`` first.

    A notebook function finds ``sample_group`` among the notebook's globals; bound to the
    reference trainer, it runs with the fixed versions of the other exercises, so a check sees
    only this function's own mistakes. Anything that is not a plain function is returned as is.
    """
    if not isinstance(fn, types.FunctionType):
        return fn
    namespace = dict(fn.__globals__)
    namespace.update({name: helpers[name] for name in EXERCISES if name in helpers})
    bound = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    bound.__kwdefaults__ = fn.__kwdefaults__
    return bound


# ---------------------------------------------------------------------------------------------
# Instruments: a policy that counts its generate calls, a reward that records what it scored.


class CountingPolicy(ToyPolicy):
    """A ToyPolicy that records every ``generate`` call: (prompts, num_return_sequences).

    Judged apart (``instructor.judge``) it stays in the judge, which counts: the learner's
    function gets a stand-in whose ``generate`` calls come back here (``JUDGE_METHODS``)."""

    JUDGE_METHODS = ("generate",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[torch.Tensor, int]] = []

    def generate(self, prompts: torch.Tensor, num_return_sequences: int = 1) -> torch.Tensor:
        self.calls.append((prompts.clone(), num_return_sequences))
        return super().generate(prompts, num_return_sequences)


class RecordingReward:
    """A deterministic reward function that keeps a copy of every batch it scored (in the
    judge, when judged apart: ``JUDGE_METHODS``)."""

    JUDGE_METHODS = ("__call__",)

    def __init__(self, reward_fn: RewardFn = sum_reward) -> None:
        self.reward_fn, self.scored = reward_fn, []

    def __call__(self, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
        self.scored.append(completions.clone())
        return self.reward_fn(prompts, completions)


def _fixed_policy(seed: int = 0) -> CountingPolicy:
    """A policy that always answers prompt p with the digits (p, p+1, p+2) mod 4."""
    policy = CountingPolicy(seed)
    with torch.no_grad():
        for p in range(TARGETS):
            for t in range(policy.length):
                policy.prompt_logits[p, t, (p + t) % policy.vocab] = 30.0
    return policy


def _prompts(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


def _others(name: str) -> dict[str, Callable]:
    return {k: v for k, v in REFERENCE_TRAINER.items() if k != name}


def _bound_call(fn: Callable, name: str, *args: Any, **kwargs: Any) -> Any:
    """Run where ``fn`` lives: ``fn`` bound to the reference trainer's other exercises, called."""
    return bind(fn, _others(name))(*args, **kwargs)


def _bound_apply(fn: Callable, name: str, helper: str, *args: Any, **kwargs: Any) -> Any:
    """Run where ``fn`` lives: this module's ``helper`` applied to ``fn`` bound as above."""
    return globals()[helper](bind(fn, _others(name)), *args, **kwargs)


class _BoundInKernel(InKernel):
    """A learner's function judged apart (``instructor.judge``), bound where it runs (the
    measurer) as ``bind`` binds it here; ``beside(self, helper, ...)`` runs ``helper`` there
    too."""

    def __init__(self, fn: InKernel, name: str) -> None:
        self.fn, self.name = fn, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn.apply(_bound_call, self.name, *args, **kwargs)

    def apply(self, helper: Callable, *args: Any, **kwargs: Any) -> Any:
        return self.fn.apply(_bound_apply, self.name, helper.__name__, *args, **kwargs)


def _measured(
    fn: Callable | None,
    name: str,
    cases: Sequence[Case],
    probe: Callable,
    mistakes: Sequence[Mistake] = (),
) -> None:
    """Run ``probe(fn bound to the reference trainer's other exercises, *case.args)`` on every
    case (bound in the measurer when judged apart); the expected value is the probe of
    the reference function unless the case gives one. Each of ``mistakes`` (a wrong version of
    the function) is probed the same way, for its hint."""
    require_function(fn, name)
    learner = _BoundInKernel(fn, name) if isinstance(fn, InKernel) else bind(fn, _others(name))
    reference = REFERENCE_TRAINER[name]

    def probed(function: Callable) -> Callable:
        return lambda *a, **k: probe(function, *a, **k)

    with torch_threads(1):
        run_cases(
            probed(learner),
            name,
            cases,
            probed(reference),
            mistakes=[Mistake(probed(m.fn), m.hint) for m in mistakes],
        )


# ---------------------------------------------------------------------------------------------
# Drawing the twins: every value comes from ``generator(seed)``; the structure of each kind
# (how many prompts, which edge) is fixed, so a drawn value never makes a new kind of case.


def _pick(g: torch.Generator, *values: Any) -> Any:
    return values[draw_int(g, 0, len(values) - 1)]


def _seed(g: torch.Generator) -> int:
    """A seed for a toy policy and for the sampling under ``torch.manual_seed``."""
    return draw_int(g, 0, 9_999)


def _draw_prompts(g: torch.Generator, low: int, high: int) -> torch.Tensor:
    """``low`` to ``high`` distinct target sums in a drawn order."""
    return torch.randperm(TARGETS, generator=g)[: draw_int(g, low, high)]


# ---------------------------------------------------------------------------------------------
# Exercise 1: sample_group (bug (e), seed 000 lines 279-289)


def _probe_sample_group(
    fn: Callable, measure: str, prompts: torch.Tensor, num_generations: int, seed: int = 0
):
    policy = _fixed_policy(seed) if measure == "order" else CountingPolicy(seed, scale=1.0)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        completions = fn(policy, prompts, num_generations)
    if measure == "generate calls":
        return len(policy.calls)
    return completions


SAMPLE_HINT = (
    "one policy.generate(prompts, num_return_sequences=G) for the whole batch: the seed's loop "
    "(seed 000 lines 279-289, inside a loop over prompts at 345-347) decodes P*G times, one "
    "after another"
)
ORDER_HINT = (
    "consecutive blocks of G rows per prompt, as generate(num_return_sequences=G) returns them "
    "(prompts.repeat(G) interleaves the prompts instead)"
)


def _calls_case(name: str, prompts: torch.Tensor, group: int) -> Case:
    return Case(
        name,
        ("generate calls", prompts, group),
        expected=1,
        show=f"prompts {prompts.tolist()}, G={group}: the number of policy.generate calls",
        hint=SAMPLE_HINT,
    )


def _order_case(name: str, prompts: torch.Tensor, group: int) -> Case:
    return Case(
        name,
        ("order", prompts, group),
        show=f"prompts {prompts.tolist()}, G={group}, a policy that answers prompt p with "
        "(p, p+1, p+2) mod 4",
        hint=ORDER_HINT,
    )


SAMPLE_PUBLIC = [
    _calls_case("one generate call for the whole batch", _prompts(4, 6), 4),
    _order_case("completion i answers prompt i // G", _prompts(2, 0, 1), 2),
]


def sample_twins(seed: int) -> list[Case]:
    """One case of every kind ``sample_group`` is graded on, with values drawn from ``seed``."""
    g = generator(seed)
    batch, size = _draw_prompts(g, 2, 5), draw_int(g, 2, 8)
    single, large = _draw_prompts(g, 1, 1), draw_int(g, 9, 16)
    # prompts with distinct answers under the fixed policy (p mod 4 differs), so the order shows
    count = draw_int(g, 3, 4)
    residues = torch.randperm(4, generator=g)[:count]
    ordered, blocks = residues + 4 * torch.randint(0, 2, (count,), generator=g), draw_int(g, 2, 4)
    sampled, sampled_size, torch_seed = _draw_prompts(g, 2, 5), draw_int(g, 2, 6), _seed(g)
    return [
        _calls_case(f"one generate call for {len(batch)} prompts, G={size}", batch, size),
        _calls_case(f"one generate call for a single prompt, G={large}", single, large),
        _order_case(f"completion i answers prompt i // G, G={blocks}", ordered, blocks),
        Case(
            f"the completions are generate's own samples, {len(sampled)} prompts, G={sampled_size}",
            ("completions", sampled, sampled_size, torch_seed),
            show=f"prompts {sampled.tolist()}, G={sampled_size}, a random policy, "
            f"torch.manual_seed({torch_seed}): the returned completions",
            hint="return what the single generate call sampled, unchanged (no reordering, no "
            "second sample)",
        ),
    ]


def check_sample_group(fn: Callable, seed: int | None = None) -> None:
    """The public cases and their twins; with the grader's ``seed``, fresh twins only."""
    cases = cases_for(SAMPLE_PUBLIC, sample_twins, seed)
    _measured(fn, "sample_group", cases, _probe_sample_group)


def time_sample_group(
    fn: Callable, num_prompts: int = 16, num_generations: int = 8, repeats: int = 5
) -> str:
    """How long ``fn`` takes for one batch, and how many generate calls it makes, next to the
    seed's per-sample loop (best of ``repeats``). For the notebook's demo; never asserted."""

    def measure(sample) -> tuple[float, int]:
        policy = CountingPolicy(0, scale=1.0)
        prompts = torch.arange(num_prompts) % TARGETS
        best = float("inf")
        for _ in range(repeats):
            policy.calls.clear()
            start = time.perf_counter()
            sample(policy, prompts, num_generations)
            best = min(best, time.perf_counter() - start)
        return best, len(policy.calls)

    with torch_threads(1):
        yours, seeds = measure(fn), measure(SeedTrainer.sample_group)
    return (
        f"{num_prompts} prompts x G={num_generations}\n"
        f"  yours:      {yours[1]:4d} generate call(s), {1e3 * yours[0]:7.2f} ms\n"
        f"  seed's loop: {seeds[1]:3d} generate call(s), {1e3 * seeds[0]:7.2f} ms  "
        f"({seeds[0] / yours[0]:.0f}x yours)"
    )


# ---------------------------------------------------------------------------------------------
# Exercise 2: make_rollout (bug (b), seed 001 lines 91-102)


REWARDS = {"sum": sum_reward, "distance": distance_reward}
REWARD_TEXT = {
    "sum": "reward = 1 if the digits add up to the prompt",
    "distance": "reward = -|digit sum - prompt|",
}


def _probe_make_rollout(
    fn: Callable,
    prompts: torch.Tensor,
    num_generations: int,
    seed: int = 0,
    reward: str = "sum",
) -> dict:
    policy = CountingPolicy(seed, scale=1.0)
    reward_fn = RecordingReward(REWARDS[reward])
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rollout = fn(policy, prompts, reward_fn, num_generations)
    if not isinstance(rollout, Rollout):
        raise TypeError(f"make_rollout returned {type(rollout).__name__}, not a Rollout")
    completions = rollout.completions
    rewards = reward_fn.reward_fn(prompts, completions)
    return {
        "generate calls": len(policy.calls),
        "reward_fn calls": len(reward_fn.scored),
        "completions were scored": any(
            s.shape == completions.shape and torch.equal(s, completions) for s in reward_fn.scored
        ),
        "rewards are theirs": close(rollout.rewards, rewards),
        "advantages from those rewards": close(
            rollout.advantages, package.group_advantages(rewards, num_generations)
        ),
    }


ROLLOUT_HINT = (
    "sample once, score those completions, compute their advantages from those rewards "
    "(group_advantages, equation (2)), and return all three. Seed 001 samples again after the "
    "rewards (line 102), so advantage i multiplies the gradient of an unscored completion"
)
ROLLOUT_PUBLIC = [
    Case(
        "the rollout's completions are the scored ones",
        (_prompts(4, 6), 4),
        show=f"2 prompts, G=4, {REWARD_TEXT['sum']}: what was sampled, what was scored and "
        "what the rollout holds",
        hint=ROLLOUT_HINT,
    ),
]


def rollout_twins(seed: int) -> list[Case]:
    """One case of every kind ``make_rollout`` is graded on: each reward function."""
    g = generator(seed)
    cases = []
    for reward in REWARDS:
        prompts, size, torch_seed = _draw_prompts(g, 2, 5), draw_int(g, 2, 8), _seed(g)
        cases.append(
            Case(
                f"{len(prompts)} prompts, G={size}, the {reward} reward: the rollout's "
                "completions are the scored ones",
                (prompts, size, torch_seed, reward),
                show=f"prompts {prompts.tolist()}, G={size}, torch.manual_seed({torch_seed}), "
                f"{REWARD_TEXT[reward]}: what was sampled, what was scored and what the "
                "rollout holds",
                hint=ROLLOUT_HINT,
            )
        )
    return cases


def _fields_swapped(policy, prompts, reward_fn, num_generations):
    """A mistake: the rewards and the advantages given to Rollout in each other's places."""
    completions = REFERENCE_TRAINER["sample_group"](policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    advantages = REFERENCE_TRAINER["group_advantages"](rewards, num_generations)
    return Rollout(prompts, completions, advantages, rewards)


ROLLOUT_MISTAKES = [
    Mistake(
        _fields_swapped,
        "Rollout's fields are (prompts, completions, rewards, advantages), in this order: "
        "the rewards and the advantages went into each other's places (pass them by "
        "keyword, Rollout(..., rewards=rewards, advantages=advantages))",
    ),
]


def check_make_rollout(fn: Callable, seed: int | None = None) -> None:
    cases = cases_for(ROLLOUT_PUBLIC, rollout_twins, seed)
    _measured(fn, "make_rollout", cases, _probe_make_rollout, ROLLOUT_MISTAKES)


# ---------------------------------------------------------------------------------------------
# Exercise 3: group_advantages (bug (d), seed 000 lines 609-621)


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


ZERO_VARIANCE_HINT = "all rewards equal: 0 / (0 + eps) = 0, never NaN"
ADVANTAGE_PUBLIC = [
    Case(
        "zero-variance group",
        (_t(1, 1, 1, 1), 4),
        expected=[0.0] * 4,
        hint=ZERO_VARIANCE_HINT,
    ),
    Case(
        "the seed's group: three right, one wrong",
        (_t(1, 1, 0, 1), 4),
        expected=[0.25 / (0.5 + 1e-4)] * 2 + [-0.75 / (0.5 + 1e-4), 0.25 / (0.5 + 1e-4)],
        hint="mean 0.75, sample std 0.5: 0.25 / (0.5 + eps) = +0.5 and -0.75 / (0.5 + eps) = "
        "-1.5, as the seed's code computes them (rewards.std(), seed 000 line 301), not the "
        "worked +0.58 / -1.74 (population std 0.43)",
    ),
    Case(
        "two groups are normalised separately",
        (_t(1, 0, 0, 0, 5, 3, 4, 4), 4),
        hint="each block of G rewards is one group: its own mean and std (not the batch's, as "
        "seed 002 lines 74-79 do)",
    ),
]


def advantage_twins(seed: int) -> list[Case]:
    """One case of every kind ``group_advantages`` is graded on, with values drawn from
    ``seed``: binary, normal and integer rewards, G=2, a flat group beside another, eps."""
    g = generator(seed)
    size, constant = draw_int(g, 3, 8), float(draw_int(g, -2, 3))
    eps = _pick(g, 0.5, 0.1, 1.0)

    def normal(count: int) -> torch.Tensor:
        return torch.randn(count, generator=g) * 2 - 1

    return [
        Case(
            f"binary rewards, 3 groups of {size}",
            (torch.randint(0, 2, (3 * size,), generator=g).float(), size),
            hint="equation (2) within each group, sample std (divide by G-1)",
        ),
        Case(
            "normal rewards, groups of 2",
            (normal(8), 2),
            hint="the sample std of a pair [a, b] is |a - b| / sqrt(2); the population std "
            "would be |a - b| / 2",
        ),
        Case(
            f"a zero-variance group (every reward {constant:g}) next to another, G={size}",
            (torch.cat([torch.full((size,), constant), normal(size)]), size),
            hint="each group is normalised on its own: the flat group gets 0, never NaN",
        ),
        Case(
            f"eps={eps} passed by keyword",
            (normal(4), 4),
            {"eps": eps},
            hint="use the eps argument, do not hard-code 1e-4",
        ),
        Case(
            "integer rewards (int64), groups of 4",
            (torch.randint(0, 5, (8,), generator=g), 4),
            hint="integer tensors have no mean or std: convert the rewards to float first",
        ),
    ]


# lab 01's mistakes of group_advantages, for this exercise's signature (no scale_rewards)
GROUP_MISTAKES = [
    Mistake(
        lambda rewards, num_generations, eps=1e-4, wrong=m.fn: wrong(
            rewards, num_generations, "group", eps
        ),
        m.hint,
    )
    for m in lab01_checks.GROUP_MISTAKES
]


def check_group_advantages(fn: Callable, seed: int | None = None) -> None:
    run_cases(
        fn,
        "group_advantages",
        cases_for(ADVANTAGE_PUBLIC, advantage_twins, seed),
        lambda rewards, num_generations, eps=1e-4: package.group_advantages(
            rewards, num_generations, eps=eps
        ),
        mistakes=GROUP_MISTAKES,
    )


# ---------------------------------------------------------------------------------------------
# Exercise 4: kl_penalty (bug (c), seed 002 lines 49-53 and seed 000 lines 378-406)


def _logits(
    g: torch.Generator, shape: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Policy logits, reference logits, sampled tokens, drawn from ``g``."""
    logits = torch.randn(*shape, generator=g)
    ref_logits = torch.randn(*shape, generator=g)
    tokens = torch.randint(0, shape[-1], shape[:-1], generator=g)
    return logits, ref_logits, tokens


def _token_logps(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _loss_gradient(
    fn: Callable,
    logits: torch.Tensor,
    ref_logits: torch.Tensor,
    tokens: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """d loss / d logits of the update's loss (8) with every advantage 0: only the KL acts."""
    logits = logits.detach().requires_grad_(True)
    logps = _token_logps(logits, tokens)
    ref_logps = _token_logps(ref_logits, tokens)
    advantages = torch.zeros(logits.shape[0], 1)
    ratio = torch.exp(logps - logps.detach())
    clipped = torch.clamp(ratio, 0.8, 1.2)
    loss = -torch.min(ratio * advantages, clipped * advantages).mean()
    loss = loss + beta * fn(logps, ref_logps)
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
        return torch.zeros_like(logits)
    (gradient,) = torch.autograd.grad(loss, logits, allow_unused=True)
    return torch.zeros_like(logits) if gradient is None else gradient


def _kl_pull(fn: Callable, seed: int, beta: float, lr: float) -> tuple[float, float]:
    """One SGD step on beta * kl_penalty alone, on samples of a policy away from the
    reference: the exact KL(pi || pi_ref) before and after."""
    ref, policy = ToyPolicy(seed, scale=1.0), ToyPolicy(seed + 1, scale=1.0)
    prompts = torch.arange(TARGETS)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        completions = policy.generate(prompts, 8)
    before = exact_kl(policy, ref, prompts)
    optimizer = torch.optim.SGD(policy.parameters(), lr=lr)
    loss = beta * fn(policy.logps(prompts, completions), ref.logps(prompts, completions).detach())
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return before, exact_kl(policy, ref, prompts)


def _probe_kl_penalty(fn: Callable, measure: str, *args):
    if measure == "value":
        logps, ref_logps = args
        value = fn(logps, ref_logps)
        if isinstance(value, torch.Tensor):
            return value.item() if value.numel() == 1 else value.detach()
        return value
    if measure == "gradient":  # autograd through the learner's penalty: where it lives
        return beside(fn, _loss_gradient, *args)
    return beside(fn, _kl_pull, *args)


def _rounded_list(values: torch.Tensor | list | float) -> list | float:
    """Nested lists of floats with 3 decimals, to print an input."""
    if isinstance(values, torch.Tensor):
        values = values.tolist()
    if isinstance(values, list):
        return [_rounded_list(v) for v in values]
    return round(values, 3)


def _value_case(name: str, g: torch.Generator, shape: tuple[int, ...], hint: str) -> Case:
    logits, ref_logits, tokens = _logits(g, shape)
    logps, ref_logps = _token_logps(logits, tokens), _token_logps(ref_logits, tokens)
    return Case(
        name,
        ("value", logps, ref_logps),
        show=f"logps={_rounded_list(logps)}, ref_logps={_rounded_list(ref_logps)}",
        hint=hint,
    )


def _same_policy_case(name: str, logps: torch.Tensor) -> Case:
    return Case(
        name,
        ("value", logps, logps.clone()),
        expected=0.0,
        show=f"logps = ref_logps = {_rounded_list(logps)}",
        hint="x = 0 for every token: k3 = 0",
    )


GRADIENT_HINT = (
    "the value is right (the cases before passed): the penalty has no gradient. Keep logps "
    "attached to the graph: seed 002 line 51 detaches log_probs_new, seed 000 line 405 builds "
    "its KL from two log-probs computed under torch.no_grad()"
)


def _gradient_case(name: str, g: torch.Generator, shape: tuple[int, ...], beta: float) -> Case:
    outputs, tokens, actions = shape
    return Case(
        name,
        ("gradient", *_logits(g, shape), beta),
        show=f"random logits [{outputs} outputs, {tokens} tokens, {actions} actions], "
        f"advantages 0, beta={beta}: d loss / d logits of -L_clip + beta * "
        "kl_penalty(logps, ref_logps)",
        hint=GRADIENT_HINT,
    )


K3_HINT = "k3 = exp(x) - x - 1 with x = ref_logps - logps, equation (7), then the mean"
KL_PUBLIC = [
    _value_case("the value: k3 averaged over tokens", generator(0), (2, 3, 4), K3_HINT),
    _same_policy_case("the same policy as the reference", _t(-1.0, -0.5, -2.0)),
    _gradient_case("the KL term has a gradient", generator(0), (2, 2, 3), 0.1),
]


def kl_twins(seed: int) -> list[Case]:
    """One case of every kind ``kl_penalty`` is graded on: the value, a policy equal to the
    reference, the loss's gradient, and one SGD step that must pull the policy back."""
    g = generator(seed)
    shape = (draw_int(g, 2, 4), draw_int(g, 2, 5), draw_int(g, 3, 6))
    value = _value_case(f"k3 averaged over tokens, shape {list(shape[:2])}", g, shape, K3_HINT)
    tokens = draw_int(g, 3, 8)
    logps = -3 * torch.rand(tokens, generator=g)
    same = _same_policy_case(f"the same policy as the reference, {tokens} tokens", logps)
    shape, beta = (draw_int(g, 2, 3), draw_int(g, 2, 3), draw_int(g, 3, 5)), _pick(g, 0.1, 0.5, 1.0)
    name = f"the KL term has a gradient, beta={beta}, logits of shape {list(shape)}"
    gradient = _gradient_case(name, g, shape, beta)
    policy_seed = _seed(g)
    pull = Case(
        f"the penalty pulls the policy towards the reference (policy seed {policy_seed})",
        ("pull", policy_seed, 1.0, 0.5),
        show="policy != reference, one SGD step (lr 0.5) on 1.0 * kl_penalty alone, on 80 of its "
        "own samples: exact KL(pi || pi_ref) (before, after)",
        hint="with a gradient, the step moves pi towards pi_ref and the KL falls; without one "
        "it stays where it was",
    )
    return [value, same, gradient, pull]


def check_kl_penalty(fn: Callable, seed: int | None = None) -> None:
    cases = cases_for(KL_PUBLIC, kl_twins, seed)
    _measured(fn, "kl_penalty", cases, _probe_kl_penalty)


# ---------------------------------------------------------------------------------------------
# Exercise 5: grpo_update (bug (a), seed 001 lines 107-110)


def _probe_grpo_update(fn: Callable, *args: Any) -> Any:
    """``_update_and_measure`` where ``fn`` lives: it updates a policy with its optimizer."""
    return beside(fn, _update_and_measure, *args)


def _update_and_measure(
    fn: Callable,
    measure: str,
    num_iterations: int,
    seed: int = 0,
    beta: float = 0.04,
    epsilon: float = 0.2,
    lr: float = 2.0,
):
    """A policy moved away from the reference samples a rollout; ``fn`` updates it. Measures
    the largest |ratio - 1| of each update, or the policy's mean log-prob afterwards."""
    ref = ToyPolicy(seed, scale=0.5)
    policy = copy.deepcopy(ref)
    with torch.no_grad():
        policy.prompt_logits.add_(ToyPolicy(seed + 100, scale=1.0).prompt_logits)
    prompts = torch.arange(TARGETS)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        rollout = make_rollout(policy, prompts, distance_reward, 8)
    optimizer = torch.optim.SGD(policy.parameters(), lr=lr)
    ratios = fn(
        policy,
        ref,
        optimizer,
        rollout,
        num_iterations=num_iterations,
        beta=beta,
        epsilon=epsilon,
    )
    if measure == "ratios":
        if not isinstance(ratios, list | tuple) or not all(
            isinstance(r, torch.Tensor) for r in ratios
        ):
            raise TypeError(
                f"grpo_update returned {type(ratios).__name__}; it should return a list with the "
                "ratio tensor of each update"
            )
        # how far the furthest token's ratio is from 1, at each update
        return [(r.detach() - 1).abs().max().item() for r in ratios]
    with torch.no_grad():
        return policy.logps(rollout.prompts, rollout.completions).mean().item()


RATIO_MEASURE = "the largest |ratio - 1| over the tokens, at each update"
LOGPS_MEASURE = "mean log pi of the rollout's tokens after the updates"
ON_POLICY_HINT = (
    "pi_old is the policy that SAMPLED the rollout: before any update pi / pi_old = 1. "
    "Seed 001 (lines 107-110) takes log pi_old from ref_policy, so the ratio is pi / pi_ref "
    "and the clip holds the policy near the reference"
)
MOVES_HINT = (
    "evaluate log pi_old once, before the first update, under torch.no_grad(), and keep it: "
    "recomputed inside the loop the ratio is 1 at every update and the clip never acts. (This "
    "case passes beta=0: use the beta you are given, not a hard-coded 0.04)"
)
CLIP_HINT = (
    "the ratio moves as it should with epsilon=0.2 (the case before passed): clip it to "
    "[1 - epsilon, 1 + epsilon] with the epsilon you are given, not a hard-coded 0.2"
)
ANCHOR_HINT = (
    "the KL term is beta (the one you are given) times kl_penalty against ref_policy's "
    "log-probs, the frozen reference, not pi_old's: with pi_ref = pi_old (seed 002 refreshes "
    "its reference every iteration) it anchors the policy to nothing"
)


def _update_case(
    name: str,
    hint: str,
    measure: str,
    num_iterations: int,
    seed: int = 0,
    beta: float = 0.04,
    epsilon: float = 0.2,
    lr: float = 2.0,
) -> Case:
    return Case(
        name,
        (measure, num_iterations, seed, beta, epsilon, lr),
        expected=[0.0] if num_iterations == 1 and measure == "ratios" else None,
        show=f"a policy moved away from ref_policy (seed {seed}) samples 10 prompts x G=8, "
        f"distance reward, and is updated with SGD (lr {lr:g}), beta={beta:g}, "
        f"epsilon={epsilon:g}, num_iterations={num_iterations}: "
        + (RATIO_MEASURE if measure == "ratios" else LOGPS_MEASURE),
        hint=hint,
    )


UPDATE_PUBLIC = [
    _update_case("the first update is on-policy: every ratio is 1", ON_POLICY_HINT, "ratios", 1),
    _update_case("the ratio moves off 1 over several updates", MOVES_HINT, "ratios", 3, 0, 0.0),
    _update_case("the parameters after several updates", ANCHOR_HINT, "logps after", 3, 0, 0.2),
]


def update_twins(seed: int) -> list[Case]:
    """One case of every kind ``grpo_update`` is graded on: the on-policy first update, the
    ratio over several updates (beta 0), the clip range (an epsilon that is never 0.2), the
    parameters after several updates (a beta that is never 0.04); other policies and learning
    rates. The learning rate and the number of updates are large enough for some ratio to
    leave [1 - epsilon, 1 + epsilon] before the last update: the clip acts in every case with
    several updates."""
    g = generator(seed)
    cases = []
    for what, hint, measure, updates, betas, epsilons in [
        ("the first update is on-policy", ON_POLICY_HINT, "ratios", (1,), (0.1, 0.5), (0.1, 0.3)),
        ("the ratio moves off 1", MOVES_HINT, "ratios", (4,), (0.0,), (0.2,)),
        ("the clip range is epsilon", CLIP_HINT, "ratios", (4,), (0.0,), (0.05, 0.1)),
        ("the parameters afterwards", ANCHOR_HINT, "logps after", (3, 4), (0.1, 0.5), (0.2,)),
    ]:
        n, policy_seed, lr = _pick(g, *updates), _seed(g), _pick(g, 2.5, 3.0)
        beta, epsilon = _pick(g, *betas), _pick(g, *epsilons)
        name = f"num_iterations={n}, beta={beta:g}, epsilon={epsilon:g}, lr={lr:g}: {what}"
        cases.append(_update_case(name, hint, measure, n, policy_seed, beta, epsilon, lr))
    return cases


class _GradientsKept:
    """An optimizer whose ``zero_grad`` does nothing: what forgetting it does."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer

    def zero_grad(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name: str):
        return getattr(self._optimizer, name)


def _update_without_zero_grad(policy, ref_policy, optimizer, rollout, **kwargs):
    return grpo_update(policy, ref_policy, _GradientsKept(optimizer), rollout, **kwargs)


def _wrong_update(
    policy,
    ref_policy,
    optimizer,
    rollout,
    num_iterations=1,
    beta=0.04,
    epsilon=0.2,
    *,
    mistake: str,
):
    """``grpo_update`` with one ``mistake`` learners make: "no step" (zero_grad between backward
    and step wipes the gradient), "pi_old / pi" (the ratio upside down), "loss sign" (+L_clip
    minimised), "clipped only" (clip(ratio) * A without the min), "one step short"."""
    prompts, completions = rollout.prompts, rollout.completions
    with torch.no_grad():
        old_logps = policy.logps(prompts, completions)
        ref_logps = ref_policy.logps(prompts, completions)
    advantages = rollout.advantages.unsqueeze(1)
    ratios = []
    steps = num_iterations - 1 if mistake == "one step short" else num_iterations
    for _ in range(steps):
        logps = policy.logps(prompts, completions)
        log_ratio = old_logps - logps if mistake == "pi_old / pi" else logps - old_logps
        ratio = torch.exp(log_ratio)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
        surrogate = (
            clipped * advantages
            if mistake == "clipped only"
            else torch.min(ratio * advantages, clipped * advantages)
        )
        sign = 1.0 if mistake == "loss sign" else -1.0
        loss = sign * surrogate.mean() + beta * kl_penalty(logps, ref_logps)
        optimizer.zero_grad()
        loss.backward()
        if mistake == "no step":
            optimizer.zero_grad()
        optimizer.step()
        ratios.append(ratio.detach())
    return ratios


def _update_with(mistake: str) -> Callable:
    return lambda *args, **kwargs: _wrong_update(*args, **kwargs, mistake=mistake)


UPDATE_MISTAKES = [
    Mistake(
        _update_without_zero_grad,
        "call optimizer.zero_grad() before each loss.backward(): backward ADDS to the "
        "gradients the previous update left, so from the second update on each step also "
        "carries the old gradients",
    ),
    Mistake(
        _update_with("no step"),
        "the policy never moved: each update is optimizer.zero_grad(), then "
        "loss.backward(), then optimizer.step() (a zero_grad between backward and step "
        "wipes the gradient; without step nothing changes)",
    ),
    Mistake(
        _update_with("pi_old / pi"),
        "the ratio is pi / pi_old = exp(logps - old_logps), equation (5); "
        "exp(old_logps - logps) is its inverse",
    ),
    Mistake(
        _update_with("loss sign"),
        "the loss is -L_clip + beta * KL, equation (8): minimising it maximises the "
        "surrogate; with +L_clip the policy moves away from the high-advantage completions",
    ),
    Mistake(
        _update_with("clipped only"),
        "the surrogate is torch.min(ratio * A, clipped * A), equation (6): clipped * A "
        "alone drops the unclipped term, and the gradient is zero wherever the clip holds",
    ),
    Mistake(
        _update_with("one step short"),
        "num_iterations updates, one ratio each: for _ in range(num_iterations)",
    ),
]


def check_grpo_update(fn: Callable, seed: int | None = None) -> None:
    cases = cases_for(UPDATE_PUBLIC, update_twins, seed)
    _measured(fn, "grpo_update", cases, _probe_grpo_update, UPDATE_MISTAKES)


def ratio_distances(fn: Callable, num_iterations: int = 3, beta: float = 0.04) -> list[float]:
    """The largest |ratio - 1| at each update of ``fn`` in the check's setting (a policy moved
    away from its reference, SGD with lr 2, epsilon 0.2), for the notebook's demo."""
    bound = bind(fn, {k: v for k, v in REFERENCE_TRAINER.items() if k != "grpo_update"})
    with torch_threads(1):
        return [round(d, 3) for d in _probe_grpo_update(bound, "ratios", num_iterations, 0, beta)]


# ---------------------------------------------------------------------------------------------
# The demo: train a fresh toy policy with a trainer's functions


@dataclass
class DemoRun:
    """What ``train_demo`` measured: expected reward by step, the final KL to the reference,
    the number of generate calls and the seconds taken."""

    curve: list[tuple[int, float]]
    kl: float
    generate_calls: int
    seconds: float

    def __str__(self) -> str:
        steps = "  ".join(f"{step:>5d}" for step, _ in self.curve)
        rewards = "  ".join(f"{reward:5.2f}" for _, reward in self.curve)
        return (
            f"step             {steps}\n"
            f"expected reward  {rewards}\n"
            f"KL(pi || pi_ref) at the end {self.kl:.3f}; "
            f"{self.generate_calls} generate calls; {self.seconds:.2f} s"
        )


_RUNS: dict[tuple, DemoRun] = {}


def train_demo(
    functions: Mapping[str, Callable],
    steps: int = 40,
    prompts_per_step: int = 4,
    num_generations: int = 8,
    num_iterations: int = 2,
    beta: float = 0.04,
    epsilon: float = 0.2,
    lr: float = 0.1,
    seed: int = 0,
    every: int = 10,
) -> DemoRun:
    """Train a fresh (uniform) toy policy with ``functions`` (a dict with the five exercise
    names: ``SEED_TRAINER``, ``REFERENCE_TRAINER`` or a notebook's ``globals()``); every
    ``every`` steps record the exact expected reward over all ten prompts. A run of this
    module's own trainers is computed once per setting and then remembered."""
    helpers = {name: functions[name] for name in EXERCISES}
    settings = (steps, prompts_per_step, num_generations, num_iterations, beta, epsilon, lr)
    key = (tuple(helpers[name] for name in EXERCISES), *settings, seed, every)
    if key in _RUNS:
        return _RUNS[key]
    rollout_fn = bind(helpers["make_rollout"], helpers)
    update_fn = bind(helpers["grpo_update"], helpers)
    with torch_threads(1), torch.random.fork_rng():
        torch.manual_seed(seed)
        ref = ToyPolicy(seed)
        policy = CountingPolicy(seed)
        optimizer = torch.optim.Adam(policy.parameters(), lr=lr)  # the first one imports a lot
        start = time.perf_counter()
        curve = [(0, expected_reward(policy))]
        for step in range(1, steps + 1):
            prompts = torch.randperm(TARGETS)[:prompts_per_step]
            rollout = rollout_fn(policy, prompts, sum_reward, num_generations)
            update_fn(
                policy,
                ref,
                optimizer,
                rollout,
                num_iterations=num_iterations,
                beta=beta,
                epsilon=epsilon,
            )
            if step % every == 0:
                curve.append((step, expected_reward(policy)))
        kl = exact_kl(policy, ref, torch.arange(TARGETS))
    run = DemoRun(curve, kl, len(policy.calls), time.perf_counter() - start)
    if all(getattr(fn, "__module__", None) == __name__ for fn in helpers.values()):
        _RUNS[key] = run  # this module's trainers are deterministic: run each setting once
    return run


def bug_table(functions: Mapping[str, Callable] | None = None, **kwargs) -> str:
    """``train_demo`` with the reference trainer and ONE seed bug put back, for each bug in
    turn; then the seeds' whole trainer and (if given) ``functions``. One row each: the
    expected reward at the end, the KL to the reference, generate calls, seconds."""
    rows = [("all five fixed (reference)", REFERENCE_TRAINER)]
    rows += [
        (f"only {name} as the seed wrote it", {**REFERENCE_TRAINER, name: SEED_TRAINER[name]})
        for name in EXERCISES
    ]
    rows.append(("the seeds' trainer (all five bugs)", SEED_TRAINER))
    if functions is not None:
        rows.append(("your trainer", functions))
    lines = [f"{'trainer':44s} {'reward':>7s} {'KL':>7s} {'generate calls':>15s} {'seconds':>8s}"]
    for label, trainer in rows:
        run = train_demo(trainer, **kwargs)
        lines.append(
            f"{label:44s} {run.curve[-1][1]:7.2f} {run.kl:7.3f} {run.generate_calls:15d} "
            f"{run.seconds:8.2f}"
        )
    return "\n".join(lines)
