"""Lab 06: the reference passes, a delegate to the package passes, known mistakes fail.

Every known mistake is caught by ``lab check`` (the public cases and their twins) with a hint
that names it, and by the grader's twins too. The training check (exercise 4) trains the tiny
model: its tests are the slow ones (``-k "not training"`` skips them; run with GRPO_QUICK=1).
"""

from __future__ import annotations

import re
import types

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

from grpo_minimal import completions, group_advantages, grpo_loss
from grpo_minimal import lm_grpo as package
from grpo_minimal.labs import llm_step as checks
from grpo_minimal.labs.checking import GRADING_ENV, PUBLIC_SEED, CheckFailed
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_train import MathConfig
from grpo_minimal.rewards import accuracy_reward, score_completions


def first_case(message: str) -> str:
    """The name of the case a failure details (the first failing one)."""
    return message.splitlines()[1].removeprefix("  case:").strip()


def hint(message: str) -> str:
    return next(line for line in message.splitlines() if line.startswith("  hint:"))


def detailed(message: str) -> str:
    """What the learner reads about the first failing case: what was returned and the hint."""
    lines = message.split("\n  also failing")[0].splitlines()
    return "\n".join(line for line in lines if line.startswith(("  got:", "  hint:", "    ")))


def kind(case) -> str:
    """A case's kind: its name up to the drawn numbers."""
    return re.sub(r"-?[0-9.]+(e-?[0-9]+)?", "#", case.name)


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


def argmax_first_eos(completion_ids, eos_ids):
    """The first EOS found with argmax: a row without EOS gives 0, so only its first token."""
    first = _is_eos(completion_ids, eos_ids).long().argmax(dim=1, keepdim=True)
    return (torch.arange(completion_ids.shape[1]) <= first).long()


def bool_mask(completion_ids, eos_ids):  # another dtype, the same values: accepted
    return reference_mask(completion_ids, eos_ids).bool()


MASK_WRONG = {  # the mistake -> the case that details it, a piece of its hint
    eos_masked_out: ("EOS in the middle", "AND including"),
    padding_counted: ("EOS in the middle", "0 after it"),
    first_eos_id_only: ("two end tokens", "ANY of them"),
    until_last_eos: ("the padding is EOS too", "FIRST EOS"),
    argmax_first_eos: ("no EOS", "keeps every token"),
}


@pytest.mark.parametrize("fn", [reference_mask, completions.mask_after_eos, bool_mask])
def test_mask_reference_and_package_pass(fn):
    assert_passes(checks.check_mask_after_eos, fn)


@pytest.mark.parametrize("fn", MASK_WRONG, ids=lambda f: f.__name__)
def test_mask_mistakes_are_caught_by_lab_check(fn):
    message = assert_caught_publicly(checks.check_mask_after_eos, fn)
    case, hint_piece = MASK_WRONG[fn]
    assert case in first_case(message) and hint_piece in hint(message), message


@pytest.mark.parametrize("fn", [*MASK_WRONG, reference_mask], ids=lambda f: f.__name__)
def test_mask_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_mask_after_eos, fn)


def test_mask_hidden_kinds_each_catch_their_mistake():
    """The twins made for a mistake catch it with any seed (not only the hand-made rows)."""
    for seed in GRADER_SEEDS:
        message = assert_fails(checks.check_mask_after_eos, until_last_eos, seed=seed)
        assert "padding is EOS" in first_case(message) or "two EOS" in first_case(message)
        message = assert_fails(checks.check_mask_after_eos, first_eos_id_only, seed=seed)
        assert "two end tokens" in first_case(message), message


# --- exercise 2: completion_logps --------------------------------------------------------------


def make_logps(
    shift=1,
    attention=True,
    log_softmax=True,
    dim=-1,
    use_temperature=True,
    grad=True,
    entropy_temperature=True,
    interleave=True,
):
    """completion_logps with one switch per mistake; the defaults are the reference."""

    def completion_logps(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True):
        G, C = rollout.num_generations, rollout.completion_ids.shape[1]
        repeat = (
            rollout.prompt_ids.repeat_interleave(G, dim=0)
            if interleave
            else rollout.prompt_ids.repeat(G, 1)
        )
        masks = (
            rollout.prompt_mask.repeat_interleave(G, dim=0)
            if interleave
            else rollout.prompt_mask.repeat(G, 1)
        )
        input_ids = torch.cat([repeat, rollout.completion_ids], dim=1)
        attention_mask = torch.cat([masks, rollout.completion_mask], dim=1)
        kwargs = {"attention_mask": attention_mask} if attention else {}
        with torch.set_grad_enabled(grad):
            logits = model(input_ids=input_ids, **kwargs).logits
            end = logits.shape[1] - shift  # the last logit predicts no completion token
            raw = logits[:, end - C : end]
            z = raw / (temperature if use_temperature else 1.0)
            scores = z.log_softmax(dim=dim) if log_softmax else z
            logps = scores.gather(-1, rollout.completion_ids.unsqueeze(-1)).squeeze(-1)
        entropy = None
        if with_entropy:
            with torch.no_grad():
                e = z if entropy_temperature else raw
                entropy = -(e.softmax(-1) * e.log_softmax(-1)).sum(-1)
        return logps, entropy

    return completion_logps


reference_logps = make_logps()


def logps_only(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True):
    return reference_logps(model, rollout, temperature)[0]


def summed_per_completion(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True):
    """A sequence's log-prob, as some write-ups compute it: [N], the tokens summed."""
    logps, entropy = reference_logps(model, rollout, temperature, with_entropy, share_prompts)
    return (logps * rollout.completion_mask).sum(dim=1), entropy


LOGPS_WRONG = {  # the mistake -> the case that details it, a piece of its hint
    "shifted_by_one_token": (make_logps(shift=0), "one prompt, two completions", "t+1"),
    "attention_mask_ignored": (
        make_logps(attention=False),
        "prompts of different lengths",
        "attention_mask",
    ),
    "raw_logits_gathered": (make_logps(log_softmax=False), "one prompt", "log-softmax"),
    "log_softmax_over_positions": (make_logps(dim=1), "one prompt", "dim=-1"),
    "temperature_ignored": (
        make_logps(use_temperature=False),
        "temperature 0.7",
        "divide the logits by the temperature",
    ),
    "under_no_grad": (make_logps(grad=False), "carry a gradient", "no torch.no_grad()"),
    "entropy_at_temperature_1": (
        make_logps(entropy_temperature=False),
        "with entropy",
        "for both the log-probs and the entropy",
    ),
    "prompts_repeated_not_interleaved": (
        make_logps(interleave=False),
        "prompts of different lengths",
        "repeat_interleave",
    ),
    "returns_the_logps_alone": (logps_only, "one prompt", "must return a pair"),
    "summed_per_completion": (summed_per_completion, "one prompt", "one log-prob per completion"),
}


@pytest.mark.parametrize("fn", [reference_logps, package.completion_logps])
def test_logps_reference_and_package_pass(fn):
    assert_passes(checks.check_completion_logps, fn)


@pytest.mark.parametrize("name", LOGPS_WRONG)
def test_logps_mistakes_are_caught_by_lab_check(name):
    fn, case, hint_piece = LOGPS_WRONG[name]
    message = assert_caught_publicly(checks.check_completion_logps, fn)
    assert case in first_case(message) and hint_piece in detailed(message), message
    assert_same_verdict(checks.check_completion_logps, fn)


def test_entropy_at_temperature_1_is_caught_by_a_public_twin():
    """The hand-made entropy case is at temperature 1: the public twin at another one is what
    catches an entropy of the untempered logits."""
    message = assert_fails(
        checks.check_completion_logps, LOGPS_WRONG["entropy_at_temperature_1"][0]
    )
    assert re.search(r"sampled at temperature [0-9.]+, with entropy", first_case(message))


def test_logps_feedback_is_readable():
    message = assert_fails(checks.check_completion_logps, logps_only)
    assert "must return a pair" in message
    message = assert_fails(checks.check_completion_logps, LOGPS_WRONG["shifted_by_one_token"][0])
    assert "'23+45=' -> ['68<eos>', '69<eos>']" in message and "tensor([[" in message

    def stub(model, rollout, temperature=1.0, with_entropy=False, share_prompts=True): ...

    assert "stub" in assert_fails(checks.check_completion_logps, stub)
    assert "define `completion_logps`" in assert_fails(checks.check_completion_logps, None)


def test_logps_twins_use_sampled_rollouts_with_unequal_left_padding():
    """The reference passes no position ids: a left-padded row's positions shift by a constant,
    which rotary attention does not see (only rounding changes), and the checks accept it."""
    for seed in (PUBLIC_SEED, *GRADER_SEEDS):
        rollout = checks.logps_twins(seed)[1].args[1]
        assert rollout.prompt_mask.sum(1).unique().numel() == 3  # the padding really differs
        assert checks.logps_twins(seed)[2].args[2] != 1.0  # a temperature other than 1


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
    reference_temperature=True,
    schedule=True,
    update=True,
    zero_means_no_clip=True,
    resample=False,
    scale_rewards=True,
    bias_correction=True,
    count=True,
    zero_grad=True,
    clip_after_update=False,
):
    """LMGRPOTrainer.step for one micro-batch and one iteration, one switch per mistake."""

    def step(self, rows):
        cfg, G = self.cfg, self.cfg.num_generations
        rollout = self.sample(rows)
        rewards, _ = score_completions(
            self.reward_funcs,
            self.reward_weights,
            [r["prompt"] for r in rollout.rows],
            rollout.completions,
            rollout.rows,
        )
        scale = cfg.scale_rewards if scale_rewards else "group"
        advantages = sign * group_advantages(torch.tensor(rewards), G, scale)
        if resample:  # the seed-001 mistake: new completions for the loss
            rollout = self.sample(rows)
        T = cfg.temperature if temperature else 1.0
        ref_logps = None
        if self.reference is not None and use_reference:
            with torch.no_grad():
                ref_logps = logps_fn(self.reference, rollout, T if reference_temperature else 1.0)
                ref_logps = ref_logps[0]
        logps, _ = logps_fn(self.model, rollout, T)
        completion_mask = rollout.completion_mask
        if mask == "ones":
            completion_mask = torch.ones_like(completion_mask)
        elif mask == "no_eos":
            completion_mask = completion_mask * (rollout.completion_ids != 1)
        loss, metrics = grpo_loss(
            logps,
            None if detach_old else logps,
            ref_logps,
            advantages,
            completion_mask,
            beta=cfg.beta if use_reference else 0.0,
            epsilon=cfg.epsilon,
            epsilon_high=cfg.epsilon_high,
            loss_type=loss_type or cfg.loss_type,
            max_completion_length=cfg.max_completion_length,
            use_bias_correction_kl=cfg.use_bias_correction_kl and bias_correction,
        )
        if zero_grad:
            self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        max_norm = cfg.max_grad_norm
        if zero_means_no_clip and max_norm == 0:
            max_norm = float("inf")
        if clip and not clip_after_update:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if update:
            self.optimizer.step()
        if clip and clip_after_update:  # too late: the update used the unclipped gradient
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        if schedule:
            self.scheduler.step()
        if count:
            self.steps_done += 1
        return metrics, rollout

    return step


reference_step = make_step()
no_update = make_step(update=False, schedule=False)  # a loss and a gradient, no update

LESSON = checks.LESSON
STEP_WRONG = {  # the mistake -> the case that details it, a piece of its hint
    "advantages_sign_flipped": (make_step(sign=-1.0), f"{LESSON}: loss", "positive above"),
    "loss_without_the_mask": (make_step(mask="ones"), f"{LESSON}: loss", "own mask"),
    "eos_masked_out": (make_step(mask="no_eos"), f"{LESSON}: loss", "EOS kept"),
    "old_logps_not_detached": (
        make_step(detach_old=False),
        f"{LESSON}: gradient",
        "old_logps=None",
    ),
    "no_gradient_clipping": (make_step(clip=False), f"{LESSON}: gradient", "clip the global"),
    "shifted_log_probs": (
        make_step(logps_fn=LOGPS_WRONG["shifted_by_one_token"][0]),
        f"{LESSON}: loss",
        "completion_logps",
    ),
    "no_scheduler_step": (make_step(schedule=False), f"{LESSON}: optimizer", "scheduler.step"),
    "reference_ignored": (make_step(use_reference=False), f"{LESSON}: loss", "self.reference"),
    "loss_type_ignored": (make_step(loss_type="dapo"), "loss_type='grpo': loss", "cfg.loss_type"),
    "temperature_ignored": (
        make_step(temperature=False),
        "temperature 0.7: loss",
        "BOTH log-probs",
    ),
    "reference_at_temperature_1": (
        make_step(reference_temperature=False),
        "temperature 0.7: loss",
        "the reference's",
    ),
    "no_optimizer_step": (no_update, f"{LESSON}: optimizer", "optimizer.step()"),
    "max_grad_norm_0_zeroes_the_gradient": (
        make_step(zero_means_no_clip=False),
        "max_grad_norm=0: no clipping: gradient",
        "infinite max norm",
    ),
    "samples_again_before_the_log_probs": (
        make_step(resample=True),
        f"{LESSON}: rollout",
        "sample ONCE",
    ),
    "scale_rewards_ignored": (
        make_step(scale_rewards=False),
        "scale_rewards='none': gradient",
        "cfg.scale_rewards",
    ),
    "bias_correction_ignored": (
        make_step(bias_correction=False),
        "use_bias_correction_kl=True: gradient",
        "use_bias_correction_kl",
    ),
    "steps_not_counted": (make_step(count=False), f"{LESSON}: optimizer", "steps_done += 1"),
    "clipped_after_the_update": (  # AdamW's first update is lr * sign(g): only SGD shows it
        make_step(clip_after_update=True),
        f"clipped to max_grad_norm=0.001, then {checks.PLAIN_SGD}: optimizer",
        "BEFORE self.optimizer.step()",
    ),
    "gradients_never_zeroed": (  # the check's trainer starts zeroed: only a stale start shows it
        make_step(zero_grad=False),
        f"{checks.STALE_GRADIENTS}: gradient",
        "zero_grad() before loss.backward()",
    ),
}


def package_step(self, rows):
    return LMGRPOTrainer.step(self, rows)


@pytest.mark.parametrize("fn", [reference_step, package_step])
def test_step_reference_and_package_pass(fn):
    assert_passes(checks.check_step, fn)


@pytest.mark.parametrize("name", STEP_WRONG)
def test_step_mistakes_are_caught_by_lab_check(name):
    fn, case, hint_piece = STEP_WRONG[name]
    message = assert_caught_publicly(checks.check_step, fn)
    assert case in first_case(message) and hint_piece in hint(message), message
    assert_same_verdict(checks.check_step, fn)


def test_resampling_is_named_and_changes_the_loss():
    """A step that samples again scores one set of completions and updates another: the check
    says so first, and its loss is not the package's either."""
    message = assert_fails(checks.check_step, STEP_WRONG["samples_again_before_the_log_probs"][0])
    assert "self.sample called 2 times" in message
    assert f"{LESSON}: loss" in message.split("also failing")[1]
    trainer, rows = checks.step_trainer()
    first, again = trainer.sample(rows), trainer.sample(rows)
    assert first.completions != again.completions and trainer.sample.calls == 2


def test_old_logps_not_detached_is_caught_by_the_gradient():
    """Its loss VALUE is right (the ratio is 1 either way): only the gradient shows it."""
    message = assert_fails(checks.check_step, STEP_WRONG["old_logps_not_detached"][0])
    assert "gradient" in first_case(message)
    assert f"{LESSON}: loss" not in message


@pytest.mark.parametrize("seed", [None, PUBLIC_SEED, *GRADER_SEEDS])
def test_step_cases_have_a_learning_signal(seed):
    """Each setup's fixed rollout has mixed groups (nonzero advantages) and completions of
    unequal length (padding after EOS), and the policy is off the reference (KL > 0)."""
    setup = checks.PUBLIC_SETUP if seed is None else checks._step_setup(seed)
    rollout = checks._fixed_rollout(setup)
    rewards = accuracy_reward(rollout.completions, [r["answer"] for r in rollout.rows])
    for start in (0, 4):
        assert 0 < sum(rewards[start : start + 4]) < 4, rewards
    assert (rollout.completion_mask == 0).any()
    trainer, rows = checks.step_trainer((), setup)
    record, _ = LMGRPOTrainer.step(trainer, rows)
    assert record["kl"] > 1e-3 and record["grad_norm"] > trainer.cfg.max_grad_norm


@pytest.mark.parametrize("settings", [(), (("beta", 1.0), ("temperature", 0.7))])
def test_step_trainer_is_the_trainer_lmgrpotrainer_builds(settings):
    """The checks reuse one policy module and one frozen reference: a step on that trainer is a
    step on a trainer built afresh (a copy of the shipped model as the reference, then nudged)."""
    cfg = MathConfig(**{**checks.STEP_SETTINGS, **dict(settings)})
    model, tokenizer = checks.tiny_model()
    torch.manual_seed(cfg.seed)
    fresh = LMGRPOTrainer(cfg, model, tokenizer)
    checks._move_off_reference(fresh.model, checks.PUBLIC_SETUP.nudge)
    reused, rows = checks.step_trainer(settings)
    fresh.sample = checks._FixedSampler(reused.sample.first, reused.sample.again)
    for trainer in (fresh, reused):
        record, _ = LMGRPOTrainer.step(trainer, rows)
        trainer.record = record
        trainer.grad = trainer.model.model.embed_tokens.weight.grad.clone()
    for key in ("loss", "kl", "grad_norm", "learning_rate"):
        assert fresh.record[key] == pytest.approx(reused.record[key], rel=1e-6, abs=1e-9), key
    assert torch.allclose(fresh.grad, reused.grad, rtol=0, atol=1e-7)
    assert torch.equal(fresh.model.lm_head.weight, reused.model.lm_head.weight)


def test_a_step_that_damages_the_shared_modules_does_not_change_later_checks():
    def vandal(self, rows):
        with torch.no_grad():
            next(self.reference.parameters()).add_(1.0)
        self.model.half()

    assert "returned nothing" in assert_fails(checks.check_step, vandal)
    checks.check_step(reference_step)


def test_step_twins_are_fresh_values_of_the_public_kinds():
    public, hidden = checks.step_twins(PUBLIC_SEED), checks.step_twins(98_765)
    assert [kind(c) for c in public] == [kind(c) for c in hidden]
    assert public[0].args[1].rows != hidden[0].args[1].rows
    temperatures = [dict(c.args[2]).get("temperature") for c in public + hidden]
    assert all(t != 1.0 for t in temperatures if t is not None) and any(temperatures)


def test_step_feedback_is_readable():
    message = assert_fails(checks.check_step, STEP_WRONG["advantages_sign_flipped"][0])
    assert "expected: 0.0578" in message and "got:      -0.0576" in message
    message = assert_fails(checks.check_step, STEP_WRONG["old_logps_not_detached"][0])
    assert "gradient of model.embed_tokens.weight: norm" in message
    assert "returned nothing" in assert_fails(checks.check_step, lambda self, rows: None)
    message = assert_fails(checks.check_step, lambda self, rows: 0.5)
    assert "must return (metrics, rollout)" in message

    def typo(self, rows):
        rollout = self.sample(rows)
        return rewardz, rollout  # noqa: F821

    message = assert_fails(checks.check_step, typo)
    assert "raised NameError" in message and "return rewardz, rollout" in message


# --- twins: the same kinds with other values -----------------------------------------------------


@pytest.mark.parametrize("twins", [checks.mask_twins, checks.logps_twins], ids=["mask", "logps"])
def test_hidden_twins_are_fresh_values_of_the_public_kinds(twins):
    """Same kinds (names up to the drawn numbers) and other values for another seed."""
    public, hidden = twins(PUBLIC_SEED), twins(98_765)
    assert [kind(c) for c in public] == [kind(c) for c in hidden]

    def tensors(case):
        arg = (
            case.args[1] if isinstance(case.args[1], completions.CompletionGroups) else case.args[0]
        )
        return arg.completion_ids if isinstance(arg, completions.CompletionGroups) else arg

    assert any(
        tensors(p).shape != tensors(h).shape or not torch.equal(tensors(p), tensors(h))
        for p, h in zip(public, hidden, strict=True)
    )


# --- exercise 4: training with the learner's step ------------------------------------------------


@pytest.fixture(autouse=False)
def quick(monkeypatch):
    monkeypatch.setenv("GRPO_QUICK", "1")


def test_training_with_a_right_step_passes(quick):
    """The lab's solution learns from the public seed and from the grader's. (The package's own
    step gives the same runs: ``test_step_reference_and_package_pass`` checks the two steps
    agree, so training it again would add a minute and no new case.)"""
    checks.check_training(reference_step)
    checks.check_training(reference_step, seed=GRADER_SEEDS[0])


def test_training_seed_is_fixed_per_use():
    assert checks.TRAINING_SEEDS == {"public": 0, "graded": 1}


def test_grading_trains_once(monkeypatch):
    """Under `lab grade` the notebook's own run, the public check and the hidden one use the
    graded seed: one cached run, not two (a lab 06 notebook took 9 minutes to grade)."""
    seeds = []

    def record(step, cfg=None, progress=False):
        seeds.append((cfg or checks.training_config()).seed)

    monkeypatch.setattr(checks, "train_with_step", record)
    for graded in (False, True):
        monkeypatch.setenv(GRADING_ENV, "1" if graded else "0")
        checks.train_with_step(reference_step)  # the notebook's cell
        for seed in (None, 12_345):  # the public check, the hidden one
            with pytest.raises(CheckFailed):  # record returns no run: "step returned nothing"
                checks.check_training(reference_step, seed=seed)
    assert seeds == [0, 0, 1, 1, 1, 1]


@pytest.mark.parametrize(
    "fn", [STEP_WRONG["advantages_sign_flipped"][0], no_update], ids=["sign_flipped", "no_update"]
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


def mask_count_at_most_one(completion_ids, eos_ids):
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids)))
    return (is_eos.long().cumsum(dim=1) <= 1).long()  # "at most one EOS so far"


def mask_down_the_batch(completion_ids, eos_ids):
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids))).long()
    return ((is_eos.cumsum(dim=0) - is_eos) == 0).long()


@pytest.mark.parametrize(
    "fn, hint",
    [
        (mask_count_at_most_one, "a count <= 1 also keeps what follows the first EOS"),
        (mask_down_the_batch, "not down the batch (dim=0)"),
    ],
    ids=["count<=1", "dim=0"],
)
@pytest.mark.parametrize("seed", [None, GRADER_SEEDS[0]])
def test_mask_slips_are_told_their_own_hint(fn, hint, seed):
    """Both once got the hint that the EOS itself is kept, which they did."""
    assert_told(checks.check_mask_after_eos, fn, hint, seed)
