"""The GPU road's vision-language model, SmolVLM-256M-Instruct, through the course's trainer on a
CPU: ``data/standin_vlm`` has its classes (Idefics3: SigLIP tiles, pixel shuffle, a Llama text
model; ``Idefics3Processor`` with image splitting) at a tiny size, random weights
(``data/make_standin_vlm.py``).

- The stand-in is an Idefics3 whose processor tiles a 32x32 picture as SmolVLM's does (16 tiles
  and a global one); a Hub id whose config has a vision tower loads as a VLM.
- GRPO trains on it: the default path (shared prompts, the sampling loop), activation
  checkpointing (per-row passes), LoRA, and beta > 0 (a reference copy); the loss is finite and
  the vision tower gets a gradient.
- Shared-prompt and per-row log-probs (and gradients) agree, with padded prompts and images of
  different tile counts (the sampling loop draws what ``generate`` draws:
  ``tests/test_sampling_loop.py``).
- A system prompt survives SmolVLM's chat template; a LoRA checkpoint reloads with its processor.
"""

from __future__ import annotations

import math

import pytest
import torch
from numerics import assert_close_float32_sums

from grpo_minimal.completions import sample_completions
from grpo_minimal.data import load_shapes
from grpo_minimal.lm_model import format_prompt, is_vlm_folder, load_model
from grpo_minimal.lm_train import train_math
from grpo_minimal.lm_trainer import completion_logps
from grpo_minimal.math_config import MathConfig
from grpo_minimal.r1_format import R1_SYSTEM_PROMPT

STANDIN = "data/standin_vlm"
TILES, TOKENS_PER_TILE = 17, 4  # a 32x32 picture: 4x4 tiles and a global one, 4 tokens each


@pytest.fixture(scope="module")
def vlm():
    return load_model(STANDIN, torch.device("cpu"))


@pytest.fixture(scope="module")
def rows():
    """Three pictures, one with a question (a longer prompt: left padding) and one twice as
    wide (fewer tiles: Idefics3 pads pixel_values with blank tiles)."""
    rows = load_shapes("validation")[:3]
    rows[1] = {**rows[1], "prompt": "How many shapes?"}
    rows[2] = {**rows[2], "image": rows[2]["image"].resize((64, 32))}
    return rows


def standin_config(**settings) -> MathConfig:
    """A run on the stand-in: 2 pictures x 2 answers a step, float32, no evaluation on the way."""
    run = dict(model=STANDIN, dataset="shapes", prompts_per_step=2, num_generations=2)
    return MathConfig(**run, eval_every=0, dtype="float32", **settings)


def some_reward(completions, **_):
    """Rewards that differ between completions (the stand-in answers nothing): a gradient."""
    return [sum(map(ord, c)) / 100 for c in completions]


def test_the_standin_is_an_idefics3_that_tiles_as_smolvlm(vlm, rows):
    model, processor = vlm
    assert type(model).__name__ == "Idefics3ForConditionalGeneration"
    assert type(processor).__name__ == "Idefics3Processor"
    assert processor.image_processor.do_resize and processor.image_processor.do_image_splitting
    assert model.config.image_token_id == processor.image_token_id
    prompts = [format_prompt(r["prompt"], processor, "plain") for r in rows]
    assert prompts[0] == "<|im_start|>User:<image><end_of_utterance>\nAssistant:"
    torch.manual_seed(0)
    rollout = sample_completions(
        model, processor, rows, prompts, num_generations=2, max_new_tokens=3
    )
    pixels = rollout.prompt_inputs["pixel_values"]
    assert pixels.shape == (3, TILES, 3, 64, 64)
    assert rollout.prompt_inputs["pixel_attention_mask"].shape == (3, TILES, 64, 64)
    images = (rollout.prompt_ids == processor.image_token_id).sum(dim=1)
    assert images.tolist() == [TILES * TOKENS_PER_TILE] * 2 + [9 * TOKENS_PER_TILE]  # 2x4 + 1
    assert not (rollout.completion_ids == processor.image_token_id).any()


def test_a_hub_id_with_a_vision_tower_loads_as_a_vlm(monkeypatch):
    from transformers import AutoConfig

    configs = {"org/vlm": STANDIN, "org/text": "data/standin_lm"}
    real = AutoConfig.from_pretrained
    monkeypatch.setattr(AutoConfig, "from_pretrained", lambda name, **kw: real(configs[name]))
    assert is_vlm_folder("org/vlm") and not is_vlm_folder("org/text")
    assert is_vlm_folder(STANDIN) and not is_vlm_folder("data/standin_lm")


@pytest.mark.parametrize(
    "case, overrides",
    [
        ("default", {"beta": 0.0}),
        ("checkpointing", {"beta": 0.0, "gradient_checkpointing": True}),
        ("lora", {"beta": 0.0, "lora_r": 8}),
        ("reference", {"beta": 0.04}),
    ],
)
def test_grpo_trains_the_standin(case, overrides):
    cfg = standin_config(max_completion_length=4, max_steps=2, eval_n=4, **overrides)
    trainer, history = train_math(cfg, reward_funcs=[some_reward], progress=False)
    steps = history[1:]
    assert len(steps) == 2 and all(math.isfinite(s["loss"]) for s in steps)
    assert steps[-1]["grad_norm"] > 0
    assert trainer.share_prompts == (case != "checkpointing")
    assert (trainer.reference is not None) == (case == "reference")
    if case == "reference":
        assert steps[0]["kl"] == 0 and steps[1]["kl"] > 0  # the policy moved after one step
    vision = {n: p for n, p in trainer.model.named_parameters() if "vision_model" in n}
    trained = {n: p for n, p in vision.items() if p.requires_grad}
    if case == "lora":  # only the adapters train, the vision tower's included
        assert trained and all("lora_" in n for n in trained)
    else:
        assert trained.keys() == vision.keys()
    silent = [n for n, p in trained.items() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent, silent


def test_shared_prompt_and_per_row_passes_agree(vlm, rows):
    """Log-probs and the vision tower's gradients, with padded prompts and blank tiles."""
    model, processor = vlm
    prompts = [format_prompt(r["prompt"], processor, "plain") for r in rows]
    torch.manual_seed(1)
    rollout = sample_completions(
        model, processor, rows, prompts, num_generations=2, max_new_tokens=5
    )
    assert rollout.prompt_mask.sum(dim=1).unique().numel() == 3  # three prompt lengths
    mask = rollout.completion_mask
    vision = [p for n, p in model.named_parameters() if "vision_model" in n]
    results = {}
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        logps, _ = completion_logps(model, rollout, share_prompts=share)
        (logps * mask).sum().backward()
        results[share] = (logps.detach() * mask, torch.cat([p.grad.flatten() for p in vision]))
    model.zero_grad(set_to_none=True)
    hidden = model.config.text_config.hidden_size
    assert_close_float32_sums(results[True][0], results[False][0], terms=hidden)
    # one scale for the whole tower: a small layer's gradient is a sum of larger terms
    assert_close_float32_sums(results[True][1], results[False][1], terms=hidden * int(mask.sum()))


def test_a_system_prompt_survives_smolvlms_chat_template(vlm):
    _, processor = vlm
    text = format_prompt("What is 2+2?", processor, "r1")
    assert text.startswith(f"<|im_start|>System: {R1_SYSTEM_PROMPT}<end_of_utterance>\n")
    assert text.endswith("User:<image>What is 2+2?<end_of_utterance>\nAssistant:")


def test_a_lora_checkpoint_reloads_with_its_processor(tmp_path):
    cfg = standin_config(max_completion_length=2, max_steps=1, eval_n=2, lora_r=4)
    train_math(cfg, progress=False, out_dir=tmp_path)
    model, processor = load_model(str(tmp_path), torch.device("cpu"))
    assert type(model).__name__ == "Idefics3ForConditionalGeneration"
    assert type(processor).__name__ == "Idefics3Processor"
