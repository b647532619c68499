# %% [raw]
# # ASSIGNMENT CONFIG
# name: 01_advantages
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 01 · Group-relative advantages
#
# **Goals** (about 25 minutes). Write GRPO's advantage yourself: the group baseline with the three
# ways TRL scales it, the leave-one-out (RLOO) baseline, and the zero-variance group. Then settle
# the question the course's seeds get wrong: which standard deviation?
#
# **Recap** (lesson: [notebook 01](../01_group_relative_advantage.ipynb)). For one prompt we sample
# a group of $G$ outputs with rewards $r_1, \dots, r_G$. Without a critic, the baseline is the
# group itself:
#
# $$A_i = r_i - \operatorname{mean}(r) \tag{1}$$
# $$A_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r) + \varepsilon} \tag{2}$$
# $$A_i = r_i - \frac{1}{G-1}\sum_{j \ne i} r_j \tag{3}$$
#
# (2) is GRPO (DeepSeekMath §4.1.2; DeepSeek-R1 eq. 3), (1) is Dr. GRPO's choice, (3) is RLOO.
# $\operatorname{std}$ is the **sample** (Bessel-corrected, $G-1$) standard deviation and
# $\varepsilon = 10^{-4}$, as in TRL.
#
# **How this lab works.** Each exercise asks for a function with the same name and signature as
# the package's, so you can compare with `grpo_minimal.advantages` afterwards (not before!).
# Replace each `...` with your code, run the cell, then run the check below it. A failed check
# names the case, the input, the expected value, what you returned and a hint. From a terminal,
# `grpo-minimal lab check notebooks/labs/01_advantages.ipynb` checks the whole notebook.
#
# **Grading** runs the same kinds of case as the checks below, with other values: rewards of
# other group sizes, other eps, other constant groups. If every check here passes and your
# function does not special-case the inputs it was shown, it earns full points.

# %%
import torch

from grpo_minimal.labs import advantages as checks

torch.manual_seed(0)

# %% [markdown]
# ## Exercise 1 · `group_advantages`
#
# Rewards arrive **flat**, `[B]`, with consecutive blocks of `num_generations` ($G$) outputs
# belonging to one prompt (TRL's order). Return one advantage per output, flat `[B]`:
#
# - `scale_rewards="group"`: equation (2) with each group's own std;
# - `scale_rewards="batch"`: centre by the group mean, divide by the std of **all** rewards in the batch (+ eps);
# - `scale_rewards="none"`: equation (1), centring only.
#
# A group whose rewards are all equal must get advantages 0, never NaN. Use the `eps` you are
# given. The rewards may be **integers** (an `int64` tensor, e.g. a count of passed tests): the
# advantages are floats all the same. You may assume the rewards are finite and that
# `len(rewards)` is a multiple of $G$.

# %% [raw]
# # BEGIN QUESTION
# name: group_advantages
# points: 4

# %% [raw]
# # BEGIN SOLUTION


# %%
def group_advantages(
    rewards: torch.Tensor,
    num_generations: int,
    scale_rewards: str = "group",
    eps: float = 1e-4,
) -> torch.Tensor:
    """Equations (1) and (2): flat rewards [B] -> flat advantages [B]."""
    # BEGIN SOLUTION
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_rewards == "group":
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale_rewards == "batch":
        centred = centred / (grouped.std() + eps)
    return centred.reshape(-1)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_group_public(group_advantages):
    from grpo_minimal.labs import advantages as checks

    checks.check_group_advantages(group_advantages)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 3
"""  # END TEST CONFIG


def test_group_hidden(group_advantages):
    from grpo_minimal.labs import advantages as checks

    checks.check_group_advantages(group_advantages, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Look at one group before moving on. If your function works, the correct outputs (reward 1) get
# a positive advantage and the rest a negative one, and the advantages of a group sum to 0.

# %%
example = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
result = group_advantages(example, 4)
print(result if result is not None else "group_advantages is not written yet")

# %% [markdown]
# ## Exercise 2 · `rloo_advantages`
#
# Equation (3): each reward minus the mean of the **other** $G-1$ rewards of its group. No scaling.
# As in exercise 1, the rewards may be an integer tensor; return floats.

# %% [raw]
# # BEGIN QUESTION
# name: rloo_advantages
# points: 2

# %% [raw]
# # BEGIN SOLUTION


# %%
def rloo_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Equation (3): reward minus the leave-one-out mean of its group."""
    # BEGIN SOLUTION
    grouped = rewards.float().view(-1, num_generations)
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (num_generations - 1)
    return (grouped - others).reshape(-1)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_rloo_public(rloo_advantages):
    from grpo_minimal.labs import advantages as checks

    checks.check_rloo_advantages(rloo_advantages)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_rloo_hidden(rloo_advantages):
    from grpo_minimal.labs import advantages as checks

    checks.check_rloo_advantages(rloo_advantages, seed=GRADER_SEED)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# **Think.** RLOO's advantage is exactly $G/(G-1)$ times the mean-centred one of equation (1).
# Show it on paper; then check it numerically with your two functions.
#
# ## Exercise 3 · Which standard deviation?
#
# One of the course's seed documents works the group `[1, 1, 0, 1]` (three correct answers out of
# four, "15 + 27") with a std of 0.43 and gives the correct answers an advantage of **+0.58** and
# the wrong one **-1.74**. Its own code (`rewards.std()`, the sample std) would give **+0.5** and
# **-1.5**, as TRL and this course do. Compute both with $\varepsilon = 10^{-4}$: the population
# std divides the squared deviations by $G$ (`unbiased=False`), the sample one by $G-1$.
# Each answer is **one float**: the advantage of one correct answer (reward 1), not the tensor of
# all four. Compute it (with torch or by hand), do not call the package.

# %% [raw]
# # BEGIN QUESTION
# name: which_std
# points: 2

# %% [raw]
# # BEGIN SOLUTION

# %%
seed_group = torch.tensor(checks.SEED_GROUP)
centred = seed_group - seed_group.mean()
advantage_population = (centred / (seed_group.std(unbiased=False) + 1e-4))[0].item()  # SOLUTION
advantage_sample = group_advantages(seed_group, 4)[0].item()  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_answers(advantage_population, advantage_sample):
    from grpo_minimal.labs import advantages as checks

    checks.check_std_question(advantage_population, advantage_sample)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The two differ by the factor $\sqrt{G/(G-1)} = \sqrt{4/3} \approx 1.155$ for every group of
# four. The direction of each update is the same; its size is not, and the gap is largest for
# small groups. When you compare numbers with a paper or a blog post, ask which std it used.
#
# **Afterwards.** Read `grpo_minimal/advantages.py` and compare: the package also treats NaN
# rewards (outputs no reward function could score) and raises a clear error on bad input.
