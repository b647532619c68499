#!/usr/bin/env bash
# DeepSpeed ZeRO-3 on one node: Qwen2.5-7B-Instruct on GSM8K, everything sharded over 8 GPUs.
# Written for: 1 node x 8 NVIDIA H100 80GB. Not run here (no GPU); tests/test_recipes.py loads the
# accelerate config and checks the batch split. Each rank first loads the model whole in float32
# (about 30 GB for 7B) before DeepSpeed shards it: on smaller GPUs, start from a smaller model.
# Per step: 16 prompts x 8 completions = 128 = 8 GPUs x 4 micro-batches x 4.
# Install: pip install -e ".[gpu]"
set -euo pipefail
accelerate launch --config_file recipes/accelerate/zero3.yaml -m grpo_minimal math --backend trl \
    --model Qwen/Qwen2.5-7B-Instruct --dataset gsm8k --prompt-template r1 --format-weight 0.2 \
    --device cuda --dtype bfloat16 --gradient-checkpointing true \
    --prompts-per-step 16 --num-generations 8 --gradient-accumulation-steps 4 \
    --max-completion-length 512 --temperature 0.9 --learning-rate 1e-6 --beta 0.04 \
    --max-steps 300 --eval-n 200 --out runs/qwen7b-zero3
