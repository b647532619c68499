"""LoRA: train low-rank adapters instead of every weight, and get the reference for free (peft).

With ``lora_r > 0`` (``MathConfig``) the policy is the model wrapped by peft's
``get_peft_model``: every linear layer of the blocks (``lora_target_modules``, peft's
``"all-linear"`` by default: every linear layer but the output head) gains
W x + (alpha / r) B A x, with A [r, in] and B [out, r] trained (B starts at 0, so the first step
starts from the base model) and W frozen. Nothing in the GRPO loss changes.

**The reference for free.** The frozen base weights *are* the reference model: with the adapter
switched off, the same network computes log pi_ref. So ``beta > 0`` needs no second copy of the
weights (TRL's ``GRPOTrainer`` does the same with a ``peft_config``). ``AdapterOff`` marks that
reference for ``LMGRPOTrainer.fixed_logps``, which runs it inside peft's ``disable_adapter()``.

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
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        yield


def lora_config(cfg):
    """peft's ``LoraConfig`` for the run: rank ``lora_r``, scale ``lora_alpha / lora_r``
    (``lora_alpha`` None: 2 r, a scale of 2 whatever the rank), dropout, target modules."""
    require("lora", "--lora-r")
    from peft import LoraConfig

    alpha = 2 * cfg.lora_r if cfg.lora_alpha is None else cfg.lora_alpha
    targets = cfg.lora_target_modules
    if targets != "all-linear":
        targets = [name.strip() for name in targets.split(",") if name.strip()]
    return LoraConfig(r=cfg.lora_r, lora_alpha=alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=targets, task_type="CAUSAL_LM")  # fmt: skip


def add_lora(model, cfg):
    """The model wrapped with fresh LoRA adapters (``lora_config``); only they train."""
    from peft import get_peft_model

    try:
        with quiet_peft():
            return get_peft_model(model, lora_config(cfg))
    except ValueError as err:  # e.g. a target module name the model does not have
        raise ValueError(f"lora_target_modules: {' '.join(str(err).split())}") from None


def check_lora(cfg, model) -> None:
    """Before a LoRA run: peft installed (the ``lora`` extra) and every named target module
    present in the model; one line naming the field otherwise."""
    if not cfg.lora_r:
        return
    require("lora", "--lora-r")
    if cfg.lora_target_modules == "all-linear":
        return
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [t for t in lora_config(cfg).target_modules if t not in names]
    if missing:
        raise ValueError(f"lora_target_modules: the model has no module named {', '.join(sorted(missing))}")


class AdapterOff:
    """The reference of a LoRA run: the policy's own network with its adapter disabled."""

    def __init__(self, model) -> None:
        self.model = model

    def disabled(self):
        """A context in which ``self.model`` computes the base model's outputs."""
        return self.model.disable_adapter()


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
