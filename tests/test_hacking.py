"""The cold start (sft.py), the lenient grader and the hedging experiment (hacking.py), and the
length bias of the ``grpo`` aggregation that notebook 08 shows."""

from __future__ import annotations

import pytest
import torch

from grpo_minimal.course.hacking import hedge_target, is_hedge, run_hedging
from grpo_minimal.course.sft import encode_chars, sft_batch, supervised_finetune
from grpo_minimal.data import load_train_eval_rows
from grpo_minimal.lm_model import load_model
from grpo_minimal.losses import grpo_loss
from grpo_minimal.rewards import accuracy_reward, lenient_accuracy_reward


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny", torch.device("cpu"))


def test_targets_keep_their_spaces(tiny):
    _, tokenizer = tiny
    ids = encode_chars(tokenizer, "67 68")
    assert tokenizer.decode(ids) == "67 68"
    assert ids[2] == tokenizer.convert_tokens_to_ids(" ")


def test_unknown_characters_are_refused(tiny):
    with pytest.raises(ValueError, match=r"\['x'\]"):
        encode_chars(tiny[1], "6x")


def test_sft_batch_labels_only_the_target_and_eos(tiny):
    _, tokenizer = tiny
    rows = [{"prompt": "1+2=", "target": "2 3"}, {"prompt": "1+1=", "target": "2"}]
    batch = sft_batch(tokenizer, rows, key="target")
    eos, pad, space = (
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        encode_chars(tokenizer, " ")[0],
    )
    two, three = encode_chars(tokenizer, "23")
    assert batch["labels"][0].tolist() == [-100] * 4 + [two, space, three, eos]
    assert batch["labels"][1].tolist() == [-100] * 4 + [two, eos, -100, -100]
    assert batch["attention_mask"][1].tolist() == [1] * 6 + [0, 0]
    assert batch["input_ids"][1, -1].item() == pad


def test_supervised_finetune_learns_its_targets():
    model, tokenizer = load_model("tiny", torch.device("cpu"))
    rows = [{"prompt": f"{a}+1=", "target": f"{a} {a + 1}"} for a in range(10, 18)]
    losses = supervised_finetune(model, tokenizer, rows, steps=40, key="target", batch_size=8)
    assert losses[-1] < 0.25 * losses[0]


def test_hedges_and_the_two_graders():
    assert hedge_target("68") == "67 68 69"
    assert hedge_target("0") == "-1 0 1"
    completions = ["67 68 69", "68", "67", "6 8"]
    gold = ["68"] * 4
    assert [is_hedge(c) for c in completions] == [True, False, False, True]
    assert lenient_accuracy_reward(completions, gold) == [1.0, 1.0, 0.0, 0.0]
    assert accuracy_reward(completions, gold) == [0.0, 1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        lenient_accuracy_reward(["1", "2"], ["1"])


@pytest.mark.parametrize("loss_type, ratio", [("grpo", 3.0), ("dr_grpo", 1.0), ("dapo", 1.0)])
def test_length_bias_of_the_aggregation(loss_type, ratio):
    """Two wrong completions with the same advantage, 3 and 9 tokens long: equation (9) with
    ``grpo`` pushes each token of the short one down 9/3 = 3 times harder than each token of
    the long one (1/|o_i|); ``dr_grpo`` and ``dapo`` push every token alike."""
    mask = torch.zeros(2, 9, dtype=torch.float64)
    mask[0, :3] = 1
    mask[1, :] = 1
    logps = torch.zeros(2, 9, dtype=torch.float64, requires_grad=True)
    loss, _ = grpo_loss(
        logps,
        None,
        None,
        torch.tensor([-1.0, -1.0], dtype=torch.float64),
        mask,
        beta=0.0,
        epsilon=0.2,
        loss_type=loss_type,
        max_completion_length=9,
        num_items_in_batch=mask.sum(),
    )
    loss.backward()
    short, long = logps.grad[0, 0].item(), logps.grad[1, 0].item()
    assert short > 0 and long > 0  # minimising the loss lowers both (advantage < 0)
    assert short / long == pytest.approx(ratio, rel=1e-12)


def test_lenient_grader_teaches_hedging_and_strict_refuses_it():
    """The headline of notebook 08, section 8, on a small budget: 150 GRPO steps (64 sampled
    completions each) from one cold start, once with each grader.

    Certain by construction, on any seed, thread count or CPU: each run is scored by its own
    grader. The strict run's reward is its strict accuracy at every step; the lenient run pays
    completions that the strict grader does not (its hedges around the answer).

    Certain in direction, from the graders: a hedge of different numbers always scores 0 under
    the strict grader (the lowest reward, so its advantage is never positive) and 1 under the
    lenient one whenever the answer is among its numbers. So strict training drives sampled
    hedges down and lenient training drives them up. The thresholds are on 50- and 10-step
    windows (not one step's 64 samples) and sit well inside what seeds 0-13 gave (every one
    passes; the range in brackets; seed 0 on two threads repeats its one-thread run exactly):
    - strict run, steps 101-150: hedge rate below 5% (1.0-2.3%) and below half of its rate over
      steps 1-10 (2.9-7.1 times lower);
    - lenient run, steps 101-150: hedge rate at least 5 times the strict run's (10-37 times)
      and 3 points above its own over steps 1-10 (+7.8 to +35 points);
    - strict accuracy, steps 101-150: the strict run's at least 3 points above the lenient
      run's (9-31 points);
    - the strict run's greedy hedge rate ends below 2% (0 in all 14).
    Whether the *greedy* answer tips over to a hedge under the lenient grader differs from seed
    to seed (not in seed 3), so it is not asserted.
    """
    train, test = load_train_eval_rows("arithmetic", "test", 200)
    result = run_hedging(0, [("lenient", "dapo"), ("strict", "dapo")], train, test, steps=150)
    lenient, strict = (result["runs"][k] for k in ("lenient/dapo", "strict/dapo"))
    assert len(lenient["hedge_rate"]) == len(strict["hedge_rate"]) == 150

    # each run is scored by its own grader (the values are rounded to 4 places)
    assert strict["reward_mean"] == pytest.approx(strict["strict_accuracy"], abs=1e-4)
    assert any(
        paid > right + 1e-3
        for paid, right in zip(lenient["reward_mean"], lenient["strict_accuracy"], strict=True)
    )

    def mean(run, key, first, last):  # over steps first..last (1-based)
        return sum(run[key][first - 1 : last]) / (last - first + 1)

    def hedges(run):  # sampled hedge rate over steps 1-10 and over steps 101-150
        return mean(run, "hedge_rate", 1, 10), mean(run, "hedge_rate", 101, 150)

    (strict_early, strict_late), (lenient_early, lenient_late) = hedges(strict), hedges(lenient)
    assert strict_late < 0.05 and strict_late < 0.5 * strict_early
    assert lenient_late >= 5 * strict_late and lenient_late >= lenient_early + 0.03
    late_accuracy = [mean(run, "strict_accuracy", 101, 150) for run in (strict, lenient)]
    assert late_accuracy[0] >= late_accuracy[1] + 0.03
    assert strict["greedy"]["hedge_rate"] < 0.02
