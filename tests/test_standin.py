"""The GPU lesson's code path, run on a CPU on the stand-in for the real model (data/standin_lm).

No GPU is lent to this project, so what a learner with a Colab T4 runs (a byte-level BPE
tokenizer with a chat template, GSM8K prompts with spaces and letters, the r1 and boxed
templates, reduced-precision autocast, ``MathConfig.for_device("cuda")``) runs here on a small
Qwen2 built by ``data/make_standin_model.py``. This shows the plumbing works, on both backends;
it says nothing about a real GPU's speed or memory.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from grpo_minimal.cli import main
from grpo_minimal.data import DATA_DIR, load_gsm8k_sample
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import (
    check_prompt_lengths,
    eos_token_ids,
    format_prompt,
    load_model,
    load_tokenizer,
)
from grpo_minimal.lm_train import MathConfig
from grpo_minimal.rewards import R1_SYSTEM_PROMPT, accuracy_reward, format_reward

STANDIN = DATA_DIR / "standin_lm"
ROWS = load_gsm8k_sample()


def cpu_bf16() -> bool:
    """bfloat16 autocast on this CPU (torch emulates it where the CPU has no bf16 units)."""
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    except RuntimeError:
        return False


@pytest.fixture(scope="module")
def standin():
    return load_model(str(STANDIN), torch.device("cpu"))


def test_the_standin_is_small_and_shaped_like_the_real_model(standin):
    model, tokenizer = standin
    info = json.loads((STANDIN / "standin_info.json").read_text())
    assert model.config.model_type == "qwen2" and tokenizer.chat_template is not None
    assert sum(p.numel() for p in model.parameters()) == info["parameters"] < 300_000
    assert sum(f.stat().st_size for f in STANDIN.iterdir()) < 2**20
    assert tokenizer.unk_token_id is None  # byte-level: every string encodes
    end = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert eos_token_ids(model, tokenizer) == sorted(end)  # two end tokens, as Qwen2.5-Instruct
    assert tokenizer.pad_token == "<|endoftext|>"  # the pad is one of them, as in Qwen2.5


@pytest.mark.parametrize("template", ["r1", "boxed"])
def test_gsm8k_prompts_survive_tokenisation(standin, template):
    """Spaces, letters, digits and the chat template come back from the ids as they went in."""
    model, tokenizer = standin
    prompts = [format_prompt(row["prompt"], tokenizer, template) for row in ROWS]
    for row, text in zip(ROWS, prompts, strict=True):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
        assert row["prompt"] in text and text.endswith("<|im_start|>assistant\n")
        assert len(ids) < len(text)  # merged: BPE, not one id per character
        question = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(question) == row["prompt"] and " " in row["prompt"]
    assert (R1_SYSTEM_PROMPT in prompts[0]) == (template == "r1")
    check_prompt_lengths(
        prompts, tokenizer, model, MathConfig.PRESETS["gpu"]["max_completion_length"]
    )


def test_rewards_read_answers_that_went_through_the_tokenizer(standin):
    """A completion decoded from ids is what the rewards read: right answers score 1."""
    _, tokenizer = standin
    golds = [row["answer"] for row in ROWS]
    r1 = [f"<think>so {g} it is</think><answer>{g}</answer>" for g in golds]
    boxed = [f"The total is \\boxed{{{g}}}." for g in golds]
    for completions in (r1, boxed):
        ids = [
            tokenizer(c, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            for c in completions
        ]
        decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
        assert decoded == completions
        assert accuracy_reward(decoded, golds) == [1.0] * len(golds)
    assert format_reward(r1) == [1.0] * len(golds)
    shifted = [str(int(g) + 1) for g in golds]
    assert accuracy_reward(r1, shifted) == [0.0] * len(golds)


def gpu_lesson_flags() -> list[str]:
    """``MathConfig.for_device("cuda")`` as flags, on the stand-in and the offline GSM8K sample,
    for 2 steps; on the CPU, in bfloat16 autocast where it runs."""
    values = {
        **MathConfig.PRESETS["gpu"],
        "model": str(STANDIN),
        "dataset": "gsm8k_sample",
        "max_steps": 2,
        "eval_n": 4,
        "eval_every": 0,
    }
    assert MathConfig.for_device("cuda").to_dict() == {
        **MathConfig(device="cuda").to_dict(),
        **MathConfig.PRESETS["gpu"],
    }
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in values.items()]
    dtype = "bfloat16" if cpu_bf16() else "float32"
    return [*flags, "--device", "cpu", "--dtype", dtype, "--allow-eval-overlap", "true"]


@pytest.mark.parametrize("backend", ["grpo_minimal", "trl"])
def test_the_gpu_lesson_runs_on_the_standin_then_evaluates(backend, standin, tmp_path, capsys):
    if backend == "trl":
        pytest.importorskip("trl")
    _, tokenizer = standin
    out = tmp_path / backend
    assert (
        main(
            ["math", *gpu_lesson_flags(), "--backend", backend, "--no-progress", "--out", str(out)]
        )
        == 0
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["eval_n"] == 4
    # the stand-in answers its 20 problems greedily: a score above 0 means that the chat
    # prompt, generation, decoding and the rewards all worked end to end
    assert summary["accuracy_before"] > 0
    saved = json.loads((out / "grpo_config.json").read_text())
    assert (saved["prompt_template"], saved["max_completion_length"]) == ("r1", 256)
    reloaded = load_tokenizer(str(out))
    assert reloaded.chat_template == tokenizer.chat_template
    text = format_prompt(ROWS[0]["prompt"], tokenizer, "r1")
    assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert main(["evaluate", "math", "--model", str(out), "--n", "4"]) == 0
    evaluated = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert evaluated["accuracy"] == summary["accuracy_after"] and evaluated["n"] == 4


def test_reward_functions_see_the_dataset_prompt_on_both_backends(standin, tmp_path):
    """TRL samples from the chat-formatted prompt; its reward functions, like ours, are called
    with the dataset's own prompt."""
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import make_trl_trainer

    seen: dict[str, list[str]] = {"ours": [], "trl": []}

    def recorder(name):
        def prompt_seen(prompts, completions, **kwargs):
            seen[name].extend(prompts)
            return [0.0] * len(completions)

        return prompt_seen

    cfg = dataclasses.replace(
        MathConfig.for_device(
            "cuda",
            model=str(STANDIN),
            prompts_per_step=2,
            num_generations=2,
            gradient_accumulation_steps=1,
            max_completion_length=8,
            max_steps=1,
            beta=0.0,
        ),
        device="cpu",
        dtype="float32",
    )
    rows = ROWS[:2]
    model, tokenizer = load_model(str(STANDIN), torch.device("cpu"))
    LMGRPOTrainer(cfg, model, tokenizer, [recorder("ours")]).step(rows)
    trainer, _ = make_trl_trainer(
        cfg, model, tokenizer, rows, str(tmp_path), reward_funcs=[recorder("trl")]
    )
    trainer.train()
    questions = {row["prompt"] for row in rows}
    assert set(seen["ours"]) == questions and set(seen["trl"]) == questions
    assert trainer.train_dataset[0]["prompt"] == format_prompt(rows[0]["prompt"], tokenizer, "r1")
