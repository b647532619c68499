"""Loading a causal LM and its tokenizer, and the prompts it sees.

``load_model`` gives a float32 model with dropout off and a tokenizer that pads on the left
(batched generation continues every row from its last prompt token); ``format_prompt`` turns a
dataset prompt into the text the model sees (as it is, or a chat prompt asking for a format);
``eos_token_ids`` lists every token that ends a completion; ``check_prompt_lengths`` refuses
prompts that leave no room for the completion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import torch

from .rewards import R1_SYSTEM_PROMPT

TINY_MODEL = Path(__file__).resolve().parent.parent / "data" / "tiny_math_lm"
"""The small model the course ships (built by ``data/make_tiny_model.py``)."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def resolve_model_name(name: str) -> str:
    """``tiny`` is the shipped model folder; anything else is a local folder or a Hub id."""
    return str(TINY_MODEL) if name == "tiny" else name


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' loading / saving progress bars (they flood notebooks and logs)."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def load_model(name: str, device: torch.device):
    """A causal LM (float32 weights, dropout off) and its tokenizer, ready for left padding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = resolve_model_name(name)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).to(device)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    disable_dropout(model)
    return model, tokenizer


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout would make log pi differ between two passes over the same tokens (ratio != 1)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


def enable_activation_checkpointing(model) -> None:
    """Recompute activations in the backward pass instead of storing them (less GPU memory)."""
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers 5's name
    (enable or model.gradient_checkpointing_enable)()


def eos_token_ids(model, tokenizer) -> list[int]:
    """Every token that ends a completion: the tokenizer's EOS and the model's (chat models
    often have two, e.g. ``<|im_end|>`` and ``<|endoftext|>``)."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(configured, int):
        ids.add(configured)
    elif configured is not None:
        ids.update(configured)
    ids.discard(None)
    if not ids:
        raise ValueError("the tokenizer has no eos_token: completions would never end")
    return sorted(ids)


def format_prompt(question: str, tokenizer, template: str) -> str:
    """The text the model sees: the prompt as it is, or a chat prompt asking for a format."""
    if template == "plain":
        return question
    if template == "r1":
        messages = [
            {"role": "system", "content": R1_SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
    elif template == "boxed":
        messages = [{"role": "user", "content": f"{question}\n{BOXED_INSTRUCTION}"}]
    else:
        raise ValueError(f"prompt_template must be 'plain', 'r1' or 'boxed', got {template!r}")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"prompt_template={template!r} needs a tokenizer with a chat template; "
            "use prompt_template='plain' for a base model such as the tiny one"
        )
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def check_prompt_lengths(prompts: Sequence[str], tokenizer, model, max_new_tokens: int) -> None:
    """Refuse prompts that leave no room for the completion in the model's context."""
    context = getattr(model.config, "max_position_embeddings", None)
    if context is None:
        return
    lengths = [len(ids) for ids in tokenizer(list(prompts), add_special_tokens=False)["input_ids"]]
    for index, length in enumerate(lengths):
        if length + max_new_tokens > context:
            raise ValueError(
                f"prompt {index} is {length} tokens long; with max_completion_length="
                f"{max_new_tokens} that exceeds the model's context of {context} tokens "
                f"(prompt starts {prompts[index][:60]!r}). Shorten the prompt or lower "
                "max_completion_length."
            )
