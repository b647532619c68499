"""The probe behind MathConfig.PRESETS["lora:smollm2-135m"]: LoRA on SmolLM2-135M-Instruct
(``grpo-minimal fetch smollm2-135m`` first), scored greedily on the chat_arithmetic validation
split (37 problems, the split the smollm2-135m preset scores on); the test split is not read. One seed (0),
the model's other defaults (20 steps), two torch threads.

    python data/probe_lora_smollm2.py 0:1e-5 16:1e-4 16:3e-4 16:1e-3   # lora_r:learning_rate ...
"""

import sys
import time

from grpo_minimal.device import torch_threads
from grpo_minimal.lm_train import MathConfig, train_math

for spec in sys.argv[1:]:
    r, lr = spec.split(":")
    cfg = MathConfig.for_device(
        "cpu", model="smollm2-135m", lora_r=int(r), learning_rate=float(lr), eval_every=0, seed=0
    )
    t = time.time()
    with torch_threads(2):
        _, h = train_math(cfg, progress=False)
    print(
        f"lora_r {r} lr {lr}: validation {h[0]['eval_accuracy']:.3f} -> {h[-1]['eval_accuracy']:.3f} ({time.time() - t:.0f} s)",
        flush=True,
    )
