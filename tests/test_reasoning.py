"""Notebook 10's task: the data, the column sums, the measures of reasoning, the rewards."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grpo_minimal.course.reasoning import (
    column_steps,
    direct_target,
    make_length_penalty,
    operands,
    reasoning_rate,
    reasoning_target,
    steps_right,
    steps_right_rate,
    think_block,
    writes_steps,
)
from grpo_minimal.data import DATA_DIR, load_math_dataset, load_reasoning, problem_key
from grpo_minimal.device import torch_threads
from grpo_minimal.rewards import accuracy_reward, format_reward

STEP_RE = re.compile(r"([0-9])\+([0-9])(\+1)?=([0-9]+)")


def read_split(name: str) -> list[dict]:
    path = DATA_DIR / f"reasoning_{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def answer_from_steps(steps: str) -> int:
    """Check each written step on its own (digit + digit [+ carry] = sum, the carry in matching
    the column before) and read the answer off them: the independent check of a target."""
    carry, digits = 0, []
    for step in steps.split():
        match = STEP_RE.fullmatch(step)
        assert match, step
        x, y, plus_one, total = int(match[1]), int(match[2]), match[3], int(match[4])
        assert bool(plus_one) == bool(carry), step  # +1 written exactly when a carry comes in
        assert total == x + y + carry, step
        digits.append(total % 10)
        carry = total // 10
    return int(("1" if carry else "") + "".join(str(d) for d in reversed(digits)))


def test_splits_are_disjoint_and_the_shipped_sizes():
    train, test = read_split("train"), read_split("test")
    assert (len(train), len(test)) == (4000, 500)
    keys = {
        name: [problem_key(r["prompt"]) for r in rows]
        for name, rows in (("train", train), ("test", test))
    }
    assert len(set(keys["train"])) == 4000 and len(set(keys["test"])) == 500  # no repeats
    assert not set(keys["train"]) & set(keys["test"])  # a+b and b+a are one problem


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_target_step_is_right(split):
    for row in read_split(split):
        a, b = operands(row["prompt"])
        assert 100 <= a <= 999 and 100 <= b <= 999
        assert int(row["answer"]) == a + b
        # the steps' digits are the operands' digits, column by column from the units
        columns = [STEP_RE.fullmatch(s).group(1, 2) for s in row["steps"].split()]
        assert "".join(x for x, _ in reversed(columns)) == str(a)
        assert "".join(y for _, y in reversed(columns)) == str(b)
        assert answer_from_steps(row["steps"]) == a + b
        assert row["steps"] == " ".join(column_steps(a, b))


def test_loaders_and_the_dataset_name():
    assert load_reasoning("test") == load_math_dataset("reasoning", "test")
    assert load_reasoning("train")[0].keys() == {"prompt", "answer"}  # steps are not for rewards
    with pytest.raises(ValueError, match="reasoning split must be one of"):
        load_reasoning("mix_train")


def test_script_reproduces_the_shipped_files_and_fresh_problems_are_new(tmp_path):
    script = str(DATA_DIR / "make_reasoning.py")
    subprocess.run(
        [sys.executable, script, "--out", str(tmp_path)], check=True, capture_output=True
    )
    for name in ("train", "test"):
        shipped = (DATA_DIR / f"reasoning_{name}.jsonl").read_bytes()
        assert (tmp_path / f"reasoning_{name}.jsonl").read_bytes() == shipped
    fresh = tmp_path / "fresh.jsonl"
    subprocess.run(
        [sys.executable, script, "--fresh", "300", "--out", str(fresh)],
        check=True,
        capture_output=True,
    )
    rows = [json.loads(line) for line in fresh.read_text().splitlines()]
    shipped_keys = {problem_key(r["prompt"]) for n in ("train", "test") for r in read_split(n)}
    fresh_keys = {problem_key(r["prompt"]) for r in rows}
    assert len(fresh_keys) == 300 and not fresh_keys & shipped_keys


def test_column_steps_by_hand():
    assert column_steps(347, 285) == ["7+5=12", "4+8+1=13", "3+2+1=6"]
    assert column_steps(999, 1) == ["9+1=10", "9+0+1=10", "9+0+1=10"]  # then the carry: 1000
    assert column_steps(120, 304) == ["0+4=4", "2+0=2", "1+3=4"]
    assert reasoning_target(347, 285) == (
        "<think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>"
    )
    assert direct_target(347, 285) == "<answer>632</answer>"
    for prompt in ("34*2=", "34+2", "3 4+2="):
        with pytest.raises(ValueError, match="not an addition prompt"):
            operands(prompt)


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_column_steps_add_up(a, b):
    assert answer_from_steps(" ".join(column_steps(a, b))) == a + b
    target = reasoning_target(a, b)
    assert steps_right(f"{a}+{b}=", target) is True
    assert accuracy_reward([target, direct_target(a, b)], [str(a + b)] * 2) == [1.0, 1.0]


def test_think_block_and_steps_by_hand():
    prompt = "347+285="
    right = "<think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>"
    wrong_step = "<think>7+5=12 4+8+1=14 3+2+1=6</think><answer>642</answer>"
    missing_step = "<think>7+5=12 4+8+1=13</think><answer>632</answer>"
    direct = "<answer>632</answer>"
    empty = "<think> </think><answer>632</answer>"
    unclosed = "<think>7+5=12 4+8+1=13<answer>632</answer>"
    assert think_block(right) == "7+5=12 4+8+1=13 3+2+1=6"
    assert think_block(direct) is None and think_block(unclosed) is None
    assert [writes_steps(t) for t in (right, direct, empty, unclosed)] == [
        True,
        False,
        False,
        False,
    ]
    assert steps_right(prompt, right) is True
    assert steps_right(prompt, wrong_step) is False and steps_right(prompt, missing_step) is False
    assert steps_right(prompt, direct) is None and steps_right(prompt, empty) is None
    texts = [right, wrong_step, missing_step, direct, empty]
    assert reasoning_rate(texts) == 3 / 5
    assert steps_right_rate([prompt] * 5, texts) == 1 / 3  # of the three that write steps
    assert steps_right_rate([prompt], [direct]) is None and reasoning_rate([]) == 0.0


def test_rewards_on_hand_cases():
    """The outcome reward reads the answer block only: wrong steps with the right answer still
    earn 1, the right number inside the think block alone earns 0. The format reward pays the
    strict R1 form, so a direct answer gets none of it (why the main run leaves it out)."""
    texts = [
        "<think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>",  # right, written
        "<answer>632</answer>",  # right, direct
        "<think>7+5=12 4+8+1=14 3+2+1=6</think><answer>632</answer>",  # a wrong step
        "<think>7+5=12 4+8+1=13 3+2+1=6 632</think>",  # no answer block
        "<answer>642</answer>",  # wrong
        "<think>7+5=12</think><answer>632",  # unclosed answer
    ]
    assert accuracy_reward(texts, ["632"] * 6) == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert format_reward(texts) == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_length_penalty_counts_tokens():
    from grpo_minimal.lm_model import load_tokenizer

    tokenizer = load_tokenizer("tiny-reasoning")
    penalty = make_length_penalty(tokenizer, per_token=0.01)
    direct, written = direct_target(347, 285), reasoning_target(347, 285)
    # a tag is one token: <answer> 6 3 2 </answer> is 5 tokens; the written one 30
    assert penalty([direct, written]) == pytest.approx([-0.05, -0.30])
    assert len(tokenizer(written, add_special_tokens=False)["input_ids"]) == 30
    with pytest.raises(ValueError, match="per_token"):
        make_length_penalty(tokenizer, per_token=-1)


def test_cli_trains_the_reasoning_run_and_evaluate_reports_how_it_reasons(tmp_path, capsys):
    """``grpo-minimal math --dataset reasoning --model tiny-reasoning`` takes the reasoning
    settings (room for written steps, grpo aggregation) and logs how the completions reason;
    ``evaluate math`` reports completion_length and reasoning_rate beside accuracy, for the
    reasoning checkpoint and for the arithmetic model alike."""
    from grpo_minimal.cli import main as cli_main

    out = tmp_path / "run"
    assert (
        cli_main(
            [
                "math",
                "--dataset",
                "reasoning",
                "--model",
                "tiny-reasoning",
                "--out",
                str(out),
                "--max-steps",
                "2",
                "--eval-n",
                "16",
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
    saved = json.loads((out / "grpo_config.json").read_text())
    assert (saved["max_completion_length"], saved["loss_type"]) == (40, "grpo")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert 0 <= records[1]["reasoning_rate"] <= 1 and "steps_right" in records[1]
    assert cli_main(["evaluate", "math", "--model", str(out), "--n", "16"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["accuracy"] == summary["accuracy_after"]
    assert result["reasoning_rate"] == summary["reasoning_rate_after"]
    assert result["dataset"] == "reasoning" and result["completion_length"] > 5
    assert cli_main(["evaluate", "math", "--model", "tiny", "--n", "20"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["reasoning_rate"] == 0.0 and 2 <= result["completion_length"] <= 5


def test_reading_the_runs_by_hand():
    """final_intervals: mean and interval per variant, and the change from grpo's mean;
    completions_text marks each completion right / wrong and steps / direct."""
    from grpo_minimal.course.r1_zero import completions_text, final_intervals

    def run(variant, before, after):
        evals = [{"step": 0, "eval_accuracy": before}, {"step": 9, "eval_accuracy": after}]
        return {"variant": variant, "evals": evals}

    runs = [run("grpo", 0.3, 0.9), run("grpo", 0.3, 0.7), run("no_steps", 0.3, 0.5)]
    rows = final_intervals(runs, "eval_accuracy")
    assert [r["variant"] for r in rows] == ["grpo", "no_steps"]
    assert rows[0]["after"][0] == pytest.approx(0.8) and rows[0]["before"][0] == pytest.approx(0.3)
    low, high = rows[0]["after"][1:]
    assert 0.7 <= low <= 0.8 <= high <= 0.9
    assert rows[1]["minus_baseline"][0] == pytest.approx(-0.3) and "minus_baseline" not in rows[0]
    group = ["<think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>", "<answer>642</answer>"]
    text = completions_text([{"step": 5, "prompt": "347+285=", "completions": group}])
    assert text.splitlines() == [
        "step 5: 347+285=  (answer 632)",
        "  right, written  <think>7+5=12 4+8+1=13 3+2+1=6</think><answer>632</answer>",
        "  wrong, direct   <answer>642</answer>",
    ]


# A short run: 100 steps at the notebook's learning rate, held constant, on one thread (the
# fixture). Over seeds 5-9 (not the notebook's 0-4) it raised the greedy accuracy on these 100
# test problems (from 0.32) by 0.59, 0.07, 0.57, 0.06 and 0.53, and the chance of opening a
# think block (from 0.16) by 0.54, 0.12, 0.61, 0.15 and 0.53: a seed's run switches to writing
# steps within 100 steps or not yet. The thresholds are half the smallest of each, so the test
# (seed 5) passes with room even if another CPU's rounding made its run one that has not
# switched yet.
MIN_ACCURACY_GAIN, MIN_THINK_GAIN = 0.03, 0.06


@pytest.fixture
def one_thread():
    """torch on one thread for the test, restored after. 100 sampled steps amplify the last bits
    of a matmul, and their order depends on the thread count: the same seed on two threads is
    another run. Alone the suite gets every core, on a pytest-xdist worker a share
    (``conftest.py``); pinned, the run is the one the thresholds were measured on, wherever
    it runs."""
    with torch_threads(1):
        yield


def test_grpo_makes_the_cold_start_write_steps_and_get_more_right(one_thread):
    """From the reasoning cold start, the outcome reward alone raises both the held-out accuracy
    and the policy's chance of writing steps (``think_probability``: exact, not sampled)."""
    import torch

    from grpo_minimal.course.reasoning import log_reasoning, think_probability
    from grpo_minimal.lm_train import setup, train_math
    from grpo_minimal.math_config import MathConfig

    assert torch.get_num_threads() == 1  # the thresholds' setting, whatever the worker's share
    rows = load_reasoning("test")[:100]
    prompts = [row["prompt"] for row in rows]
    cfg = MathConfig.for_device(
        "cpu",
        dataset="reasoning",
        seed=5,
        max_steps=100,
        eval_every=0,
        eval_n=100,
        lr_scheduler_type="constant",
    )
    model, tokenizer = setup(cfg)
    think_before = think_probability(model, tokenizer, prompts)
    _, history = train_math(
        cfg, model, tokenizer, eval_rows=rows, progress=False, on_step=log_reasoning
    )
    think_after = think_probability(model, tokenizer, prompts)
    before, after = history[0]["eval_accuracy"], history[-1]["eval_accuracy"]
    assert after - before >= MIN_ACCURACY_GAIN, (before, after)
    assert think_after - think_before >= MIN_THINK_GAIN, (think_before, think_after)
    assert 0 <= history[-1]["reasoning_rate"] <= 1  # the trainer logs how the samples reason


# 4 to 8 tokens: in one batch, left padding of 0 to 4 tokens
THINK_PROMPTS = ["7+5=", "12+345=", "964+494=", "1+23=", "5000+6="]


def gpt2_with_the_reasoning_vocabulary(tokenizer):
    """A small random GPT-2: learned absolute position embeddings, where a prompt's positions
    matter in exact arithmetic (RoPE, in the shipped model, sees only relative positions)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=32,
        n_embd=32,
        n_layer=2,
        n_head=2,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("architecture", ["shipped", "absolute positions"])
def test_think_probability_of_a_padded_batch_is_each_prompt_alone(architecture):
    """pi(<think> | prompt) over prompts of different lengths, in one left-padded batch, is the
    mean of each prompt's own: the softmax of the last position of one forward of the prompt
    alone (no padding, positions 0, 1, ...).

    In float64 the two differ only by float64 rounding (at most 1e-17 observed on the means, 3e-16
    on single prompts), so the tolerance is 1e-12. A position mistake (no position ids: each
    padded prompt shifted by its padding) moves the shipped model's mean by 2e-9 (RoPE's angles
    are computed in float32, so shifted positions round differently; in exact arithmetic RoPE
    sees only relative positions) and the GPT-2's by 5e-3; a padding mistake (right padding, no
    attention mask) by 2e-3 to 0.13."""
    import torch

    from grpo_minimal.course.reasoning import think_probability
    from grpo_minimal.lm_model import load_model, load_tokenizer

    model, tokenizer = load_model("tiny-reasoning", torch.device("cpu"))
    if architecture != "shipped":
        model = gpt2_with_the_reasoning_vocabulary(tokenizer)
    model = model.to(torch.float64)
    think = tokenizer.convert_tokens_to_ids("<think>")
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in THINK_PROMPTS]
    assert len(set(lengths)) > 2  # the batch is padded, by different amounts

    def alone(prompt: str) -> float:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            return model(input_ids=ids).logits[0, -1].softmax(-1)[think].item()

    expected = sum(alone(p) for p in THINK_PROMPTS) / len(THINK_PROMPTS)
    assert think_probability(model, tokenizer, THINK_PROMPTS) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="no <think> token"):
        think_probability(model, load_tokenizer("tiny"), ["1+2="])
