"""Lab 06: the reference passes, a delegate to the package passes, known mistakes fail.

The training check (exercise 4) trains the tiny model: run with GRPO_QUICK=1 (60 steps a run).
"""

from __future__ import annotations

import types

import pytest
import torch
from lab_helpers import assert_fails, assert_fails_somewhere, assert_passes

from grpo_minimal import group_advantages, grpo_loss
from grpo_minimal import lm_grpo as package
from grpo_minimal.labs import llm_step as checks
from grpo_minimal.labs.checking import CheckFailed
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.rewards import accuracy_reward, score_completions

# --- exercise 1: mask_after_eos ----------------------------------------------------------------


def _is_eos(completion_ids, eos_ids):
    return torch.isin(completion_ids, torch.tensor(list(eos_ids)))


def reference_mask(completion_ids, eos_ids):
    is_eos = _is_eos(completion_ids, eos_ids).long()
    return (is_eos.cumsum(dim=1) - is_eos == 0).long()


def eos_masked_out(completion_ids, eos_ids):
    """The completion stops BEFORE its EOS: the model never learns to stop."""
    return (_is_eos(completion_ids, eos_ids).long().cumsum(dim=1) == 0).long()


def padding_counted(completion_ids, eos_ids):
    """Only the EOS tokens are dropped: everything after the EOS counts."""
    return (~_is_eos(completion_ids, eos_ids)).long()


def first_eos_id_only(completion_ids, eos_ids):
    return reference_mask(completion_ids, [list(eos_ids)[0]])


def until_last_eos(completion_ids, eos_ids):
    """Keeps everything up to the LAST EOS (padding that is itself EOS is kept)."""
    is_eos = _is_eos(completion_ids, eos_ids).long()
    after = is_eos.flip(1).cumsum(1).flip(1) - is_eos  # EOS tokens later in the row
    return ((after > 0) | (is_eos.cumsum(1) == 0) | (is_eos == 1)).long()


def bool_mask(completion_ids, eos_ids):  # another dtype, the same values: accepted
    return reference_mask(completion_ids, eos_ids).bool()


MASK_WRONG = [eos_masked_out, padding_counted, first_eos_id_only, until_last_eos]


@pytest.mark.parametrize("fn", [reference_mask, package.mask_after_eos, bool_mask])
def test_mask_reference_and_package_pass(fn):
    assert_passes(checks.check_mask_after_eos, fn)


@pytest.mark.parametrize("fn", MASK_WRONG, ids=lambda f: f.__name__)
def test_mask_mistakes_fail_public(fn):
    assert_fails(checks.check_mask_after_eos, fn)


def test_mask_mistakes_are_caught_by_the_case_made_for_them():
    assert "EOS in the middle" in assert_fails(checks.check_mask_after_eos, eos_masked_out)
    assert "two end tokens" in assert_fails(checks.check_mask_after_eos, first_eos_id_only)
    assert "padding is EOS" in assert_fails(checks.check_mask_after_eos, until_last_eos)
    assert "FIRST EOS" in assert_fails(checks.check_mask_after_eos, until_last_eos, hidden=True)


# --- exercise 2: completion_logps --------------------------------------------------------------


def make_logps(shift=1, attention=True, log_softmax=True, dim=-1, use_temperature=True, grad=True):
    """completion_logps with one switch per mistake; the defaults are the reference."""

    def completion_logps(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True):
        G, C = rollout.num_generations, rollout.completion_ids.shape[1]
        input_ids = torch.cat(
            [rollout.prompt_ids.repeat_interleave(G, dim=0), rollout.completion_ids], dim=1
        )
        attention_mask = torch.cat(
            [rollout.prompt_mask.repeat_interleave(G, dim=0), rollout.completion_mask], dim=1
        )
        kwargs = {"attention_mask": attention_mask} if attention else {}
        with torch.set_grad_enabled(grad):
            logits = model(input_ids=input_ids, **kwargs).logits
            end = logits.shape[1] - shift  # the last logit predicts no completion token
            z = logits[:, end - C : end] / (temperature if use_temperature else 1.0)
            scores = z.log_softmax(dim=dim) if log_softmax else z
            logps = scores.gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                entropy = -(z.softmax(-1) * z.log_softmax(-1)).sum(-1)
        return logps, entropy

    return completion_logps


reference_logps = make_logps()

LOGPS_WRONG = {
    "shifted_by_one_token": make_logps(shift=0),
    "attention_mask_ignored": make_logps(attention=False),
    "raw_logits_gathered": make_logps(log_softmax=False),
    "log_softmax_over_positions": make_logps(dim=1),
    "temperature_ignored": make_logps(use_temperature=False),
    "under_no_grad": make_logps(grad=False),
}


def logps_only(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True):
    return reference_logps(model, rollout, temperature)[0]


@pytest.mark.parametrize("fn", [reference_logps, package.completion_logps])
def test_logps_reference_and_package_pass(fn):
    assert_passes(checks.check_completion_logps, fn)


@pytest.mark.parametrize("name", LOGPS_WRONG)
def test_logps_mistakes_fail_public(name):
    assert_fails(checks.check_completion_logps, LOGPS_WRONG[name])


@pytest.mark.parametrize(
    "name, case",
    [
        ("shifted_by_one_token", "one prompt, two completions"),
        ("attention_mask_ignored", "prompts of different lengths"),
        ("raw_logits_gathered", "one prompt, two completions"),
        ("log_softmax_over_positions", "one prompt, two completions"),
        ("temperature_ignored", "temperature 0.7"),
        ("under_no_grad", "carry a gradient"),
    ],
)
def test_logps_mistakes_are_caught_by_the_case_made_for_them(name, case):
    assert case in assert_fails(checks.check_completion_logps, LOGPS_WRONG[name])


def test_logps_mistakes_fail_hidden_too():
    for name in ("shifted_by_one_token", "attention_mask_ignored", "raw_logits_gathered"):
        assert_fails(checks.check_completion_logps, LOGPS_WRONG[name], hidden=True)


def test_logps_feedback_is_readable():
    message = assert_fails(checks.check_completion_logps, logps_only)
    assert "must return a pair" in message
    message = assert_fails(checks.check_completion_logps, LOGPS_WRONG["shifted_by_one_token"])
    assert "'23+45=' -> ['68<eos>', '69<eos>']" in message and "tensor([[" in message

    def stub(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True): ...

    assert "stub" in assert_fails(checks.check_completion_logps, stub)
    assert "define `completion_logps`" in assert_fails(checks.check_completion_logps, None)


def test_hidden_rollouts_have_unequal_left_padding():
    """The reference passes no position ids: a left-padded row's positions shift by a constant,
    which rotary attention does not see (only rounding changes), and the checks accept it."""
    rollout = checks.sampled_rollout(0, ("7+56=", "23+45=", "9+9="), 4, 5)
    assert rollout.prompt_mask.sum(1).unique().numel() > 1  # the padding really differs


# --- exercise 3: the step ----------------------------------------------------------------------


def make_step(
    logps_fn=reference_logps,
    sign=1.0,
    mask="completion",
    detach_old=True,
    clip=True,
    use_reference=True,
    loss_type=None,
    temperature=True,
    schedule=True,
    update=True,
    zero_means_no_clip=True,
):
    """LMGRPOTrainer.step for one micro-batch and one iteration, one switch per mistake."""

    def step(self, rows):
        cfg, G = self.cfg, self.cfg.num_generations
        rollout = self.sample(rows)
        rewards, _ = score_completions(
            self.reward_funcs, self.reward_weights, [r["prompt"] for r in rollout.rows],
            rollout.completions, rollout.rows,
        )  # fmt: skip
        advantages = sign * group_advantages(torch.tensor(rewards), G, cfg.scale_rewards)
        T = cfg.temperature if temperature else 1.0
        ref_logps = None
        if self.reference is not None and use_reference:
            with torch.no_grad():
                ref_logps = logps_fn(self.reference, rollout, T)[0]
        logps, _ = logps_fn(self.model, rollout, T)
        completion_mask = rollout.completion_mask
        if mask == "ones":
            completion_mask = torch.ones_like(completion_mask)
        elif mask == "no_eos":
            completion_mask = completion_mask * (rollout.completion_ids != 1)
        loss, metrics = grpo_loss(
            logps, None if detach_old else logps, ref_logps, advantages, completion_mask,
            beta=cfg.beta if use_reference else 0.0, epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high, loss_type=loss_type or cfg.loss_type,
            max_completion_length=cfg.max_completion_length,
            use_bias_correction_kl=cfg.use_bias_correction_kl,
        )  # fmt: skip
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            max_norm = cfg.max_grad_norm
            if zero_means_no_clip and max_norm == 0:
                max_norm = float("inf")
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if update:
            self.optimizer.step()
        if schedule:
            self.scheduler.step()
        self.steps_done += 1
        return metrics, rollout

    return step


reference_step = make_step()


def package_step(self, rows):
    return LMGRPOTrainer.step(self, rows)


no_update = make_step(update=False, schedule=False)  # a loss and a gradient, no update


STEP_WRONG = {
    "advantages_sign_flipped": make_step(sign=-1.0),
    "loss_without_the_mask": make_step(mask="ones"),
    "eos_masked_out": make_step(mask="no_eos"),
    "old_logps_not_detached": make_step(detach_old=False),
    "no_gradient_clipping": make_step(clip=False),
    "shifted_log_probs": make_step(logps_fn=LOGPS_WRONG["shifted_by_one_token"]),
    "no_scheduler_step": make_step(schedule=False),
    "reference_ignored": make_step(use_reference=False),
    "loss_type_ignored": make_step(loss_type="dapo"),
    "temperature_ignored": make_step(temperature=False),
    "no_optimizer_step": no_update,
    "max_grad_norm_0_zeroes_the_gradient": make_step(zero_means_no_clip=False),
}


@pytest.mark.parametrize("fn", [reference_step, package_step, LMGRPOTrainer.step])
def test_step_reference_and_package_pass(fn):
    assert_passes(checks.check_step, fn)


@pytest.mark.parametrize("name", STEP_WRONG)
def test_step_mistakes_fail(name):
    assert_fails_somewhere(checks.check_step, STEP_WRONG[name])


@pytest.mark.parametrize(
    "name",
    [
        "advantages_sign_flipped",
        "loss_without_the_mask",
        "eos_masked_out",
        "old_logps_not_detached",
        "no_gradient_clipping",
        "shifted_log_probs",
        "no_scheduler_step",
    ],
)
def test_step_mistakes_fail_public(name):
    assert_fails(checks.check_step, STEP_WRONG[name])


@pytest.mark.parametrize(
    "name, case",
    [
        ("reference_ignored", "beta=0.04): loss"),
        ("loss_type_ignored", "loss_type='grpo': loss"),
        ("temperature_ignored", "temperature 0.7: gradient"),
        ("max_grad_norm_0_zeroes_the_gradient", "max_grad_norm=0: no clipping"),
        ("no_scheduler_step", "optimizer"),
    ],
)
def test_step_mistakes_are_caught_by_the_case_made_for_them(name, case):
    message = assert_fails_somewhere(checks.check_step, STEP_WRONG[name])
    assert case in message.splitlines()[1], message


def test_old_logps_not_detached_is_caught_by_the_gradient():
    """Its loss VALUE is right (the ratio is 1 either way): only the gradient shows it."""
    message = assert_fails(checks.check_step, STEP_WRONG["old_logps_not_detached"])
    assert "gradient" in message.splitlines()[1]


def test_step_cases_have_a_learning_signal():
    """The fixed rollout's groups are mixed (nonzero advantages), its completions of unequal
    length (padding after EOS), and the policy is off the reference (KL > 0)."""
    rollout = checks._fixed_rollout(())
    rewards = accuracy_reward(rollout.completions, [r["answer"] for r in rollout.rows])
    for start in (0, 4):
        assert 0 < sum(rewards[start : start + 4]) < 4, rewards
    assert (rollout.completion_mask == 0).any()
    trainer, rows = checks.step_trainer()
    record, _ = LMGRPOTrainer.step(trainer, rows)
    assert record["kl"] > 1e-3 and record["grad_norm"] > trainer.cfg.max_grad_norm


def test_step_feedback_is_readable():
    message = assert_fails(checks.check_step, STEP_WRONG["advantages_sign_flipped"])
    assert "expected: 0.0578" in message and "got:      -0.0576" in message
    message = assert_fails(checks.check_step, STEP_WRONG["old_logps_not_detached"])
    assert "gradient of model.embed_tokens.weight: norm" in message
    assert "returned nothing" in assert_fails(checks.check_step, lambda self, rows: None)
    message = assert_fails(checks.check_step, lambda self, rows: 0.5)
    assert "must return (metrics, rollout)" in message


# --- exercise 4: training with the learner's step ------------------------------------------------


@pytest.fixture(autouse=False)
def quick(monkeypatch):
    monkeypatch.setenv("GRPO_QUICK", "1")


@pytest.mark.parametrize("fn", [reference_step, package_step])
def test_training_with_a_right_step_passes(quick, fn):
    checks.check_training(fn)
    if fn is reference_step:
        checks.check_training(fn, hidden=True)


@pytest.mark.parametrize(
    "fn", [STEP_WRONG["advantages_sign_flipped"], no_update], ids=["sign_flipped", "no_update"]
)
def test_training_with_a_wrong_step_fails(quick, fn):
    with pytest.raises(CheckFailed, match="held-out accuracy rises"):
        checks.check_training(fn)


def test_training_stub_and_missing_step_fail_clearly(quick):
    def stub(self, rows): ...

    with pytest.raises(CheckFailed, match="step returned nothing"):
        checks.check_training(stub)
    with pytest.raises(CheckFailed, match="define `step`"):
        checks.check_training(None)


def _helper():
    return 1


def _outer():
    return _helper()


def test_a_cached_run_is_not_reused_after_a_called_function_changes():
    """Notebook functions call each other through globals: the fingerprint follows them."""
    namespace = {"_helper": _helper}
    step = types.FunctionType(_outer.__code__, namespace)
    key = checks._fingerprint(step)
    assert key == (step, _helper)
    namespace["_helper"] = lambda: 2  # the learner fixes a function the step calls
    assert checks._fingerprint(step) != key
