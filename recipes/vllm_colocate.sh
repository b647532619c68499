#!/usr/bin/env bash
# vLLM colocate mode: each training process also runs a vLLM engine on its own GPU for the
# generations (the slowest part of a GRPO step), sharing the memory with training.
# Written for: 1 node x 8 NVIDIA H100 80GB, Qwen2.5-1.5B-Instruct with ZeRO-2. Not run here (no
# GPU, no vLLM); tests/test_recipes.py checks the config and the batch split.
# vllm_gpu_memory_utilization is vLLM's share of each GPU.
# Install: pip install -e ".[gpu]" "trl[vllm]"
set -euo pipefail
accelerate launch --config_file recipes/accelerate/zero2.yaml -m grpo_minimal math --backend trl \
    --model Qwen/Qwen2.5-1.5B-Instruct --dataset gsm8k --prompt-template r1 --format-weight 0.2 \
    --device cuda --dtype bfloat16 --gradient-checkpointing true \
    --prompts-per-step 16 --num-generations 8 --gradient-accumulation-steps 2 \
    --max-completion-length 512 --temperature 0.9 --learning-rate 1e-6 --beta 0.04 \
    --max-steps 300 --eval-n 200 --out runs/qwen1.5b-vllm-colocate \
    --trl use_vllm=true --trl vllm_mode=colocate --trl vllm_gpu_memory_utilization=0.3
