"""``MathConfig``: every setting of a GRPO run on a causal LM (``lm_grpo.py``, ``lm_train.py``).

Its own module so that the step (``lm_grpo``) and the loop (``lm_train``) both read it without
importing each other.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from .config import ObjectiveConfig, check_choice, check_range, option, override
from .device import DEVICE_NAMES, DTYPE_NAMES

PROMPT_TEMPLATES = ("plain", "r1", "boxed", "final")


@dataclass
class MathConfig(ObjectiveConfig):
    """GRPO on a causal LM with verifiable math rewards (``lm_grpo.py``, ``lm_train.py``).

    The defaults are the CPU lesson of notebook 06: the shipped tiny model (``data/tiny_math_lm``)
    learns two-digit addition from the accuracy reward. ``MathConfig.for_device()`` returns them
    on a CPU and the real-model settings of ``GPU_DEFAULTS`` (Qwen2.5-0.5B-Instruct on GSM8K) on a
    CUDA GPU; keyword arguments override either. Names follow TRL's ``GRPOConfig`` where the idea
    is the same (``max_completion_length``, ``temperature``, ``top_p``, ``max_steps``,
    ``gradient_accumulation_steps``, ``gradient_checkpointing``); one step samples
    ``prompts_per_step * num_generations`` completions, TRL's ``per_device_train_batch_size``.
    ``beta`` defaults to 0.04 (DeepSeekMath's value; TRL's default is 0) so that the lesson can
    show the KL to the reference model.
    """

    model: str = option(
        "tiny",
        "a local Hugging Face model folder or a Hub id; tiny means the shipped data/tiny_math_lm"
        " (tiny-reasoning and tiny-direct: notebook 10's cold starts)",
    )
    dataset: str = option(
        "arithmetic",
        "arithmetic, arithmetic_mix, reasoning, chat_arithmetic (notebook 11), gsm8k (Hub), "
        "gsm8k_sample or a .jsonl file with prompt and answer fields",
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
    )
    prompts_per_step: int = option(
        8, "distinct prompts per step; each gets num_generations completions"
    )
    max_completion_length: int = option(
        5, "new tokens sampled per completion at most (a completion also ends at EOS)"
    )
    temperature: float = option(
        1.0, "sampling temperature; log-probs are computed at the same temperature, as in TRL"
    )
    top_p: float = option(
        1.0,
        "nucleus sampling: keep the smallest set of tokens with this much probability; 1 keeps all",
    )
    max_steps: int = option(600, "GRPO steps (one sampled batch each)")
    time_budget_s: float = option(
        0.0, "stop once training has run this many seconds; 0 means no limit"
    )
    gradient_accumulation_steps: int = option(
        1,
        "split each batch into this many micro-batches of whole groups (one backward each) "
        "before the optimizer step: the same update with less memory; must divide "
        "prompts_per_step",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute activations in the backward pass instead of storing them (less GPU memory)",
    )
    weight_decay: float = option(0.0, "AdamW weight decay (TRL's default is 0)")
    lr_scheduler_type: str = option(
        "linear", "linear: decay the learning rate to 0 over max_steps (TRL's default); constant"
    )
    format_weight: float = option(
        0.0,
        "reward = accuracy + format_weight * format (format_reward: the strict <think>/<answer>"
        " form); 0 uses the accuracy reward alone",
    )
    eval_n: int = option(
        500, "held-out problems for greedy accuracy (the first eval_n of the split)"
    )
    allow_eval_overlap: bool = option(
        False,
        'measure "held-out" accuracy even when evaluation prompts are also training prompts '
        "(the overlap is counted and logged); False refuses such a run",
    )
    eval_every: int = option(
        100, "also measure held-out accuracy every this many steps (0: only before and after)"
    )
    save_every: int = option(
        0, "write a checkpoint to the output folder every this many steps (0: only at the end)"
    )
    lora_r: int = option(
        0,
        "LoRA rank: train low-rank adapters on lora_target_modules instead of every weight (the "
        "lora extra, peft); 0 trains every weight. With beta > 0 the reference is the base model "
        "with the adapter off, no copy",
    )
    lora_alpha: float | None = option(
        None, "LoRA scale numerator: the adapter adds (lora_alpha / lora_r) B A x; None: 2 * lora_r"
    )
    lora_dropout: float = option(
        0.0,
        "dropout on the adapter's input (0: the same log-probs on every pass, ratio 1 on-policy)",
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
    )

    num_generations: int = override(ObjectiveConfig, "num_generations", 8)
    loss_type: str = override(ObjectiveConfig, "loss_type", "dapo")
    beta: float = override(ObjectiveConfig, "beta", 0.04)
    learning_rate: float = override(ObjectiveConfig, "learning_rate", 1e-4)

    # Not fields (no annotation): the real-model configuration used on a CUDA GPU.
    GPU_DEFAULTS = {
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
    }

    # Notebook 10's run (R1-Zero in miniature): the reasoning task and its cold start, with room
    # for written column sums, and GRPO's per-sequence token mean (DeepSeekMath's equation (3);
    # DeepSeek-R1, arXiv 2501.12948v1, writes its objective per sequence, eq. 1, and says nothing
    # of token averaging). Taken when the dataset is reasoning or the model one of its cold starts.
    REASONING_DEFAULTS = {
        "model": "tiny-reasoning",
        "dataset": "reasoning",
        "max_completion_length": 40,
        "loss_type": "grpo",
        "max_steps": 200,
        "eval_n": 200,
        "eval_every": 25,
    }

    # Notebook 11's run: a real chat model on a laptop CPU (``grpo-minimal fetch smollm2-135m``).
    # Its own task (questions it answers right about a third of the time, so groups carry
    # signal), its chat template asking for the answer alone, room for a short sentence, a batch
    # 2 CPU cores take 11-15 s a step on, no reference model (beta 0: no frozen copy to hold and
    # run each step). Chosen on the train and validation splits (bench/README.md, real_model.py);
    # taken whenever the model is asked for, on any device.
    MODEL_DEFAULTS = {
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
            "eval_split": "validation",  # the test split is for reported results alone
            "eval_n": 37,
            "eval_every": 5,
        },
    }

    # LoRA trains fewer weights and wants a larger learning rate than a full fine-tune: taken
    # when lora_r > 0 and no rate is given. Chosen on validation (data/README.md): the tiny
    # model's at lora_r 8 on a carve-out of the training split (1e-4, 1e-3, 3e-3), SmolLM2's at
    # lora_r 16 on its validation split (1e-4, 3e-4, 1e-3). No other model has one.
    LORA_DEFAULTS = {"tiny": {"learning_rate": 1e-3}, "smollm2-135m": {"learning_rate": 3e-4}}

    @classmethod
    def for_device(cls, device: str = "auto", **overrides) -> MathConfig:
        """The CPU defaults, or ``GPU_DEFAULTS`` when ``device`` is (or auto-detects) CUDA;
        ``REASONING_DEFAULTS`` for the reasoning dataset or its models, on any device;
        ``MODEL_DEFAULTS`` for a model that has its own, on any device; ``LORA_DEFAULTS`` for
        a LoRA run (``lora_r > 0``) of a model that has them.

        Asking for a shipped tiny model (``model="tiny"``) keeps the CPU lesson's settings on
        any device: the real-model settings (chat template, long completions) do not fit it.
        """
        if overrides.get("dataset") == "reasoning" or overrides.get("model") in (
            "tiny-reasoning", "tiny-direct"
        ):  # fmt: skip
            values = cls.REASONING_DEFAULTS | overrides
        elif overrides.get("model") in cls.MODEL_DEFAULTS:
            values = cls.MODEL_DEFAULTS[overrides["model"]] | overrides
        else:
            cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
            real_model = overrides.get("model", cls.GPU_DEFAULTS.get("model")) != "tiny"
            values = (dict(cls.GPU_DEFAULTS) if cuda and real_model else {}) | overrides
        model = values.get("model", cls.__dataclass_fields__["model"].default)
        if values.get("lora_r") and model in cls.LORA_DEFAULTS:
            values = values | cls.LORA_DEFAULTS[model] | overrides  # over MODEL_DEFAULTS only
        elif values.get("lora_r") and "learning_rate" not in overrides:
            warnings.warn(f"lora_r: no LoRA learning rate was chosen for {model}; the full "
                          "fine-tune's is kept, and LoRA usually needs a larger one (10x and 30x "
                          "on the models in LORA_DEFAULTS): pass --learning-rate", stacklevel=2)  # fmt: skip
        return cls(device=device, **values)

    def validate(self) -> None:
        super().validate()
        for name in ("model", "dataset", "eval_split"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name).strip():
                raise ValueError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        check_choice("prompt_template", self.prompt_template, PROMPT_TEMPLATES)
        check_range("prompts_per_step", self.prompts_per_step, 1)
        check_range("max_completion_length", self.max_completion_length, 1)
        check_range("temperature", self.temperature, 0.0, low_open=True)
        check_range("top_p", self.top_p, 0.0, 1.0, low_open=True)
        check_range("max_steps", self.max_steps, 1)
        check_range("time_budget_s", self.time_budget_s, 0.0)
        check_range("gradient_accumulation_steps", self.gradient_accumulation_steps, 1)
        if self.prompts_per_step % self.gradient_accumulation_steps:
            raise ValueError(
                f"gradient_accumulation_steps must divide prompts_per_step={self.prompts_per_step}"
                f" (a micro-batch holds whole groups), got {self.gradient_accumulation_steps}"
            )
        check_range("weight_decay", self.weight_decay, 0.0)
        check_choice("lr_scheduler_type", self.lr_scheduler_type, ("linear", "constant"))
        check_range("format_weight", self.format_weight, 0.0)
        check_range("eval_n", self.eval_n, 1)
        check_range("eval_every", self.eval_every, 0)
        check_range("save_every", self.save_every, 0)
        if self.device not in DEVICE_NAMES and not self.device.startswith("cuda:"):
            raise ValueError(f"device must be one of {DEVICE_NAMES} or cuda:N, got {self.device!r}")
        check_choice("dtype", self.dtype, DTYPE_NAMES)
        check_range("lora_r", self.lora_r, 0)
        if self.lora_alpha is not None:
            check_range("lora_alpha", self.lora_alpha, 0.0, low_open=True)
        check_range("lora_dropout", self.lora_dropout, 0.0, 1.0, high_open=True)
        if not isinstance(self.lora_target_modules, str) or not self.lora_target_modules.strip():
            raise ValueError(
                f"lora_target_modules must be all-linear or module names, got {self.lora_target_modules!r}"
            )
        if self.lora_r and self.ref_update_every:
            raise ValueError(
                "ref_update_every must be 0 with lora_r > 0: the reference is the base model with "
                "the adapter off, which training never changes"
            )
        if not isinstance(self.gradient_checkpointing, bool):
            raise ValueError(
                f"gradient_checkpointing must be True or False, got {self.gradient_checkpointing!r}"
            )
