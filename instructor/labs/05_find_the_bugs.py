# %% [raw]
# # ASSIGNMENT CONFIG
# name: 05_find_the_bugs
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 05 · Find the bugs
#
# **Goals** (about 40 minutes). Five mistakes from the course's four seed documents (Korean
# write-ups with GRPO code) leave a trainer running without an error, with a loss that looks
# normal, while it learns slowly, noisily or not at all. Four are in the seeds' training code;
# one is a worked example that its own code contradicts. This lab puts the five into one small
# trainer, one per function. You fix each, and each check **measures** what your fix changes:
# the number of `generate` calls, which completions the reward function scored, the advantages of
# the worked example, the gradient of the KL term, the ratio over several updates.
#
# **Recap** (lessons: [notebook 01](../01_group_relative_advantage.ipynb), section 7 "What the
# seeds' training code gets wrong"; [notebook 04](../04_clipping_and_kl.ipynb) for the ratio,
# the clip and the KL; [notebook 06](../06_llm_grpo_math.ipynb) for the whole step on a language
# model). One GRPO step, in the order this trainer runs it:
#
# 1. sample $G$ completions of each of $P$ prompts in one `generate` call (`sample_group`);
# 2. score them, and turn the rewards into group advantages (2) (`make_rollout`,
#    `group_advantages`);
# 3. fix the log-probs of the policy that sampled, $\log\pi_{old}$, and of the reference,
#    $\log\pi_{ref}$, then take `num_iterations` optimizer steps on the loss (5)-(8), averaged
#    over tokens (`grpo_update`, `kl_penalty`).
#
# $$A_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r) + \varepsilon} \tag{2}$$
# $$\rho = \exp(\log\pi_\theta - \log\pi_{old}) \tag{5}$$
# $$L^{clip} = \min\big(\rho A,\ \operatorname{clip}(\rho, 1-\epsilon, 1+\epsilon)\,A\big) \tag{6}$$
# $$k_3 = e^{x} - x - 1, \qquad x = \log\pi_{ref} - \log\pi_\theta \tag{7}$$
# $$\ell = -L^{clip} + \beta\,k_3 \tag{8}$$
#
# In (2) the std is the sample (Bessel-corrected, $G-1$) std of the group and
# $\varepsilon = 10^{-4}$; in (6) $\epsilon = 0.2$ is the clip range.
#
# **The toy.** To keep every check on the CPU and under a second, the policy is not an LLM but
# has an LLM's interface. A prompt is a target sum $q \in \{0, \dots, 9\}$; a completion is three
# tokens, each a digit 0-3; the reward is 1 when the digits add up to the target (a verifiable
# reward, as in notebook 05). `policy.generate(prompts, num_return_sequences=G)` decodes token
# by token and returns `[P*G, 3]` token ids, the $G$ completions of each prompt in consecutive
# rows; `policy.logps(prompts, completions)` returns $\log\pi(o_t \mid q, o_{<t})$ for every token,
# `[P*G, 3]`. With only $4^3 = 64$ possible completions, the expected reward and the KL to the
# reference are computed exactly, by summing over all of them.
#
# **How this lab works.** Each exercise cell holds one function as the seeds wrote it: it runs,
# and it has one bug. The text above it quotes the seed's lines (file and line numbers in the seed
# document). Fix the function in place and run the cell, then run the check below it. (The empty
# cell under each function is spare: a definition there would replace the one above.) Each check
# calls your function with the fixed versions of the other four, so it sees one fix at a time. A
# failed check names the case, the input, the expected and the measured value, and a hint. From a
# terminal, `grpo-minimal lab check notebooks/labs/05_find_the_bugs.ipynb` checks the notebook.
#
# **Grading** runs the same kinds of case as the checks below, with other values: other prompts
# and group sizes, other seeds for the toy policies, other `eps`, `beta`, `epsilon` and learning
# rates. Each exercise says what its check measures. If every check here passes and your
# function does not special-case the inputs it was shown, it earns full points.

# %%
import torch

from grpo_minimal.labs import bugs as checks
from grpo_minimal.labs.bugs import RewardFn, Rollout, ToyPolicy, sum_reward

_ = torch.manual_seed(0)

# %% [markdown]
# A uniform policy answers each prompt with every one of the 64 completions equally often; for a
# random target that is right one time in ten.

# %%
policy = ToyPolicy(seed=0)  # all logits 0: uniform
prompts = torch.tensor([4, 6])
completions = policy.generate(prompts, num_return_sequences=4)
print(completions.tolist())
print(sum_reward(prompts, completions).tolist())
print(f"expected reward of the uniform policy: {checks.expected_reward(policy):.3f}")

# %% [markdown]
# ## The trainer as the seeds wrote it
#
# Forty steps of 4 prompts × 8 completions, two updates per batch, Adam (learning rate 0.1),
# $\beta = 0.04$, $\epsilon = 0.2$, starting from the uniform policy, with the five functions as
# the exercises below give them to you:

# %%
print(checks.train_demo(checks.SEED_TRAINER))

# %% [markdown]
# The expected reward stays at the uniform policy's 0.10. Nothing crashed and nothing is NaN:
# these bugs are silent, which is why each check below measures an effect instead of waiting for
# an error.
#
# ## Exercise 1 · `sample_group`: one `generate` call
#
# Seed 000 (`000_262155a5727a711f.txt`, `GRPO.sample_group`, lines 279-289) samples a group one
# completion at a time:
#
# ```python
#  279          responses = []
#  280          for _ in range(self.group_size):
#  281              with torch.no_grad():
#  282                  outputs = self.policy.generate(
#  283                      **inputs,
#  284                      max_new_tokens=256,
#  285                      do_sample=True,
#  286                      temperature=0.7,
#  287                      top_p=0.9,
#  288                      pad_token_id=self.tokenizer.pad_token_id,
# ```
#
# and its `train_step` calls `sample_group` once per prompt (`for prompt in prompts:`, lines
# 345-347). That is $P \cdot G$ decodes of batch size 1, one after another. The samples are
# fine; the time is not. Decoding produces one token per forward pass, and while the GPU waits on
# memory a pass over $G$ sequences costs little more than a pass over one, so the loop can be up
# to $G$ times slower per prompt than it needs to be, and up to $P \cdot G$ times per step.
#
# Fix: **one** call for the whole batch, `num_return_sequences=G`, which returns row $i$ for
# prompt $i \,//\, G$: consecutive blocks of $G$, the order `group_advantages` assumes (TRL's
# order). The check counts the calls with a policy that records them, and reads the order of the
# rows from a policy that always answers prompt $p$ with the digits $p, p+1, p+2 \bmod 4$, and
# compares the completions with what one `generate` call samples: return them unchanged. It
# uses batches of several prompts and of a single one, with various $G$.

# %% [raw]
# # BEGIN QUESTION
# name: sample_group
# points: 2

# %% [raw]
# # BEGIN PROMPT


# %%
def sample_group(policy: ToyPolicy, prompts: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Step 1: G completions of every prompt, [P*G, L], in consecutive blocks of G."""
    completions = []
    for prompt in prompts:  # seed 000, lines 345-347: one prompt at a time
        for _ in range(num_generations):  # seed 000, lines 279-289: one sample at a time
            completions.append(policy.generate(prompt.view(1), num_return_sequences=1))
    return torch.cat(completions)


# %% [raw]
# # END PROMPT

# %% [raw]
# # BEGIN SOLUTION


# %%
# BEGIN SOLUTION NO PROMPT
def sample_group(policy: ToyPolicy, prompts: torch.Tensor, num_generations: int) -> torch.Tensor:  # noqa: F811
    """Step 1: G completions of every prompt, [P*G, L], in ONE batched generate call."""
    return policy.generate(prompts, num_return_sequences=num_generations)


# END SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_sample_group_public(sample_group):
    from grpo_minimal.labs import bugs as checks

    checks.check_sample_group(sample_group)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_sample_group_hidden(sample_group):
    from grpo_minimal.labs import bugs as checks

    checks.check_sample_group(sample_group, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# How much does it cost? The cell times your `sample_group` and the seed's loop on one batch of
# 16 prompts × 8 (the best of five runs; the numbers depend on this machine and its load).

# %%
print(checks.time_sample_group(sample_group))

# %% [markdown]
# On the toy the gain is close to the number of calls saved, because each call costs mostly a
# fixed overhead (Python, the launch of each small tensor operation), whatever its batch size. A
# GPU decoding an LLM is in the same situation while it is memory-bound: the weights are read
# once per decoding step, whether for one sequence or for $G$. Seed 001 batches correctly for
# its single prompt, `input_ids.repeat(self.G, 1)` and one `generate` (lines 81-88); with
# several prompts, `repeat` would interleave them ($p_0, p_1, p_0, p_1, \dots$) where the groups
# need blocks: `repeat_interleave` keeps them.
#
# ## Exercise 2 · `make_rollout`: train on what was scored
#
# Seed 001 (`001_494382ac716eb860.txt`, `GRPOTrainer.compute_grpo_loss`, lines 91-102) receives
# rewards for responses its caller sampled and scored, then samples new ones before computing the
# log-probs (the comment on line 101 reads "compute the log prob of each response"):
#
# ```python
#   91      def compute_grpo_loss(self, input_ids, rewards):
#   96          # 보상 정규화 (그룹 내 상대적 품질)
#   97          mean_r = rewards.mean()
#   98          std_r = rewards.std() + 1e-8
#   99          advantages = (rewards - mean_r) / std_r
#  100
#  101          # 각 응답에 대한 log prob 계산
#  102          responses = self.generate_group_responses(input_ids[:1])
# ```
#
# The advantage of the $i$-th scored response then multiplies $\nabla\log\pi_\theta$ of the
# $i$-th **new** one, which was sampled independently of that reward:
# $\mathbb{E}[A_i\,\nabla\log\pi_\theta(y'_i)] = \mathbb{E}[A_i]\,\mathbb{E}[\nabla\log\pi_\theta(y'_i)] = 0$.
# The policy term has zero expected gradient; what is left is noise (notebook 01, section 7). In
# this trainer the same slip sits where the batch is assembled: `make_rollout` returns
# completions the reward function never saw.
#
# The check gives your function a reward function that keeps a copy of every batch it scores
# and a policy that counts its `generate` calls, then compares the rollout with what they saw:
# one `generate` call, one `reward_fn` call, the rollout's completions the scored ones, its
# rewards theirs and its advantages `group_advantages` of those rewards. It runs with the sum
# reward above and with a denser one, minus the distance of the digit sum to the target.

# %% [raw]
# # BEGIN QUESTION
# name: make_rollout
# points: 2

# %% [raw]
# # BEGIN PROMPT


# %%
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


# %% [raw]
# # END PROMPT

# %% [raw]
# # BEGIN SOLUTION


# %%
# BEGIN SOLUTION NO PROMPT
def make_rollout(  # noqa: F811
    policy: ToyPolicy, prompts: torch.Tensor, reward_fn: RewardFn, num_generations: int
) -> Rollout:
    """Steps 1-3 on the same completions: sample once, score them, group advantages (2)."""
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    advantages = group_advantages(rewards, num_generations)
    return Rollout(prompts, completions, rewards, advantages)


# END SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_make_rollout_public(make_rollout):
    from grpo_minimal.labs import bugs as checks

    checks.check_make_rollout(make_rollout)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_make_rollout_hidden(make_rollout):
    from grpo_minimal.labs import bugs as checks

    checks.check_make_rollout(make_rollout, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# **Think.** Sampling a second time and scoring that second batch instead would also pair each
# advantage with its own completion. Why does the check still reject it? (What does it cost, and
# what does the first sample then do?)
#
# ## Exercise 3 · `group_advantages`: which standard deviation?
#
# Seed 000 works the "15 + 27" group, three right answers out of four, by hand (lines 609-621):
#
# ```text
#  610  rewards = [1.0, 1.0, 0.0, 1.0]
#  613  mean = (1.0 + 1.0 + 0.0 + 1.0) / 4 = 0.75
#  614  std = sqrt(variance) ≈ 0.43
#  617      (1.0 - 0.75) / 0.43 = +0.58,   # 정답: 양의 advantage
#  619      (0.0 - 0.75) / 0.43 = -1.74,   # 오답: 음의 advantage
# ```
#
# (정답 / 오답: right / wrong answer; 양의 / 음의: positive / negative.) 0.43 is the
# **population** std, $\sqrt{0.1875}$ (divide by $G$). The seed's own code,
# `std_reward = rewards.std() + 1e-8` (line 301), calls torch's default, the **sample**
# (Bessel-corrected) std (divide by $G-1$): 0.5, so the code computes **+0.5 / -1.5**, as TRL
# and this course do (notebook 01). Either convention can be defended; what cannot is numbers
# that disagree with the code. The function below was written from the worked numbers. Make it
# compute equation (2) as the seed's code, TRL and `grpo_minimal.advantages.group_advantages` do.
#
# The check also runs groups of other sizes ($G = 2$ included), a zero-variance group next to
# another (its advantages are 0, never NaN), an `eps` passed by keyword (use the one you are
# given) and **integer** rewards (an `int64` tensor: the advantages are floats all the same).

# %% [raw]
# # BEGIN QUESTION
# name: group_advantages
# points: 2

# %% [raw]
# # BEGIN PROMPT


# %%
def group_advantages(
    rewards: torch.Tensor, num_generations: int, eps: float = 1e-4
) -> torch.Tensor:
    """Equation (2): flat rewards [P*G] -> flat advantages [P*G]."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    # seed 000, lines 613-614: "std = sqrt(variance) ≈ 0.43" for the group [1, 1, 0, 1]
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    return (centred / (std + eps)).reshape(-1)


# %% [raw]
# # END PROMPT

# %% [raw]
# # BEGIN SOLUTION


# %%
# BEGIN SOLUTION NO PROMPT
def group_advantages(  # noqa: F811
    rewards: torch.Tensor, num_generations: int, eps: float = 1e-4
) -> torch.Tensor:
    """Equation (2) with the sample (G-1) std: flat rewards [P*G] -> flat advantages [P*G]."""
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    return (centred / (std + eps)).reshape(-1)


# END SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_group_advantages_public(group_advantages):
    from grpo_minimal.labs import bugs as checks

    checks.check_group_advantages(group_advantages)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_group_advantages_hidden(group_advantages):
    from grpo_minimal.labs import bugs as checks

    checks.check_group_advantages(group_advantages, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The seed's group, with your function (+0.5 for each right answer, -1.5 for the wrong one, up
# to $\varepsilon$, once it is fixed):

# %%
print(group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), 4))

# %% [markdown]
# The two conventions differ by the factor $\sqrt{G/(G-1)}$ ($\sqrt{4/3} \approx 1.155$ here) for
# every group of $G$: the same direction for every update, a different step size. Of the five
# bugs this is the mildest, as the table at the end shows: under Adam, which divides each
# gradient by its own running scale, a constant factor on every advantage changes little beyond
# the weight of the KL term. (The seed's -1.74 is itself rounded: 0.75 / 0.4330 = 1.732.)
#
# ## Exercise 4 · `kl_penalty`: a penalty needs a gradient
#
# Seed 002 (`002_4429bfad63f02b7f.txt`, lines 49-53) proposes this as the "accurate KL
# divergence estimator" (정확한 KL divergence 추정기):
#
# ```python
#   49  def calculate_kl_divergence(self, log_probs_new, log_probs_ref):
#   50      """정확한 KL divergence 추정기"""
#   51      log_ratio = log_probs_ref - log_probs_new.detach()
#   52      kl_div = torch.exp(log_ratio) - log_ratio - 1
#   53      return torch.relu(kl_div.mean())
# ```
#
# The formula is $k_3$ of equation (7) and the **value** is right. But `log_probs_new` is
# detached and the reference is frozen, so nothing in `kl_div` depends on the policy's
# parameters: the penalty adds to the logged loss and nothing to the gradient, and $\beta$
# never pulls the policy back. Seed 000 (`GRPO.train_step`, lines 378-406) does the same another
# way: its `kl = old_log_prob - ref_log_prob` (line 405) subtracts two log-probs computed under
# `torch.no_grad()` (lines 379-382 and 390-393), where `new_log_prob`, equal in value, would have
# carried the gradient. (The `relu` does no harm: $k_3 \ge 0$ already.)
#
# A test of the value cannot see this bug, and the first public cases below pass as it stands.
# The next one asks autograd: with every advantage 0 the clipped term gives no gradient, so
# $d\,\text{loss} / d\,\text{logits}$ of equation (8) comes from $\beta\,k_3$ alone, and it must
# be the gradient of $k_3$, not zero. The last one takes one SGD step on $\beta\,k_3$ alone, for
# a policy away from its reference, and measures the exact KL before and after: with a gradient
# it falls.

# %% [raw]
# # BEGIN QUESTION
# name: kl_penalty
# points: 2

# %% [raw]
# # BEGIN PROMPT


# %%
def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Equation (7): k3 = exp(x) - x - 1 with x = log pi_ref - log pi, mean over tokens."""
    log_ratio = ref_logps - logps.detach()  # seed 002, lines 51-53
    kl_div = torch.exp(log_ratio) - log_ratio - 1
    return torch.relu(kl_div.mean())


# %% [raw]
# # END PROMPT

# %% [raw]
# # BEGIN SOLUTION


# %%
# BEGIN SOLUTION NO PROMPT
def kl_penalty(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:  # noqa: F811
    """Equation (7): k3 = exp(x) - x - 1 with x = log pi_ref - log pi, mean over tokens."""
    log_ratio = ref_logps - logps  # logps keeps its graph: the penalty's gradient
    return (torch.exp(log_ratio) - log_ratio - 1).mean()


# END SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_kl_penalty_public(kl_penalty):
    from grpo_minimal.labs import bugs as checks

    checks.check_kl_penalty(kl_penalty)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_kl_penalty_hidden(kl_penalty):
    from grpo_minimal.labs import bugs as checks

    checks.check_kl_penalty(kl_penalty, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# What the gradient does in training: the fixed trainer with your `kl_penalty`, with seed 002's,
# and with no penalty at all. $\beta = 0.3$ here, a tight leash, so that the effect is plain; at
# the default 0.04 it is small (notebook 04, section 4).

# %%
for label, penalty, beta in [
    ("yours, beta=0.3", kl_penalty, 0.3),
    ("seed 002's, beta=0.3", checks.SEED_TRAINER["kl_penalty"], 0.3),
    ("no penalty, beta=0", checks.kl_penalty, 0.0),
]:
    run = checks.train_demo({**checks.REFERENCE_TRAINER, "kl_penalty": penalty}, beta=beta)
    print(f"{label:22s} reward {run.curve[-1][1]:.2f}   KL(pi || pi_ref) {run.kl:.2f}")

# %% [markdown]
# With its gradient the penalty holds the policy at a KL of about 1.5 nats from the reference,
# and pays for it in reward (that is the leash's job). Detached, the run is **identical** to
# $\beta = 0$: the penalty changed the logged loss and nothing else.
#
# ## Exercise 5 · `grpo_update`: which policy is $\pi_{old}$?
#
# Seed 001 (`001_494382ac716eb860.txt`, `compute_grpo_loss`, lines 104-110):
#
# ```python
#  104          log_probs_new = self.compute_log_probs(
#  105              self.model, input_ids[:1], responses
#  106          )
#  107          with torch.no_grad():
#  108              log_probs_old = self.compute_log_probs(
#  109                  self.ref_model, input_ids[:1], responses
#  110              )
# ```
#
# $\pi_{old}$ is the frozen reference, so the ratio (5) is $\pi_\theta / \pi_{ref}$. Once a
# token is 20% likelier than under the reference (or 20% less likely, for a negative
# advantage), the clip (6) removes its gradient, and for good: the reference never moves. The
# policy stays in a box around the reference whatever the rewards say. $\pi_{old}$ must be the
# policy that **sampled** the rollout, evaluated once, before the first update, and held fixed:
# then $\rho = 1$ at the first update and moves off 1 at the next ones (`num_iterations > 1`),
# which is where the clip does its work.
#
# Two tempting fixes are wrong. Recomputing $\log\pi_{old}$ inside the update loop makes the
# ratio 1 at every update, so the clip never acts (seed 000 does this, lines 379-387; notebook 01,
# section 7). Taking the KL's reference from the same tensor makes $\pi_{ref} = \pi_{old}$ (seed
# 002 copies the current model into its reference every iteration, lines 37-40 and 124-126), so
# the KL anchors the policy to nothing.
#
# The function returns the ratio of every token at each update, for logging. The check moves a
# policy away from its reference, samples a rollout with it and runs your function: with
# `num_iterations=1` every ratio must be exactly 1; with 3 updates, the largest $|\rho - 1|$ must
# grow from 0 as the fixed trainer's does; and the policy's log-probs after the updates must be
# the fixed trainer's. The check also passes other values of `beta` and `epsilon` than the
# defaults, with learning rates large enough for the clip to act: use the arguments you are
# given.

# %% [raw]
# # BEGIN QUESTION
# name: grpo_update
# points: 3

# %% [raw]
# # BEGIN PROMPT


# %%
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


# %% [raw]
# # END PROMPT

# %% [raw]
# # BEGIN SOLUTION


# %%
# BEGIN SOLUTION NO PROMPT
def grpo_update(  # noqa: F811
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
        old_logps = policy.logps(prompts, completions)  # the sampler, before any update
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


# END SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_grpo_update_public(grpo_update):
    from grpo_minimal.labs import bugs as checks

    checks.check_grpo_update(grpo_update)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_grpo_update_hidden(grpo_update):
    from grpo_minimal.labs import bugs as checks

    checks.check_grpo_update(grpo_update, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The largest $|\rho - 1|$ over the tokens at each of three updates, in the check's setting:

# %%
print("yours:     ", checks.ratio_distances(grpo_update))
print("seed 001's:", checks.ratio_distances(checks.SEED_TRAINER["grpo_update"]))

# %% [markdown]
# Fixed, the ratio starts at exactly 1 and moves away with each update; by the third some tokens
# are past $1 + \epsilon = 1.2$ and the clip holds them. Against the reference, the ratio is far
# outside $[0.8, 1.2]$ before the first step: every token whose advantage would push it further
# out gets no gradient at all.
#
# ## Put it together
#
# The same 40 training steps as at the start, now with the fixed trainer and **one** seed bug put
# back at a time, then the seeds' whole trainer and yours. "reward" is the exact expected reward
# at the end (0.10 for the uniform start), "KL" the exact $\mathrm{KL}(\pi_\theta \,\|\,
# \pi_{ref})$ over whole completions, averaged over the ten prompts.

# %%
print(checks.bug_table(globals()))

# %% [markdown]
# Reading the rows (the exact numbers depend a little on the machine):
#
# - **`make_rollout`** as the seed wrote it: the reward stays near 0.1 while the KL to the
#   reference grows past 1 nat. The policy moves, pushed by noise (exercise 2's zero expected
#   gradient), and nothing steers it.
# - **`grpo_update`**: stuck near the start with a KL of about 0.3: the box that the clip
#   draws around the reference.
# - **`sample_group`**: learns as the fixed trainer does (its samples differ, so its numbers do a
#   little), with 32 times the `generate` calls and several times the seconds.
# - **`kl_penalty`** at $\beta = 0.04$ and **`group_advantages`**: within the run-to-run spread
#   of the fixed trainer; the $\beta = 0.3$ runs above show what the missing gradient costs when
#   the leash matters.
#
# Your row should match the first. Afterwards, compare with the language-model trainer,
# `grpo_minimal/lm_grpo.py`: `sample_completions` (`completions.py`: every group at once),
# `score_completions` on `rollout.completions`, `group_advantages`, `frozen_logps` and
# `reference_logps` (`lm_trainer.py`) for $\pi_{old}$ (only when `num_iterations > 1`) and
# $\pi_{ref}$, and `losses.grpo_loss` with
# `kl_k3` on the live log-probs.
