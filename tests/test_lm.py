"""Unit tests of the causal-LM GRPO step (lm_grpo.py) and its loop (lm_train.py) on the
shipped tiny model.

Everything runs on the CPU in a few seconds, offline; no timing is asserted.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from numerics import FLOAT32_ULP, assert_close_float64

from grpo_minimal import group_advantages, grpo_loss
from grpo_minimal.cli import main as cli_main
from grpo_minimal.completions import CompletionGroups, mask_after_eos, sample_completions
from grpo_minimal.data import count_overlap, load_train_eval_rows
from grpo_minimal.device import autocast, peak_memory_mb, pick_device, pick_dtype
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import TINY_MODEL, check_prompt_lengths, format_prompt, load_model
from grpo_minimal.lm_train import MathConfig, evaluate_accuracy, save_checkpoint, train_math
from grpo_minimal.lm_trainer import completion_logits, completion_logps
from grpo_minimal.rewards import score_completions

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(23, 45), (10, 7), (99, 99)]]
EVAL_ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(31, 2), (4, 50), (66, 11)]]


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", torch.device("cpu"))


def small_cfg(**overrides) -> MathConfig:
    values = dict(device="cpu", prompts_per_step=2, num_generations=4, max_steps=2, eval_n=8)
    values.update(overrides)
    return MathConfig(**values)


def position_reward(completions, **kwargs):
    """A reward that always varies within a group, so every step has a learning signal."""
    return [float(i % 4) for i in range(len(completions))]


def fresh_trainer(reward_funcs=None, float64=False, **overrides) -> LMGRPOTrainer:
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    if float64:  # for equivalence tests: rounding far below any real difference
        model.double()
    return LMGRPOTrainer(small_cfg(**overrides), model, tokenizer, reward_funcs)


# --- the shipped model ---------------------------------------------------------------------------


def test_tiny_model_is_small_offline_and_char_level(tiny):
    model, tokenizer = tiny
    assert model.config.model_type in ("qwen2", "llama")
    assert sum(p.numel() for p in model.parameters()) <= 2_000_000
    for text in ("23+45=68", "12 + 3 =", " 1 2 "):  # spaces are characters too
        ids = tokenizer(text)["input_ids"]
        assert len(ids) == len(text) and tokenizer.decode(ids) == text
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    info = json.loads((TINY_MODEL / "training_info.json").read_text())
    assert 0.3 <= info["test_accuracy"] <= 0.7 and "seed" in info
    assert sum(f.stat().st_size for f in TINY_MODEL.iterdir()) < 8 * 2**20


def test_tiny_tokenizer_loads_as_it_was_saved(tiny, tmp_path):
    """transformers 5 rebuilds a qwen2 tokenizer as byte-level BPE through AutoTokenizer (spaces
    dropped, letters lost); ``load_tokenizer`` keeps the shipped one-token-per-character one,
    with ``<unk>`` for characters outside the vocabulary, and a saved checkpoint keeps it."""
    model, tokenizer = tiny
    assert tokenizer("1 2")["input_ids"] == tokenizer.convert_tokens_to_ids(["1", " ", "2"])
    assert tokenizer("1a")["input_ids"] == [
        tokenizer.convert_tokens_to_ids("1"),
        tokenizer.unk_token_id,
    ]
    save_checkpoint(model, tokenizer, tmp_path)
    _, reloaded = load_model(str(tmp_path), torch.device("cpu"))
    for text in ("1 2", "12 + 3 =", "1a", "67 68 69"):
        assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert reloaded.padding_side == "left"


def test_a_gsm8k_prompt_is_refused_by_the_tiny_model_in_one_line(tiny):
    from grpo_minimal.data import load_gsm8k_sample

    model, tokenizer = tiny
    prompt = load_gsm8k_sample()[0]["prompt"]
    with pytest.raises(ValueError, match=rf"prompt 0 is {len(prompt)} tokens long") as err:
        check_prompt_lengths([prompt], tokenizer, model, 5)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="prompt 1 has characters .* does not know: 'bc'"):
        check_prompt_lengths(["1+2=", "b2=c"], tokenizer, model, 5)


# --- stage 1: sampling ----------------------------------------------------------------------------


def test_mask_after_eos_keeps_the_first_eos_and_nothing_after():
    ids = torch.tensor([[5, 1, 7, 1], [5, 6, 7, 8], [1, 5, 5, 5], [5, 8, 1, 6]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
    assert torch.equal(mask_after_eos(ids, [1]), expected)
    # a chat model has several end tokens: the first of any of them ends the completion
    two_eos = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    assert torch.equal(mask_after_eos(ids, [1, 8]), two_eos)


def test_sampling_is_one_generate_call_with_groups_in_consecutive_blocks(tiny, monkeypatch):
    model, tokenizer = tiny
    calls = []
    original = model.generate

    def counting_generate(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", counting_generate)
    torch.manual_seed(0)
    rollout = sample_completions(
        model, tokenizer, ROWS, [r["prompt"] for r in ROWS], num_generations=4, max_new_tokens=5
    )
    assert len(calls) == 1 and calls[0][0] == 12  # 3 prompts x 4, one call
    assert rollout.prompts == [r["prompt"] for r in ROWS for _ in range(4)]
    assert [r["answer"] for r in rollout.rows] == [r["answer"] for r in ROWS for _ in range(4)]
    # prompts are stored once each, left-padded: the shorter "10+7=" starts with padding
    assert rollout.prompt_ids.shape[0] == 3 and rollout.num_generations == 4
    assert rollout.prompt_mask[1, 0] == 0 and rollout.prompt_mask[0].all()
    # after the first EOS everything is padding and masked
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    for ids, mask in zip(rollout.completion_ids, rollout.completion_mask, strict=True):
        n = int(mask.sum())
        assert (ids[n:] == pad).all() and (mask[:n] == 1).all()
        assert eos not in ids[: n - 1].tolist()
    assert rollout.completion_ids.shape[1] <= 5
    texts = tokenizer.batch_decode(rollout.completion_ids, skip_special_tokens=True)
    assert rollout.completions == texts


def test_generation_stops_at_max_length_without_eos(tiny):
    model, tokenizer = tiny
    torch.manual_seed(0)
    rollout = sample_completions(
        model, tokenizer, ROWS, [r["prompt"] for r in ROWS], num_generations=2, max_new_tokens=1
    )
    assert rollout.completion_ids.shape[1] == 1 and rollout.completion_mask.all()


def test_sampling_is_seeded(tiny):
    model, tokenizer = tiny
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs.append(
            sample_completions(
                model,
                tokenizer,
                ROWS,
                [r["prompt"] for r in ROWS],
                num_generations=4,
                max_new_tokens=5,
            ).completions
        )
    assert outs[0] == outs[1]


# --- stage 3: log-probs ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny64():
    """The tiny model in float64: equivalence tests compare where rounding is ~1e-15."""
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    return model.double(), tokenizer


def unpadded_logps(model, rollout: CompletionGroups, temperature: float) -> list[torch.Tensor]:
    """The textbook way, one completion at a time with no padding at all: a forward over its
    real prompt tokens and completion tokens, a full log-softmax. Any position error in the
    batched, left-padded path (rotary models hide a constant shift) shows against this."""
    G = rollout.num_generations
    rows = []
    for i in range(rollout.completion_ids.shape[0]):
        prompt = rollout.prompt_ids[i // G][rollout.prompt_mask[i // G].bool()]
        completion = rollout.completion_ids[i][rollout.completion_mask[i].bool()]
        ids = torch.cat([prompt, completion])[None]
        logits = model(input_ids=ids).logits[0] / temperature
        full = torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
        rows.append(full.gather(-1, completion[:, None]).squeeze(-1))
    return rows


@pytest.mark.numerics
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_completion_logps_match_unpadded_per_row_runs(tiny64, temperature):
    """Prompts of unequal length (left padding 0-2 tokens) and completions of unequal length."""
    model, tokenizer = tiny64
    torch.manual_seed(0)
    rollout = sample_completions(
        model,
        tokenizer,
        ROWS,
        [r["prompt"] for r in ROWS],
        num_generations=2,
        max_new_tokens=5,
        temperature=temperature,
    )
    assert rollout.prompt_mask.sum(1).unique().numel() > 1  # the padding really differs
    with torch.no_grad():
        logps, entropy = completion_logps(model, rollout, temperature, with_entropy=True)
        unshared, _ = completion_logps(model, rollout, temperature, share_prompts=False)
        expected = unpadded_logps(model, rollout, temperature)
        out = model.generate(
            input_ids=rollout.prompt_ids,
            attention_mask=rollout.prompt_mask,
            do_sample=False,
            max_new_tokens=1,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    assert logps.dtype == torch.float64
    for i, row in enumerate(expected):
        n = len(row)
        assert_close_float64(logps[i, :n], row)
        assert_close_float64(unshared[i, :n], row)
    # the first token's distribution is the one generate sampled from; generate hands out its
    # logits in float32, so they carry float32 rounding: about 2**-24 of the largest logit
    scores = out.logits[0].double() / temperature
    first = torch.log_softmax(scores, -1).repeat_interleave(2, 0)
    first = first.gather(-1, rollout.completion_ids[:, :1]).squeeze(-1)
    float32_rounding = 8 * 2**-24 * (scores.abs().max().item() + 1.0)
    torch.testing.assert_close(logps[:, 0], first, rtol=0, atol=float32_rounding)
    # entropy of the token distribution at each completion position
    logits = completion_logits(model, rollout).double() / temperature
    log_p = torch.log_softmax(logits, -1)
    exact_entropy = -(log_p.exp() * log_p).sum(-1)
    mask = rollout.completion_mask.bool()
    assert_close_float64(entropy[mask], exact_entropy[mask])


@pytest.mark.numerics
def test_shared_prompt_pass_gives_the_same_gradient(tiny64):
    """Encoding each prompt once and copying its cache G times is exact, gradients included."""
    model, tokenizer = tiny64
    torch.manual_seed(0)
    rollout = sample_completions(
        model, tokenizer, ROWS, [r["prompt"] for r in ROWS], num_generations=4, max_new_tokens=5
    )
    grads = []
    for share in (True, False):
        logps, _ = completion_logps(model, rollout, share_prompts=share)
        loss = (logps * rollout.completion_mask * torch.linspace(-1, 1, 12)[:, None]).sum()
        grads.append(torch.autograd.grad(loss, list(model.parameters())))
    for shared, plain in zip(*grads, strict=True):
        assert_close_float64(shared, plain)


def test_a_group_is_g_copies_of_its_prompt(tiny):
    """Greedy completions of G copies in one group equal those of each copy on its own."""
    model, tokenizer = tiny
    prompts = ["5+61=", "99+99=", "7"]  # left padding of 0-2 tokens
    grouped = sample_completions(
        model, tokenizer, [{}] * 3, prompts, num_generations=2, max_new_tokens=5, do_sample=False
    )
    one_each = sample_completions(
        model,
        tokenizer,
        [{}] * 6,
        [p for p in prompts for _ in "ab"],
        num_generations=1,
        max_new_tokens=5,
        do_sample=False,
    )
    assert grouped.completions == one_each.completions


def test_sampling_ignores_the_models_own_generation_config(tiny):
    """transformers fills unset settings from model.generation_config; a chat model's top_k,
    min_p or repetition_penalty must not change the distribution the loss assumes."""
    model, tokenizer = tiny
    prompts, rows = ["5+61=", "99+99="], [{}, {}]

    def sample():
        torch.manual_seed(0)
        return sample_completions(
            model, tokenizer, rows, prompts, num_generations=16, max_new_tokens=5, temperature=1.0
        )

    clean = sample()
    own = model.generation_config
    polluted = copy.deepcopy(own)
    polluted.top_k, polluted.min_p, polluted.repetition_penalty = 1, 0.9, 5.0
    model.generation_config = polluted
    try:
        assert sample().completions == clean.completions
    finally:
        model.generation_config = own
    assert len(set(clean.completions[:16])) > 1  # top_k=1 would make every sample the same


# --- stages 2 and 4: rewards and advantages; bad input --------------------------------------------------


def test_score_completions_weights_and_none_rule():
    def always_one(completions, **kw):
        return [1.0] * len(completions)

    def some_none(completions, **kw):
        return [None, 0.5, None, 2.0]

    rewards, means = score_completions(
        [always_one, some_none], [1.0, 0.5], ["p"] * 4, ["a", "b", "c", "d"], [{"prompt": "p"}] * 4
    )
    assert rewards == [1.0, 1.25, 1.0, 2.0]  # None counts as nothing (TRL's nansum)
    assert means == {"always_one": 1.0, "some_none": 1.25}
    rewards, _ = score_completions(
        [some_none], [1.0], ["p"] * 4, list("abcd"), [{"prompt": "p"}] * 4
    )
    assert math.isnan(rewards[0]) and rewards[1] == 0.5


def test_reward_functions_get_dataset_columns_and_prompts():
    seen = {}

    def spy(prompts, completions, answer, level, **kw):
        seen.update(prompts=prompts, answer=answer, level=level)
        return [0.0] * len(completions)

    rows = [
        {"prompt": "1+1=", "answer": "2", "level": 1},
        {"prompt": "2+2=", "answer": "4", "level": 2},
    ]
    score_completions([spy], [1.0], ["1+1=", "2+2="], ["2", "5"], rows)
    assert seen == {"prompts": ["1+1=", "2+2="], "answer": ["2", "4"], "level": [1, 2]}


@pytest.mark.parametrize(
    "values, message",
    [
        ([1.0, 2.0], "returned 2 values for 3 completions"),
        ([1.0, float("nan"), 0.0], "returned nan for completion 1"),
        ([1.0, 0.0, float("inf")], "returned inf for completion 2"),
        ([1.0, "yes", 0.0], "returned 'yes' for completion 1"),
    ],
)
def test_bad_rewards_are_clear_errors(values, message):
    def bad(completions, **kw):
        return values

    with pytest.raises(ValueError, match=message):
        score_completions([bad], [1.0], ["p"] * 3, ["a", "b", "c"], [{"prompt": "p"}] * 3)


def test_a_reward_that_returns_one_number_is_a_clear_error():
    def scalar(completions, **kw):
        return 1.0

    with pytest.raises(ValueError, match=r"'scalar' returned 1.0 for 3 completions.*a list"):
        score_completions([scalar], [1.0], ["p"] * 3, ["a", "b", "c"], [{"prompt": "p"}] * 3)


def test_a_raising_reward_names_the_completion():
    def picky(completions, **kw):
        return [1.0 / (len(c) - 3) for c in completions]  # "abc" divides by zero

    with pytest.raises(RuntimeError, match=r"'picky' raised on completion 2 \('abc'\)"):
        score_completions(
            [picky], [1.0], ["p"] * 4, ["a", "ab", "abc", "abcd"], [{"prompt": "p"}] * 4
        )


def test_empty_dataset_is_a_clear_error(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="training dataset is empty"):
        train_math(small_cfg(), model, tokenizer, train_rows=[], eval_rows=ROWS, progress=False)
    with pytest.raises(ValueError, match="evaluation dataset is empty"):
        train_math(small_cfg(), model, tokenizer, train_rows=ROWS, eval_rows=[], progress=False)
    with pytest.raises(ValueError, match="row 1 needs a string 'prompt'"):
        train_math(
            small_cfg(),
            model,
            tokenizer,
            train_rows=[ROWS[0], {"question": "1+1"}],
            eval_rows=ROWS,
            progress=False,
        )


def test_prompt_longer_than_the_context_is_a_clear_error(tiny):
    model, tokenizer = tiny
    context = model.config.max_position_embeddings
    long_prompt = "1+" * context + "1="
    with pytest.raises(ValueError, match=r"prompt 1 is \d+ tokens long.*context of 32 tokens"):
        check_prompt_lengths(["1+1=", long_prompt], tokenizer, model, 5)
    with pytest.raises(ValueError, match="prompt 0 is"):
        train_math(
            small_cfg(),
            model,
            tokenizer,
            train_rows=[{"prompt": long_prompt, "answer": "1"}],
            eval_rows=ROWS,
            progress=False,
        )
    check_prompt_lengths(["1+1="], tokenizer, model, context - 4)  # exactly fits


def test_evaluation_checks_prompt_length_and_answers(tiny):
    model, tokenizer = tiny
    long_prompt = "1+" * model.config.max_position_embeddings + "1="
    with pytest.raises(ValueError, match="prompt 0 is"):
        evaluate_accuracy(model, tokenizer, [{"prompt": long_prompt, "answer": "1"}], small_cfg())
    with pytest.raises(ValueError, match="evaluation row 1 needs an 'answer' field"):
        evaluate_accuracy(model, tokenizer, [ROWS[0], {"prompt": "1+1="}], small_cfg())
    with pytest.raises(ValueError, match="training row 0 needs an 'answer' field"):
        train_math(
            small_cfg(),
            model,
            tokenizer,
            train_rows=[{"prompt": "1+1="}],
            eval_rows=ROWS,
            progress=False,
        )


def test_a_step_refuses_prompts_that_do_not_split_into_micro_batches():
    trainer = fresh_trainer([position_reward], prompts_per_step=2, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2 must divide.*got 3"):
        trainer.step(ROWS)


def test_a_dataset_smaller_than_a_step_still_fills_the_step():
    sampled = []  # per step: (rows given, completions sampled, their prompts)

    class CountingTrainer(LMGRPOTrainer):
        def step(self, rows):
            record, rollout = super().step(rows)
            sampled.append((len(rows), rollout.completion_ids.shape[0], rollout.prompts))
            return record, rollout

    _, history = train_math(
        small_cfg(prompts_per_step=4, eval_n=3),
        train_rows=ROWS[:1],
        eval_rows=EVAL_ROWS,
        progress=False,
        trainer_cls=CountingTrainer,
    )
    steps = history[1:]
    assert [r["step"] for r in steps] == [1, 2]
    # 4 prompts x 4 generations were sampled although the dataset holds one row
    assert sampled == [(4, 16, [ROWS[0]["prompt"]] * 16)] * 2
    for r in steps:
        assert math.isfinite(r["loss"])


def test_chat_templates_need_a_chat_tokenizer(tiny):
    _, tokenizer = tiny
    assert format_prompt("2+2=", tokenizer, "plain") == "2+2="
    with pytest.raises(ValueError, match="needs a tokenizer with a chat template"):
        format_prompt("2+2=", tokenizer, "r1")


def test_r1_and_boxed_templates_use_the_chat_template(tiny):
    _, tokenizer = tiny
    chat = tokenizer.__class__.from_pretrained(TINY_MODEL)
    chat.chat_template = (
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    r1 = format_prompt("What is 2+2?", chat, "r1")
    assert r1.startswith("[system] A conversation") and r1.endswith("What is 2+2?\n[assistant] ")
    assert "\\boxed{}" in format_prompt("What is 2+2?", chat, "boxed")


# --- stage 5: the update ----------------------------------------------------------------------------


def test_one_step_reports_finite_metrics_and_changes_the_policy():
    trainer = fresh_trainer(learning_rate=1e-3, beta=0.0)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    record, rollout = trainer.step(ROWS[:2])
    for key in (
        "reward_mean",
        "reward_std",
        "frac_zero_std",
        "kl",
        "clip_fraction",
        "entropy",
        "loss",
        "grad_norm",
        "completion_length",
        "step_s",
        "completions_per_s",
    ):
        assert math.isfinite(record[key]), key
    assert (
        len(rollout.completions) == 8 and record["reward/accuracy_reward"] == record["reward_mean"]
    )
    changed = any(
        not torch.equal(p, q) for p, q in zip(before, trainer.model.parameters(), strict=True)
    )
    assert changed == (record["frac_zero_std"] < 1)


def test_format_weight_adds_the_format_reward():
    trainer = fresh_trainer(format_weight=0.2)
    names = [f.__name__ for f in trainer.reward_funcs]
    assert names == ["accuracy_reward", "format_reward"] and trainer.reward_weights == [1.0, 0.2]
    record, _ = trainer.step(ROWS[:2])
    assert record["reward/format_reward"] == 0.0  # the tiny model never writes <think> tags
    assert record["reward_mean"] == pytest.approx(record["reward/accuracy_reward"])


def test_kl_reference_and_its_refresh():
    trainer = fresh_trainer([position_reward], beta=0.1, ref_update_every=2, learning_rate=1e-3)
    assert all(not p.requires_grad for p in trainer.reference.parameters())
    first, _ = trainer.step(ROWS[:2])
    assert first["kl"] == 0.0  # the policy still equals the reference
    second, _ = trainer.step(ROWS[1:])
    assert second["kl"] > 0  # the first step moved the policy away from it
    # every 2 steps the reference becomes a copy of the policy
    for p, q in zip(trainer.model.parameters(), trainer.reference.parameters(), strict=True):
        assert torch.equal(p, q)
    third, _ = trainer.step(ROWS[:2])
    assert third["kl"] == 0.0  # the same weights give the same log-probs, exactly
    assert fresh_trainer(beta=0.0).reference is None


@pytest.mark.parametrize("schedule", ["linear", "constant"])
def test_learning_rate_schedule(schedule):
    trainer = fresh_trainer(max_steps=2, num_iterations=2, lr_scheduler_type=schedule)
    rates = [trainer.step(ROWS[:2])[0]["learning_rate"] for _ in range(2)]
    lr = trainer.cfg.learning_rate
    # 4 optimizer steps in all; the rate after the last one is 0 with the linear schedule
    assert rates == ([lr / 2, 0.0] if schedule == "linear" else [lr, lr])


def test_num_iterations_uses_old_logps_so_clipping_can_act():
    trainer = fresh_trainer([position_reward], num_iterations=3, learning_rate=3e-3, epsilon=0.05)
    records = [trainer.step(ROWS[:2])[0] for _ in range(3)]
    assert max(r["clip_fraction"] for r in records) > 0


class FixedRollout:
    """Make ``trainer.sample`` return one stored rollout (to compare updates on equal data)."""

    def __init__(self, rollout):
        self.rollout = rollout

    def __call__(self, rows):
        return self.rollout


@pytest.mark.numerics
@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_gradient_accumulation_gives_the_same_update(loss_type):
    base = fresh_trainer(loss_type=loss_type)
    torch.manual_seed(1)
    rollout = base.sample(ROWS[:2])
    results = []
    for accumulation in (1, 2):  # 2 prompts: one group per micro-batch
        trainer = fresh_trainer(
            [position_reward],
            float64=True,
            loss_type=loss_type,
            learning_rate=1e-3,
            gradient_accumulation_steps=accumulation,
        )
        trainer.sample = FixedRollout(rollout)
        record, _ = trainer.step(ROWS[:2])
        # .grad still holds the (accumulated, clipped) gradient the optimizer used
        results.append(([p.grad.clone() for p in trainer.model.parameters()], record))
    (grads_1, rec_1), (grads_2, rec_2) = results
    assert rec_1["grad_norm"] == pytest.approx(rec_2["grad_norm"], rel=64 * 2**-24)
    for g, h in zip(grads_1, grads_2, strict=True):
        assert g.dtype == torch.float64
        assert_close_float64(g, h)


@pytest.mark.numerics
def test_step_loss_is_grpo_loss_of_the_batch():
    """The logged loss is grpo_loss on the rollout with the trainer's beta and reference (one
    iteration, no accumulation), after a first step has moved the policy off the reference."""
    trainer = fresh_trainer([position_reward], loss_type="grpo", beta=0.5, learning_rate=1e-2)
    trainer.step(ROWS[:2])  # now policy != reference: the KL term is not 0
    torch.manual_seed(2)
    rollout = trainer.sample(ROWS[:2])
    trainer.sample = FixedRollout(rollout)
    with torch.no_grad():
        logps, _ = completion_logps(trainer.model, rollout)
        ref_logps, _ = completion_logps(trainer.reference, rollout)
    rewards, _ = score_completions(
        [position_reward], [1.0], rollout.prompts, rollout.completions, rollout.rows
    )
    mask = rollout.completion_mask
    advantages = group_advantages(torch.tensor(rewards), 4)
    expected, metrics = grpo_loss(
        logps, None, ref_logps, advantages, mask, beta=0.5, epsilon=0.2, loss_type="grpo"
    )
    without_kl, _ = grpo_loss(
        logps, None, None, advantages, mask, beta=0.0, epsilon=0.2, loss_type="grpo"
    )
    # float32 sums over the batch's tokens, in possibly another order: their worst-case rounding
    terms = int(mask.sum()) * trainer.model.config.hidden_size
    tolerance = terms * FLOAT32_ULP * (abs(expected.item()) + 1)
    # the KL term moves the loss by far more than rounding, so leaving it out must show
    assert abs(expected.item() - without_kl.item()) > 10 * tolerance
    record, _ = trainer.step(ROWS[:2])
    assert record["loss"] == pytest.approx(expected.item(), abs=tolerance)
    assert record["kl"] == pytest.approx(metrics["kl"], rel=terms * FLOAT32_ULP)


# --- precision and device branches that run on a CPU ---------------------------------------------


def test_device_and_dtype_choices():
    assert pick_device("cpu").type == "cpu" and pick_dtype(torch.device("cpu")) == torch.float32
    assert pick_dtype(torch.device("cpu"), "bfloat16") == torch.bfloat16
    with pytest.raises(ValueError, match="dtype must be one of"):
        pick_dtype(torch.device("cpu"), "float8")
    with pytest.raises(ValueError, match="device must be one of"):
        pick_device("tpu")
    if not torch.cuda.is_available():
        assert pick_device("auto").type == "cpu"
        with pytest.raises(ValueError, match="torch sees no CUDA GPU"):
            pick_device("cuda")
    assert peak_memory_mb(torch.device("cpu")) > 0


def test_each_launched_process_takes_its_own_gpu(monkeypatch):
    """Under torchrun / accelerate launch, "cuda" is cuda:LOCAL_RANK (not every rank on GPU 0)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pick_device("cuda") == torch.device("cuda") and pick_device("auto").type == "cuda"
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert pick_device("cuda") == torch.device("cuda", 3)
    assert pick_device("auto") == torch.device("cuda", 3)
    assert pick_device("cuda:1") == torch.device("cuda", 1)  # an explicit GPU stays as asked
    assert pick_device("cpu").type == "cpu"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_step_on_cpu(dtype):
    """The autocast (and, for float16, loss-scaling) branch the GPU path takes, run on the CPU."""
    trainer = fresh_trainer(dtype=dtype, beta=0.05, learning_rate=1e-3)
    assert trainer.scaler.is_enabled() == (dtype == "float16")
    with autocast(trainer.device, trainer.dtype):
        assert torch.get_autocast_dtype("cpu") == getattr(torch, dtype)
    record, _ = trainer.step(ROWS[:2])
    assert math.isfinite(record["loss"]) and math.isfinite(record["kl"])
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())  # master weights


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_first_step_kl_is_exactly_zero_in_every_precision(dtype):
    """The reference is the policy's twin in the same precision and autocast, whatever the
    device and dtype: before the first update the two give identical log-probs, so KL = 0."""
    trainer = fresh_trainer([position_reward], dtype=dtype, beta=0.1)
    ref_dtypes = {p.dtype for p in trainer.reference.parameters()}
    assert ref_dtypes == {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    record, _ = trainer.step(ROWS[:2])
    assert record["kl"] == 0.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_first_step_kl_is_exactly_zero_on_a_gpu(dtype):
    """The branch that held the bug: on CUDA the reference was cast to the compute dtype."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny", torch.device("cuda"))
    trainer = LMGRPOTrainer(
        small_cfg(device="cuda", dtype=dtype, beta=0.1), model, tokenizer, [position_reward]
    )
    assert {p.dtype for p in trainer.reference.parameters()} == {torch.float32}
    assert trainer.step(ROWS[:2])[0]["kl"] == 0.0


def test_reward_functions_get_the_dataset_prompts_not_the_chat_text(tiny):
    """TRL passes the dataset's prompt column to reward functions; so does the trainer, even
    when the model saw a chat-formatted prompt."""
    _, tokenizer = tiny
    chat = tokenizer.__class__.from_pretrained(TINY_MODEL)
    chat.chat_template = (
        "{% for m in messages %}{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}={% endif %}"
    )
    torch.manual_seed(0)
    model, _ = load_model("tiny", torch.device("cpu"))
    seen = []

    def spy(prompts, completions, **kwargs):
        seen.extend(prompts)
        return position_reward(completions)

    trainer = LMGRPOTrainer(
        small_cfg(prompt_template="boxed", max_completion_length=2), model, chat, [spy]
    )
    rows = [{"prompt": "1+1", "answer": "2"}, {"prompt": "2+3", "answer": "5"}]
    _, rollout = trainer.step(rows)
    assert seen == ["1+1"] * 4 + ["2+3"] * 4
    assert rollout.prompts[0] != "1+1" and rollout.prompts[0].startswith("1+1")  # the chat text


def test_held_out_rows_that_are_training_rows_are_refused(tmp_path):
    """A dataset with one split (gsm8k_sample, a .jsonl file) would be evaluated on its own
    training rows: refused with the overlap count, unless asked for explicitly."""
    assert count_overlap(ROWS, [*EVAL_ROWS, ROWS[1], {"prompt": " 23+45= "}]) == 2
    with pytest.raises(ValueError, match=r"20 of 20 evaluation prompts.*also training prompts"):
        load_train_eval_rows("gsm8k_sample", "test", 20)
    with pytest.raises(ValueError, match=r"20 of 20 evaluation prompts.*also training prompts"):
        train_math(small_cfg(dataset="gsm8k_sample", eval_n=20))  # it loads the rows itself
    train, held_out = load_train_eval_rows("gsm8k_sample", "test", 20, allow_overlap=True)
    assert held_out == train[:20]
    train, held_out = load_train_eval_rows("arithmetic", "test", 500)
    assert count_overlap(train, held_out) == 0 and len(held_out) == 500
    with pytest.raises(ValueError, match="2 of 3 evaluation prompts are also training prompts"):
        train_math(
            small_cfg(), train_rows=ROWS, eval_rows=[ROWS[0], ROWS[2], EVAL_ROWS[0]], progress=False
        )
    _, history = train_math(
        small_cfg(max_steps=1, allow_eval_overlap=True),
        train_rows=ROWS,
        eval_rows=ROWS,
        progress=False,
    )
    assert history[0]["eval_overlap"] == 3


def test_cli_refuses_an_overlapping_evaluation_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["math", "--dataset", "gsm8k_sample", "--device", "cpu", "--out", str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "evaluation prompts" in err and "allow_eval_overlap" in err and "Traceback" not in err


def test_evaluate_math_says_when_the_overlap_was_not_checked(capsys):
    """A model that is not a checkpoint of ours: what it was trained on is unknown (null). (The
    stand-in, not the tiny model: a GSM8K question does not fit the tiny one's 32 tokens.)"""
    standin = str(TINY_MODEL.parent / "standin_lm")
    assert (
        cli_main(
            [
                "evaluate",
                "math",
                "--model",
                standin,
                "--dataset",
                "gsm8k_sample",
                "--eval-split",
                "train",
                "--n",
                "2",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["eval_overlap"] is None


def test_gradient_checkpointing_step_on_cpu():
    trainer = fresh_trainer(gradient_checkpointing=True, learning_rate=1e-3)
    record, _ = trainer.step(ROWS[:2])
    flag = getattr(trainer.model, "is_activation_checkpointing", None)
    assert flag if flag is not None else trainer.model.is_gradient_checkpointing
    assert math.isfinite(record["loss"])


def test_gpu_defaults_are_the_real_model_configuration():
    cfg = MathConfig.for_device("cuda")  # only builds the config: no GPU needed
    assert cfg.model == "Qwen/Qwen2.5-0.5B-Instruct" and cfg.dataset == "gsm8k"
    assert cfg.prompt_template == "r1" and cfg.gradient_checkpointing
    assert MathConfig.for_device("cpu").model == "tiny"
    assert MathConfig.for_device("cuda", max_steps=5).max_steps == 5
    tiny_on_gpu = MathConfig.for_device("cuda", model="tiny")  # the tiny model keeps its lesson
    assert tiny_on_gpu.prompt_template == "plain" and tiny_on_gpu.dataset == "arithmetic"
    assert tiny_on_gpu.device == "cuda"


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("prompts_per_step", 0, "prompts_per_step must be in"),
        ("temperature", 0.0, "temperature must be in"),
        ("top_p", 1.5, "top_p must be in"),
        ("gradient_accumulation_steps", 3, "must divide prompts_per_step=8"),
        ("prompt_template", "chatml", "prompt_template must be one of"),
        ("dtype", "fp8", "dtype must be one of"),
        ("device", "tpu", "device must be one of"),
        ("model", "", "model must be a non-empty string"),
        ("format_weight", -1.0, "format_weight must be in"),
    ],
)
def test_math_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        MathConfig(**{field: value})


# --- checkpoints, training loop and CLI ----------------------------------------------------------


def test_checkpoints_are_written_atomically(tiny, tmp_path, monkeypatch):
    model, tokenizer = tiny
    save_checkpoint(model, tokenizer, tmp_path, {"seed": 0})
    names = {p.name for p in tmp_path.iterdir()}
    assert {"config.json", "model.safetensors", "grpo_config.json"} <= names
    assert not any(n.startswith(".saving-") for n in names)
    reloaded, _ = load_model(str(tmp_path), torch.device("cpu"))
    for p, q in zip(model.parameters(), reloaded.parameters(), strict=True):
        assert torch.equal(p, q)
    # a save that fails half-way leaves the previous checkpoint as it was, and no debris
    before = (tmp_path / "model.safetensors").read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(tokenizer, "save_pretrained", broken)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    try:
        with pytest.raises(OSError, match="disk full"):
            save_checkpoint(model, tokenizer, tmp_path)
    finally:
        with torch.no_grad():
            next(model.parameters()).sub_(1.0)
    assert (tmp_path / "model.safetensors").read_bytes() == before
    assert {p.name for p in tmp_path.iterdir()} == names


def test_train_math_logs_every_step_and_evaluates(tmp_path):
    cfg = small_cfg(max_steps=3, eval_every=2, save_every=2)
    seen = []
    trainer, history = train_math(
        cfg,
        train_rows=ROWS,
        eval_rows=EVAL_ROWS,
        out_dir=tmp_path,
        progress=False,
        on_step=lambda record, _: seen.append(record),
    )
    assert [r["step"] for r in history] == [0, 1, 2, 3] and seen == history
    assert [r["step"] for r in history if "eval_accuracy" in r] == [0, 2, 3]
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [0, 1, 2, 3]
    assert json.loads((tmp_path / "grpo_config.json").read_text())["max_steps"] == 3
    acc, completions = evaluate_accuracy(trainer.model, trainer.tokenizer, EVAL_ROWS, cfg)
    assert acc == history[-1]["eval_accuracy"] and len(completions) == 3


def test_time_budget_stops_training():
    cfg = small_cfg(max_steps=1000, time_budget_s=1e-9)
    _, history = train_math(cfg, train_rows=ROWS, eval_rows=EVAL_ROWS, progress=False)
    assert history[-1]["step"] == 1 and "eval_accuracy" in history[-1]


def test_cli_math_then_evaluate(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        cli_main(
            [
                "math",
                "--out",
                str(out),
                "--max-steps",
                "2",
                "--eval-n",
                "20",
                "--prompts-per-step",
                "2",
                "--no-progress",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["eval_n"] == 20
    assert (out / "learning_curve.png").is_file() and (out / "model.safetensors").is_file()
    assert cli_main(["evaluate", "math", "--model", str(out), "--n", "20"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["n"] == 20 and result["accuracy"] == summary["accuracy_after"]
    assert result["dataset"] == "arithmetic" and result["split"] == "test"


def test_cli_reports_bad_values_without_a_traceback(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_main(["math", "--temperature", "0", "--device", "cpu"])
    assert exc.value.code == 2
    assert "temperature must be in" in capsys.readouterr().err
