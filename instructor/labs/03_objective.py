# %% [raw]
# # ASSIGNMENT CONFIG
# name: 03_objective
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 03 · The objective
#
# **Goals** (about 40 minutes). Write the three pieces of GRPO's loss that sit between the
# log-probabilities and `loss.backward()`: the clipped surrogate with clip-higher (about 10
# minutes), the $k_3$ KL estimator (5), and the four ways TRL averages per-token losses into one
# number (12). Then answer two questions with what the package's own code gives: where the clip
# switches the gradient off (5), and which KL estimator, used as a loss, follows the gradient of
# the reverse KL (8).
#
# **Recap** (lesson: [notebook 04](../04_clipping_and_kl.ipynb); the equation numbers are the
# lesson's and those of `grpo_minimal/losses.py`). For token $t$ of output $i$, with the
# log-probabilities of the policy being trained ($\log\pi_\theta$), of the policy that sampled
# the data ($\log\pi_{old}$) and of the reference ($\log\pi_{ref}$), and the output's advantage
# $A_i$:
#
# $$\rho = \exp(\log \pi_\theta - \log \pi_{old}) \tag{5}$$
# $$L^{clip} = \min\big(\rho A,\ \operatorname{clip}(\rho, 1 - \varepsilon_{low}, 1 + \varepsilon_{high})\,A\big) \tag{6}$$
# $$k_1 = -x, \qquad k_2 = \tfrac{1}{2}x^2, \qquad k_3 = e^{x} - x - 1, \qquad x = \log \pi_{ref} - \log \pi_\theta \tag{7}$$
# $$\ell_{i,t} = -L^{clip}_{i,t} + \beta\,k_{3,i,t} \tag{8}$$
#
# and, with the completion mask $m_{i,t}$ (1 on the output's tokens, 0 on padding), $B$ outputs
# in the batch and $|o_i| = \sum_t m_{i,t}$ tokens in output $i$, the four `loss_type`s of (9):
#
# $$\begin{aligned}
# \mathtt{grpo}&: \frac{1}{B}\sum_i \frac{\sum_t m_{i,t}\,\ell_{i,t}}{\max(|o_i|, 1)} &
# \mathtt{bnpo}&: \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{\max(\sum_i |o_i|, 1)} \\
# \mathtt{dr\_grpo}&: \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{B \cdot L_{max}} &
# \mathtt{dapo}&: \frac{\sum_{i,t} m_{i,t}\,\ell_{i,t}}{\max(N_{global}, 1)}
# \end{aligned} \tag{9}$$
#
# Where they come from. (6) is PPO's clipped surrogate inside GRPO's objective (DeepSeekMath,
# Shao et al. 2024, eq. (3)); letting $\varepsilon_{high}$ exceed $\varepsilon_{low}$ is DAPO's
# "clip-higher" (Yu et al. 2025, §3.1; $\varepsilon_{high} = 0.28$ there). The estimators (7)
# are those of Schulman's "Approximating KL divergence" (2020); DeepSeekMath uses $k_3$
# (eq. (4) of the paper). In (9), `grpo` is the normalisation of DeepSeekMath's eq. (3) over a
# group of $G$ outputs, $\frac{1}{G}\sum_i \frac{1}{|o_i|}\sum_t$; `bnpo` and `dapo` are token
# means, as in DAPO's token-level loss (§3.3): `bnpo` counts the tokens of this batch, `dapo`
# those of the whole (global) batch, `num_items_in_batch` ($N_{global}$), and is `bnpo` when that
# is not given.
# Dr. GRPO (Liu et al. 2025, arXiv:2503.20783) points at the $1/|o_i|$ of eq. (3) as a
# source of length bias; TRL's `dr_grpo` divides by a constant instead, $B \cdot L_{max}$ with
# $L_{max}$ = `max_completion_length` (`aggregate_loss` takes the padded width of the batch when
# it is not given).
#
# **How this lab works.** Each exercise asks for a function with the same name and signature as
# the package's, so you can compare with `grpo_minimal.losses` afterwards (not before!). Replace
# each `...` with your code, run the cell, then run the check below it. A failed check names the
# case, the input, the expected value, what you returned and a hint. From a terminal,
# `grpo-minimal lab check notebooks/labs/03_objective.ipynb` checks the whole notebook.
#
# **Grading** runs the same kinds of case as the checks below, with other values: other ratios,
# advantages, epsilons, log-probs, batch sizes and masks. If every check here passes and your
# function does not special-case the inputs it was shown, it earns full points.
#
# *Aside.* The lesson's interactive views of (6) and (7), `clipping_explorer()` and
# `kl_explorer()` from `grpo_minimal.course.widgets`, work here too (in a running kernel): put
# one in a spare cell if a picture helps.

# %%
import torch

from grpo_minimal.labs import objective as checks
from grpo_minimal.losses import categorical_kl, expected_kl_loss_gradient, grpo_loss, policy_ratio

torch.manual_seed(0)

# %% [markdown]
# ## Exercise 1 · `clipped_surrogate`
#
# Equation (6), token by token. `ratio` is $\rho$, already computed by (5) (for example by
# `policy_ratio(logps, old_logps)`); `advantages` broadcasts against it: the same shape, or
# `[batch, 1]` for one advantage per output. `epsilon` is $\varepsilon_{low}$, `epsilon_high` is
# $\varepsilon_{high}$, and `epsilon_high=None` means $\varepsilon_{high} = \varepsilon_{low}$.
# Return $L^{clip}$ with the ratio's shape: the **objective**, to be maximised (the loss (8)
# negates it, as `grpo_loss` does).
#
# Build it from torch operations on `ratio` (`torch.clamp`, `torch.min`, ...): the check also
# compares the gradient $\partial L^{clip} / \partial \rho$ with the package's, and that gradient
# is the point of the clip. The checks include ratios far from 1 ($10^{-4}$ to $10^4$), float64
# inputs, $\varepsilon = 0$ and an `epsilon_high` smaller than `epsilon` (the bounds are still
# $1 - \varepsilon_{low}$ and $1 + \varepsilon_{high}$).

# %% [raw]
# # BEGIN QUESTION
# name: clipped_surrogate
# points: 3

# %% [raw]
# # BEGIN SOLUTION


# %%
def clipped_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    epsilon: float,
    epsilon_high: float | None = None,
) -> torch.Tensor:
    """Equation (6), per token: the clipped surrogate objective (to be maximised)."""
    # BEGIN SOLUTION
    high = epsilon if epsilon_high is None else epsilon_high
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + high)
    return torch.min(ratio * advantages, clipped * advantages)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_clip_public(clipped_surrogate):
    from grpo_minimal.labs import objective as checks

    checks.check_clipped_surrogate(clipped_surrogate)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 2
"""  # END TEST CONFIG


def test_clip_hidden(clipped_surrogate):
    from grpo_minimal.labs import objective as checks

    checks.check_clipped_surrogate(clipped_surrogate, seed=GRADER_SEED)  # noqa: F821


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The lesson's five tokens, with the slope autograd finds through your function. Where the slope
# is 0, this token no longer pushes the policy in this round.

# %%
ratio = torch.tensor([1.5, 0.5, 0.5, 1.5, 1.1], requires_grad=True)
advantage = torch.tensor([1.0, 1.0, -1.0, -1.0, 1.0])
objective = clipped_surrogate(ratio, advantage, 0.2)
if objective is None:
    print("clipped_surrogate is not written yet")
else:
    (slope,) = torch.autograd.grad(objective.sum(), ratio)
    rows = zip(ratio.tolist(), advantage.tolist(), objective.tolist(), slope.tolist(), strict=True)
    for rho, a, value, s in rows:
        print(f"ratio {rho:.1f}  A {a:+.0f}   L_clip {value:+.2f}   dL/dratio {s:+.0f}")

# %% [markdown]
# ## Exercise 2 · `kl_k3`
#
# Equation (7): $k_3 = e^{x} - x - 1$ with $x = \log \pi_{ref} - \log \pi_\theta$, per token.
# The first argument is the policy's log-probs, the second the reference's; return a tensor of
# their shape (float32 or float64).
#
# **Stay in log space**: compute $x$ from the log-probs, then $e^x - x - 1$ with that $x$. A token
# the reference finds very unlikely can have a log-prob of $-120$ under it, and `exp(-120)` is 0
# in float32: a ratio of probabilities, `exp(ref_logps) / exp(logps)`, is then 0 / 0 = NaN (or 0,
# whose log is $-\infty$), and so is `log(exp(x))` for $x = -119.5$. The checks include tokens
# with log-probs below $-110$ under both models, and log-ratios $x$ below $-100$, where
# $k_3 \approx -x - 1$.

# %% [raw]
# # BEGIN QUESTION
# name: kl_k3
# points: 2

# %% [raw]
# # BEGIN SOLUTION


# %%
def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Equation (7): k3 = exp(x) - x - 1 with x = log pi_ref - log pi, per token."""
    # BEGIN SOLUTION
    x = ref_logps - logps
    return torch.exp(x) - x - 1.0
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_kl_public(kl_k3):
    from grpo_minimal.labs import objective as checks

    checks.check_kl_k3(kl_k3)


# %%
""" # BEGIN TEST CONFIG
hidden: true
"""  # END TEST CONFIG


def test_kl_hidden(kl_k3):
    from grpo_minimal.labs import objective as checks

    checks.check_kl_k3(kl_k3, seed=GRADER_SEED)  # noqa: F821


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# $k_3$ is unbiased: its mean under $\pi_\theta$ is exactly $\mathrm{KL}(\pi_\theta \| \pi_{ref})$,
# because $\mathbb{E}_{\pi_\theta}[e^x] = \sum_a \pi_{ref}(a) = 1$. Check it on the lesson's
# policy and reference over five outcomes (both are used again in question 2), summing over every
# outcome weighted by $\pi_\theta$:

# %%
policy_logits = torch.tensor(checks.POLICY_LOGITS, dtype=torch.float64)
ref_logits = torch.tensor(checks.REF_LOGITS, dtype=torch.float64)
log_pi, log_ref = torch.log_softmax(policy_logits, -1), torch.log_softmax(ref_logits, -1)
k3 = kl_k3(log_pi, log_ref)
if k3 is None:
    print("kl_k3 is not written yet")
else:
    print(f"E_pi[k3]            = {(log_pi.exp() * k3).sum().item():.10f}")
    print(f"exact KL(pi || ref) = {categorical_kl(policy_logits, ref_logits).item():.10f}")

# %% [markdown]
# ## Exercise 3 · `aggregate_loss`
#
# Equation (9): average a per-token loss `[batch, tokens]` into one number, as TRL's `loss_type`
# does. `mask` is the completion mask (1 on an output's tokens, 0 on padding; it may be float,
# int or bool); masked tokens never count, whatever their loss.
#
# - `"grpo"`: each sequence's mean over its own tokens, then the mean over the $B$ sequences. A
#   sequence with no tokens contributes 0 and still counts in $B$: clamp each token count to at
#   least 1 (`.clamp(min=1.0)`, as TRL does).
# - `"bnpo"`: the sum over all tokens of the batch divided by their number (clamped to at
#   least 1).
# - `"dr_grpo"`: the sum over all tokens divided by `batch * max_completion_length`;
#   `max_completion_length=None` means the width of the tensor, `per_token_loss.shape[-1]`.
# - `"dapo"`: the sum over all tokens divided by `num_items_in_batch` (clamped to at least 1);
#   `None` means the number of tokens in this batch.
#
# Return a 0-dim tensor (a loss you can call `.backward()` on). Any other `loss_type` raises
# `ValueError`.
#
# The checks include an **empty completion** (a mask row of 0s: an output with no tokens) and a
# batch with **no tokens at all**: the loss is then a number, never NaN, for every `loss_type`;
# that is what the clamps above are for. The losses may be float32 or float64.

# %% [raw]
# # BEGIN QUESTION
# name: aggregate_loss
# points: 4

# %% [raw]
# # BEGIN SOLUTION


# %%
def aggregate_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | None = None,
) -> torch.Tensor:
    """Equation (9): a [batch, tokens] loss -> a scalar, as TRL's loss_type defines it."""
    # BEGIN SOLUTION
    if loss_type not in ("grpo", "bnpo", "dr_grpo", "dapo"):
        raise ValueError(f"unknown loss_type {loss_type!r}")
    mask = mask.to(per_token_loss.dtype)
    total = (per_token_loss * mask).sum()
    if loss_type == "grpo":
        per_sequence = (per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_sequence.mean()
    if loss_type == "bnpo":
        return total / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        width = per_token_loss.shape[-1]
        length = width if max_completion_length is None else max_completion_length
        return total / (per_token_loss.shape[0] * length)
    if num_items_in_batch is None:
        return total / mask.sum().clamp(min=1.0)
    return total / max(float(num_items_in_batch), 1.0)
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_aggregate_public(aggregate_loss):
    from grpo_minimal.labs import objective as checks

    checks.check_aggregate_loss(aggregate_loss)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 3
"""  # END TEST CONFIG


def test_aggregate_hidden(aggregate_loss):
    from grpo_minimal.labs import objective as checks

    checks.check_aggregate_loss(aggregate_loss, seed=GRADER_SEED)  # noqa: F821


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Put the three together: equation (8) per token, then (9), and compare with the package's
# `grpo_loss` on two outputs of different lengths (one update after sampling, so $\rho \ne 1$).
# Equal numbers on every line mean your pieces make GRPO's loss.

# %%
logps = torch.log(torch.tensor([[0.30, 0.10, 0.50, 0.20], [0.60, 0.05, 0.40, 0.90]]))
old_logps = torch.log(torch.tensor([[0.20, 0.10, 0.45, 0.25], [0.50, 0.10, 0.40, 0.90]]))
ref_logps = torch.log(torch.tensor([[0.25, 0.20, 0.50, 0.30], [0.40, 0.10, 0.50, 0.80]]))
advantages = torch.tensor([1.0, -1.0])
completion_mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
beta = 0.04

surrogate = clipped_surrogate(
    policy_ratio(logps, old_logps), advantages.unsqueeze(-1), 0.2, epsilon_high=0.28
)
kl = kl_k3(logps, ref_logps)
if surrogate is None or kl is None:
    print("write clipped_surrogate and kl_k3 first")
else:
    per_token_loss = -surrogate + beta * kl
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        mine = aggregate_loss(per_token_loss, completion_mask, loss_type)
        reference, _ = grpo_loss(
            logps,
            old_logps,
            ref_logps,
            advantages,
            completion_mask,
            beta=beta,
            epsilon=0.2,
            epsilon_high=0.28,
            loss_type=loss_type,
        )
        yours = "not written yet" if mine is None else f"{float(mine):+.6f}"
        print(f"{loss_type:8s} yours {yours:>16s}   grpo_loss {reference.item():+.6f}")

# %% [markdown]
# **Think.** Why do `grpo` and `bnpo` differ here? Under `grpo` each token of the 2-token output
# weighs $\frac{1}{2} \cdot \frac{1}{2}$ and each token of the 3-token one
# $\frac{1}{2} \cdot \frac{1}{3}$; under `bnpo` every token weighs $\frac{1}{5}$. Which of the
# two gives a long output a larger share of the update?
#
# ## Question 1 · Where is the gradient zero?
#
# The cell below scans $\rho$ from 0 to 3 in steps of 0.001 and returns the ratios where the slope
# of **your** `clipped_surrogate` is exactly 0, for one advantage. Use it (or reason from (6)) to
# answer, as floats:
#
# - `ratio_zero_grad_positive`: $A > 0$, $\varepsilon = 0.2$ (`epsilon_high=None`): above which
#   ratio is the gradient zero?
# - `ratio_zero_grad_negative`: $A < 0$, $\varepsilon = 0.2$: below which ratio is it zero?
# - `ratio_zero_grad_clip_higher`: $A > 0$, $\varepsilon = 0.2$, $\varepsilon_{high} = 0.28$:
#   above which ratio?


# %%
def zero_gradient_ratios(advantage, epsilon, epsilon_high=None):
    """The ratios in [0, 3] (step 0.001) where your clipped_surrogate has slope 0."""
    rho = torch.linspace(0.0, 3.0, 3001, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(advantage, dtype=torch.float64)
    objective = clipped_surrogate(rho, a, epsilon, epsilon_high)
    if objective is None:
        return None
    (slope,) = torch.autograd.grad(objective.sum(), rho)
    return rho.detach()[slope == 0]


flat = zero_gradient_ratios(+2.0, 0.1)
if flat is None:
    print("clipped_surrogate is not written yet")
else:
    print(f"A = +2, epsilon = 0.1: slope 0 at {len(flat)} of 3001 ratios: {flat.tolist()[:3]} ...")

# %% [raw]
# # BEGIN QUESTION
# name: clip_gradient_question
# points: 2

# %% [raw]
# # BEGIN SOLUTION

# %%
ratio_zero_grad_positive = zero_gradient_ratios(+1.0, 0.2).min().item()  # SOLUTION
ratio_zero_grad_negative = zero_gradient_ratios(-1.0, 0.2).max().item()  # SOLUTION
ratio_zero_grad_clip_higher = zero_gradient_ratios(+1.0, 0.2, 0.28).min().item()  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_clip_answers(
    ratio_zero_grad_positive, ratio_zero_grad_negative, ratio_zero_grad_clip_higher
):
    from grpo_minimal.labs import objective as checks

    checks.check_clip_question(
        ratio_zero_grad_positive, ratio_zero_grad_negative, ratio_zero_grad_clip_higher
    )


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# The zero-gradient side is always the side the advantage wants to move towards; a token moved the
# wrong way (a good one made less likely, a bad one more likely) is never clipped. Clip-higher
# moves only the upper edge: for $A < 0$ the answer is still $1 - \varepsilon$.
#
# ## Question 2 · Which KL estimator, used as a loss, follows the reverse KL?
#
# In training, an estimator (7) is a **loss**: autograd differentiates it on the sampled tokens,
# which are held fixed. The expected gradient over samples $x \sim \pi_\theta$ is
#
# $$\mathbb{E}_{x\sim\pi_\theta}\big[\nabla_\theta k(x)\big] = \sum_x \operatorname{sg}[\pi_\theta(x)]\,\nabla_\theta k(x) \tag{20}$$
#
# (sg: stop-gradient), and the package computes it exactly for a categorical policy:
# `expected_kl_loss_gradient(policy_logits, ref_logits, name)` with `name` one of `"k1"`, `"k2"`,
# `"k3"` (each used on its own, without the ratio). The cell below computes the gradient of the
# exact reverse KL, $\nabla\,\mathrm{KL}(\pi_\theta \| \pi_{ref})$, with respect to the policy
# logits. Compare, then answer with a string, `"k1"`, `"k2"` or `"k3"`:
#
# - `reverse_kl_estimator`: the estimator whose expected gradient (20) equals
#   $\nabla\,\mathrm{KL}(\pi_\theta \| \pi_{ref})$;
# - `zero_gradient_estimator`: the one whose expected gradient is 0.

# %%
logits = policy_logits.clone().requires_grad_(True)
(reverse,) = torch.autograd.grad(categorical_kl(logits, ref_logits), logits)
print("grad KL(pi || pi_ref) =", [round(g, 4) for g in reverse.tolist()])

# %% [raw]
# # BEGIN QUESTION
# name: kl_loss_question
# points: 2

# %% [raw]
# # BEGIN SOLUTION

# %%
# for each name in ("k1", "k2", "k3"): expected_kl_loss_gradient(policy_logits, ref_logits, name)
# BEGIN SOLUTION
for name in ("k1", "k2", "k3"):
    gradient = expected_kl_loss_gradient(policy_logits, ref_logits, name)
    print(
        f"{name}: |E[grad] - grad KL(pi || ref)| = {(gradient - reverse).norm().item():.1e}"
        f"   |E[grad]| = {gradient.norm().item():.1e}"
    )
# END SOLUTION
reverse_kl_estimator = "k2"  # SOLUTION
zero_gradient_estimator = "k1"  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_kl_answers(reverse_kl_estimator, zero_gradient_estimator):
    from grpo_minimal.labs import objective as checks

    checks.check_kl_loss_question(reverse_kl_estimator, zero_gradient_estimator)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# So the estimator whose **value** GRPO logs, $k_3$ (unbiased for $\mathrm{KL}(\pi_\theta \|
# \pi_{ref})$, as the cell after exercise 2 showed), is not the one whose **gradient** follows
# that KL: used as a loss on its own, $k_3$ follows the forward $\mathrm{KL}(\pi_{ref} \|
# \pi_\theta)$ (lesson, equation (21)). Autograd on fixed samples differentiates the estimator
# only, not the sampling distribution, which also depends on $\theta$. `grpo_loss` adds
# $\beta k_3$ without the ratio by default (`use_bias_correction_kl=False`), as DeepSeekMath's
# eq. (3) does; `use_bias_correction_kl=True` (TRL 1.16's default) multiplies it by the ratio, and
# $\rho\,k_3$ follows the reverse KL again: try
# `expected_kl_loss_gradient(policy_logits, ref_logits, "k3", use_bias_correction_kl=True)`.
#
# **Afterwards.** Read `grpo_minimal/losses.py` and compare: `grpo_loss` puts (5)-(9) together,
# treats `old_logps=None` as on-policy ($\rho = 1$ in value, not in gradient) and returns the clip
# fractions (`clipped_tokens`) that a training log shows.
