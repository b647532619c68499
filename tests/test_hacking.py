"""The cold start (sft.py), the lenient grader and the hedging experiment (hacking.py), and the
length bias of the ``grpo`` aggregation that notebook 08 shows."""

from __future__ import annotations

import pytest
import torch

from grpo_minimal.data import load_train_eval_rows
from grpo_minimal.hacking import hedge_target, is_hedge, run_hedging
from grpo_minimal.lm_model import load_model
from grpo_minimal.losses import grpo_loss
from grpo_minimal.rewards import accuracy_reward, lenient_accuracy_reward
from grpo_minimal.sft import encode_chars, sft_batch, supervised_finetune


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
    loss, _ = grpo_loss(logps, None, None, torch.tensor([-1.0, -1.0], dtype=torch.float64), mask,
                        beta=0.0, epsilon=0.2, loss_type=loss_type, max_completion_length=9,
                        num_items_in_batch=mask.sum())  # fmt: skip
    loss.backward()
    short, long = logps.grad[0, 0].item(), logps.grad[1, 0].item()
    assert short > 0 and long > 0  # minimising the loss lowers both (advantage < 0)
    assert short / long == pytest.approx(ratio, rel=1e-12)


def test_lenient_grader_teaches_hedging_and_strict_refuses_it():
    """The headline of notebook 08, section 8, on a small budget (150 steps from the same cold
    start). Sampled completions, steps 101-150: the lenient grader's hedge rate is higher than at
    step 1 by at least 3 points and at least 4 times the strict grader's, and its strict
    accuracy at least 5 points lower; the strict grader's greedy hedge rate ends below 2%.
    Sampled rates, not greedy ones: whether the greedy answer tips over to a hedge differs from
    seed to seed (1 seed of 5 did not in bench/results/hedging.json), the sampled rate rose in
    all 5 (from 14-30% at step 1 to 32-66% at steps 101-150, strict grader 1.4-2.6%). Seeds 0 and
    3-5 here: +26, +7, +29, +25 points; 32, 10, 23, 22 times; 23, 9, 20, 25 points lower."""
    train, test = load_train_eval_rows("arithmetic", "test", 200)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as bench/hedging.py runs
    try:
        result = run_hedging(0, [("lenient", "dapo"), ("strict", "dapo")], train, test, steps=150)
    finally:
        torch.set_num_threads(threads)
    lenient, strict = (result["runs"][k] for k in ("lenient/dapo", "strict/dapo"))

    def late(run, key):
        return sum(run[key][100:150]) / 50

    assert late(lenient, "hedge_rate") >= lenient["hedge_rate"][0] + 0.03
    assert late(lenient, "hedge_rate") >= 4 * late(strict, "hedge_rate")
    assert late(strict, "strict_accuracy") >= late(lenient, "strict_accuracy") + 0.05
    assert strict["greedy"]["hedge_rate"] < 0.02
