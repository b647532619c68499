#!/usr/bin/env bash
# vLLM server mode: GPU 7 runs `trl vllm-serve` and does every generation; GPUs 0-6 train with
# ZeRO-3 and send the new weights to the server after each step.
# Written for: 1 node x 8 NVIDIA H100 80GB, Qwen2.5-7B-Instruct. Not run here (no GPU, no vLLM);
# tests/test_recipes.py checks the config, that the training GPUs match its 7 processes, the batch
# split (14 prompts x 8 completions = 112 = 7 GPUs x 2 micro-batches x 8; 16 prompts would not
# split over 7), and, with stand-ins for `trl` and `accelerate`, the wait and the clean-up below.
# Install: pip install -e ".[gpu]" "trl[vllm]"
#
# Training starts only once the server answers GET /health (TRL itself gives up after
# vllm_server_timeout, 240 s, and loading a 7B model can take longer). The server is stopped when
# this script exits, however it exits. VLLM_PORT and VLLM_WAIT_S override the defaults.
set -euo pipefail
VLLM_PORT="${VLLM_PORT:-8000}"
VLLM_WAIT_S="${VLLM_WAIT_S:-900}"
CUDA_VISIBLE_DEVICES=7 trl vllm-serve --model Qwen/Qwen2.5-7B-Instruct --port "$VLLM_PORT" &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
healthy() { # does the server answer GET /health with 200?
    python -c 'import sys, urllib.request as r; sys.exit(r.urlopen(sys.argv[1], timeout=5).status != 200)' \
        "http://127.0.0.1:$VLLM_PORT/health" 2>/dev/null
}
echo "vllm_server.sh: waiting up to ${VLLM_WAIT_S}s for the vLLM server (http://127.0.0.1:$VLLM_PORT/health)"
deadline=$((SECONDS + VLLM_WAIT_S))
until healthy; do
    if ! kill -0 "$server" 2>/dev/null; then
        echo "vllm_server.sh: the vLLM server exited before it answered /health; its log is above" >&2
        exit 1
    fi
    if ((SECONDS >= deadline)); then
        echo "vllm_server.sh: no answer from http://127.0.0.1:$VLLM_PORT/health after ${VLLM_WAIT_S}s;" \
            "read the server's log above, or set VLLM_WAIT_S higher" >&2
        exit 1
    fi
    sleep 1
done
echo "vllm_server.sh: the vLLM server is up; training starts"
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6 \
accelerate launch --config_file recipes/accelerate/server7.yaml -m grpo_minimal math --backend trl \
    --model Qwen/Qwen2.5-7B-Instruct --dataset gsm8k --prompt-template r1 --format-weight 0.2 \
    --device cuda --dtype bfloat16 --gradient-checkpointing true \
    --prompts-per-step 14 --num-generations 8 --gradient-accumulation-steps 2 \
    --max-completion-length 512 --temperature 0.9 --learning-rate 1e-6 --beta 0.04 \
    --max-steps 300 --eval-n 200 --out runs/qwen7b-vllm-server \
    --trl use_vllm=true --trl vllm_mode=server --trl vllm_server_port="$VLLM_PORT"
