"""``MathConfig``: every setting of a GRPO run on a causal LM (``lm_grpo.py``, ``lm_train.py``).

Its own module so that the step (``lm_grpo``) and the loop (``lm_train``) both read it without
importing each other.
"""

from __future__ import annotations

import textwrap
import warnings
from dataclasses import dataclass

import torch

from .config import ObjectiveConfig, option, override
from .device import DEVICE_NAMES, DTYPE_NAMES

PROMPT_TEMPLATES = ("plain", "r1", "boxed", "final")


@dataclass
class MathConfig(ObjectiveConfig):
    """GRPO on a causal LM with verifiable math rewards (``lm_grpo.py``, ``lm_train.py``).

    The defaults are the CPU lesson of notebook 06: the shipped tiny model (``data/tiny_math_lm``)
    learns two-digit addition from the accuracy reward. ``MathConfig.for_device()`` applies the
    named ``PRESETS`` that ``presets_for`` picks (the real model on a CUDA GPU, notebook 10's
    reasoning run, SmolLM2's own, LoRA's rates) over them; keyword arguments override both. Names follow TRL's ``GRPOConfig`` where the idea
    is the same (``max_completion_length``, ``temperature``, ``top_p``, ``max_steps``,
    ``gradient_accumulation_steps``, ``gradient_checkpointing``); one step samples
    ``prompts_per_step * num_generations`` completions, TRL's ``per_device_train_batch_size``.
    ``beta`` defaults to 0.04 (DeepSeekMath's value; TRL's default is 0) so that the lesson can
    show the KL to the reference model.
    """

    model: str = option(
        "tiny",
        "a local Hugging Face model folder or a Hub id; tiny means the shipped data/tiny_math_lm"
        " (tiny-reasoning and tiny-direct: notebook 10's cold starts; tiny-vlm: notebook 13's "
        "vision-language model)",
    )
    dataset: str = option(
        "arithmetic",
        "arithmetic, arithmetic_mix, reasoning, chat_arithmetic (notebook 11), shapes (notebook 13:"
        " images, for a vision-language model), gsm8k (Hub), gsm8k_sample or a .jsonl file with "
        "prompt and answer fields (and image, a file path, for a vision-language model)",
    )
    eval_split: str = option(
        "test",
        "split used for held-out accuracy (test; validation for chat_arithmetic, which also has "
        "one), or a .jsonl file of held-out problems",
    )
    prompt_template: str = option(
        "plain",
        "plain: the dataset prompt as it is; r1: the chat template with a system prompt asking "
        "for <think>...</think><answer>...</answer>; boxed: the chat template, asking for "
        "reasoning then \\boxed{answer}; final: the chat template, asking for only the final answer "
        "in \\boxed{}",
        choices=PROMPT_TEMPLATES,
    )
    prompts_per_step: int = option(
        8, "distinct prompts per step; each gets num_generations completions", low=1.0
    )
    max_completion_length: int = option(
        5, "new tokens sampled per completion at most (a completion also ends at EOS)", low=1.0
    )
    temperature: float = option(
        1.0,
        "sampling temperature; log-probs are computed at the same temperature, as in TRL",
        low=0.0,
        low_open=True,
    )
    top_p: float = option(
        1.0,
        "nucleus sampling: keep the smallest set of tokens with this much probability; 1 keeps all",
        low=0.0,
        high=1.0,
        low_open=True,
    )
    max_steps: int = option(600, "training steps (one sampled batch each)", low=1.0)
    time_budget_s: float = option(
        0.0, "stop once training has run this many seconds; 0 means no limit", low=0.0
    )
    gradient_accumulation_steps: int = option(
        1,
        "split each batch into this many micro-batches of whole groups (one backward each) "
        "before the optimizer step: the same update with less memory; must divide "
        "prompts_per_step",
        low=1.0,
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute activations in the backward pass instead of storing them (less GPU memory)",
    )
    weight_decay: float = option(0.0, "AdamW weight decay (TRL's default is 0)", low=0.0)
    lr_scheduler_type: str = option(
        "linear",
        "linear: decay the learning rate to 0 over max_steps (TRL's default); constant",
        choices=("linear", "constant"),
    )
    format_weight: float = option(
        0.0,
        "reward = accuracy + format_weight * format (format_reward: the strict <think>/<answer>"
        " form); 0 uses the accuracy reward alone",
        low=0.0,
    )
    eval_n: int = option(
        500, "held-out problems for greedy accuracy (the first eval_n of the split)", low=1.0
    )
    allow_eval_overlap: bool = option(
        False,
        'measure "held-out" accuracy even when evaluation prompts are also training prompts '
        "(the overlap is counted and logged); False refuses such a run",
    )
    eval_every: int = option(
        100,
        "also measure held-out accuracy every this many steps (0: only before and after)",
        low=0.0,
    )
    save_every: int = option(
        0,
        "write a checkpoint to the output folder every this many steps (0: only at the end)",
        low=0.0,
    )
    lora_r: int = option(
        0,
        "LoRA rank: train low-rank adapters on lora_target_modules instead of every weight (the "
        "lora extra, peft); 0 trains every weight. With beta > 0 the reference is the base model "
        "with the adapter off, no copy",
        low=0.0,
    )
    lora_alpha: float | None = option(
        None,
        "LoRA scale numerator: the adapter adds (lora_alpha / lora_r) B A x; None: 2 * lora_r",
        low=0.0,
        low_open=True,
    )
    lora_dropout: float = option(
        0.0,
        "dropout on the adapter's input (0: the same log-probs on every pass, ratio 1 on-policy)",
        low=0.0,
        high=1.0,
        high_open=True,
    )
    lora_target_modules: str = option(
        "all-linear",
        "layers that get an adapter: all-linear (every linear layer of the blocks, not the output "
        "head; peft's name) or comma-separated module names such as q_proj,v_proj",
    )
    device: str = option("auto", "auto (CUDA if available, else CPU), cpu, cuda or cuda:N")
    dtype: str = option(
        "auto",
        "compute precision: auto (bfloat16 on GPUs that support it, else float16; float32 on "
        "CPU), float32, bfloat16 or float16; weights stay float32",
        choices=DTYPE_NAMES,
    )

    num_generations: int = override(ObjectiveConfig, "num_generations", 8)
    loss_type: str = override(ObjectiveConfig, "loss_type", "dapo")
    beta: float = override(ObjectiveConfig, "beta", 0.04)
    learning_rate: float = override(ObjectiveConfig, "learning_rate", 1e-4)

    # Not fields (no annotation): the named presets ``for_device`` applies (its docstring says in
    # which order). Each is a few settings over the CPU lesson's defaults above; why each value
    # was chosen is in bench/README.md and data/README.md.
    PRESETS = {
        # a real model on a CUDA GPU (notebook 06, section 9)
        "gpu": {
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "dataset": "gsm8k",
            "prompt_template": "r1",
            "format_weight": 0.2,
            "max_completion_length": 256,
            "prompts_per_step": 8,
            "num_generations": 8,
            "gradient_accumulation_steps": 8,
            "gradient_checkpointing": True,
            "learning_rate": 1e-6,
            "beta": 0.04,
            "temperature": 0.9,
            "max_steps": 200,
            "eval_n": 200,
            "eval_every": 50,
        },
        # notebook 10, R1-Zero in miniature: the reasoning task and its cold start, room for
        # written column sums, GRPO's per-sequence token mean (DeepSeekMath's equation (3))
        "reasoning": {
            "model": "tiny-reasoning",
            "dataset": "reasoning",
            "max_completion_length": 40,
            "loss_type": "grpo",
            "max_steps": 200,
            "eval_n": 200,
            "eval_every": 25,
        },
        # notebook 11: the fetched SmolLM2-135M-Instruct on a laptop CPU (grpo-minimal fetch),
        # chosen on the train and validation splits; the test split is for reported results alone
        "smollm2-135m": {
            "dataset": "chat_arithmetic",
            "prompt_template": "final",
            "max_completion_length": 32,
            "temperature": 0.7,
            "prompts_per_step": 2,
            "num_generations": 8,
            "learning_rate": 1e-5,
            "beta": 0.0,
            "max_steps": 20,
            "eval_split": "validation",
            "eval_n": 37,
            "eval_every": 5,
        },
        # notebook 13: the tiny vision-language model counting shapes (data/make_tiny_vlm.py);
        # one digit and <eos> answer; chosen on the validation split (bench/README.md)
        "tiny-vlm": {
            "model": "tiny-vlm",
            "dataset": "shapes",
            "eval_split": "validation",
            "max_completion_length": 2,
            "prompts_per_step": 16,
            "num_generations": 8,
            "max_steps": 150,
            "eval_n": 300,
            "eval_every": 50,
        },
        # LoRA trains fewer weights and wants a larger learning rate, chosen on validation
        # (data/README.md) for these two models only
        "lora:tiny": {"learning_rate": 1e-3},
        "lora:smollm2-135m": {"learning_rate": 3e-4},
    }

    @classmethod
    def presets_for(cls, device: str = "auto", **overrides) -> list[str]:
        """The presets a run takes, in the order they apply; the settings given override them all.

        1. One of: ``reasoning`` for the reasoning dataset or its cold-start models
           (``tiny-reasoning``, ``tiny-direct``), on any device; ``tiny-vlm`` for the shapes
           dataset with no model named, on any device; else the model's own preset
           (``smollm2-135m``), on any device; else ``gpu`` on a CUDA device (``device`` cuda,
           or auto with CUDA present), unless the model is the shipped ``tiny`` one; else none:
           the CPU lesson's defaults.
        2. Then ``lora:<model>`` when ``lora_r > 0`` and the model has one.
        """
        model = overrides.get("model")
        if overrides.get("dataset") == "reasoning" or model in ("tiny-reasoning", "tiny-direct"):
            names = ["reasoning"]
        elif overrides.get("dataset") == "shapes" and model in (None, "tiny-vlm"):
            names = ["tiny-vlm"]
        elif model in cls.PRESETS and model not in ("gpu", "reasoning"):  # a model's own preset
            names = [model]
        else:
            cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
            names = ["gpu"] if cuda and model != "tiny" else []
        if model is None:  # the model the presets (or the defaults) choose
            chosen = [cls.PRESETS[name]["model"] for name in names if "model" in cls.PRESETS[name]]
            model = chosen[-1] if chosen else cls.__dataclass_fields__["model"].default
        if overrides.get("lora_r") and f"lora:{model}" in cls.PRESETS:
            names.append(f"lora:{model}")
        return names

    @classmethod
    def for_device(cls, device: str = "auto", **overrides) -> MathConfig:
        """The config of a run on ``device``: the defaults, the presets ``presets_for`` names,
        then ``overrides``."""
        names = cls.presets_for(device, **overrides)
        values: dict = {}
        for name in names:
            values |= cls.PRESETS[name]
        model = (values | overrides).get("model", cls.__dataclass_fields__["model"].default)
        lora_rate = any(name.startswith("lora:") for name in names)
        if overrides.get("lora_r") and "learning_rate" not in overrides and not lora_rate:
            warnings.warn(
                f"lora_r: no LoRA learning rate was chosen for {model}; the full fine-tune's is "
                "kept, and LoRA usually needs a larger one (10x and 30x on the models with a "
                "lora: preset): pass --learning-rate",
                stacklevel=2,
            )
        return cls(device=device, **(values | overrides))

    def validate(self) -> None:
        """Each field on its own (``option``), then the rules that tie fields together."""
        super().validate()
        if self.device not in DEVICE_NAMES and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be one of {DEVICE_NAMES} or cuda:N, got {self.device!r}")
        if self.prompts_per_step % self.gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps must divide prompts_per_step={self.prompts_per_step}"
                f" (a micro-batch holds whole groups), got {self.gradient_accumulation_steps}"
            )
        if self.lora_r and self.ref_update_every:
            raise ValueError(
                "ref_update_every must be 0 with lora_r > 0: the reference is the base model with "
                "the adapter off, which training never changes"
            )

    def summary(self) -> str:
        """The resolved settings, ``name=value`` wrapped at 100 columns: what a run prints first."""
        pairs = " ".join(f"{name}={value}" for name, value in self.to_dict().items())
        return textwrap.fill(pairs, width=100, break_on_hyphens=False)
