"""Lab 05: the fixed trainer passes, each seed bug fails its check, other wrong fixes fail too.

The wrong variants call the other exercises by their plain names (``sample_group``, ...), as a
learner's notebook function does; the checks bind those names to the reference trainer, so each
variant is judged on its own mistake.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest
import torch
from lab_helpers import (
    GRADER_SEEDS,
    assert_caught_publicly,
    assert_fails,
    assert_passes,
    assert_same_verdict,
    assert_told,
)

from grpo_minimal import advantages as package
from grpo_minimal import losses
from grpo_minimal.labs import bugs as checks
from grpo_minimal.labs.bugs import (
    REFERENCE_TRAINER,
    SEED_TRAINER,
    Rollout,
    group_advantages,
    kl_penalty,
    sample_group,
)

SOURCE = Path(__file__).resolve().parent.parent / "instructor" / "labs" / "05_find_the_bugs.py"

CHECKS = {
    "sample_group": checks.check_sample_group,
    "make_rollout": checks.check_make_rollout,
    "group_advantages": checks.check_group_advantages,
    "kl_penalty": checks.check_kl_penalty,
    "grpo_update": checks.check_grpo_update,
}


# --- the reference, and the seeds' versions --------------------------------------------------


@pytest.mark.parametrize("name", checks.EXERCISES)
def test_reference_passes(name):
    assert_passes(CHECKS[name], REFERENCE_TRAINER[name])


@pytest.mark.parametrize("name", checks.EXERCISES)
def test_seed_bug_is_caught_by_lab_check(name):
    """The notebook's starting code fails its public check, and grading with any seed."""
    assert_caught_publicly(CHECKS[name], SEED_TRAINER[name])


SEED_FEEDBACK = {
    "sample_group": ("one generate call for the whole batch", "got:      8", "seed 000 lines 279"),
    "make_rollout": ("completions are the scored ones", "'generate calls': 2", "line 102"),
    "group_advantages": ("the seed's group", "0.577217", "0.43"),
    "kl_penalty": ("the KL term has a gradient", "0.0, 0.0, 0.0", "seed 002 line 51"),
    "grpo_update": ("the first update is on-policy", "[8.94", "lines 107-110"),
}


@pytest.mark.parametrize("name", checks.EXERCISES)
def test_seed_bug_feedback_names_the_case(name):
    message = assert_fails(CHECKS[name], SEED_TRAINER[name])
    for text in SEED_FEEDBACK[name]:
        assert text in message, f"{text!r} not in\n{message}"


@pytest.mark.parametrize("name", checks.EXERCISES)
def test_undefined_function_gets_clear_feedback(name):
    message = assert_fails(CHECKS[name], None)
    assert f"define `{name}`" in message


def _cells(source: str) -> list[str]:
    return re.split(r"^# %%.*$", source, flags=re.MULTILINE)


def _prompt_functions() -> dict[str, ast.FunctionDef]:
    """The functions between the raw cells ``# BEGIN PROMPT`` and ``# END PROMPT``."""
    functions, inside = {}, False
    for cell in _cells(SOURCE.read_text()):
        if "# # BEGIN PROMPT" in cell:
            inside = True
        elif "# # END PROMPT" in cell:
            inside = False
        elif inside and cell.strip():
            (node,) = ast.parse(cell).body
            functions[node.name] = node
    return functions


@pytest.mark.parametrize("name", checks.EXERCISES)
def test_notebook_starting_code_is_the_seed_trainer(name):
    """What the learner starts from is what these tests call the seed's bug (as code: the
    comparison ignores formatting, comments and the ``@staticmethod`` decorator)."""
    notebook = _prompt_functions()[name]
    (seed,) = ast.parse(textwrap.dedent(inspect.getsource(SEED_TRAINER[name]))).body
    seed.decorator_list = []
    assert ast.dump(notebook) == ast.dump(seed)


# --- exercise 1: sample_group -----------------------------------------------------------------


def sample_per_prompt(policy, prompts, num_generations):
    """Loops over prompts only (seed 003 lines 60-61, seed 000 345-347): P calls."""
    return torch.cat(
        [policy.generate(p.view(1), num_return_sequences=num_generations) for p in prompts]
    )


def sample_g_calls(policy, prompts, num_generations):
    """Loops over the group only: G calls of the whole batch, rows interleaved."""
    return torch.cat(
        [policy.generate(prompts, num_return_sequences=1) for _ in range(num_generations)]
    )


def sample_repeat(policy, prompts, num_generations):
    """One call, but ``repeat`` interleaves the prompts: row i answers prompt i % P."""
    return policy.generate(prompts.repeat(num_generations), num_return_sequences=1)


def sample_twice(policy, prompts, num_generations):
    """One batched call, then a second one whose samples are returned."""
    policy.generate(prompts, num_return_sequences=num_generations)
    return policy.generate(prompts, num_return_sequences=num_generations)


def sample_repeat_interleave(policy, prompts, num_generations):
    """A correct alternative: the prompts in blocks, one call."""
    return policy.generate(prompts.repeat_interleave(num_generations), num_return_sequences=1)


SAMPLE_WRONG = [sample_per_prompt, sample_g_calls, sample_repeat, sample_twice]


@pytest.mark.parametrize("fn", SAMPLE_WRONG, ids=lambda f: f.__name__)
def test_sample_group_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_sample_group, fn)


def test_sample_group_feedback():
    assert "got:      2" in assert_fails(checks.check_sample_group, sample_per_prompt)
    assert "got:      4" in assert_fails(checks.check_sample_group, sample_g_calls)
    assert "answers prompt i // G" in assert_fails(checks.check_sample_group, sample_repeat)
    assert "got:      2" in assert_fails(checks.check_sample_group, sample_twice)


def test_sample_group_alternative_passes():
    assert_passes(checks.check_sample_group, sample_repeat_interleave)


def test_time_sample_group_reports_calls():
    report = checks.time_sample_group(sample_group, num_prompts=2, num_generations=3, repeats=1)
    assert "1 generate call(s)" in report and "6 generate call(s)" in report


# --- exercise 2: make_rollout -----------------------------------------------------------------


def rollout_rescored_stale_advantages(policy, prompts, reward_fn, num_generations):
    """Samples again and scores the new batch, but keeps the first batch's advantages."""
    completions = sample_group(policy, prompts, num_generations)
    advantages = group_advantages(reward_fn(prompts, completions), num_generations)
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    return Rollout(prompts, completions, rewards, advantages)


def rollout_sampled_twice(policy, prompts, reward_fn, num_generations):
    """Consistent, but samples twice: the first batch is wasted."""
    sample_group(policy, prompts, num_generations)
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    return Rollout(prompts, completions, rewards, group_advantages(rewards, num_generations))


def rollout_scores_a_fresh_sample(policy, prompts, reward_fn, num_generations):
    """The bug the other way round: returns the first sample, scores a second one."""
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, sample_group(policy, prompts, num_generations))
    return Rollout(prompts, completions, rewards, group_advantages(rewards, num_generations))


def rollout_advantages_are_rewards(policy, prompts, reward_fn, num_generations):
    """Forgets equation (2): the raw rewards as advantages."""
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    return Rollout(prompts, completions, rewards, rewards)


ROLLOUT_WRONG = [
    rollout_rescored_stale_advantages,
    rollout_sampled_twice,
    rollout_scores_a_fresh_sample,
    rollout_advantages_are_rewards,
]


@pytest.mark.parametrize("fn", ROLLOUT_WRONG, ids=lambda f: f.__name__)
def test_make_rollout_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_make_rollout, fn)


def test_make_rollout_feedback():
    stale = assert_fails(checks.check_make_rollout, rollout_rescored_stale_advantages)
    assert "'advantages from those rewards': False" in stale
    assert "'generate calls': 2" in assert_fails(checks.check_make_rollout, rollout_sampled_twice)
    unscaled = assert_fails(checks.check_make_rollout, rollout_advantages_are_rewards)
    assert (
        "'generate calls': 1" in unscaled and "'advantages from those rewards': False" in unscaled
    )
    assert "advantages from those rewards (group_advantages" in unscaled


def rollout_fields_swapped(policy, prompts, reward_fn, num_generations):
    """Everything right, given to Rollout in the wrong order."""
    completions = sample_group(policy, prompts, num_generations)
    rewards = reward_fn(prompts, completions)
    return Rollout(prompts, completions, group_advantages(rewards, num_generations), rewards)


@pytest.mark.parametrize("seed", [None, GRADER_SEEDS[0]])
def test_make_rollout_told_its_fields_swapped(seed):
    assert_told(checks.check_make_rollout, rollout_fields_swapped, "each other's places", seed)
    # the seed's own bug is not told the swap
    resampled = assert_fails(checks.check_make_rollout, rollout_sampled_twice, seed)
    assert "each other's places" not in resampled and "Seed 001" in resampled


def test_make_rollout_returning_no_rollout():
    def returns_tensor(policy, prompts, reward_fn, num_generations):
        return sample_group(policy, prompts, num_generations)

    assert "not a Rollout" in assert_fails(checks.check_make_rollout, returns_tensor)


def test_make_rollout_uses_the_reference_helpers():
    """A correct make_rollout passes even while the notebook's sample_group still loops."""
    namespace = {"sample_group": SEED_TRAINER["sample_group"]}
    correct = REFERENCE_TRAINER["make_rollout"]
    learner = checks.bind(correct, namespace)  # as if defined next to the seed's sample_group
    assert_passes(checks.check_make_rollout, learner)


# --- exercise 3: group_advantages -------------------------------------------------------------


def advantages_batch(rewards, num_generations, eps=1e-4):
    """Seed 002 lines 74-79: one mean and std for the whole batch."""
    rewards = rewards.float()
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def advantages_no_eps(rewards, num_generations, eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / grouped.std(dim=1, keepdim=True)).reshape(-1)


def advantages_hard_coded_eps(rewards, num_generations, eps=1e-4):
    return group_advantages(rewards, num_generations)


def advantages_unbiased_over_batch(rewards, num_generations, eps=1e-4):
    """Group means, but the std of the whole batch (TRL's scale_rewards='batch')."""
    grouped = rewards.float().view(-1, num_generations)
    return ((grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std() + eps)).reshape(-1)


def advantages_no_float(rewards, num_generations, eps=1e-4):
    """Integer rewards kept as integers: torch has no mean of an int64 tensor."""
    grouped = rewards.view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + eps)).reshape(-1)


def advantages_package(rewards, num_generations, eps=1e-4):
    return package.group_advantages(rewards, num_generations, eps=eps)


ADVANTAGE_WRONG = [
    advantages_batch,
    advantages_no_eps,
    advantages_hard_coded_eps,
    advantages_unbiased_over_batch,
    advantages_no_float,
]


@pytest.mark.parametrize("fn", ADVANTAGE_WRONG, ids=lambda f: f.__name__)
def test_group_advantages_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_group_advantages, fn)


@pytest.mark.parametrize("fn", [advantages_package, package.group_advantages])
def test_group_advantages_package_passes(fn):
    assert_passes(checks.check_group_advantages, fn)


def advantages_eps_inside_the_sqrt(rewards, num_generations, eps=1e-4):
    grouped = rewards.float().view(-1, num_generations)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / torch.sqrt(grouped.var(dim=1, keepdim=True) + eps)).flatten()


def test_eps_inside_the_sqrt_is_told_so_as_in_lab_01():
    """Lab 01's mistakes of group_advantages get lab 01's hints here too (this hint once said
    to compute each block's own mean and std, which the learner did)."""
    for seed in (None, 12_345):
        assert_told(
            checks.check_group_advantages,
            advantages_eps_inside_the_sqrt,
            "outside the square root",
            seed,
        )


def test_group_advantages_feedback():
    assert "zero-variance group" in assert_fails(checks.check_group_advantages, advantages_no_eps)
    for fn in (advantages_batch, advantages_unbiased_over_batch):
        message = assert_fails(checks.check_group_advantages, fn)
        assert "two groups are normalised separately" in message
    hard_coded = assert_fails(checks.check_group_advantages, advantages_hard_coded_eps)
    assert "passed by keyword" in hard_coded and "use the eps argument" in hard_coded
    no_float = assert_fails(checks.check_group_advantages, advantages_no_float)
    assert "integer rewards (int64)" in no_float and "convert the rewards to float" in no_float
    assert "raised RuntimeError" in no_float and "grouped.mean(dim=1" in no_float


def test_population_std_gives_the_seed_numbers():
    message = assert_fails(checks.check_group_advantages, SEED_TRAINER["group_advantages"])
    assert "0.577217" in message and "-1.73165" in message
    assert "= +0.5" in message and "= -1.5" in message and "0.43" in message


# --- exercise 4: kl_penalty -------------------------------------------------------------------


def kl_no_grad(logps, ref_logps):
    """Seed 000 lines 379-405: every operand computed under torch.no_grad()."""
    with torch.no_grad():
        log_ratio = ref_logps - logps
        return (torch.exp(log_ratio) - log_ratio - 1).mean()


def kl_item(logps, ref_logps):
    """The value as a Python float: right number, no graph."""
    log_ratio = ref_logps - logps
    return (torch.exp(log_ratio) - log_ratio - 1).mean().item()


def kl_detached_result(logps, ref_logps):
    log_ratio = ref_logps - logps
    return (torch.exp(log_ratio) - log_ratio - 1).mean().detach()


def kl_wrong_direction(logps, ref_logps):
    """k3 with x = log pi - log pi_ref: attached, but the other direction."""
    log_ratio = logps - ref_logps
    return (torch.exp(log_ratio) - log_ratio - 1).mean()


def kl_k1(logps, ref_logps):
    """k1 = log pi - log pi_ref: unbiased value, no expected gradient (notebook 04)."""
    return (logps - ref_logps).mean()


def kl_seed_001(logps, ref_logps):
    """Seed 001 line 125: log pi_ref - log pi, k1 with its sign flipped."""
    return (ref_logps - logps).mean()


KL_WRONG = [
    kl_no_grad,
    kl_item,
    kl_detached_result,
    kl_wrong_direction,
    kl_k1,
    kl_seed_001,
]


@pytest.mark.parametrize("fn", KL_WRONG, ids=lambda f: f.__name__)
def test_kl_penalty_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_kl_penalty, fn)


@pytest.mark.parametrize("fn", [kl_no_grad, kl_item, kl_detached_result])
def test_kl_without_gradient_fails_the_gradient_case(fn):
    message = assert_fails(checks.check_kl_penalty, fn)
    assert "the KL term has a gradient" in message and "keep logps attached" in message.lower()
    assert "the penalty pulls the policy towards the reference" in message  # also failing
    for seed in GRADER_SEEDS:
        graded = assert_fails(checks.check_kl_penalty, fn, seed=seed)
        assert "case:     the KL term has a gradient, beta=" in graded


@pytest.mark.parametrize("fn", [kl_wrong_direction, kl_k1, kl_seed_001])
def test_kl_wrong_value_fails_the_value_case(fn):
    message = assert_fails(checks.check_kl_penalty, fn)
    assert "case:     the value: k3 averaged over tokens" in message
    assert "x = ref_logps - logps" in message


def kl_package(logps, ref_logps):
    return losses.kl_k3(logps, ref_logps).mean()


def kl_with_relu(logps, ref_logps):
    """Seed 002's code without the .detach(): the relu is harmless."""
    log_ratio = ref_logps - logps
    return torch.relu((torch.exp(log_ratio) - log_ratio - 1).mean())


@pytest.mark.parametrize("fn", [kl_package, kl_with_relu])
def test_kl_penalty_correct_alternatives_pass(fn):
    assert_passes(checks.check_kl_penalty, fn)


def test_kl_pull_case_measures_the_pull():
    """The 'pull' case: the fixed penalty lowers the exact KL, the detached one not."""
    before, after = checks._kl_pull(kl_penalty, 0, 1.0, 0.5)
    assert after < before
    assert checks._kl_pull(SEED_TRAINER["kl_penalty"], 0, 1.0, 0.5) == (before, before)


# --- exercise 5: grpo_update ------------------------------------------------------------------


def _update(
    policy, ref_policy, optimizer, rollout, num_iterations, beta, epsilon, old, ref, zero_grad=True
):
    """The update loop with ``old(logps_now)`` and ``ref`` choosing the fixed log-probs."""
    prompts, completions = rollout.prompts, rollout.completions
    advantages = rollout.advantages.unsqueeze(1)
    ratios = []
    for _ in range(num_iterations):
        logps = policy.logps(prompts, completions)
        old_logps = old(logps)
        ratio = torch.exp(logps - old_logps)
        clipped = torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
        surrogate = torch.min(ratio * advantages, clipped * advantages)
        loss = -surrogate.mean() + beta * kl_penalty(logps, ref(old_logps))
        if zero_grad:
            optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        ratios.append(ratio.detach())
    return ratios


def update_old_inside_loop(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """log pi_old recomputed at every update (seed 000 lines 379-387): the ratio stays 1."""
    with torch.no_grad():
        ref_logps = ref_policy.logps(rollout.prompts, rollout.completions)
    return _update(
        policy,
        ref_policy,
        optimizer,
        rollout,
        num_iterations,
        beta,
        epsilon,
        old=lambda logps: logps.detach(),
        ref=lambda old: ref_logps,
    )


def update_old_not_detached(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """log pi_old from the policy, once, but with its graph: no policy gradient, then a crash."""
    old_logps = policy.logps(rollout.prompts, rollout.completions)
    with torch.no_grad():
        ref_logps = ref_policy.logps(rollout.prompts, rollout.completions)
    return _update(
        policy,
        ref_policy,
        optimizer,
        rollout,
        num_iterations,
        beta,
        epsilon,
        old=lambda logps: old_logps,
        ref=lambda old: ref_logps,
    )


def update_ref_is_old(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """pi_old right, but the KL against pi_old too (seed 002 refreshes its reference to the
    current model every iteration, lines 37-40 and 124-126)."""
    with torch.no_grad():
        old_logps = policy.logps(rollout.prompts, rollout.completions)
    return _update(
        policy,
        ref_policy,
        optimizer,
        rollout,
        num_iterations,
        beta,
        epsilon,
        old=lambda logps: old_logps,
        ref=lambda old: old,
    )


def update_returns_nothing(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    REFERENCE_TRAINER["grpo_update"](
        policy, ref_policy, optimizer, rollout, num_iterations, beta, epsilon
    )


def update_reference_copy(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """Correct: the same as the reference, through the helper."""
    with torch.no_grad():
        old_logps = policy.logps(rollout.prompts, rollout.completions)
        ref_logps = ref_policy.logps(rollout.prompts, rollout.completions)
    return _update(
        policy,
        ref_policy,
        optimizer,
        rollout,
        num_iterations,
        beta,
        epsilon,
        old=lambda logps: old_logps,
        ref=lambda old: ref_logps,
    )


def update_hard_coded_epsilon(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """Right, but clips to [0.8, 1.2] whatever epsilon it is given."""
    return update_reference_copy(policy, ref_policy, optimizer, rollout, num_iterations, beta)


def update_hard_coded_beta(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """Right, but weighs the KL term with 0.04 whatever beta it is given."""
    return update_reference_copy(
        policy, ref_policy, optimizer, rollout, num_iterations, epsilon=epsilon
    )


def update_without_zero_grad(
    policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
):
    """Right, but never zeroes the gradients: from the second update on, the old ones add up."""
    with torch.no_grad():
        old_logps = policy.logps(rollout.prompts, rollout.completions)
        ref_logps = ref_policy.logps(rollout.prompts, rollout.completions)
    return _update(
        policy,
        ref_policy,
        optimizer,
        rollout,
        num_iterations,
        beta,
        epsilon,
        old=lambda logps: old_logps,
        ref=lambda old: ref_logps,
        zero_grad=False,
    )


UPDATE_WRONG = [
    update_without_zero_grad,
    update_old_inside_loop,
    update_old_not_detached,
    update_ref_is_old,
    update_returns_nothing,
    update_hard_coded_epsilon,
    update_hard_coded_beta,
]


@pytest.mark.parametrize("fn", UPDATE_WRONG, ids=lambda f: f.__name__)
def test_grpo_update_mistakes_are_caught_by_lab_check(fn):
    assert_caught_publicly(checks.check_grpo_update, fn)


def test_grpo_update_feedback():
    inside = assert_fails(checks.check_grpo_update, update_old_inside_loop)
    assert "the ratio moves off 1" in inside and "[0.0, 0.0, 0.0]" in inside
    assert "raised RuntimeError" in assert_fails(checks.check_grpo_update, update_old_not_detached)
    ref_is_old = assert_fails(checks.check_grpo_update, update_ref_is_old)
    assert "the parameters after several updates" in ref_is_old and "seed 002" in ref_is_old
    epsilon = assert_fails(checks.check_grpo_update, update_hard_coded_epsilon)
    assert "the clip range is epsilon" in epsilon and "not a hard-coded 0.2" in epsilon
    beta = assert_fails(checks.check_grpo_update, update_hard_coded_beta)
    assert "the ratio moves off 1" in beta and "not a hard-coded 0.04" in beta
    kept = assert_fails(checks.check_grpo_update, update_without_zero_grad)  # its own hint
    hint = kept.split("  hint:", 1)[1]
    assert "zero_grad() before each loss.backward()" in hint and "pi_old" not in hint, kept


def _slipped_update(slip: str):
    """A learner's grpo_update with one slip: its order of zero_grad / backward / step, the
    ratio's direction, the loss's sign, the surrogate, the number of updates."""

    def grpo_update(
        policy, ref_policy, optimizer, rollout, num_iterations=1, beta=0.04, epsilon=0.2
    ):
        with torch.no_grad():
            old_logps = policy.logps(rollout.prompts, rollout.completions)
            ref_logps = ref_policy.logps(rollout.prompts, rollout.completions)
        advantages = rollout.advantages[:, None]
        ratios = []
        for _ in range(1, num_iterations) if slip == "range(1, n)" else range(num_iterations):
            logps = policy.logps(rollout.prompts, rollout.completions)
            if slip == "old / new":
                ratio = torch.exp(old_logps) / torch.exp(logps)
            else:
                ratio = torch.exp(logps - old_logps)
            clipped = ratio.clamp(1 - epsilon, 1 + epsilon)
            if slip == "clamp":
                objective = (clipped * advantages).mean()
            else:
                objective = torch.minimum(ratio * advantages, clipped * advantages).mean()
            kl = beta * kl_penalty(logps, ref_logps)
            loss = objective + kl if slip == "sign" else kl - objective
            if slip == "backward, zero_grad, step":
                loss.backward()
                optimizer.zero_grad()
            else:
                optimizer.zero_grad()
                loss.backward()
            optimizer.step()
            ratios.append(ratio.detach())
        return ratios

    grpo_update.__name__ = f"update_{slip}"
    return grpo_update


@pytest.mark.parametrize(
    "slip, hint",
    [
        ("backward, zero_grad, step", "the policy never moved"),
        ("old / new", "exp(old_logps - logps) is its inverse"),
        ("sign", "the loss is -L_clip + beta * KL"),
        ("clamp", "clipped * A alone drops the unclipped term"),
        ("range(1, n)", "num_iterations updates, one ratio each"),
    ],
)
@pytest.mark.parametrize("seed", [None, 12_345])
def test_grpo_update_slips_are_told_their_own_hint(slip, hint, seed):
    """Each of these once got the hint about recomputing pi_old (the first case they fail)."""
    assert_told(checks.check_grpo_update, _slipped_update(slip), hint, seed)


def test_grpo_update_correct_alternative_passes():
    assert_passes(checks.check_grpo_update, update_reference_copy)


def test_grpo_update_ratio_moves_off_one():
    """What the check relies on: with the fix, 1 at the first update and not after."""
    distances = checks._probe_grpo_update(REFERENCE_TRAINER["grpo_update"], "ratios", 3)
    assert distances[0] == 0.0
    assert 0.05 < distances[1] < distances[2]
    assert distances[2] > 0.2  # past 1 + epsilon: the clip acts on the third update


# --- public and graded cases are twins ---------------------------------------------------------

WRONG = {
    "sample_group": SAMPLE_WRONG,
    "make_rollout": ROLLOUT_WRONG,
    "group_advantages": ADVANTAGE_WRONG,
    "kl_penalty": KL_WRONG,
    "grpo_update": UPDATE_WRONG,
}


@pytest.mark.parametrize(
    "name, fn",
    [(name, fn) for name in checks.EXERCISES for fn in [*WRONG[name], SEED_TRAINER[name]]]
    + [("sample_group", sample_repeat_interleave), ("kl_penalty", kl_with_relu)],
    ids=lambda value: getattr(value, "__qualname__", value),
)
def test_public_verdict_is_the_graded_one(name, fn):
    assert_same_verdict(CHECKS[name], fn)


TWINS = [
    checks.sample_twins,
    checks.rollout_twins,
    checks.advantage_twins,
    checks.kl_twins,
    checks.update_twins,
]


def _kind(case):
    """A case's kind: its name up to the drawn numbers, its measure, its tensors' dtypes."""
    measure = case.args[0] if isinstance(case.args[0], str) else None
    dtypes = [a.dtype for a in case.args if isinstance(a, torch.Tensor)]
    return re.sub(r"-?[0-9.]+", "#", case.name), measure, dtypes, sorted(case.kwargs)


def _values(case):
    return repr([a.tolist() if isinstance(a, torch.Tensor) else a for a in case.args])


@pytest.mark.parametrize("twins", TWINS, ids=lambda f: f.__name__)
def test_hidden_twins_are_fresh_values_of_the_public_kinds(twins):
    public, hidden = twins(0), twins(98_765)
    assert [_kind(c) for c in public] == [_kind(c) for c in hidden]
    assert all(_values(p) != _values(h) for p, h in zip(public, hidden, strict=True))
    assert [_values(c) for c in twins(0)] == [_values(c) for c in public]  # drawn, not global


# --- the demo ---------------------------------------------------------------------------------


def test_demo_reference_learns_and_seed_trainer_does_not():
    """The numbers the notebook's prose describes, with wide margins."""
    fixed, seed = checks.train_demo(REFERENCE_TRAINER), checks.train_demo(SEED_TRAINER)
    assert fixed.curve[0][1] == pytest.approx(0.1, abs=1e-6)
    assert fixed.curve[-1][1] > 0.6 and seed.curve[-1][1] < 0.2
    assert fixed.generate_calls == 40 and seed.generate_calls == 40 * 2 * 32


def test_demo_detached_kl_is_the_same_run_as_beta_zero():
    detached = {**REFERENCE_TRAINER, "kl_penalty": SEED_TRAINER["kl_penalty"]}
    tight = checks.train_demo(detached, beta=0.3)
    free = checks.train_demo(REFERENCE_TRAINER, beta=0.0)
    assert tight.curve == free.curve and tight.kl == free.kl
    assert checks.train_demo(REFERENCE_TRAINER, beta=0.3).kl < 0.6 * free.kl
