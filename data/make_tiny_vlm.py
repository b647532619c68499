"""Build notebook 13's tiny vision-language model: ``data/tiny_vlm/`` (seeded, about a minute).

Run from the repository root, after ``data/make_shapes.py``:

    .venv/bin/python data/make_tiny_vlm.py

1. ``grpo_minimal.vlm.build_tiny_vlm``: a LLaVA (``LlavaForConditionalGeneration``) whose text
   tower is the tiny math model (``data/tiny_math_lm``, its weights copied in, plus an
   ``<image>`` token) and whose vision tower is a fresh 2-layer CLIP over 32x32 images in 8x8
   patches (16 image tokens per picture);
2. supervised fine-tuning on ``shapes_train.jsonl`` (the picture, then ``"=3<eos>"``: loss on
   the answer and its end only, never on an image token), batch 64, AdamW lr 1e-3, one thread;
3. stopped at the first check (every 10 steps) where greedy accuracy on the validation split
   reaches ``TARGET`` (40%): partly competent on purpose, so that a group's completions disagree
   and GRPO has something to learn from;
4. greedy accuracy on the test split (never used above), and on the same test rows with every
   picture replaced by a white one (the image must be needed), written with the seed to
   ``tiny_vlm/training_info.json``; the model and its processor saved in Hugging Face format.

The numbers are the same on every run on the same machine (same torch, one thread).
``data/TINY_VLM.md`` records the shipped copy's figures.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the checkout's grpo_minimal

from grpo_minimal.data import load_shapes  # noqa: E402
from grpo_minimal.lm_model import format_prompt  # noqa: E402
from grpo_minimal.lm_train import evaluate_accuracy, save_checkpoint  # noqa: E402
from grpo_minimal.math_config import MathConfig  # noqa: E402
from grpo_minimal.vlm import blank_rows, build_tiny_vlm  # noqa: E402

SEED, TARGET, CHECK_EVERY, MAX_STEPS = 0, 0.40, 10, 1000
BATCH, LEARNING_RATE = 64, 1e-3


def sft_batch(processor, rows) -> dict[str, torch.Tensor]:
    """Prompt (with its image) + answer + <eos>, left-padded; labels -100 except on the answer
    and <eos>, so no image token, prompt token or pad carries loss."""
    eos = processor.tokenizer.eos_token
    texts = [format_prompt(r["prompt"], processor, "plain") + r["answer"] + eos for r in rows]
    batch = processor(
        images=[r["image"] for r in rows],
        text=texts,
        return_tensors="pt",
        padding=True,
        padding_side="left",
        add_special_tokens=False,
    )
    labels = torch.full_like(batch["input_ids"], -100)
    for i, row in enumerate(rows):
        target = len(row["answer"]) + 1  # one token per character, then <eos>
        labels[i, -target:] = batch["input_ids"][i, -target:]
    return {**batch, "labels": labels}


def main() -> None:
    torch.set_num_threads(1)
    random.seed(SEED)
    model, processor = build_tiny_vlm(HERE / "tiny_math_lm", seed=SEED)
    train, validation, test = (load_shapes(s) for s in ("train", "validation", "test"))
    cfg = MathConfig(model="tiny-vlm", dataset="shapes", max_completion_length=2)

    def accuracy(rows) -> float:
        return evaluate_accuracy(model, processor, rows, cfg)[0]

    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    rng, step, history = random.Random(SEED), 0, []
    val = accuracy(validation)
    history.append({"step": 0, "validation_accuracy": val})
    while val < TARGET and step < MAX_STEPS:
        model.train()
        loss = model(**sft_batch(processor, rng.sample(train, BATCH))).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % CHECK_EVERY == 0:
            model.eval()
            val = accuracy(validation)
            history.append(
                {"step": step, "loss": round(loss.item(), 4), "validation_accuracy": val}
            )
            print(f"step {step}: loss {loss.item():.3f}, validation {val:.3f}", flush=True)
    model.eval()
    info = {
        "seed": SEED,
        "steps": step,
        "target_validation_accuracy": TARGET,
        "validation_accuracy": val,
        "test_accuracy": accuracy(test),
        "test_accuracy_blank_images": accuracy(blank_rows(test)),
        "parameters": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "history": history,
    }
    out = HERE / "tiny_vlm"
    save_checkpoint(model, processor, out)
    (out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print({k: v for k, v in info.items() if k != "history"})


if __name__ == "__main__":
    main()
