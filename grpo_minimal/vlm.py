"""A vision-language model (VLM) in the course: notebook 13's tiny LLaVA and the images it reads.

A LLaVA-style model reads an image as a fixed block of tokens. Its processor writes
``image_seq_length`` copies of the ``<image>`` token into the prompt (16 for the tiny one: a
32x32 image cut into 8x8 patches), and the model's forward replaces their embeddings with the
vision tower's patch features, projected to the text width. Everything after that is the text
model: the completion is sampled and scored as text, and only its tokens carry loss
(``completions.CompletionGroups.prompt_inputs`` carries the image tensors with their prompt).

The trainer's ``tokenizer`` is the model's processor for a VLM (``is_processor``): it encodes
images and text together; ``text_tokenizer`` is its tokenizer. ``build_tiny_vlm`` makes the
tiny LLaVA from transformers' own classes (``data/make_tiny_vlm.py`` trains and ships it);
``load_image`` and ``check_image_rows`` refuse bad images with one line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import torch

IMAGE_TOKEN = "<image>"

# The tiny VLM's chat template: an image block renders as <image> (the processor expands it to
# one token per patch), text as it is; the generation prompt is "=", the tiny math model's
# "the answer follows" (its vocabulary has no letters: digits, +-*=, space).
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}={% endif %}"
)


def is_processor(tokenizer) -> bool:
    """True for a multimodal processor (images and text), False for a tokenizer."""
    return hasattr(tokenizer, "image_processor")


def text_tokenizer(tokenizer):
    """The tokenizer inside a processor, or the tokenizer itself."""
    return tokenizer.tokenizer if is_processor(tokenizer) else tokenizer


def is_vlm(model) -> bool:
    """True for a model with a vision tower (a ``vision_config``)."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(model.config, "vision_config", None) is not None


def vision_image_size(model) -> tuple[int, int]:
    """(height, width) in pixels that the vision tower takes."""
    size = model.config.vision_config.image_size
    return (size, size) if isinstance(size, int) else tuple(size)


def image_prompt(messages: list[dict]) -> list[dict]:
    """``messages`` with one image block before the last user message's text. Every message's
    content becomes a list of parts, as TRL writes them: SmolVLM's chat template reads only
    parts, and would drop a system prompt given as a string."""
    *first, last = messages
    return [
        *[{**m, "content": [{"type": "text", "text": m["content"]}]} for m in first],
        {**last, "content": [{"type": "image"}, {"type": "text", "text": last["content"]}]},
    ]


def load_image(path: str | Path, where: str = "image"):
    """An RGB ``PIL.Image`` read from ``path``; one line naming ``where`` when it cannot be read."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.convert("RGB")
    except (OSError, UnidentifiedImageError, ValueError) as err:
        reason = "no such file" if isinstance(err, FileNotFoundError) else "not a readable image"
        raise ValueError(f"{where}: {path} is {reason}") from None


def image_key(image) -> str:
    """The identity of an image for the held-out check: a hash of its size and pixels."""
    return hashlib.sha1(repr(image.size).encode() + image.tobytes()).hexdigest()


def check_image_rows(rows: Sequence[dict], model, name: str, processor=None) -> None:
    """A VLM needs one image per row; a text model takes none (its forward would ignore one).
    Where the processor does not resize (the tiny VLM's: ``do_resize=False``), each image must
    be the size the vision tower takes; a real VLM's processor resizes (and tiles) any size."""
    if not is_vlm(model):
        for index, row in enumerate(rows):
            if "image" in row:
                raise ValueError(
                    f"{name} row {index} has an image, but the model is a text model that cannot "
                    "read it; use a vision-language model (--model tiny-vlm) or rows without images"
                )
        return
    height, width = vision_image_size(model)
    resizes = getattr(getattr(processor, "image_processor", None), "do_resize", False)
    for index, row in enumerate(rows):
        image = row.get("image")
        if image is None:
            raise ValueError(
                f"{name} row {index} has no 'image': a vision-language model needs one image per "
                "row (a JSONL row's 'image' is a file path; see data/README.md)"
            )
        if not hasattr(image, "size"):
            raise ValueError(f"{name} row {index}: 'image' must be a PIL image, got {image!r:.80}")
        if not resizes and tuple(image.size) != (width, height):
            raise ValueError(
                f"{name} row {index}: the image is {image.size[0]}x{image.size[1]} pixels; this "
                f"model's vision tower takes {width}x{height} (resize the images first)"
            )


def encode_prompts(processor, prompts: Sequence[str], images: Sequence, device) -> dict:
    """Left-padded ``input_ids`` and ``attention_mask`` [P, Lp] with each prompt's ``<image>``
    expanded to its block of image tokens, and the image tensors (``pixel_values`` [P, 3, H, W]
    for LLaVA): one image per prompt."""
    encoded = processor(
        images=list(images),
        text=list(prompts),
        return_tensors="pt",
        padding=True,
        padding_side="left",
        add_special_tokens=False,
    )
    return {name: value.to(device) for name, value in encoded.items()}


def build_tiny_vlm(text_model: str | Path, image_size: int = 32, patch: int = 8, seed: int = 0):
    """The tiny LLaVA: ``(model, processor)`` from transformers' own classes, no download.

    - text tower: the Qwen2 model in ``text_model`` (its weights copied in), its vocabulary
      grown by one token, ``<image>``, whose embedding starts at the mean of the others;
    - vision tower: a 2-layer CLIP of width 64 over ``image_size`` pixels in ``patch``-pixel
      patches; a 2-layer projector (GELU) into the text width;
    - processor: ``LlavaProcessor`` with ``CLIPImageProcessorPil`` (no torchvision), the text
      model's tokenizer, ``TINY_CHAT_TEMPLATE``, left padding.

    ``vision_feature_layer=-1``: the image tokens are the last CLIP layer's outputs (the default,
    -2, would leave the last layer without a gradient). ``"default"`` drops CLIP's class token:
    one image token per patch.
    """
    from tokenizers import AddedToken
    from transformers import (
        AutoModelForCausalLM,
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        GenerationConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )

    if image_size % patch:
        raise ValueError(f"image_size={image_size} must be a multiple of patch={patch}")
    image_tokens = (image_size // patch) ** 2
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(text_model))
    text = AutoModelForCausalLM.from_pretrained(str(text_model), dtype=torch.float32)
    tokenizer.add_tokens([AddedToken(IMAGE_TOKEN, special=True, normalized=False)])
    tokenizer.padding_side = "left"
    context = image_tokens + text.config.max_position_embeddings  # the image comes on top
    tokenizer.model_max_length = context
    square = {"height": image_size, "width": image_size}
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessorPil(
            do_resize=False,  # another size is refused (check_image_rows), not silently resized
            size=square,
            crop_size=square,
            do_center_crop=False,
            image_mean=[0.5] * 3,
            image_std=[0.5] * 3,
        ),
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, which "default" drops
        chat_template=TINY_CHAT_TEMPLATE,
        image_token=IMAGE_TOKEN,
    )
    text_config = text.config
    text_config.vocab_size = len(tokenizer)
    text_config.max_position_embeddings = context
    vision_config = CLIPVisionConfig(
        image_size=image_size,
        patch_size=patch,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
    )
    config = LlavaConfig(
        vision_config=vision_config,
        text_config=text_config,
        image_token_id=processor.image_token_id,
        image_seq_length=image_tokens,
        vision_feature_layer=-1,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
        tie_word_embeddings=text_config.tie_word_embeddings,
    )
    config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    weights = text.model.state_dict()
    embeddings = weights.pop("embed_tokens.weight")
    result = model.model.language_model.load_state_dict(weights, strict=False)
    if result.unexpected_keys or result.missing_keys != ["embed_tokens.weight"]:
        raise RuntimeError(f"text tower weights do not fit: {result}")
    with torch.no_grad():
        grown = model.model.language_model.embed_tokens.weight
        grown[: len(embeddings)] = embeddings
        grown[len(embeddings) :] = embeddings.mean(0)  # <image>: replaced, never predicted
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        suppress_tokens=[processor.image_token_id],
    )
    return model.eval(), processor


def blank_rows(rows: Sequence[dict]) -> list[dict]:
    """``rows`` with every image replaced by a white one of the same size: the control that
    shows whether a model reads the picture (a blind model scores what the answers' counts
    allow, 1 in 6 for notebook 13's task)."""
    from PIL import Image

    return [{**row, "image": Image.new("RGB", row["image"].size, "white")} for row in rows]
