#!/usr/bin/env bash
# vLLM server mode: GPU 7 runs `trl vllm-serve` and does every generation; GPUs 0-6 train with
# ZeRO-3 and send the new weights to the server after each step.
# Written for: 1 node x 8 NVIDIA H100 80GB, Qwen2.5-7B-Instruct; needs `pip install vllm` (a CUDA
# build). Not run here (no GPU, no vLLM); tests/test_recipes.py checks the config, that the
# training GPUs match its 7 processes, and the batch split: 14 prompts x 8 completions = 112 =
# 7 GPUs x 2 micro-batches x 8 (16 prompts would not split over 7).
set -euo pipefail
CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --port 8000 &
server=$!
trap 'kill $server' EXIT
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 \
accelerate launch --config_file recipes/accelerate/server7.yaml -m grpo_minimal math --backend trl \
    --model Qwen/Qwen2.5-7B-Instruct --dataset gsm8k --prompt-template r1 --format-weight 0.2 \
    --device cuda --dtype bfloat16 --gradient-checkpointing true \
    --prompts-per-step 14 --num-generations 8 --gradient-accumulation-steps 2 \
    --max-completion-length 512 --temperature 0.9 --learning-rate 1e-6 --beta 0.04 \
    --max-steps 300 --eval-n 200 --out runs/qwen7b-vllm-server \
    --trl use_vllm=true --trl vllm_mode=server --trl vllm_server_port=8000
