"""``LMPPOTrainer.step`` against a plain PPO step written here, in float64, from the equations.

``test_lm_ppo.py`` checks each equation of ``lm_ppo.py`` by hand; this file checks how the step
puts them together. The reference below shares no code with ``lm_ppo.py``, ``losses.py`` or
``ppo.py``: it runs the model on one completion at a time (no padding, no prompt cache) and
writes out the k1 rewards (22), the GAE loop (23), the whitening (24), the clipped losses (25),
the gradient clipping, AdamW (by hand, not ``torch.optim``) and the linear schedule. It is given
the initial weights, the rollout the trainer sampled, the scores and the minibatch order.

It runs in two stages, each compared with the trainer at its own precision:

1. what is fixed at sampling (log pi_old, V, advantages, value targets). ``ppo.gae`` computes
   in float32 whatever its inputs, so the trainer's advantages and targets are float32 numbers
   even in a float64 run: they are compared at float32's precision;
2. the epochs of updates, started from the trainer's own (float32) advantages and targets, so
   that everything after them is float64 against float64 and compared to 1e-10.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from numerics import FLOAT32_ULP
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

import grpo_minimal.lm_ppo as lm_ppo
from grpo_minimal.data import load_math_rows
from grpo_minimal.device import torch_threads
from grpo_minimal.lm_ppo import LMPPOConfig, LMPPOTrainer
from grpo_minimal.lm_train import setup
from grpo_minimal.rewards import accuracy_reward

# Each setting lets a part of the step show: critic_learning_rate is not learning_rate,
# max_grad_norm and value_clip are small enough to bite (asserted), 2 epochs x 2 minibatches x
# 2 micro-batches (the value clip differs from its bug only after the first update), G = 2
# (whole groups per minibatch), beta > 0 with the reference refreshed after the step, weight
# decay (spared on biases and norms), and max_steps 2: after the step's 4 of 8 updates the
# linear schedule stands at half.
SETTINGS = dict(
    prompts_per_step=4,
    num_generations=2,
    max_completion_length=5,
    temperature=0.9,
    num_iterations=2,
    num_minibatches=2,
    gradient_accumulation_steps=2,
    max_steps=2,
    learning_rate=1e-4,
    critic_learning_rate=3e-4,
    weight_decay=0.1,
    max_grad_norm=0.01,
    beta=0.1,
    ref_update_every=1,
    gae_lambda=0.95,
    value_coef=0.1,
    value_clip=0.02,
    epsilon=0.2,
    loss_type="dapo",
    seed=0,
)
ROWS = (0, 11, 12, 14)  # training rows whose answers have 2 and 3 digits: unequal lengths
BETAS, ADAM_EPS = (0.9, 0.999), 1e-8  # AdamW's defaults, which the trainer keeps
# Both sides compute in float64 (2**-53 ~ 1e-16) but in different orders (batched, padded and
# through the prompt cache against one completion at a time), then 4 AdamW steps; measured,
# they agree to ~2e-12 of each quantity's scale. Each bug this test was made for moves
# something by more than 1e-4 of it.
RTOL = 1e-10
# ppo.gae's float32: a few float32 roundings of the numbers that enter it (rewards, values ~1)
GAE_ATOL = 64 * FLOAT32_ULP


def make_ppo_trainer(cfg, model, tokenizer) -> LMPPOTrainer:
    """The one place this test builds the trainer, in float64 (the critic's head takes the
    policy's dtype)."""
    return LMPPOTrainer(cfg, model.double(), tokenizer)


def float64_rms_norm(self, hidden: torch.Tensor) -> torch.Tensor:
    """Qwen2RMSNorm's math without its cast to float32: transformers computes the norm in
    float32 even in a float64 model, which puts float32 rounding into every gradient (the
    prompt cache's backward then differs from a plain pass by ~1e-8)."""
    variance = hidden.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden * torch.rsqrt(variance + self.variance_epsilon))


# --- the only trainer internals this test reads: the step returns none of them and the -----
# --- refactor may move them, so they are read here and nowhere else ------------------------


def internals(trainer: LMPPOTrainer) -> SimpleNamespace:
    """The critic as its body (a decoder) and head (a linear layer to one value), the frozen
    reference policy, and the critic's current learning rate (from its AdamW groups)."""
    critic_ids = {id(p) for p in trainer.critic.parameters()}
    groups = trainer.optimizer.param_groups
    (critic_lr,) = {g["lr"] for g in groups if id(g["params"][0]) in critic_ids}
    return SimpleNamespace(
        critic_body=trainer.critic.body,
        critic_head=trainer.critic.head,
        reference=trainer.reference,
        critic_lr=critic_lr,
    )


def step_watching_the_loss(trainer: LMPPOTrainer, rows: list[dict]):
    """``trainer.step(rows)``, recording every call of ``lm_ppo.ppo_lm_loss`` (one per
    micro-batch, in order): its per-token inputs, [completions of the micro-batch, C], and loss."""
    calls = []
    original = lm_ppo.ppo_lm_loss

    def watched(logps, old_logps, advantages, values, old_values, targets, mask, **kwargs):
        loss, metrics = original(
            logps, old_logps, advantages, values, old_values, targets, mask, **kwargs
        )
        calls.append(
            SimpleNamespace(
                logps=logps.detach().clone(),
                old_logps=old_logps.clone(),
                values=values.detach().clone(),
                old_values=old_values.clone(),
                advantages=advantages.clone(),
                targets=targets.clone(),
                loss=loss.item(),
            )
        )
        return loss, metrics

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lm_ppo, "ppo_lm_loss", watched)
        record, rollout = trainer.step(rows)
    return record, rollout, calls


# --- the reference PPO step -----------------------------------------------------------------


def completion_tokens(rollout, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One completion's prompt and kept completion tokens, the padding stripped."""
    prompt = row // (len(rollout.completion_ids) // len(rollout.prompt_ids))
    return (
        rollout.prompt_ids[prompt][rollout.prompt_mask[prompt].bool()],
        rollout.completion_ids[row][rollout.completion_mask[row].bool()],
    )


def token_logps(policy, prompt, completion, temperature) -> torch.Tensor:
    """log pi(o_t | q, o_<t) of each completion token, from one plain forward pass."""
    ids = torch.cat([prompt, completion])[None]
    logits = policy(input_ids=ids, use_cache=False).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, completion[:, None]).squeeze(-1)


def token_values(body, head, prompt, completion) -> torch.Tensor:
    """V(s_t) of each completion token: the head on the hidden state that predicts token t."""
    ids = torch.cat([prompt, completion])[None]
    hidden = body(input_ids=ids, use_cache=False).last_hidden_state[0, len(prompt) - 1 : -1]
    return hidden @ head.weight[0] + head.bias[0]


def plain_gae(rewards: list[float], values: list[float], lam: float) -> list[float]:
    """Equation (23), gamma 1: the last token ends the episode, nothing is bootstrapped after."""
    advantages, running = [0.0] * len(rewards), 0.0
    for t in reversed(range(len(rewards))):
        next_value = values[t + 1] if t + 1 < len(rewards) else 0.0
        running = rewards[t] + next_value - values[t] + lam * running
        advantages[t] = running
    return advantages


def sampling_quantities(policy, critic_body, critic_head, reference, tokens, scores, cfg):
    """Stage 1, no gradient: log pi_old and V at sampling, then the rewards (22), GAE (23) and
    whitening (24). ``tokens``: each completion's (prompt, completion); lists, one per row."""
    with torch.no_grad():
        old_logps = [token_logps(policy, *row, cfg.temperature) for row in tokens]
        ref_logps = [token_logps(reference, *row, cfg.temperature) for row in tokens]
        old_values = [token_values(critic_body, critic_head, *row) for row in tokens]
    advantages, targets = [], []
    for old, ref, values, score in zip(old_logps, ref_logps, old_values, scores, strict=True):
        rewards = (-cfg.beta * (old - ref)).tolist()  # k1 = log pi_old - log pi_ref
        rewards[-1] += score
        gae = torch.tensor(plain_gae(rewards, values.tolist(), cfg.gae_lambda), dtype=torch.float64)
        advantages.append(gae)
        targets.append(gae + values)
    every = torch.cat(advantages)
    mean, var = every.mean(), every.var()  # the sample variance, over every token of the batch
    return SimpleNamespace(
        old_logps=old_logps,
        old_values=old_values,
        targets=targets,
        advantages=[(a - mean) / torch.sqrt(var + 1e-8) for a in advantages],
    )


def plain_adamw(param, grad, state, lr, weight_decay, step) -> None:
    """One AdamW update in place (decoupled weight decay, then Adam with bias correction)."""
    b1, b2 = BETAS
    param.mul_(1 - lr * weight_decay)
    state["m"] = b1 * state["m"] + (1 - b1) * grad
    state["v"] = b2 * state["v"] + (1 - b2) * grad * grad
    m_hat, v_hat = state["m"] / (1 - b1**step), state["v"] / (1 - b2**step)
    param.sub_(lr * m_hat / (v_hat.sqrt() + ADAM_EPS))


def clip_grads(params, max_norm: float) -> float:
    """Scale the gradients to a total norm of at most max_norm; returns the norm before. The
    1e-6 in the divisor is clip_grad_norm_'s: a 1e-10 comparison sees it."""
    norm = math.sqrt(sum((p.grad**2).sum().item() for p in params))
    for p in params:
        p.grad.mul_(min(1.0, max_norm / (norm + 1e-6)))
    return norm


def micro_batch_rows(order: torch.Tensor, G: int, cfg) -> list[list[int]]:
    """One epoch's micro-batches, as completion rows: the permuted prompts cut into
    minibatches, each cut into gradient_accumulation_steps micro-batches of whole groups."""
    micro = len(order) // cfg.num_minibatches // cfg.gradient_accumulation_steps
    prompts = order.tolist()
    return [
        [p * G + g for p in prompts[start : start + micro] for g in range(G)]
        for start in range(0, len(prompts), micro)
    ]


def ppo_updates(policy, critic_body, critic_head, tokens, fixed, orders, cfg):
    """Stage 2: per minibatch, one AdamW update of each network, in place. ``fixed`` holds each
    completion's old log-probs, old values, advantages and targets; ``orders`` each epoch's
    permutation of the prompts. Returns each micro-batch's rows, loss, log-probs and values,
    the gradient norms before clipping and how often the value clip bit."""
    G = len(tokens) // len(orders[0])
    networks = {
        "policy": list(policy.named_parameters()),
        "critic": [
            *(("body." + n, p) for n, p in critic_body.named_parameters()),
            ("head.weight", critic_head.weight),
            ("head.bias", critic_head.bias),
        ],
    }
    base_lr = {"policy": cfg.learning_rate, "critic": cfg.critic_learning_rate}
    adam = {
        id(p): {"m": torch.zeros_like(p), "v": torch.zeros_like(p)}
        for params in networks.values()
        for _, p in params
    }
    total_updates = cfg.max_steps * cfg.num_iterations * cfg.num_minibatches
    out = SimpleNamespace(
        calls=[], norms={"policy": [], "critic": []}, value_clip_bites=0, updates=0
    )
    for order in orders:
        micro_batches = micro_batch_rows(order, G, cfg)
        for first in range(0, len(micro_batches), cfg.gradient_accumulation_steps):
            for _, p in networks["policy"] + networks["critic"]:
                p.grad = None
            for rows in micro_batches[first : first + cfg.gradient_accumulation_steps]:
                policy_terms, value_terms, logps, values = [], [], [], []
                for i in rows:
                    logp = token_logps(policy, *tokens[i], cfg.temperature)
                    value = token_values(critic_body, critic_head, *tokens[i])
                    ratio = torch.exp(logp - fixed.old_logps[i])
                    advantage = fixed.advantages[i]
                    clipped = torch.clamp(ratio, 1 - cfg.epsilon, 1 + cfg.epsilon)
                    policy_terms.append(-torch.min(ratio * advantage, clipped * advantage))
                    # (13): a value counts at most value_clip away from its value at sampling
                    old, target = fixed.old_values[i], fixed.targets[i]
                    moved = old + torch.clamp(value - old, -cfg.value_clip, cfg.value_clip)
                    unclipped, pessimistic = (value - target) ** 2, (moved - target) ** 2
                    out.value_clip_bites += int((pessimistic > unclipped).sum())
                    value_terms.append(0.5 * torch.max(unclipped, pessimistic))
                    logps.append(logp.detach())
                    values.append(value.detach())
                # the trainer's aggregation: token means over each micro-batch (it gives dapo no
                # batch-wide token count), averaged; with micro-batches of unequal token counts
                # not the minibatch's token mean, so gradient_accumulation_steps changes the step
                value_loss = torch.cat(value_terms).mean()
                loss = torch.cat(policy_terms).mean() + cfg.value_coef * value_loss
                (loss / cfg.gradient_accumulation_steps).backward()
                out.calls.append(
                    SimpleNamespace(rows=rows, loss=loss.item(), logps=logps, values=values)
                )
            lr_scale = 1 - out.updates / total_updates  # linear to 0, no warmup
            out.updates += 1
            with torch.no_grad():
                for name, params in networks.items():
                    out.norms[name].append(clip_grads([p for _, p in params], cfg.max_grad_norm))
                    for pname, p in params:
                        # no weight decay on biases and norm gains (the HF Trainer's rule)
                        decay = 0.0 if "bias" in pname or "norm" in pname else cfg.weight_decay
                        plain_adamw(
                            p, p.grad, adam[id(p)], base_lr[name] * lr_scale, decay, out.updates
                        )
    return out


# --- the test -------------------------------------------------------------------------------


def named_copy(named) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in named}


def critic_copy(body, head) -> dict[str, torch.Tensor]:
    return named_copy(
        [
            *(("body." + n, p) for n, p in body.named_parameters()),
            ("head.weight", head.weight),
            ("head.bias", head.bias),
        ]
    )


def assert_close(what: str, got: torch.Tensor, want: torch.Tensor, atol: float | None = None):
    """Within atol; by default RTOL of want's largest entry, or of 1 below that (log-probs,
    values and advantages are numbers of order 1)."""
    if atol is None:
        atol = RTOL * max(1.0, want.abs().max().item())
    error = (got - want).abs().max().item()
    assert error <= atol, f"{what}: off by {error:.3g} (allowed {atol:.3g})"


def assert_same_update(network: str, after: dict, want: dict, before: dict) -> None:
    """The weights moved as the reference's did, to RTOL of the largest move in the network."""
    scale = max((want[name] - before[name]).abs().max().item() for name in want)
    for name in want:
        assert_close(
            f"{network} {name} update",
            after[name] - before[name],
            want[name] - before[name],
            RTOL * scale,
        )


def test_a_ppo_step_matches_a_plain_float64_ppo(monkeypatch):
    monkeypatch.setattr(Qwen2RMSNorm, "forward", float64_rms_norm)
    cfg = LMPPOConfig.for_device("cpu", **SETTINGS)
    model, tokenizer = setup(cfg)
    assert any(isinstance(m, Qwen2RMSNorm) for m in model.modules())  # the patch applies
    trainer = make_ppo_trainer(cfg, model, tokenizer)
    parts = internals(trainer)
    reference = copy.deepcopy(model).eval()  # the trainer's reference: the policy it was given
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # a policy moved off its reference (k1 rewards not 0), a critic head not 0 (values at
        # sampling not 0, gradients into the critic's body from the first update)
        for p in model.parameters():
            p.add_(0.005 * torch.randn(p.shape, generator=noise, dtype=p.dtype))
        head = parts.critic_head.weight
        head.copy_(0.1 * torch.randn(head.shape, generator=noise, dtype=head.dtype))
    policy = copy.deepcopy(model).train()
    critic_body, critic_head = copy.deepcopy(parts.critic_body), copy.deepcopy(parts.critic_head)
    policy_before = named_copy(model.named_parameters())
    critic_before = critic_copy(critic_body, critic_head)
    # the trainer's minibatch order: a permutation of the prompts per epoch, from a generator
    # of its own seeded with cfg.seed
    generator = torch.Generator().manual_seed(cfg.seed)
    orders = [
        torch.randperm(cfg.prompts_per_step, generator=generator) for _ in range(cfg.num_iterations)
    ]
    train_rows = load_math_rows("arithmetic", "train")

    with torch_threads(1):  # a tiny model's fastest (device.torch_threads)
        record, rollout, calls = step_watching_the_loss(trainer, [train_rows[i] for i in ROWS])
        scores = accuracy_reward(rollout.completions, [row["answer"] for row in rollout.rows])
        tokens = [completion_tokens(rollout, i) for i in range(len(rollout.completions))]
        ours = sampling_quantities(policy, critic_body, critic_head, reference, tokens, scores, cfg)
        # the trainer's per-completion inputs to the loss, from the first epoch's micro-batches
        # (each completion is in one), the padding cut off
        theirs = {}
        first_epoch = micro_batch_rows(orders[0], cfg.num_generations, cfg)
        for rows, call in zip(first_epoch, calls, strict=False):
            for j, i in enumerate(rows):
                length = len(tokens[i][1])
                theirs[i] = {
                    name: getattr(call, name)[j, :length]
                    for name in ("old_logps", "old_values", "advantages", "targets")
                }
        assert sorted(theirs) == list(range(len(tokens)))
        # stage 2 from the trainer's float32 advantages and targets (module docstring)
        fixed = SimpleNamespace(
            old_logps=ours.old_logps,
            old_values=ours.old_values,
            advantages=[theirs[i]["advantages"] for i in range(len(tokens))],
            targets=[theirs[i]["targets"] for i in range(len(tokens))],
        )
        ref = ppo_updates(policy, critic_body, critic_head, tokens, fixed, orders, cfg)

    # the settings bite: completions of unequal lengths, both gradient clips in every update,
    # the value clip somewhere; 4 updates of 2 micro-batches each
    assert len({len(completion) for _, completion in tokens}) > 1
    assert min(ref.norms["policy"]) > cfg.max_grad_norm, ref.norms
    assert min(ref.norms["critic"]) > cfg.max_grad_norm, ref.norms
    assert ref.value_clip_bites > 0
    assert ref.updates == 4 and len(calls) == len(ref.calls) == 8

    # stage 1: log-probs and values at sampling in float64, advantages and targets in float32
    for i, got in theirs.items():
        assert_close(f"old log-probs of completion {i}", got["old_logps"], ours.old_logps[i])
        assert_close(f"values at sampling of completion {i}", got["old_values"], ours.old_values[i])
        assert_close(
            f"whitened advantages of completion {i}",
            got["advantages"],
            ours.advantages[i],
            GAE_ATOL,
        )
        assert_close(f"value targets of completion {i}", got["targets"], ours.targets[i], GAE_ATOL)

    # stage 2: each micro-batch's log-probs, values and loss (the first update's included)
    for k, (got, want) in enumerate(zip(calls, ref.calls, strict=True)):
        for j, i in enumerate(want.rows):
            length = len(want.logps[j])
            update = k // cfg.gradient_accumulation_steps
            where = f"micro-batch {k} (update {update}), completion {i}"
            assert_close(f"log-probs, {where}", got.logps[j, :length], want.logps[j])
            assert_close(f"values, {where}", got.values[j, :length], want.values[j])
        assert got.loss == pytest.approx(want.loss, rel=RTOL, abs=RTOL), f"loss, micro-batch {k}"

    # the gradient norm the trainer logs (the policy's, last update) and the schedule at half
    assert record["grad_norm"] == pytest.approx(ref.norms["policy"][-1], rel=RTOL)
    done = ref.updates / (cfg.max_steps * cfg.num_iterations * cfg.num_minibatches)
    assert record["learning_rate"] == pytest.approx(cfg.learning_rate * (1 - done), rel=RTOL)
    assert internals(trainer).critic_lr == pytest.approx(
        cfg.critic_learning_rate * (1 - done), rel=RTOL
    )

    # the weights: both networks moved as the reference's, and the reference is the new policy
    assert_same_update(
        "policy",
        named_copy(model.named_parameters()),
        named_copy(policy.named_parameters()),
        policy_before,
    )
    assert_same_update(
        "critic",
        critic_copy(parts.critic_body, parts.critic_head),
        critic_copy(critic_body, critic_head),
        critic_before,
    )
    new_policy = dict(model.named_parameters())
    for name, p in internals(trainer).reference.named_parameters():
        assert torch.equal(p, new_policy[name]), f"reference {name} is not the updated policy"
