#!/usr/bin/env bash
# DDP on one node: Qwen2.5-0.5B-Instruct on GSM8K, 8 GPUs, each with the whole model.
# Written for: 1 node x 8 NVIDIA H100 80GB. Not run here (no GPU); tests/test_recipes.py loads the
# accelerate config and checks that the batch splits over its 8 processes.
# Per step: 16 prompts x 8 completions = 128, 16 per GPU in one micro-batch.
# Install: pip install -e ".[gpu]"
set -euo pipefail
accelerate launch --config_file recipes/accelerate/ddp.yaml -m grpo_minimal math --backend trl \
    --model Qwen/Qwen2.5-0.5B-Instruct --dataset gsm8k --prompt-template r1 --format-weight 0.2 \
    --device cuda --dtype bfloat16 --gradient-checkpointing true \
    --prompts-per-step 16 --num-generations 8 --gradient-accumulation-steps 1 \
    --max-completion-length 512 --temperature 0.9 --learning-rate 1e-6 --beta 0.04 \
    --max-steps 300 --eval-n 200 --out runs/qwen0.5b-ddp
