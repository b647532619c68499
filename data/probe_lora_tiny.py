"""The probe behind MathConfig.PRESETS["lora:tiny"]: LoRA on the tiny model, scored on a
validation carve-out of the training split (its last 500 problems, held out of training here);
the test split is not read. One seed (0), 150 steps, one torch thread.

    python data/probe_lora_tiny.py 0:1e-4 8:1e-4 8:1e-3 8:3e-3   # lora_r:learning_rate ...
"""

import sys
import time

from grpo_minimal.data import load_math_rows
from grpo_minimal.device import torch_threads
from grpo_minimal.lm_train import MathConfig, train_math

rows = load_math_rows("arithmetic", "train")
train, validation = rows[:-500], rows[-500:]
for spec in sys.argv[1:]:
    r, lr = spec.split(":")
    cfg = MathConfig.for_device(
        "cpu",
        lora_r=int(r),
        learning_rate=float(lr),
        max_steps=150,
        eval_every=0,
        eval_n=500,
        seed=0,
    )
    t = time.time()
    with torch_threads(1):
        _, h = train_math(cfg, train_rows=train, eval_rows=validation, progress=False)
    print(
        f"lora_r {r} lr {lr}: validation {h[0]['eval_accuracy']:.3f} -> {h[-1]['eval_accuracy']:.3f} ({time.time() - t:.0f} s)",
        flush=True,
    )
