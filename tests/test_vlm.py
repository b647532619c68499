"""Notebook 13's vision-language model through the course's trainer (``vlm.py``).

- The rollout carries each prompt's image (``prompt_inputs``) through ``select``/``split``; the
  image tokens sit in the prompt, never in a completion, and are never sampled.
- The log-probs the loss uses are those of transformers' own causal-LM loss with every prompt
  and image position labelled -100: image tokens carry no loss, yet the vision tower and the
  projector get a gradient (through attention); shared-prompt and per-row passes agree.
- (The sampling loop draws what ``generate`` draws on the VLM: ``tests/test_sampling_loop.py``.)
- Seed 002's trainers: the written-out loss equals the trainer's; k1 and discounting by hand.
- Bad input is one line: an unreadable image, a row without an image, an image given to a text
  model, an image of another size; the held-out check compares pictures.
- A learning test: the defaults raise validation accuracy within a small budget.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from numerics import assert_close_float32_sums
from PIL import Image

from grpo_minimal.cli import main
from grpo_minimal.course.seed002 import (
    GAMMA,
    DiscountedGRPOTrainer,
    K1GRPOTrainer,
    _VariantLoss,
)
from grpo_minimal.data import count_overlap, load_jsonl, load_shapes
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import evaluate_accuracy, train_math
from grpo_minimal.lm_trainer import completion_logps
from grpo_minimal.math_config import MathConfig
from grpo_minimal.vlm import blank_rows, is_vlm

IMAGE_TOKENS = 16  # (32 / 8)^2 patches


@pytest.fixture(scope="module")
def vlm():
    model, processor = load_model("tiny-vlm", torch.device("cpu"))
    return model, processor


@pytest.fixture(scope="module")
def rows():
    return load_shapes("validation")[:8]


def config(**overrides) -> MathConfig:
    return MathConfig.for_device("cpu", model="tiny-vlm", **overrides)


def test_the_rollout_carries_the_image_with_its_prompt(vlm, rows):
    model, processor = vlm
    assert is_vlm(model) and model.config.image_token_id == processor.image_token_id
    trainer = LMGRPOTrainer(config(prompts_per_step=4, num_generations=4), model, processor)
    torch.manual_seed(0)
    rollout = trainer.sample(rows[:4])
    image_id = processor.image_token_id
    assert rollout.prompt_inputs["pixel_values"].shape == (4, 3, 32, 32)
    assert ((rollout.prompt_ids == image_id).sum(dim=1) == IMAGE_TOKENS).all()
    assert not (rollout.completion_ids == image_id).any()  # suppressed when sampling
    halves = rollout.split(2)
    assert [h.prompt_inputs["pixel_values"].shape[0] for h in halves] == [2, 2]
    assert torch.equal(
        halves[1].prompt_inputs["pixel_values"], rollout.prompt_inputs["pixel_values"][2:]
    )
    picked = rollout.take(torch.tensor([3, 0]))
    assert torch.equal(
        picked.row_inputs()["pixel_values"][:4], rollout.row_inputs()["pixel_values"][12:]
    )


def test_image_tokens_carry_no_loss_and_the_vision_tower_still_learns(vlm, rows):
    """Our log-probs equal transformers' own causal-LM loss with labels -100 on the prompt
    (its 16 image tokens included) and after each completion's end; gradients reach every
    vision layer but CLIP's unused pooler norm, and the projector."""
    model, processor = vlm
    trainer = LMGRPOTrainer(config(prompts_per_step=4, num_generations=4), model, processor)
    torch.manual_seed(1)
    rollout = trainer.sample(rows[:4])
    logps, _ = completion_logps(model, rollout, share_prompts=False)
    mask = rollout.completion_mask
    ours = -(logps * mask).sum() / mask.sum()

    G = rollout.num_generations
    input_ids = torch.cat([rollout.prompt_ids.repeat_interleave(G, 0), rollout.completion_ids], 1)
    attention = torch.cat([rollout.prompt_mask.repeat_interleave(G, 0), mask], 1)
    labels = input_ids.masked_fill(attention == 0, -100)
    labels[:, : rollout.prompt_ids.shape[1]] = -100  # the prompt and its image: no loss
    positions = (attention.cumsum(1) - 1).clamp(min=0)
    hf = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=positions,
        labels=labels,
        **rollout.row_inputs(),
    ).loss
    assert_close_float32_sums(ours, hf, terms=int(mask.sum()))

    model.zero_grad(set_to_none=True)
    shared, _ = completion_logps(model, rollout, share_prompts=True)
    assert_close_float32_sums(
        shared * mask, logps * mask, terms=model.config.text_config.hidden_size
    )
    (-(shared * mask).sum()).backward()
    silent = [
        n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0
    ]
    assert all("post_layernorm" in n for n in silent), silent
    assert any("vision_tower" in n for n, p in model.named_parameters() if p.grad is not None)
    model.zero_grad(set_to_none=True)


def test_the_written_out_loss_is_the_trainers(vlm, rows):
    """``seed002._VariantLoss`` with its default hooks is ``LMGRPOTrainer.loss``: the same loss
    value and gradient, so each variant changes only its one term."""
    model, processor = vlm
    cfg = config(prompts_per_step=4, num_generations=4)
    torch.manual_seed(2)
    plain = LMGRPOTrainer(cfg, model, processor)
    rollout = plain.sample(rows[:4])
    rollout.add(
        ref_logps=plain.frozen_logps(rollout) - 0.05 * torch.rand(rollout.completion_ids.shape),
        advantages=torch.randn(16),
        loss_mask=rollout.completion_mask,
    )
    results = []
    for cls in (LMGRPOTrainer, _VariantLoss):
        trainer = cls(cfg, model, processor)
        model.zero_grad(set_to_none=True)
        loss, _ = trainer.loss(rollout, rollout)
        loss.backward()
        results.append(
            (loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None])
        )
    assert torch.equal(results[0][0], results[1][0])  # the same operations in the same order
    for a, b in zip(results[0][1], results[1][1], strict=True):
        assert torch.equal(a, b)
    model.zero_grad(set_to_none=True)
    k1 = K1GRPOTrainer(cfg, model, processor)
    logps, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    assert torch.equal(k1.kl(logps, ref), torch.tensor([[0.5, -1.0]]))  # log pi - log pi_ref


def test_discounted_advantages_by_hand(vlm, rows):
    model, processor = vlm
    trainer = DiscountedGRPOTrainer(config(prompts_per_step=1, num_generations=2), model, processor)
    rollout = trainer.sample(rows[:1])
    rollout.completion_mask = torch.tensor([[1, 1], [1, 0]])  # lengths 2 and 1
    advantages, _ = trainer.advantages(torch.tensor([1.0, 0.0]), rollout)
    a = 0.5 / (0.5**0.5 + 1e-4)  # (r - mean) / (std + 1e-4), std with n - 1
    expected = torch.tensor([[GAMMA * a, a], [-a, -a]])  # the second's one token is its last
    assert torch.allclose(advantages, expected, rtol=1e-6)


def test_the_held_out_check_compares_pictures(rows):
    assert count_overlap(rows[:4], rows[4:]) == 0  # the same empty prompt, other pictures
    assert count_overlap(rows[:4], rows[2:6]) == 2


def write_rows(folder, image, **row):
    (folder / "pic.png").write_bytes(image) if isinstance(image, bytes) else image.save(
        folder / "pic.png"
    )
    path = folder / "rows.jsonl"
    path.write_text(json.dumps({"image": "pic.png", "prompt": "", "answer": "1", **row}) + "\n")
    return path


def cli(capsys, *args) -> tuple[int, str]:
    """``grpo-minimal math ... --max-steps 1`` in this process: its exit code and stderr."""
    with pytest.raises(SystemExit) as exited:
        main(["math", "--no-progress", "--max-steps", "1", *args])
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("unreadable", "rows.jsonl: row 0: image: "),
        ("no_image", "needs a string field 'image'"),
        ("text_model", "has an image, but the model is a text model"),
        ("wrong_size", "the image is 64x64 pixels; this model's vision tower takes 32x32"),
    ],
)
def test_bad_images_give_one_clear_line(tmp_path, capsys, case, message):
    white = Image.new("RGB", (32, 32), "white")
    if case == "unreadable":
        data = write_rows(tmp_path, b"not a png")
    elif case == "wrong_size":
        data = write_rows(tmp_path, Image.new("RGB", (64, 64), "white"))
    else:
        data = write_rows(tmp_path, white)
    if case == "no_image":
        with data.open("a") as fh:
            fh.write(json.dumps({"prompt": "", "answer": "2"}) + "\n")
    model = "tiny" if case == "text_model" else "tiny-vlm"
    out = str(tmp_path / "run")
    flags = ["--dataset", str(data), "--eval-split", str(data), "--allow-eval-overlap", "true"]
    code, err = cli(capsys, "--model", model, *flags, "--out", out)
    assert code == 2, err
    assert message in err and len(err.strip().splitlines()) == 1


def test_the_defaults_learn_in_a_small_budget(vlm):
    """60 steps of the defaults (about 8 s on one thread) raise validation accuracy from the
    warm start's 41% by at least 5 points: seeds 0 to 4 here measured +10.0, +20.3, +19.3,
    +20.7 and +15.7 points (2026-12-06), and 17.7% with blank pictures, the share of one-shape
    pictures (the model answers 1 to a white picture)."""
    torch.set_num_threads(1)
    model, processor = load_model("tiny-vlm", torch.device("cpu"))
    validation = load_shapes("validation")
    cfg = config(max_steps=60, eval_every=0, seed=0)
    before = evaluate_accuracy(model, processor, validation, cfg)[0]
    trainer, history = train_math(
        cfg, model, processor, load_shapes("train"), validation, progress=False
    )
    after = history[-1]["eval_accuracy"]
    blank = evaluate_accuracy(trainer.model, processor, blank_rows(validation), cfg)[0]
    assert after - before >= 0.05, (before, after)
    assert blank < 0.30, blank


def test_fresh_images_are_in_no_split(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "data/make_shapes.py",
            "--fresh",
            "50",
            "--seed",
            "7",
            "--out",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    fresh = load_jsonl(tmp_path / "fresh.jsonl")
    assert len(fresh) == 50
    for split in ("train", "validation", "test"):
        assert count_overlap(load_shapes(split), fresh) == 0


def test_make_shapes_reproduces_the_shipped_splits(tmp_path):
    """The script redraws every shipped picture and row (pixels compared: PNG bytes may differ
    between Pillow versions, the pictures may not)."""
    subprocess.run(
        [sys.executable, "data/make_shapes.py", "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for split in ("train", "validation", "test"):
        ours = load_jsonl(tmp_path / f"shapes_{split}.jsonl")
        shipped_rows = load_shapes(split)
        assert [(r["prompt"], r["answer"]) for r in ours] == [
            (r["prompt"], r["answer"]) for r in shipped_rows
        ]
        assert all(
            a["image"].tobytes() == b["image"].tobytes()
            for a, b in zip(ours, shipped_rows, strict=True)
        )


def test_a_reference_refreshed_every_step_is_no_reference(vlm, rows):
    """Seed 002's first change, with one update per batch: the reference refreshed after every
    step is the policy that samples the next batch, so the KL term is exactly 0 in value and in
    gradient (k3 at log pi = log pi_ref: e^0 - 0 - 1 = 0, its gradient (1 - 1) grad log pi): the
    run is beta = 0's, step for step, up to rounding."""
    model, processor = vlm
    records = {}
    for name, settings in (("refreshed", {"ref_update_every": 1}), ("beta 0", {"beta": 0.0})):
        fresh, _ = load_model("tiny-vlm", torch.device("cpu"))
        trainer = LMGRPOTrainer(
            config(prompts_per_step=4, num_generations=4, **settings), fresh, processor
        )
        torch.manual_seed(5)
        records[name] = [trainer.step(rows[4 * i : 4 * i + 4])[0] for i in range(2)]
        records[name + " weights"] = [p.detach().clone() for p in fresh.parameters()]
    assert records["refreshed"][1]["kl"] == 0.0  # the first step's KL is 0 in both: pi = pi_ref
    assert [r["loss"] for r in records["refreshed"]] == [r["loss"] for r in records["beta 0"]]
    # the KL's zero gradient is a sum of equal and opposite terms, so the gradients agree up to
    # rounding; AdamW moves a weight by at most about the learning rate a step, whatever the
    # gradient's size, so two steps differ by at most 2 x 2 x lr even where rounding flips a sign
    bound = 4 * config().learning_rate
    for a, b in zip(records["refreshed weights"], records["beta 0 weights"], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=bound)
