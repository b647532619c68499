"""Build the tiny math language model the course ships: ``data/tiny_math_lm/``.

Run from the repository root (about a minute on 2 CPU cores; seeded):

    .venv/bin/python data/make_tiny_model.py

What it does, top to bottom:

1. a character-level tokenizer (one token per character: digits, ``+ - * =``, space, plus
   ``<pad>``, ``<eos>`` and ``<unk>``), built with ``tokenizers`` (a ``WordLevel`` model over
   single characters) and saved as a transformers ``PreTrainedTokenizerFast``;
2. a Qwen2 causal LM built from a config (random weights, about 0.8M parameters);
3. supervised fine-tuning on the shipped arithmetic train split (``"23+45="`` -> ``"68<eos>"``,
   loss on the answer tokens only), holding out the last ``VAL_SIZE`` train problems to decide
   when to stop: training ends at the first check where their greedy accuracy reaches
   ``TARGET_VAL_ACCURACY``, so the model is only *partly* competent and GRPO has room to show;
4. greedy accuracy on the held-out test split (never used above), written with the seed to
   ``tiny_math_lm/training_info.json``, and the model saved in Hugging Face format
   (``model.safetensors``, ``config.json``, ``generation_config.json``, tokenizer files).

Loading it needs no network::

    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    model = AutoModelForCausalLM.from_pretrained("data/tiny_math_lm")
    tokenizer = PreTrainedTokenizerFast.from_pretrained("data/tiny_math_lm")

(not ``AutoTokenizer``, which rebuilds a qwen2 model's tokenizer as byte-level BPE: see
``grpo_minimal.lm_model.load_tokenizer``)

The numbers are the same on every run on the same machine (same torch, same thread count);
another machine may land on a slightly different stopping step. ``data/TINY_MODEL.md`` records
the figures of the shipped copy.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing the package
from grpo_minimal.course.sft import sft_batch  # noqa: E402
from grpo_minimal.data import load_arithmetic  # noqa: E402
from grpo_minimal.rewards import accuracy_reward  # noqa: E402

SEED = 0
OUT = HERE / "tiny_math_lm"
SPECIAL = ["<pad>", "<eos>", "<unk>"]
CHARS = list("0123456789+-*= ")
VAL_SIZE = 300  # the last train problems, held out from SFT to decide when to stop
TARGET_VAL_ACCURACY = 0.40  # stop at the first check at or above this
MAX_STEPS = 6000
CHECK_EVERY = 25
BATCH_SIZE = 64
LEARNING_RATE = 1e-3
MAX_NEW_TOKENS = 5  # answers of 2-digit addition have at most 3 digits, then <eos>


def build_tokenizer(words: Sequence[str] = (), context: int = 32) -> PreTrainedTokenizerFast:
    """One token per character, and one per each of ``words`` (``make_reasoning_model.py``: the
    R1 tags); unknown characters become ``<unk>``; decoding concatenates."""
    vocab = {token: i for i, token in enumerate(SPECIAL + CHARS + list(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    pattern = "|".join([w.replace("/", "\\/") for w in words] + [r"[\s\S]"])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=context,
    )


def build_model(
    tokenizer: PreTrainedTokenizerFast, context: int = 32, max_new_tokens: int = MAX_NEW_TOKENS
) -> Qwen2ForCausalLM:
    """A 4-layer Qwen2 with width 128 (grouped-query attention, 4 heads / 2 KV heads), a
    context of ``context`` tokens, greedy generation of ``max_new_tokens`` by default
    (``make_reasoning_model.py`` builds notebook 10's cold starts on it)."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        max_new_tokens=max_new_tokens,
        do_sample=False,
    )
    return model


@torch.no_grad()
def greedy_accuracy(model, tokenizer, rows: list[dict], batch_size: int = 250) -> float:
    """Fraction of ``rows`` whose greedy completion the course's accuracy reward scores 1."""
    model.eval()
    correct = 0.0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        enc = tokenizer([r["prompt"] for r in chunk], return_tensors="pt", padding=True)
        out = model.generate(**enc, do_sample=False, max_new_tokens=MAX_NEW_TOKENS)
        texts = tokenizer.batch_decode(
            out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        correct += sum(accuracy_reward(texts, [r["answer"] for r in chunk]))
    model.train()
    return correct / len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUT), help=f"output folder (default: {OUT})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"seed (default: {SEED})")
    args = parser.parse_args()

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    params = sum(p.numel() for p in model.parameters())
    print(f"Qwen2 from config: {params:,} parameters, vocabulary of {len(tokenizer)} characters")

    train = load_arithmetic("train")
    sft_rows, val_rows = train[:-VAL_SIZE], train[-VAL_SIZE:]
    test_rows = load_arithmetic("test")
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    rng = random.Random(args.seed)
    start, val_accuracy, step = time.perf_counter(), 0.0, 0
    model.train()
    for step in range(1, MAX_STEPS + 1):
        batch = sft_batch(tokenizer, rng.sample(sft_rows, BATCH_SIZE))
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % CHECK_EVERY == 0:
            val_accuracy = greedy_accuracy(model, tokenizer, val_rows)
            print(
                f"step {step:5d}  loss {loss.item():.3f}  held-out train accuracy {val_accuracy:.3f}"
            )
            if val_accuracy >= TARGET_VAL_ACCURACY:
                break

    test_accuracy = greedy_accuracy(model, tokenizer, test_rows)
    info = {
        "seed": args.seed,
        "parameters": params,
        "sft_steps": step,
        "batch_size": BATCH_SIZE,
        "learning_rate": LEARNING_RATE,
        "val_accuracy": round(val_accuracy, 4),
        "test_accuracy": round(test_accuracy, 4),
        "test_problems": len(test_rows),
        "seconds": round(time.perf_counter() - start, 1),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    out = Path(args.out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "training_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
