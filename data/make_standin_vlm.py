"""Build the stand-in for SmolVLM-256M-Instruct: ``data/standin_vlm/``, so that CI runs the GPU
road's vision-language code path (an Idefics3 model, its processor, image tiling) on a CPU, with
nothing downloaded.

Run from the repository root (a few seconds; seeded):

    .venv/bin/python data/make_standin_vlm.py

SmolVLM-256M-Instruct (``HuggingFaceTB/SmolVLM-256M-Instruct``) is an Idefics3 model: a SigLIP
vision encoder (512x512 tiles in 16x16 patches), a pixel shuffle (``scale_factor`` 4: 1024
patches -> 64 image tokens per tile) and a projection into SmolLM2-135M, a Llama text model. Its
processor (``Idefics3Processor``) resizes an image to a longest edge of 2048, cuts it into
512x512 tiles plus one global tile, and writes each tile as ``<fake_token_around_image>``,
``<row_i_col_j>`` (or ``<global-img>``) and 64 ``<image>`` tokens. This stand-in has the same
classes, the same tiling rule at an eighth of the scale (64x64 tiles in 8x8 patches,
``scale_factor`` 4: 4 image tokens per tile; longest edge 256 = 4 tiles a side, so a 32x32
picture becomes 16 tiles + 1 global, as in SmolVLM), random weights (0.15M parameters, a
2-layer vision tower of width 32, a 2-layer Llama of width 64), a one-token-per-character
tokenizer with SmolVLM's special tokens (``<end_of_utterance>`` ends a turn and is the EOS,
``<|im_end|>`` pads) and SmolVLM's chat template (``User:<image>...<end_of_utterance>``, then
``Assistant:``). It reads nothing: it is a stand-in for the plumbing, not a model of anything
(``tests/test_vlm_gpu_road.py`` trains it with the course's trainer).
"""

from __future__ import annotations

import argparse
import json
import re
import string
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    Idefics3VisionConfig,
    LlamaConfig,
    PreTrainedTokenizerFast,
)

HERE = Path(__file__).resolve().parent
SEED = 0
OUT = HERE / "standin_vlm"
TILE, PATCH, SCALE = 64, 8, 4  # SmolVLM: 512, 16, 4
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE**2  # image tokens per tile (SmolVLM: 64)
LONGEST_EDGE = 4 * TILE  # SmolVLM: 2048 = 4 * 512
# SmolVLM's special tokens (its tokenizer has them, at other ids)
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<end_of_utterance>",
    "<fake_token_around_image>",
    "<image>",
    "<global-img>",
    *[f"<row_{i}_col_{j}>" for i in range(1, 7) for j in range(1, 7)],
    "<unk>",
]
CHARS = list(string.printable[:-2])  # letters, digits, punctuation, space, \t, \n (not \r \x0b)
# SmolVLM-256M-Instruct's chat template: a turn is "Role:" then its parts, an image as <image>
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'][0]['type'] == 'image' %}{{ ':' }}{% else %}{{ ': ' }}{% endif %}"
    "{% for line in message['content'] %}"
    "{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)
TEXT = dict(  # SmolLM2-135M's shape, shrunk: grouped-query attention, untied head
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rope_theta=100000.0,
    tie_word_embeddings=False,
)
VISION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=TILE,
    patch_size=PATCH,
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character and one per special token; unknown characters become ``<unk>``."""
    vocab = {token: i for i, token in enumerate(SPECIAL + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    pattern = "|".join([re.escape(t) for t in SPECIAL] + [r"[\s\S]"])
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        pad_token="<|im_end|>",
        unk_token="<unk>",
        additional_special_tokens=[t for t in SPECIAL if t.startswith(("<row", "<global", "<fake"))]
        + ["<image>", "<|endoftext|>"],
        padding_side="left",
        model_max_length=TEXT["max_position_embeddings"],
    )


def build_processor() -> Idefics3Processor:
    """SmolVLM's processor settings at the stand-in's scale (PIL backend: no torchvision)."""
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True,
        size={"longest_edge": LONGEST_EDGE},
        max_image_size={"longest_edge": TILE},
        do_image_splitting=True,
        resample=1,  # LANCZOS, as SmolVLM's preprocessor_config.json
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    )
    return Idefics3Processor(
        image_processor=image_processor,
        tokenizer=build_tokenizer(),
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(processor: Idefics3Processor) -> Idefics3ForConditionalGeneration:
    tokenizer = processor.tokenizer
    text_config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TEXT,
    )
    config = Idefics3Config(
        vision_config=Idefics3VisionConfig(**VISION),
        text_config=text_config,
        image_token_id=processor.image_token_id,
        scale_factor=SCALE,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(SEED)
    model = Idefics3ForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(OUT), help=f"output folder (default: {OUT})")
    args = parser.parse_args()
    processor = build_processor()
    model = build_model(processor)
    out = Path(args.out)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    info = {
        "seed": SEED,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vision_parameters": sum(p.numel() for p in model.model.vision_model.parameters()),
        "vocab_size": len(processor.tokenizer),
        "image_seq_len": IMAGE_SEQ_LEN,
        "torch": torch.__version__,
    }
    info["size_bytes"] = sum(
        f.stat().st_size for f in out.iterdir() if f.name != "standin_info.json"
    )
    (out / "standin_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps(info))


if __name__ == "__main__":
    main()
