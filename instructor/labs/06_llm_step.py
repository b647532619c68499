# %% [raw]
# # ASSIGNMENT CONFIG
# name: 06_llm_step
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 06 · The LLM step
#
# **Goals** (about 40 minutes). Write the three pieces of a GRPO step on a language model that
# are easy to get subtly wrong, then train with your own step: the completion mask (which tokens
# a completion owns), the per-token log-probabilities (which logits predict which token), and the
# step that turns a batch of prompts into one optimizer update. The last check trains the shipped
# tiny model with your step and asks that its held-out accuracy rise.
#
# **Recap** (lesson: [notebook 06](../06_llm_grpo_math.ipynb), sections 2-5). One step samples
# $G$ completions $o_1, \dots, o_G$ of each prompt $q$ in one `generate` call, scores each with
# the accuracy reward, and turns the rewards into group-relative advantages (2). A completion ends
# at its first EOS; what follows is padding:
#
# $$m_{i,t} = 1 \text{ if } t \le \text{the first EOS of } o_i \text{ (or there is none yet)}, \text{ else } 0 \tag{15}$$
#
# One forward pass over prompt + completion gives the logits; with $z = \text{logits} / T$ at the
# sampling temperature $T$,
#
# $$\log \pi(o_t \mid q, o_{<t}) = z_{o_t} - \operatorname{logsumexp}(z) \tag{16}$$
#
# and the loss is the clipped surrogate plus the KL penalty, per token, averaged by `loss_type`
# (equations (5)-(9), `grpo_loss`):
#
# $$\ell_{i,t} = -\min\big(\rho_{i,t} A_i,\ \operatorname{clip}(\rho_{i,t}, 1-\epsilon, 1+\epsilon_{\text{high}}) A_i\big) + \beta\, k_3\big(\log\pi_{\text{ref}} - \log\pi_\theta\big), \qquad \rho_{i,t} = \exp(\log\pi_\theta - \log\pi_{\text{old}})$$
#
# With one update per batch, $\pi_{\text{old}}$ is $\pi_\theta$ detached: $\rho = 1$ in value,
# and its gradient is $\nabla \log \pi_\theta$.
#
# **How this lab works.** Each exercise asks for a function with the same name and signature as
# the package's (`grpo_minimal.completions`, `lm_trainer`, `lm_grpo`), so you can compare
# afterwards (not before!). Everything
# runs on the shipped tiny model (`data/tiny_math_lm`: 0.8M parameters, one token per character)
# on the CPU. Replace each `...`, run the cell, then the check below it. A failed check names the
# case, the input, the expected value, what you returned and a hint.
#
# **Grading** runs the same kinds of case as the checks below, with other values: other token
# rows and end tokens, other sampled rollouts and temperatures, other problems and settings for
# the step. If every check here passes and your functions do not special-case the inputs they
# were shown, they earn full points. The training check (exercise 4) trains from another seed.

# %%
import torch

from grpo_minimal import group_advantages, grpo_loss
from grpo_minimal.completions import CompletionGroups
from grpo_minimal.labs import llm_step as checks
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.rewards import score_completions

torch.manual_seed(0)
model, tokenizer = checks.tiny_model()
print("vocabulary:", dict(enumerate(tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))))))
print("eos:", tokenizer.eos_token_id, " pad:", tokenizer.pad_token_id)

# %% [markdown]
# ## Exercise 1 · `mask_after_eos`
#
# `generate` returns `completion_ids` `[N, C]`: each row runs until its first EOS, then the
# tokenizer's pad token fills it up to the longest row (or EOS again, for models whose pad token
# *is* their EOS). Return the mask of equation (15), `[N, C]`: 1 up to **and including** the first
# token that is any of `eos_ids`, 0 after it; a row without EOS keeps every token.
#
# `eos_ids` is a list **or a tuple** of one or more token ids (a chat model has several end
# tokens: whichever comes first ends the completion). Rows may have a single token (`C = 1`).
# Any integer, bool or float dtype of 0/1 values is accepted.
#
# Why keep the EOS: stopping is an action the model takes. If the mask drops it, the model is
# never rewarded for ending an answer. One of the course's seeds does exactly that: it sets the
# pad token to EOS and then masks the pad token,
#
# ```
#  265          self.tokenizer.pad_token = self.tokenizer.eos_token
#  331          mask = (shift_labels != self.tokenizer.pad_token_id).float()
# ```
#
# (seed 000), so every real EOS is masked too.

# %% [raw]
# # BEGIN QUESTION
# name: mask_after_eos
# points: 2

# %% [raw]
# # BEGIN SOLUTION


# %%
def mask_after_eos(completion_ids: torch.Tensor, eos_ids: list[int]) -> torch.Tensor:
    """Equation (15): 1 up to and including the first EOS of each row, 0 after it."""
    # BEGIN SOLUTION
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids))).long()
    eos_before = is_eos.cumsum(dim=1) - is_eos  # EOS tokens strictly before position t
    return (eos_before == 0).long()
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_mask_public(mask_after_eos):
    from grpo_minimal.labs import llm_step as checks

    checks.check_mask_after_eos(mask_after_eos)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_mask_hidden(mask_after_eos):
    from grpo_minimal.labs import llm_step as checks

    checks.check_mask_after_eos(mask_after_eos, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Three completions of `"23+45="` as `generate` returns them: `"68"` then EOS, `"6"` then EOS,
# and `"68999"`, which ran to the length limit (digits are tokens 3-12, so `6` is 9).

# %%
raw = torch.tensor([[9, 11, 1, 0, 0], [9, 1, 0, 0, 0], [9, 11, 12, 12, 12]])
mask = mask_after_eos(raw, [tokenizer.eos_token_id])
print(mask if mask is not None else "mask_after_eos is not written yet")

# %% [markdown]
# ## Exercise 2 · `completion_logps`
#
# A `CompletionGroups` (`grpo_minimal/completions.py`) holds `P` distinct prompts and
# `N = P * G` completions, completion `i` answering prompt `i // G`:
#
# - `prompt_ids`, `prompt_mask` `[P, Lp]`, **left**-padded (so every prompt ends where
#   generation starts);
# - `completion_ids`, `completion_mask` `[N, C]`, right-padded, the mask of equation (15);
# - `rollout.num_generations` is $G$.
#
# Return `(logps, entropy)`: `logps[i, t]` $= \log\pi(o_{i,t} \mid q, o_{i,<t})$ of equation (16),
# `[N, C]`, **with** its gradient (the loss differentiates it); `entropy` is `None`, or with
# `with_entropy=True` the entropy $\operatorname{logsumexp}(z) - \sum_v \operatorname{softmax}(z)_v\, z_v$
# of each position's distribution, `[N, C]`, without gradient. Values at padding positions are
# never used: anything there is accepted. `share_prompts` only chooses how the package computes
# the same numbers; you may ignore it.
#
# The recipe:
#
# 1. repeat each prompt row $G$ times (`repeat_interleave(G, dim=0)`) and concatenate prompt and
#    completion: `input_ids` and `attention_mask` `[N, Lp + C]`;
# 2. `model(input_ids=..., attention_mask=...).logits` is `[N, Lp + C, V]`. The logits at
#    position $t$ are the distribution of the token at position $t + 1$: pick the $C$ positions
#    that predict the completion tokens;
# 3. divide by the temperature, take the log-softmax over the vocabulary and `gather` each
#    completion token's entry.
#
# Position ids are optional here: a left-padded row without them is shifted by a constant, which
# rotary attention does not see (the package passes them; the checks accept either).
# The checks use rollouts written by hand and rollouts sampled from the model (prompts of
# different lengths, completions of one token), at temperature 1 and **at other temperatures**:
# the temperature divides the logits for the log-probs and for the entropy alike.
# Seed 001 gets step 2 right (`logits[:, input_len-1:-1, :]`, line 67) but samples at
# `temperature=0.9` (line 87) and scores the tokens at $T = 1$ (line 64), and sums the log-probs
# of every token, padding after EOS included (line 76).

# %% [raw]
# # BEGIN QUESTION
# name: completion_logps
# points: 4

# %% [raw]
# # BEGIN SOLUTION


# %%
def completion_logps(
    model,
    rollout: CompletionGroups,
    temperature: float = 1.0,
    with_entropy: bool = False,
    share_prompts: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Equation (16): log pi(o_t | q, o_<t) for every completion token [N, C] (and entropy)."""
    # BEGIN SOLUTION
    G, C = rollout.num_generations, rollout.completion_ids.shape[1]
    prompt_ids = rollout.prompt_ids.repeat_interleave(G, dim=0)
    prompt_mask = rollout.prompt_mask.repeat_interleave(G, dim=0)
    input_ids = torch.cat([prompt_ids, rollout.completion_ids], dim=1)
    attention_mask = torch.cat([prompt_mask, rollout.completion_mask], dim=1)
    positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=positions
    ).logits
    z = logits[:, -C - 1 : -1] / temperature  # position t predicts token t + 1
    log_p = torch.log_softmax(z, dim=-1)
    logps = log_p.gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = -(log_p.exp() * log_p).sum(dim=-1)
    return logps, entropy
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_logps_public(completion_logps):
    from grpo_minimal.labs import llm_step as checks

    checks.check_completion_logps(completion_logps)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 3
"""  # END TEST CONFIG


def test_logps_hidden(completion_logps):
    from grpo_minimal.labs import llm_step as checks

    checks.check_completion_logps(completion_logps, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# How sure is the tiny model of each digit? Two completions of `"23+45="` (`$` is EOS): the right
# one and one off by one in the last digit.

# %%
example = checks.make_rollout(["23+45="], ["68$", "69$"], num_generations=2)
out = completion_logps(model, example)
if out is None:
    print("completion_logps is not written yet")
else:
    for ids, logps in zip(example.completion_ids, out[0], strict=True):
        tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
        print(
            "   ".join(
                f"{tok:<5} p = {lp.exp():.3f}" for tok, lp in zip(tokens, logps, strict=True)
            )
        )

# %% [markdown]
# ## Exercise 3 · `step`
#
# Now the whole step, `LMGRPOTrainer.step` written as a function of the trainer (`self`) and a
# list of dataset rows (`{"prompt", "answer"}`). The trainer gives you:
#
# | `self.` | what |
# |---|---|
# | `cfg` | the run's config, a `MathConfig` (`from grpo_minimal.lm_train import MathConfig`): `num_generations`, `scale_rewards`, `temperature`, `beta`, `epsilon`, `epsilon_high`, `loss_type`, `max_completion_length`, `use_bias_correction_kl`, `max_grad_norm` |
# | `sample(rows)` | step 1: the `CompletionGroups` (all groups sampled at once, mask (15) applied) |
# | `reward_funcs`, `reward_weights` | for `score_completions(funcs, weights, prompts, completions, rows)` |
# | `model`, `reference` | the policy; the frozen reference (`None` when `beta == 0`) |
# | `optimizer`, `scheduler`, `steps_done` | AdamW, the learning-rate schedule, the step counter |
#
# In order: sample; score (the dataset's prompts, `[r["prompt"] for r in rollout.rows]`, as TRL
# passes them); advantages (2) with `cfg.scale_rewards`; your `completion_logps` at
# `cfg.temperature` for the policy and, without gradient, for the reference; `grpo_loss` with
# `old_logps=None` (one update: $\pi_{\text{old}} = \pi_\theta$ detached) and the config's
# settings; zero the gradients, backward, clip the gradient norm to `cfg.max_grad_norm` (0 means
# no clipping), one optimizer step, one scheduler step, `steps_done += 1`. Return
# `(metrics, rollout)`, where `metrics` is a dict with at least `"loss"` (a float).
#
# You may assume `num_iterations == 1`, `gradient_accumulation_steps == 1` and float32 on the CPU
# (the package's step also handles several updates per batch, micro-batches and mixed precision).
# The check runs your step and the package's from the same trainer on the same completions
# (`self.sample` returns a fixed rollout there) and compares the loss, a gradient and the update.
# It runs the lesson's settings and one change at a time: `cfg.temperature` other than 1,
# `loss_type` `"grpo"` and `"dr_grpo"`, `beta = 0` (no reference), a large `beta` with
# `use_bias_correction_kl`, `scale_rewards="none"`, `max_grad_norm = 0` and a shorter schedule.
# Both log-probs, the policy's and the reference's, are taken **at `cfg.temperature`**.
#
# **Call `self.sample` once** and score the rollout you compute log-probs on (in the check, a
# second call returns other completions, as sampling again would). Seed 001 scores one set of
# responses and then samples another for the loss (lines 101-102,
# `responses = self.generate_group_responses(...)` after the rewards arrive), so each advantage
# lands on a completion it was never computed for.

# %% [raw]
# # BEGIN QUESTION
# name: step
# points: 4

# %% [raw]
# # BEGIN SOLUTION


# %%
def step(self: LMGRPOTrainer, rows: list[dict]) -> tuple[dict, CompletionGroups]:
    """One GRPO step: sample, score, advantages (2), log-probs (16), loss (5)-(9), update."""
    # BEGIN SOLUTION
    cfg, G = self.cfg, self.cfg.num_generations
    rollout = self.sample(rows)
    prompts = [row["prompt"] for row in rollout.rows]
    rewards, _ = score_completions(
        self.reward_funcs, self.reward_weights, prompts, rollout.completions, rollout.rows
    )
    advantages = group_advantages(torch.tensor(rewards), G, cfg.scale_rewards)
    ref_logps = None
    if self.reference is not None:
        with torch.no_grad():
            ref_logps = completion_logps(self.reference, rollout, cfg.temperature)[0]
    logps, _ = completion_logps(self.model, rollout, cfg.temperature)
    loss, metrics = grpo_loss(
        logps,
        None,
        ref_logps,
        advantages,
        rollout.completion_mask,
        beta=cfg.beta,
        epsilon=cfg.epsilon,
        epsilon_high=cfg.epsilon_high,
        loss_type=cfg.loss_type,
        max_completion_length=cfg.max_completion_length,
        use_bias_correction_kl=cfg.use_bias_correction_kl,
    )
    self.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
    self.optimizer.step()
    self.scheduler.step()
    self.steps_done += 1
    return metrics, rollout
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_step_public(step):
    from grpo_minimal.labs import llm_step as checks

    checks.check_step(step)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 3
"""  # END TEST CONFIG


def test_step_hidden(step):
    from grpo_minimal.labs import llm_step as checks

    checks.check_step(step, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# One step on the check's trainer (2 prompts × 4 completions, the policy nudged off the
# reference so that the KL term is not 0):

# %%
trainer, rows = checks.step_trainer()
out = step(trainer, rows)
if out is None:
    print("step is not written yet")
else:
    metrics, rollout = out
    print("completions:", rollout.completions)
    print({k: round(float(v), 5) for k, v in metrics.items() if isinstance(v, int | float)})

# %% [markdown]
# **Think.** The loss printed above is small, and with $\rho = 1$ its policy part is
# $-\sum_i A_i\, n_i / \sum_i n_i$ ($n_i$ tokens in completion $i$, `dapo`): it does not depend
# on the log-probs at all. Why does the model still learn? What would be left of the gradient if
# you passed `old_logps=logps` (not detached)?
#
# ## Exercise 4 · Train with your step
#
# The cell below runs notebook 06's CPU settings with **your** `step`: 150 steps of 8 prompts × 8
# completions from the shipped model (60 with `GRPO_QUICK=1`), drawing the batches as `train_math`
# does, and measures greedy accuracy on 500 held-out problems before and after (about a minute).
# With the package's step, 150 steps add about 20 points (45% → 65%); the check asks for 10
# (5 in quick mode). The check trains from seed 0; grading trains once, from seed 1 (this cell's
# run included). Nothing to write: this exercise grades exercise 3 by what it does.

# %%
run = checks.train_with_step(step, progress=True)
if run is None:
    print("step is not written yet: nothing trained")
else:
    quarter = max(len(run.rewards) // 4, 1)
    print(
        f"held-out greedy accuracy {run.accuracy_before:.1%} -> {run.accuracy_after:.1%} "
        f"({100 * run.rise:+.1f} points) in {run.seconds:.0f} s of steps; sampled reward "
        f"{sum(run.rewards[:quarter]) / quarter:.2f} (first quarter) -> "
        f"{sum(run.rewards[-quarter:]) / quarter:.2f} (last quarter)"
    )

# %% [raw]
# # BEGIN QUESTION
# name: training
# points: 2

# %% [raw]
# # BEGIN TESTS


# %%
def test_training_public(step):
    from grpo_minimal.labs import llm_step as checks

    checks.check_training(step)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_training_hidden(step):
    from grpo_minimal.labs import llm_step as checks

    checks.check_training(step, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# **Think.** Flip the sign of the advantages in your step and rerun the two cells above (then
# flip it back): what happens to accuracy, and why does exercise 3's check catch it with the
# loss *value* while `old_logps=logps` is caught only by the gradient?
#
# **Afterwards.** Read `grpo_minimal/completions.py`, `lm_trainer.py` and `lm_grpo.py` and compare:
# `mask_after_eos` and `completion_logps` are the same ideas (the package takes the log-softmax as `gather` minus
# `logsumexp`, so no second `[N, C, V]` tensor is kept for the backward pass, and can encode
# each prompt once for its $G$ completions, `prompt_cache.py`); `LMGRPOTrainer.step` adds
# several updates per batch (`num_iterations`, with $\pi_{\text{old}}$ stored) and leaves
# micro-batches, mixed precision and the metrics notebook 06 plots to the helpers it shares with
# PPO (`LMTrainer.backward`, `optimizer_step`, `record`).
