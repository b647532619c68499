"""Memory and time of one GRPO step of notebook 06's GPU plan, measured beside the planner.

On a CUDA GPU, with no download: a model of Qwen2.5-0.5B-Instruct's architecture with random
weights (a step's work and memory depend on the shapes, not on the weights) and the stand-in's
tokenizer (``data/standin_lm``; ids it does not know decode to nothing) run
``LMGRPOTrainer.step`` with ``MathConfig.for_device("cuda")``'s settings on the GSM8K sample,
in bf16 autocast (what an A100 or H100 uses) and fp16 with loss scaling (a T4's precision), for
the main run and for section 8's experiment (G = 16, 4 prompts); then a T4's two ways out, the
main run without the reference (``beta=0``) and in float32. Random weights almost never
sample an end token (254 of 256 tokens on average, ``completion_length`` in each row): the
figures are upper bounds for real completions of that length. The first step warms up; the second is timed.

Each row: the measured peak (``torch.cuda.max_memory_allocated``, which includes generation's KV
cache and temporaries the planner leaves out) beside ``memory.plan_memory``'s estimate for the
same shapes ("fp32-autocast": float32 weights and AdamW, forward passes under autocast; "float32"
for the float32 row), and the seconds of the timed step. ``--small`` runs a tiny architecture
on the CPU to check the script.

    python bench/gpu_plan.py --out bench/results/gpu_plan.json      # on a CUDA GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import platform
import time
from pathlib import Path

import torch
from provenance import provenance  # bench/ is on the path when a script here runs

from grpo_minimal.course.memory import QWEN2_5, plan_memory, qwen2_config
from grpo_minimal.data import load_gsm8k_sample
from grpo_minimal.device import peak_memory_mb, reset_peak_memory
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import format_prompt, load_tokenizer
from grpo_minimal.math_config import MathConfig
from grpo_minimal.shipped import model_path

SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=4096,
    tie_word_embeddings=True,
)
# section 8 of notebook 06, on top of the GPU settings (its accumulation divides the 4 prompts)
EXPERIMENT = dict(num_generations=16, prompts_per_step=4, beta=0.0, loss_type="grpo")


def measure(architecture: dict, device: str, dtype: str, overrides: dict, length: int) -> dict:
    from transformers import Qwen2ForCausalLM

    gpu = {**MathConfig.PRESETS["gpu"], **overrides}
    accumulation = math.gcd(gpu["gradient_accumulation_steps"], gpu["prompts_per_step"])
    cfg = MathConfig.for_device(
        "cuda",
        **overrides,
        dtype=dtype,
        max_completion_length=length,
        gradient_accumulation_steps=accumulation,
    )
    cfg = dataclasses.replace(cfg, device=device)
    tokenizer = load_tokenizer(str(model_path("standin")))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(qwen2_config(**architecture)).to(device)
    trainer = LMGRPOTrainer(cfg, model, tokenizer)
    rows = load_gsm8k_sample()[: cfg.prompts_per_step]
    prompts = [format_prompt(r["prompt"], tokenizer, cfg.prompt_template) for r in rows]
    prompt_tokens = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    trainer.step(rows)  # warm-up
    reset_peak_memory(trainer.device)
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    record, _ = trainer.step(rows)
    if trainer.device.type == "cuda":
        torch.cuda.synchronize()
    step_s = time.perf_counter() - start
    plan = plan_memory(
        architecture,
        num_generations=cfg.num_generations,
        prompts_per_micro_batch=cfg.prompts_per_step // accumulation,
        prompt_length=prompt_tokens,
        completion_length=length,
        precision="float32" if dtype == "float32" else "fp32-autocast",
        gradient_checkpointing=cfg.gradient_checkpointing,
        beta=cfg.beta,
    )
    return {
        "dtype": str(trainer.dtype).removeprefix("torch."),
        "num_generations": cfg.num_generations,
        "prompts_per_step": cfg.prompts_per_step,
        "gradient_accumulation_steps": accumulation,
        "beta": cfg.beta,
        "prompt_tokens": prompt_tokens,
        "completion_length": record["completion_length"],
        "step_s": round(step_s, 2),
        "peak_gb": round(peak_memory_mb(trainer.device) * 2**20 / 1e9, 2),
        "planned_gb": round(plan["total_gb"], 2),
        "finite_loss": math.isfinite(record["loss"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="a tiny architecture on the CPU")
    parser.add_argument("--out", help="write the rows to this JSON file")
    args = parser.parse_args()
    device = "cpu" if args.small else "cuda"
    architecture = SMALL if args.small else QWEN2_5["0.5B"]
    length = 8 if args.small else MathConfig.PRESETS["gpu"]["max_completion_length"]
    runs = [
        (name, dtype, overrides)
        for dtype in ("bfloat16", "float16")
        for name, overrides in (("main run", {}), ("section 8", EXPERIMENT))
    ]
    # a T4's ways out when the main run does not fit or overflows in fp16
    runs += [("main run, beta 0", "float16", {"beta": 0.0}), ("main run", "float32", {})]
    if args.small:
        runs = [(name, "float32", overrides) for name, _, overrides in runs[:2]]
    rows = []
    for name, dtype, overrides in runs:
        row = {"run": name, **measure(architecture, device, dtype, overrides, length)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        if device == "cuda":
            torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or "CPU"
    result = {
        "machine": gpu,  # notebook 11 prints machine, date and torch
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "architecture": "Qwen2.5-0.5B (random weights)" if not args.small else "small",
        "rows": rows,
        "provenance": provenance(threads=torch.get_num_threads()),
    }
    if args.out:
        tmp = Path(args.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(args.out)


if __name__ == "__main__":
    main()
