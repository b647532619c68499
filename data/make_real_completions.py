"""Sample real completions of SmolLM2-135M-Instruct for the reward tests (notebook 11's model).

Run from the repository root after ``grpo-minimal fetch smollm2-135m`` (seed 0):

    python data/make_real_completions.py            # or: --out FILE

It writes ``real_completions.jsonl``: 32 completions, one per problem of notebook 11's train
split (never the test split), asked with notebook 11's prompt (the ``final`` template) and
sampled as training samples them (temperature 0.7, at most 32 new tokens), ``{"prompt",
"answer", "completion"}``. What the parsers must read in each is written by hand in
``tests/test_rewards.py`` (``REAL_VERDICTS``), not by this script.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import set_seed

from grpo_minimal.completions import sample_completions
from grpo_minimal.data import load_chat_arithmetic
from grpo_minimal.lm_model import eos_token_ids, format_prompt, load_model
from grpo_minimal.math_config import MathConfig

HERE = Path(__file__).resolve().parent
MODEL, N = "smollm2-135m", 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "real_completions.jsonl")
    out = parser.parse_args().out
    torch.set_num_threads(1)  # the same draws on any machine with torch's CPU kernels
    set_seed(0)
    cfg = MathConfig.for_device("cpu", model=MODEL)
    model, tokenizer = load_model(MODEL, torch.device("cpu"))
    rows = load_chat_arithmetic("train")[:N]
    prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in rows]
    rollout = sample_completions(
        model,
        tokenizer,
        rows,
        prompts,
        num_generations=1,
        max_new_tokens=cfg.max_completion_length,
        temperature=cfg.temperature,
        top_p=1.0,
        do_sample=True,
        eos_ids=eos_token_ids(model, tokenizer),
        amp=torch.autocast("cpu", enabled=False),
    )
    lines = [
        json.dumps({"prompt": r["prompt"], "answer": r["answer"], "completion": c})
        for r, c in zip(rows, rollout.completions, strict=True)
    ]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} completions to {out}")


if __name__ == "__main__":
    main()
