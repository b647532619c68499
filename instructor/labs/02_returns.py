# %% [raw]
# # ASSIGNMENT CONFIG
# name: 02_returns
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 02 · Returns
#
# **Goals** (about 25 minutes). Write the discounted returns-to-go that GRPO on CartPole turns
# its per-step rewards into, for a padded batch of episodes of different lengths (about 12
# minutes). Then work out what they are for a CartPole episode cut by the 500-step time limit
# (about 5 minutes), and what that cut costs, here and in PPO, which treats it differently
# (about 8 minutes).
#
# **Recap** (lesson: [notebook 02](../02_cartpole_grpo.ipynb), section 2). An action is credited
# with the rewards that follow it, each discounted by $\gamma \in (0, 1]$ per step of delay:
#
# $$R_t = r_t + \gamma R_{t+1}, \qquad R_T = r_T \tag{4}$$
#
# for an episode whose last step is $T$. Episodes in a batch have different lengths, so the
# rewards are a tensor `[episodes, T_max]` padded after each episode's end, with a **mask**
# $m_t$ that is 1 on real steps and 0 on padding. With the mask, (4) for every row at once is
#
# $$R_t = m_t\,\big(r_t + \gamma R_{t+1}\big), \qquad R_{T_\text{max}} = 0 \tag{4'}$$
#
# computed backwards from the last column: a padded step gets return 0, whatever reward the
# padding holds, so nothing after an episode's end reaches the steps before it.
#
# An episode ends in one of two ways (gymnasium's `step` returns both flags): **terminated**,
# the pole fell (or the cart left the track) and no reward can follow; or **truncated**, the
# `TimeLimit` wrapper cut it at 500 steps, and it would have gone on. GRPO's `run_episodes`
# stops an episode at either and records which in `EpisodeBatch.terminated`, but
# `discounted_returns` receives only the mask: both kinds simply end, since without a critic
# there is no value to bootstrap from (notebook 02, section 1). PPO
# ([notebook 03](../03_ppo_vs_grpo.ipynb), section 2) does tell them apart.
#
# **How this lab works.** Each exercise asks for a function with the same name and signature as
# the package's, so you can compare with `grpo_minimal.advantages` afterwards (not before!).
# Replace each `...` with your code, run the cell, then run the check below it. A failed check
# names the case, the input, the expected value, what you returned and a hint. From a terminal,
# `grpo-minimal lab check notebooks/labs/02_returns.ipynb` checks the whole notebook.
#
# **Grading** runs the same kinds of case as the checks below, with other values: other batch
# sizes and episode lengths, other discounts, other rewards (integer ones too). If every check
# here passes and your function does not special-case the inputs it was shown, it earns full
# points.

# %%
import torch

from grpo_minimal.labs import returns as checks

torch.manual_seed(0)

# %% [markdown]
# ## Exercise 1 · `discounted_returns`
#
# `rewards` and `mask` are tensors of the same shape `[episodes, T_max]`; `mask` is 1 on the
# first steps of each row (the episode) and 0 on the padding after it. Return the returns-to-go
# (4'), a **float** tensor `[episodes, T_max]`, with 0 on padding. Each row is its own episode.
#
# The rewards may be float32, float64 or **integers** (an `int64` tensor, e.g. +1 per step as
# a count); the returns are floats all the same: with $\gamma = 0.5$, integer rewards `[1, 1]`
# have returns `[1.5, 1.0]`. A result made with `torch.zeros_like(rewards)` has the rewards'
# dtype, so for integer rewards it would be an integer tensor: create it as a float tensor.
#
# - Go **backwards** in time: $R_t$ needs $R_{t+1}$. A loop over the $T_\text{max}$ columns,
#   each step handling all rows at once, is fine.
# - $\gamma$ multiplies the **next** return, not the current reward: at an episode's last
#   step the return is that step's reward.
# - The padding may hold non-zero rewards: use the mask, do not trust the padding to be 0.
# - Do not change `rewards` or `mask` in place (`rewards *= mask` edits the caller's tensor).
#
# You may assume $0 < \gamma \le 1$ and that every row's mask is some 1s followed by 0s.

# %% [raw]
# # BEGIN QUESTION
# name: discounted_returns
# points: 4

# %% [raw]
# # BEGIN SOLUTION


# %%
def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """Equation (4'): returns-to-go [episodes, T_max] of padded episodes, 0 on padding."""
    # BEGIN SOLUTION
    rewards = rewards * mask
    returns = torch.zeros(rewards.shape, dtype=torch.float32)
    running = torch.zeros(rewards.shape[0], dtype=torch.float32)
    for t in reversed(range(rewards.shape[1])):
        running = mask[:, t] * (rewards[:, t] + gamma * running)
        returns[:, t] = running
    return returns
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_returns_public(discounted_returns):
    from grpo_minimal.labs import returns as checks

    checks.check_discounted_returns(discounted_returns)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 2
"""  # END TEST CONFIG


def test_returns_hidden(discounted_returns):
    from grpo_minimal.labs import returns as checks

    checks.check_discounted_returns(discounted_returns, seed=GRADER_SEED)  # noqa: F821


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Look at a padded batch before moving on: three episodes of 6, 4 and 2 steps, +1 per step as
# in CartPole, $\gamma = 0.9$. If your function works, every episode's last real step has return
# 1, the padding 0, and the first step of the longest episode $1 + 0.9 + \dots + 0.9^5 = 4.69$.

# %%
lengths = torch.tensor([6, 4, 2])
example_mask = (torch.arange(6) < lengths.unsqueeze(1)).float()
result = discounted_returns(torch.ones(3, 6), example_mask, 0.9)
print(result if result is not None else "discounted_returns is not written yet")

# %% [markdown]
# **Think.** The longer an episode, the larger its early returns: $R_0$ of the six-step episode
# is 4.69, of the two-step one 1.9. Notebook 02 (section 3) compares returns within a group
# *at the same step $t$* (`advantage="per_step"`); why would comparing $R_0$ of one episode with
# $R_5$ of another say little about the actions?
#
# ## Exercise 2 · A CartPole episode that reached the time limit
#
# A good policy keeps the pole up until gymnasium's `TimeLimit` truncates the episode at 500
# steps: 500 rewards of +1, mask all 1. With the course's default $\gamma = 0.99$
# (`CartPoleConfig().gamma`), what returns does `discounted_returns` give its first step
# ($R_0$) and its last ($R_{499}$)? Write numbers (floats). $R_0$ is a geometric series with a
# closed form; your function from exercise 1 computes the same.

# %%
gamma = checks.GAMMA  # 0.99, CartPoleConfig().gamma

# %% [raw]
# # BEGIN QUESTION
# name: truncated_episode
# points: 1

# %% [raw]
# # BEGIN SOLUTION

# %%
return_first = (1 - gamma**500) / (1 - gamma)  # SOLUTION
return_last = 1.0  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_truncated_episode(return_first, return_last):
    from grpo_minimal.labs import returns as checks

    checks.check_truncated_episode(return_first, return_last)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Compare with your function (it computes in float32, so expect agreement to about 4 decimals):

# %%
long_episode = discounted_returns(torch.ones(1, 500), torch.ones(1, 500), gamma)
if long_episode is not None:
    print(f"R_0 = {long_episode[0, 0].item():.4f}, R_499 = {long_episode[0, -1].item():.4f}")

# %% [markdown]
# ## Exercise 3 · What the cut costs, and what PPO does instead
#
# Had the time limit not cut the episode of exercise 2, suppose the policy would have kept the
# pole up forever, +1 per step. Its return-to-go from any step would then be
# $1 + \gamma + \gamma^2 + \dots = 1/(1-\gamma) = 100$. Under the package's convention, a
# truncated episode's returns count only the rewards up to the cut.
#
# 1. `shortfall_first`: how much lower than 100 is the package's $R_0$?
# 2. `shortfall_last`: how much lower than 100 is the package's $R_{499}$?
# 3. `ppo_target_last`: PPO bootstraps a truncated step from its critic. Its TD error (10) is
#    $\delta_t = r_t + \gamma\,(1 - \mathrm{term}_t)\,V(s_{t+1}) - V(s_t)$, where
#    $\mathrm{term}_t = 1$ only if the episode terminated at $t$, and $s_{t+1}$ at the last
#    step is the state the episode was cut at. If the critic says $V(s_\text{final}) = 100$,
#    what is the target $r_{499} + \gamma\,(1 - \mathrm{term}_{499})\,V(s_\text{final})$?
#
# Write numbers (floats).

# %% [raw]
# # BEGIN QUESTION
# name: truncation_cost
# points: 2

# %% [raw]
# # BEGIN SOLUTION

# %%
shortfall_first = 1 / (1 - gamma) - return_first  # SOLUTION
shortfall_last = 1 / (1 - gamma) - return_last  # SOLUTION
ppo_target_last = 1.0 + gamma * (1 - 0) * 100.0  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_truncation_cost(shortfall_first, shortfall_last, ppo_target_last):
    from grpo_minimal.labs import returns as checks

    checks.check_truncation_cost(shortfall_first, shortfall_last, ppo_target_last)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The shortfall at step $t$ is $\gamma^{500-t}/(1-\gamma)$: about 0.66 at the start, 99 at the
# end. So the cut barely touches the early returns and wipes out the late ones, although the
# states near step 500 need not be worse than earlier ones: CartPole's observation (cart
# position and velocity, pole angle and angular velocity) does not include the time, so the
# policy cannot see the limit coming. If a step were treated as terminated
# ($\mathrm{term} = 1$), PPO's target would be $r = 1$, like GRPO's $R_{499}$, pulling its
# critic's value of that state toward 1; keeping $V(s_\text{final})$ gives 100, what the uncut
# episode would have earned. GRPO has no $V$: the package ends truncated episodes like
# terminated ones, and relies on every episode of a group facing the same limit (the docstring
# of `grpo_minimal/gym_grpo.py`). The trainer logs how often the limit is hit: `frac_truncated`.
#
# **Afterwards.** Read `discounted_returns` in `grpo_minimal/advantages.py` and compare: the
# package also refuses a $\gamma$ outside $(0, 1]$ and a mask whose shape differs from the
# rewards', with a clear `ValueError`. Then `gae` in `grpo_minimal/ppo.py`: the same backward
# loop, with `terminated` and `dones` kept apart.
