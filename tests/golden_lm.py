"""Golden trajectories of the LM trainers: short seeded runs, recorded bit for bit.

Each run in ``TRAJECTORIES`` builds a trainer on a shipped tiny model (``make_trainer``), calls
``trainer.step(rows)`` ``STEPS`` times on the rows ``lm_train.training_batches`` draws, on one
thread, and keeps per step the algorithm's numbers (as ``float.hex`` strings: equal means equal
bits), a sha256 of the sampled tokens and of the advantages (GRPO's with its mask of counted
tokens), and at the end a sha256 of every network's weights (policy, reference, critic).
``tests/test_golden_lm.py`` runs them again against the recording.

``make_trainer`` is the adapter: the one place that knows the config and trainer classes, which
record key holds which number, and where the advantages and networks live. A refactor that
changes no number changes only it (and ``RECORD_KEYS``), never the recording.

    python tests/golden_lm.py --write   # rewrites tests/golden/lm_trajectories.json
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch

from grpo_minimal import lm_ppo
from grpo_minimal.course.rft import RFTTrainer
from grpo_minimal.data import load_math_rows
from grpo_minimal.device import torch_threads
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_ppo import LMPPOConfig, LMPPOTrainer
from grpo_minimal.lm_train import setup, training_batches
from grpo_minimal.math_config import MathConfig

GOLDEN = Path(__file__).parent / "golden" / "lm_trajectories.json"
STEPS = 20

# every run: seed 0, the CPU, two epochs over each batch in two micro-batches, a reference (beta)
COMMON = dict(
    seed=0,
    max_steps=STEPS,
    device="cpu",
    prompts_per_step=2,
    num_iterations=2,
    gradient_accumulation_steps=2,
    beta=0.04,
)

# name -> the trainer and the settings over COMMON (each config's own defaults fill the rest)
TRAJECTORIES = {
    "grpo": dict(trainer="grpo", loss_type="grpo", ref_update_every=5),
    "bnpo": dict(trainer="grpo", loss_type="bnpo"),
    "dr_grpo": dict(trainer="grpo", loss_type="dr_grpo"),
    "dapo": dict(trainer="grpo", loss_type="dapo"),
    # one completion per prompt (PPO's default), 4 prompts: 2 minibatches of 2 micro-batches
    "ppo": dict(trainer="ppo", prompts_per_step=4, num_minibatches=2, ref_update_every=5),
    # the reference is the adapter switched off; ref_update_every is refused with LoRA
    "lora": dict(trainer="grpo", loss_type="dapo", lora_r=8),
    # RFTTrainer refuses anything but beta 0, dapo and one epoch
    "rft": dict(trainer="rft", beta=0.0, loss_type="dapo", num_iterations=1),
    # notebook 10's run: the reasoning preset (model, dataset, 40 tokens) with 20 steps
    "reasoning": dict(
        trainer="reasoning", model="tiny-reasoning", dataset="reasoning", loss_type="grpo"
    ),
}

SHARED = ("reward_mean", "kl", "grad_norm", "learning_rate", "clip_fraction", "completion_length")
# quantity -> the record key that holds it today; after a rename only the right side changes
RECORD_KEYS = {
    "grpo": {name: name for name in (*SHARED, "loss", "entropy")},
    "ppo": {
        name: name
        for name in (*SHARED, "policy_loss", "value_loss", "explained_variance", "approx_kl")
    },
}


@contextmanager
def make_trainer(name: str):
    """The adapter: yields the run ``name`` as ``cfg``, ``trainer`` (``.step(rows)`` returns
    ``(record, rollout)``), ``keys`` (``RECORD_KEYS``), ``advantages`` (each step's, appended)
    and ``networks()`` (name -> module whose weights are hashed)."""
    settings = COMMON | TRAJECTORIES[name]
    kind = settings.pop("trainer")
    cfg = (LMPPOConfig if kind == "ppo" else MathConfig).for_device(**settings)
    model, tokenizer = setup(cfg)  # set_seed(cfg.seed), then the model, as train_math does
    classes = {
        "grpo": LMGRPOTrainer,
        "ppo": LMPPOTrainer,
        "rft": RFTTrainer,
        "reasoning": LMGRPOTrainer,  # was ReasoningTrainer, whose logging is now an observer
    }
    trainer = classes[kind](cfg, model, tokenizer)
    advantages: list[tuple] = []

    def kept(function):  # the same function, its result also appended to advantages
        def call(*args, **kwargs):
            result = function(*args, **kwargs)
            advantages.append(result if isinstance(result, tuple) else (result,))
            return result

        return call

    def networks() -> dict:
        found = {
            "policy": trainer.model,
            "reference": trainer.reference,
            "critic": getattr(trainer, "critic", None),
        }
        # a LoRA run's reference is the policy itself (adapter off), with nothing of its own
        return {k: v for k, v in found.items() if isinstance(v, torch.nn.Module)}

    if kind == "ppo":  # the whitened per-token advantages, equation (24)
        watching = mock.patch.object(lm_ppo, "whiten", kept(lm_ppo.whiten))
    else:  # stage 4: the advantages and the mask of counted tokens (RFT's choice is the mask)
        trainer.advantages = kept(trainer.advantages)
        watching = nullcontext()
    with watching:
        yield SimpleNamespace(
            cfg=cfg,
            trainer=trainer,
            advantages=advantages,
            keys=RECORD_KEYS["ppo" if kind == "ppo" else "grpo"],
            networks=networks,
        )


def sha256(tensors) -> str:
    """One hash over the bytes of the tensors, in order."""
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def run_trajectory(name: str) -> dict:
    """Run ``name`` on one thread (the rounding of a sum depends on how it is split among
    threads); its per-step values and final weight hashes, as the recording holds them."""
    with torch_threads(1), make_trainer(name) as run:
        rows = load_math_rows(run.cfg.dataset, "train")
        batches = training_batches(rows, run.cfg.prompts_per_step, run.cfg.seed)
        steps = []
        for _ in range(STEPS):
            record, rollout = run.trainer.step(next(batches))
            # causes before effects, so that a failure names the first: the sampled tokens (as
            # int64, whatever integer type the rollout keeps), the advantages, the numbers
            values = {
                "completion_ids": sha256([rollout.completion_ids.to(torch.int64)]),
                "advantages": sha256(run.advantages.pop()),
            }
            values |= {quantity: float(record[key]).hex() for quantity, key in run.keys.items()}
            steps.append(values)
        weights = {net: sha256(module.parameters()) for net, module in run.networks().items()}
        config = run.cfg.to_dict()
    return {
        "settings": TRAJECTORIES[name],
        "config": config,
        "record_keys": run.keys,
        "steps": steps,
        "weights": weights,
    }


def machine_kind() -> dict:
    """What bit-for-bit equality holds across: the torch build and the CPU's kernels."""
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.machine(),
    }


def write() -> None:
    import peft
    import transformers

    import grpo_minimal

    root = Path(__file__).resolve().parent.parent
    # an install of another checkout (a shared venv, a worktree) would record that code instead
    if Path(grpo_minimal.__file__).resolve().parent != root / "grpo_minimal":
        sys.exit(f"grpo_minimal comes from {grpo_minimal.__file__}: run with PYTHONPATH={root}")
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()
    recorded = machine_kind() | {
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit,
        "threads": 1,
    }
    golden = {"recorded": recorded, "trajectories": {}}
    for name in TRAJECTORIES:
        print(f"recording {name}", file=sys.stderr)
        golden["trajectories"][name] = run_trajectory(name)
    GOLDEN.parent.mkdir(exist_ok=True)
    # atomic: a reader sees the old file or the new one, never half of one
    with tempfile.NamedTemporaryFile("w", dir=GOLDEN.parent, suffix=".tmp", delete=False) as fh:
        json.dump(golden, fh, indent=1)
        fh.write("\n")
    os.chmod(fh.name, 0o644)  # a temporary file is private to its owner
    os.replace(fh.name, GOLDEN)
    print(f"wrote {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/golden_lm.py --write")
    write()
