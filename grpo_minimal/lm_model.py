"""Loading a causal LM and its tokenizer, and the prompts it sees.

``load_model`` gives a float32 model with dropout off and a tokenizer that pads on the left
(batched generation continues every row from its last prompt token); ``load_tokenizer`` loads a
tokenizer as it was saved; ``format_prompt`` turns a dataset prompt into the text the model sees
(as it is, or a chat prompt asking for a format); ``eos_token_ids`` lists every token that ends a
completion; ``check_prompt_lengths`` refuses prompts the model cannot read: characters its
tokenizer does not know, or too long to leave room for the completion.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import torch

from . import fetch, shipped
from .r1_format import R1_SYSTEM_PROMPT
from .vlm import image_prompt, is_processor, is_vlm, text_tokenizer

SHIPPED_MODELS = {
    name: shipped.data_dir() / shipped.SHIPPED_MODEL_FOLDERS[name]
    for name in ("tiny", "tiny-reasoning", "tiny-direct", "tiny-vlm")
}
"""Short names of the models in ``data/`` that ``--model`` takes: the tiny math model,
notebook 10's cold starts (``data/make_reasoning_model.py``: a minority of written solutions, and
none) and notebook 13's tiny vision-language model (``data/make_tiny_vlm.py``). ``grpo_minimal.shipped`` finds them in a checkout or in the installed package."""

TINY_MODEL = SHIPPED_MODELS["tiny"]
"""The small model the course ships (built by ``data/make_tiny_model.py``)."""

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
FINAL_INSTRUCTION = "Give only the final answer in \\boxed{}."
"""The ``final`` template's request (notebook 11): a 135M model asked to reason step by step
writes long, wrong steps; asked for the answer alone it is right more often (data/README.md)."""


def resolve_model_name(name: str) -> str:
    """``tiny``, ``tiny-reasoning`` and ``tiny-direct`` are the shipped model folders
    (``SHIPPED_MODELS``), ``smollm2-135m`` a model fetched into the cache
    (``fetch.FETCHABLE_MODELS``); anything else is a local folder or a Hub id.

    A name that can only be a local path (it starts with ``.``, ``/`` or ``~``, has more than
    one ``/``, or its first part is a local folder, as ``data/`` is) must be a folder holding a
    ``config.json`` (or a LoRA run's ``adapter_config.json``): a typo is refused at once instead
    of being looked up on the Hub.
    """
    if name in SHIPPED_MODELS:
        return str(shipped.model_path(name))  # a clear error if this install lacks it
    if name in fetch.FETCHABLE_MODELS:
        return str(fetch.fetched_path(name))  # a clear error naming the command to fetch it
    path = Path(name).expanduser()
    slashes = name.count("/")
    local = name.startswith((".", "/", "~")) or slashes > 1 or (slashes and path.parent.is_dir())
    if local or path.is_dir():
        if not any((path / f).is_file() for f in ("config.json", "adapter_config.json")):
            what = "holds no config.json" if path.is_dir() else "is not a folder"
            raise ValueError(
                f"model: {name!r} {what}; give a model folder (a checkpoint written by "
                "grpo-minimal math, or save_pretrained), a Hub id such as "
                "Qwen/Qwen2.5-0.5B-Instruct, or one of "
                f"{', '.join([*SHIPPED_MODELS, *fetch.FETCHABLE_MODELS])}"
            )
        return str(path)
    return name


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


def load_tokenizer(name: str):
    """The tokenizer saved with a model, as it was saved, padding on the left.

    Its ``tokenizer.json`` is loaded as it is (``PreTrainedTokenizerFast``), not through
    ``AutoTokenizer``: transformers 5 lists ``qwen2`` among the model types whose Hub tokenizer
    class it distrusts (``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS`` in
    ``models/auto/tokenization_auto.py``, 5.24) and rebuilds such a tokenizer as Qwen2's
    byte-level BPE. For the tiny model's one-token-per-character vocabulary that drops spaces
    (``"1 2"`` -> 2 tokens) and letters (no token at all, instead of ``<unk>``). A model without
    a ``tokenizer.json`` (a slow tokenizer only) falls back to ``AutoTokenizer``.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    name = resolve_model_name(name)
    with quiet_transformers():
        try:
            tokenizer = PreTrainedTokenizerFast.from_pretrained(name)
        except ValueError:  # no tokenizer.json (a slow tokenizer only): let transformers convert it
            tokenizer = AutoTokenizer.from_pretrained(name)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def is_vlm_folder(name: str) -> bool:
    """True for a model whose config has a vision tower (a ``vision_config``): a local folder's
    ``config.json``, or a Hub id's config (SmolVLM's GPU road loads one by its id)."""
    config = Path(name) / "config.json"
    if config.is_file() or Path(name).is_dir():
        return config.is_file() and '"vision_config"' in config.read_text(encoding="utf-8")
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError):  # no config (a Hub LoRA adapter): the causal-LM loader decides
        return False
    return getattr(config, "vision_config", None) is not None


def load_processor(name: str):
    """A vision-language model's processor (images and text), its tokenizer padding left."""
    from transformers import AutoProcessor

    with quiet_transformers():
        processor = AutoProcessor.from_pretrained(name)
    processor.tokenizer.padding_side = "left"
    return processor


def load_model(name: str, device: torch.device):
    """A causal LM (float32 weights, dropout off) and its tokenizer (``load_tokenizer``); a LoRA
    checkpoint loads as its base model with the adapter merged (``lora.load_adapter_merged``).
    A vision-language model (``vlm.py``), or a LoRA checkpoint of one, loads with its processor
    in the tokenizer's place."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    from .lora import is_adapter_folder, load_adapter_merged

    name = resolve_model_name(name)
    with quiet_transformers():
        if is_adapter_folder(name):  # a LoRA run's checkpoint: its base, the adapter merged in
            model = load_adapter_merged(name, device, load_model)
        elif is_vlm_folder(name):
            model = AutoModelForImageTextToText.from_pretrained(name, dtype=torch.float32)
        else:
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    # a VLM's LoRA checkpoint holds its processor too: reloaded with the text tokenizer alone,
    # it could not read images (and --merge would write a model without its image processor)
    tokenizer = load_processor(name) if is_vlm(model) else load_tokenizer(name)
    disable_dropout(model)
    return model.to(device), tokenizer


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
    ids = {text_tokenizer(tokenizer).eos_token_id}
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
    """The text the model sees: the prompt as it is, or a chat prompt asking for a format. For a
    vision-language model (``tokenizer`` is its processor) the prompt is always a chat, with the
    row's image before the question (``plain``: the question alone)."""
    if template == "plain":
        if not is_processor(tokenizer):
            return question
        return tokenizer.apply_chat_template(
            image_prompt([{"role": "user", "content": question}]),
            tokenize=False,
            add_generation_prompt=True,
        )
    if template == "r1":
        messages = [
            {"role": "system", "content": R1_SYSTEM_PROMPT},
            {"role": "user", "content": question},
        ]
    elif template == "boxed":
        messages = [{"role": "user", "content": f"{question}\n{BOXED_INSTRUCTION}"}]
    elif template == "final":
        messages = [{"role": "user", "content": f"{question} {FINAL_INSTRUCTION}"}]
    else:
        raise ValueError(
            f"prompt_template must be 'plain', 'r1', 'boxed' or 'final', got {template!r}"
        )
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"prompt_template={template!r} needs a tokenizer with a chat template; "
            "use prompt_template='plain' for a base model such as the tiny one"
        )
    if is_processor(tokenizer):
        messages = image_prompt(messages)
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def check_prompt_lengths(prompts: Sequence[str], tokenizer, model, max_new_tokens: int) -> None:
    """Refuse prompts the model cannot read: too long to leave room for the completion in the
    model's context, or with characters its tokenizer maps to the unknown token (``<unk>``: the
    tiny model's vocabulary is the digits, ``+-*=`` and the space). A VLM's ``<image>`` counts
    as the block of image tokens its processor expands it to."""
    processor, tokenizer = tokenizer, text_tokenizer(tokenizer)
    # verbose=False: the length is ours to report, in one line
    encoded = tokenizer(list(prompts), add_special_tokens=False, verbose=False)["input_ids"]
    config = model.config.get_text_config()  # a VLM's context is its text model's
    context = getattr(config, "max_position_embeddings", None)
    unk = tokenizer.unk_token_id
    image_id, image_tokens = None, 1
    if is_processor(processor):
        image_id = processor.image_token_id
        image_tokens = getattr(model.config, "image_seq_length", None) or 1
    for index, ids in enumerate(encoded):
        length = len(ids) + (image_tokens - 1) * ids.count(image_id)
        if context is not None and length + max_new_tokens > context:
            raise ValueError(
                f"prompt {index} is {length} tokens long; with max_completion_length="
                f"{max_new_tokens} that exceeds the model's context of {context} tokens "
                f"(prompt starts {prompts[index][:60]!r}). Shorten the prompt or lower "
                "max_completion_length."
            )
    for index, ids in enumerate(encoded):
        if unk is not None and unk in ids:
            unknown = {c for c in prompts[index] if tokenizer.convert_tokens_to_ids(c) == unk}
            raise ValueError(
                f"prompt {index} has characters the model's tokenizer does not know: "
                f"{''.join(sorted(unknown))!r} (prompt starts {prompts[index][:60]!r}); use data the "
                "model can read (the tiny one reads digits, +-*= and spaces) or another model"
            )
