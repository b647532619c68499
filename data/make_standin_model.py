"""Build the stand-in for the real model: ``data/standin_lm/``, so that CI runs the GPU lesson's
code path (a byte-level BPE tokenizer, a chat template, GSM8K-style prompts with spaces and
letters, the ``r1`` and ``boxed`` templates) on a CPU, with nothing downloaded.

Run from the repository root (about a minute on 2 CPU cores; seeded):

    .venv/bin/python data/make_standin_model.py

What it does, top to bottom:

1. a byte-level BPE tokenizer trained with ``tokenizers`` on the course's own text and data
   (``CORPUS``: the data files, the R1 and boxed instructions, the chat roles), with Qwen2's way of
   cutting text before the merges (``SPLIT``: words, single digits, punctuation runs, spaces)
   and Qwen2.5-Instruct's special tokens (``<|endoftext|>`` pads, ``<|im_end|>`` ends a turn);
2. a chat template in Qwen2.5-Instruct's ChatML form (``<|im_start|>role\\n...<|im_end|>``,
   with a default system turn), written for this project;
3. a Qwen2 causal LM built from a config (``MODEL``: random weights, about 0.2M parameters,
   context 1024 tokens), with two end tokens in its generation config, as Qwen2.5-Instruct has;
4. supervised fine-tuning on the 20 problems of ``gsm8k_sample.jsonl`` in both chat formats
   (``r1``: ``<think>steps</think><answer>N</answer>``; ``boxed``: steps, then ``\\boxed{N}``),
   until it answers them, so that rewards read real answers in the tests. It knows nothing else:
   it is a stand-in for the plumbing, not a model of anything.

The figures (parameters, size on disk, training loss, greedy accuracy on the 20 problems in each
format, the corpus files and their SHA-256) go to ``standin_lm/standin_info.json``. The same
corpus, seed, torch build and thread count give the same files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package
from grpo_minimal.course.sft import sft_batch  # noqa: E402
from grpo_minimal.data import load_gsm8k_sample, read_jsonl  # noqa: E402
from grpo_minimal.lm_model import BOXED_INSTRUCTION, format_prompt  # noqa: E402
from grpo_minimal.rewards import R1_SYSTEM_PROMPT, accuracy_reward, format_reward  # noqa: E402

SEED = 0
OUT = HERE / "standin_lm"
# the course's data files (fixed: the tokenizer does not change when the prose does)
CORPUS = [
    "data/gsm8k_sample.jsonl",
    "data/arithmetic_train.jsonl",
    "data/arithmetic_mix_train.jsonl",
]
VOCAB_SIZE = 1024
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer pattern: contractions, letter runs, single digits, punctuation, spaces
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MODEL = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
)
STEPS, BATCH_SIZE, LEARNING_RATE = 600, 20, 3e-3
MAX_NEW_TOKENS = 96


def corpus_lines() -> list[str]:
    """The course's own text: each corpus file's lines (JSONL rows as their text fields)."""
    lines = [
        R1_SYSTEM_PROMPT,
        BOXED_INSTRUCTION,
        "system user assistant You are a helpful assistant.",
    ]
    for name in CORPUS:
        path = ROOT / name
        if path.suffix == ".jsonl":
            lines += [" ".join(str(v) for v in row.values()) for row in read_jsonl(path)]
        else:
            lines += path.read_text(encoding="utf-8").splitlines()
    return lines


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE: every string encodes (no unknown token), spaces and letters included."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        model_max_length=MODEL["max_position_embeddings"],
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    end_ids = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=end_ids[0],
        pad_token_id=tokenizer.pad_token_id,
        **MODEL,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=end_ids,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
        max_new_tokens=MAX_NEW_TOKENS,
    )
    return model


def targets(row: dict) -> dict[str, str]:
    """What the model learns to answer in each template: the worked steps (GSM8K's calculator
    notes ``<<3*12=36>>`` removed), then the final number in the template's format."""
    steps = re.sub(r"<<[^>]*>>", "", row["solution"]).strip()
    gold = row["answer"]
    return {
        "r1": f"<think>{steps}</think><answer>{gold}</answer>",
        "boxed": f"{steps} The answer is \\boxed{{{gold}}}.",
    }


def training_rows(tokenizer) -> list[dict[str, str]]:
    """``{"prompt": the chat-formatted question, "target": the answer}`` for every problem in
    both templates."""
    raw = read_jsonl(HERE / "gsm8k_sample.jsonl")
    rows = []
    for row, example in zip(load_gsm8k_sample(), raw, strict=True):
        solution = example["answer"].rpartition("####")[0]
        for template, target in targets({**row, "solution": solution}).items():
            rows.append(
                {"prompt": format_prompt(row["prompt"], tokenizer, template), "target": target}
            )
    return rows


def encode(tokenizer, text: str) -> list[int]:
    """Ids of ``text`` as the BPE tokenizer cuts it (``sft.sft_batch``'s ``encode``)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def greedy_scores(model, tokenizer, template: str) -> tuple[float, float]:
    """Greedy accuracy and R1-format reward on the 20 problems, prompts in ``template``."""
    model.eval()
    rows = load_gsm8k_sample()
    prompts = [format_prompt(r["prompt"], tokenizer, template) for r in rows]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    out = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    model.train()
    accuracy = float(np.mean(accuracy_reward(texts, [r["answer"] for r in rows])))
    return accuracy, float(np.mean(format_reward(texts)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUT), help=f"output folder (default: {OUT})")
    args = parser.parse_args()
    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    start = time.perf_counter()

    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    rows = training_rows(tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    rng = random.Random(SEED)
    model.train()
    for _ in range(STEPS):
        sample = rng.sample(rows, BATCH_SIZE)
        loss = model(**sft_batch(tokenizer, sample, key="target", encode=encode)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    out = Path(args.out)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (r1_acc, r1_format), (boxed_acc, _) = (
        greedy_scores(model, tokenizer, "r1"),
        greedy_scores(model, tokenizer, "boxed"),
    )
    info = {
        "seed": SEED,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(tokenizer),
        "sft_steps": STEPS,
        "final_sft_loss": round(loss.item(), 4),
        "greedy_accuracy_r1": r1_acc,
        "format_reward_r1": r1_format,
        "greedy_accuracy_boxed": boxed_acc,
        "corpus_sha256": {
            name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() for name in CORPUS
        },
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "build_s": round(time.perf_counter() - start, 1),
    }
    info["size_bytes"] = sum(f.stat().st_size for f in out.iterdir())
    (out / "standin_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
