"""LoRA: train low-rank adapters instead of every weight, and get the reference for free (peft).

With ``lora_r > 0`` (``MathConfig``) the policy is the model wrapped by peft's
``get_peft_model``: every linear layer of the blocks (``lora_target_modules``, peft's
``"all-linear"`` by default: every linear layer but the output head) gains
W x + (alpha / r) B A x, with A [r, in] and B [out, r] trained (B starts at 0, so the first step
starts from the base model) and W frozen. Nothing in the GRPO loss changes.

**The reference for free.** The frozen base weights *are* the reference model: with the adapter
switched off, the same network computes log pi_ref. So ``beta > 0`` needs no second copy of the
weights (TRL's ``GRPOTrainer`` does the same with a ``peft_config``):
``LMTrainer.reference_logps`` runs the policy inside peft's ``disable_adapter()``.

A LoRA run's checkpoint is the adapter (``adapter_config.json``, ``adapter_model.safetensors``,
peft's format, which names its base model) beside the tokenizer; ``load_model`` recognises the
folder, loads the base and merges the adapter into it (``load_adapter_merged``); ``--merge``
also writes that merged model to ``OUT/merged`` (``lm_train.save_merged``).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path

from .extras import require

ADAPTER_CONFIG = "adapter_config.json"


@contextlib.contextmanager
def quiet_peft():
    """peft 0.21 asks transformers 5 for ``is_gradient_checkpointing``, a deprecated name: its
    FutureWarning says nothing a learner can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning
        )
        yield


def lora_config(
    r: int, alpha: float | None = None, dropout: float = 0.0, targets: str = "all-linear"
):
    """peft's ``LoraConfig``: rank ``r``, scale ``alpha / r`` (``alpha`` None: 2 r, a scale of 2
    whatever the rank), ``dropout`` on the adapter's input, ``targets`` (``all-linear`` or
    comma-separated module names), as ``MathConfig``'s ``lora_*`` fields name them."""
    require("lora", "--lora-r")
    from peft import LoraConfig

    if targets != "all-linear":
        targets = [name.strip() for name in targets.split(",") if name.strip()]
    return LoraConfig(
        r=r,
        lora_alpha=2 * r if alpha is None else alpha,
        lora_dropout=dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def add_lora(model, config):
    """The model wrapped with fresh LoRA adapters (peft's ``config``, ``lora_config``); only they
    train."""
    from peft import get_peft_model

    with quiet_peft():
        return get_peft_model(model, config)


def check_lora(cfg, model) -> None:
    """Before a LoRA run: peft installed (the ``lora`` extra) and every named target module
    present in the model; one line naming the field otherwise."""
    if not cfg.lora_r:
        return
    require("lora", "--lora-r")
    if cfg.lora_target_modules == "all-linear":
        return
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    wanted = [t.strip() for t in cfg.lora_target_modules.split(",") if t.strip()]
    missing = [t for t in wanted if t not in names]
    if missing:
        raise ValueError(
            f"lora_target_modules: the model has no module named {', '.join(sorted(missing))}"
        )


def is_adapter_folder(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_adapter_merged(path: str | Path, device, base_loader):
    """A LoRA checkpoint as one ordinary model: the base its ``adapter_config.json`` names
    (``base_loader(name, device)``), the adapter loaded and merged into its weights."""
    require("lora", "a LoRA checkpoint")
    from peft import PeftModel

    base_name = json.loads((Path(path) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base_name:
        raise ValueError(f"{path}: {ADAPTER_CONFIG} names no base model")
    base, _ = base_loader(base_name, device)
    with quiet_peft():
        return PeftModel.from_pretrained(base, str(path)).merge_and_unload()
