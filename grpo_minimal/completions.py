"""Stage 1 of the LLM GRPO and PPO steps: sample G completions of each prompt, as ``CompletionGroups``.

``sample_completions`` draws all groups at once and masks everything after each completion's
first EOS, equation (15) (symbols as in ``lm_grpo.py`` and notebook 06). It draws through one
batched ``model.generate`` call, or through ``sample_with_kv_cache``, a short loop over the
model's own key/value cache that makes the same draws (``uses_sampling_loop`` says when).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

from .lm_model import eos_token_ids
from .vlm import encode_prompts, is_processor, text_tokenizer

SAMPLING_LOOP_MAX_PARAMETERS = 10_000_000
"""``uses_sampling_loop``: models up to this size sample through the loop on a CPU."""
SAMPLERS = ("generate", "loop")
"""``sample_completions``'s ``sampler`` values."""


@dataclass
class CompletionGroups:
    """A rollout: P distinct prompts x G completions = N rows; completion i answers prompt i // G.

    Prompts are stored once (left-padded), completions right-padded. The tensors a step adds
    (``add``: old and reference log-probs, advantages, values, masks) travel with
    their rows: ``split`` and ``take`` slice every one of them together, as TRL's
    ``split_tensor_dict`` does, and each is read as an attribute (``rollout.advantages``).
    A vision-language model's image tensors travel with their prompts, in ``prompt_inputs``
    (``pixel_values`` [P, 3, H, W]): every forward over a prompt passes them (``row_inputs``
    repeats them for a pass over prompt + completion rows).
    """

    prompt_ids: torch.Tensor  # [P, Lp], one row per distinct prompt
    prompt_mask: torch.Tensor  # [P, Lp]
    completion_ids: torch.Tensor  # [N, C]
    completion_mask: torch.Tensor  # [N, C], equation (15)
    prompts: list[str] = field(default_factory=list)  # N prompt texts (each repeated G times)
    completions: list[str] = field(default_factory=list)  # N decoded completions
    rows: list[dict] = field(default_factory=list)  # N dataset rows, for the reward functions
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)  # per row: [N, ...] each
    prompt_inputs: dict[str, torch.Tensor] = field(default_factory=dict)  # per prompt: [P, ...]

    def __getattr__(self, name: str) -> torch.Tensor:
        # only called for names that are not fields: the tensors a step added
        tensors = self.__dict__.get("tensors", {})
        if name in tensors:
            return tensors[name]
        raise AttributeError(f"this rollout holds no {name!r}")

    @property
    def num_generations(self) -> int:
        return self.completion_ids.shape[0] // self.prompt_ids.shape[0]

    def add(self, **tensors: torch.Tensor | None) -> None:
        """Attach per-row tensors ([N, ...]). None removes the name: a pass that did not run
        this step leaves nothing from an earlier step behind."""
        for name, value in tensors.items():
            if value is None:
                self.tensors.pop(name, None)
                continue
            if value.shape[0] != self.completion_ids.shape[0]:
                raise ValueError(
                    f"{name} has {value.shape[0]} rows, the rollout {self.completion_ids.shape[0]}"
                )
            self.tensors[name] = value

    def row_inputs(self) -> dict[str, torch.Tensor]:
        """``prompt_inputs`` with each prompt's repeated for its G rows: [N, ...] each."""
        G = self.num_generations
        return {k: v.repeat_interleave(G, dim=0) for k, v in self.prompt_inputs.items()}

    def get(self, name: str) -> torch.Tensor | None:
        """An added tensor, or None when the step did not add it (``ref_logps`` at beta 0)."""
        return self.tensors.get(name)

    def select(self, prompts, rows) -> CompletionGroups:
        """The given prompts and rows (indices or slices), every tensor sliced alike."""
        pick = (
            (lambda items: items[rows])
            if isinstance(rows, slice)
            else (lambda items: [items[i] for i in rows])
        )
        return CompletionGroups(
            self.prompt_ids[prompts],
            self.prompt_mask[prompts],
            self.completion_ids[rows],
            self.completion_mask[rows],
            pick(self.prompts),
            pick(self.completions),
            pick(self.rows),
            {name: value[rows] for name, value in self.tensors.items()},
            {name: value[prompts] for name, value in self.prompt_inputs.items()},
        )

    def take(self, prompts: torch.Tensor) -> CompletionGroups:
        """The groups of the given prompt indices, in that order (PPO's shuffled minibatches)."""
        G = self.num_generations
        return self.select(prompts, (prompts[:, None] * G + torch.arange(G)).flatten().tolist())

    def split(self, parts: int) -> list[CompletionGroups]:
        """``parts`` equal micro-batches of whole groups, in order."""
        G, prompts = self.num_generations, self.prompt_ids.shape[0]
        if prompts % parts:  # unequal micro-batches would weight the loss unevenly
            raise ValueError(
                f"gradient_accumulation_steps={parts} must divide the number of prompts in a "
                f"step, got {prompts} prompts"
            )
        size = prompts // parts
        return [
            self.select(slice(start, start + size), slice(start * G, (start + size) * G))
            for start in range(0, prompts, size)
        ]

    def shuffled(self, parts: int, generator: torch.Generator) -> list[CompletionGroups]:
        """``parts`` minibatches of whole groups in a random order drawn from ``generator``."""
        prompts = self.prompt_ids.shape[0]
        order, size = torch.randperm(prompts, generator=generator), prompts // parts
        return [self.take(order[first : first + size]) for first in range(0, prompts, size)]


def mask_after_eos(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> torch.Tensor:
    """Equation (15): 1 up to and including the first EOS of each row, 0 after it."""
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids), device=completion_ids.device))
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # an EOS earlier in the row
    return (~seen_before).long()


def cache_argument(model) -> str:
    """The forward's name for the key/value cache: transformers 5.x renames ``past_key_values``
    to ``cache`` (the old name warns). A peft model passes it on to the model it wraps."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft (LoRA)
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def output_cache(out):
    """The key/value cache a forward with ``use_cache=True`` returned (transformers 5 / 4)."""
    return out["cache"] if "cache" in out else out.past_key_values


def uses_sampling_loop(model) -> bool:
    """The rule for stage 1's sampler: ``sample_with_kv_cache`` for a small model on the CPU that
    the loop can drive, ``model.generate`` otherwise. The loop needs all of:

    - the CPU, and at most ``SAMPLING_LOOP_MAX_PARAMETERS`` parameters;
    - a decoder-only model (no ``config.is_encoder_decoder``);
    - a forward that names ``position_ids``, ``logits_to_keep`` and the cache argument (a
      forward taking them only through ``**kwargs`` may ignore them), and ``use_cache`` or
      ``**kwargs`` (LLaVA passes it on to its text model; the probe sees a cache come back);
    - a forward of one token with those arguments that returns one position's logits and a
      cache with ``batch_repeat_interleave`` (transformers' ``DynamicCache``; not a recurrent
      model's state or a legacy tuple). This probe runs in eval mode and draws no random numbers.

    A small model's step on a CPU is mostly per-call overhead, and ``generate`` adds its own to
    every token; the loop is checked token for token against ``generate`` on the course's small
    models (``tests/test_sampling_loop.py``). Real models and GPUs keep ``generate``: there the
    forward's arithmetic dominates, and ``generate`` handles what the loop does not (compiled
    forwards, static and hybrid caches, other models' quirks).
    """
    device = next(model.parameters()).device
    size = sum(p.numel() for p in model.parameters())
    if device.type != "cpu" or size > SAMPLING_LOOP_MAX_PARAMETERS:
        return False
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return False
    named = inspect.signature(model.forward).parameters
    if not {"position_ids", "logits_to_keep", cache_argument(model)} <= set(named):
        return False
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in named.values())
    if "use_cache" not in named and not passes_on:
        return False
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            one = torch.zeros(1, 1, dtype=torch.long, device=device)
            out = model(input_ids=one, position_ids=one, use_cache=True, logits_to_keep=1)
    finally:
        model.train(was_training)
    cache = output_cache(out)
    return out.logits.shape[:2] == (1, 1) and hasattr(cache, "batch_repeat_interleave")


def nucleus_filter(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p: keep the most likely tokens whose probabilities sum to at least ``top_p``, set the
    others to -inf. The same operations as transformers' ``TopPLogitsWarper``."""
    sorted_scores, order = torch.sort(scores, descending=False)
    cumulative = sorted_scores.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= (1 - top_p)  # the unlikely tail holding at most 1 - top_p of the mass
    drop[..., -1:] = False  # the most likely token always stays
    return scores.masked_fill(drop.scatter(1, order, drop), float("-inf"))


@torch.no_grad()
def sample_with_kv_cache(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    do_sample: bool,
    pad_id: int,
    eos_ids: Sequence[int],
    prompt_inputs: dict[str, torch.Tensor] | None = None,
    suppress_ids: Sequence[int] = (),
) -> torch.Tensor:
    """G completions of each of P left-padded prompts, token by token: [P * G, C] new tokens,
    C <= ``max_new_tokens`` (row i answers prompt i // G).

    The draws of ``model.generate`` with the same settings: the same logits, the same calls to
    torch's random generator (transformers' ``_sample``), without its per-token bookkeeping.
    One forward over the P prompts fills the key/value cache; the G rows of a group copy it
    (``repeat_interleave``: exact). Then each new token is one forward of one token per row.
    (``generate`` runs the prompt pass over all P * G rows: a matmul over another number of rows
    may round differently, so the first token's logits can differ in the last bits; on the
    course's models the draws are the same, ``tests/test_sampling_loop.py``.)
    A row that has emitted an EOS gets ``pad_id`` from then on (equation (15) masks it); the
    loop stops when every row has, or after ``max_new_tokens``. ``prompt_inputs`` (a VLM's
    ``pixel_values``) go into the prompt pass only: the image features then live in the cache.
    ``suppress_ids`` are never drawn (a VLM's ``<image>``: generate's ``suppress_tokens``).
    """
    G, N = num_generations, prompt_ids.shape[0] * num_generations
    # positions count real tokens only, so left padding moves nothing
    positions = (prompt_mask.cumsum(dim=1) - 1).masked_fill(prompt_mask == 0, 0)
    # generate passes no mask when there is no padding; a mask would change the attention kernel
    mask = None if bool(prompt_mask.all()) else prompt_mask
    out = model(
        input_ids=prompt_ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **(prompt_inputs or {}),
    )
    cache = output_cache(out)
    cache.batch_repeat_interleave(G)
    logits = out.logits[:, -1].repeat_interleave(G, dim=0)
    suppress = list(suppress_ids)
    positions = positions[:, -1:].repeat_interleave(G, dim=0)
    mask = None if mask is None else mask.repeat_interleave(G, dim=0)
    eos = torch.tensor(list(eos_ids), device=prompt_ids.device)
    unfinished = torch.ones(N, dtype=torch.bool, device=prompt_ids.device)
    tokens, cache_name = [], cache_argument(model)
    while True:
        scores = logits.float()  # generate samples from float32 scores
        if suppress:  # before the temperature, as generate's SuppressTokensLogitsProcessor
            scores[:, suppress] = float("-inf")
        if do_sample:
            if temperature != 1.0:  # generate skips the division at T = 1
                scores = scores / temperature
            if top_p < 1.0:
                scores = nucleus_filter(scores, top_p)
            token = torch.multinomial(torch.softmax(scores, dim=-1), num_samples=1).squeeze(1)
        else:
            token = scores.argmax(dim=-1)
        token = torch.where(unfinished, token, pad_id)  # a finished row only pads
        tokens.append(token)
        unfinished &= ~torch.isin(token, eos)
        if len(tokens) == max_new_tokens or not unfinished.any():
            return torch.stack(tokens, dim=1)
        positions = positions + 1  # the new token's position
        if mask is not None:
            mask = torch.cat([mask, mask.new_ones(N, 1)], dim=1)
        out = model(
            input_ids=token[:, None],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            logits_to_keep=1,
            **{cache_name: cache},
        )
        logits = out.logits[:, -1]


def generate_completions(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    num_generations: int,
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    do_sample: bool,
    pad_id: int,
    eos_ids: Sequence[int],
    prompt_inputs: dict[str, torch.Tensor] | None = None,
    suppress_ids: Sequence[int] = (),
) -> torch.Tensor:
    """``sample_with_kv_cache``'s [P * G, C] new tokens, from one batched ``generate`` call.

    The sampling settings are a fresh ``GenerationConfig`` that stands in for the model's own
    during the call: transformers fills every setting left unset from the model's generation
    config, so a chat model's ``top_k=20``, ``min_p`` or ``repetition_penalty`` would otherwise
    change the distribution whose log-probs the loss uses.
    """
    from transformers import GenerationConfig

    sampling = {"temperature": temperature, "top_p": top_p, "top_k": 0} if do_sample else {}
    config = GenerationConfig(
        do_sample=do_sample,
        max_new_tokens=max_new_tokens,
        pad_token_id=pad_id,
        eos_token_id=list(eos_ids),
        suppress_tokens=list(suppress_ids) or None,
        **sampling,
    )
    own_config, model.generation_config = model.generation_config, config
    try:
        output = model.generate(
            input_ids=prompt_ids.repeat_interleave(num_generations, dim=0),
            attention_mask=prompt_mask.repeat_interleave(num_generations, dim=0),
            generation_config=config,
            **{
                k: v.repeat_interleave(num_generations, dim=0)
                for k, v in (prompt_inputs or {}).items()
            },
        )
    finally:
        model.generation_config = own_config
    return output[:, prompt_ids.shape[1] :]


@torch.no_grad()
def sample_completions(
    model,
    tokenizer,
    rows: Sequence[dict],
    prompts: Sequence[str],
    *,
    num_generations: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    do_sample: bool = True,
    eos_ids: Sequence[int] | None = None,
    amp=None,
    sampler: Literal["generate", "loop"] = "generate",
) -> CompletionGroups:
    """Stage 1: G completions of each prompt, all at once, in consecutive blocks of G.

    ``sampler`` draws them: ``"generate"`` (the default) through one batched ``generate`` call
    (``generate_completions``), ``"loop"`` through ``sample_with_kv_cache``: the same draws,
    faster for small models on a CPU (``uses_sampling_loop``, the trainer's rule).

    Prompts are padded on the left whatever the tokenizer's ``padding_side`` (as TRL does): new
    tokens follow each prompt's last token, never a pad.

    For a vision-language model ``tokenizer`` is its processor: each row's ``image`` is encoded
    with its prompt, the image tensors travel in the rollout's ``prompt_inputs``, and the
    ``<image>`` token is never drawn (``config.image_token_id``, as TRL suppresses it).
    """
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    G = num_generations
    device = next(model.parameters()).device
    eos_ids = list(eos_ids or eos_token_ids(model, tokenizer))
    if is_processor(tokenizer):
        enc = encode_prompts(tokenizer, prompts, [row["image"] for row in rows], device)
    else:
        enc = tokenizer(
            list(prompts),
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=False,
        ).to(device)
    prompt_ids, prompt_mask = enc.pop("input_ids"), enc.pop("attention_mask")
    prompt_inputs = dict(enc)  # a VLM's pixel_values; nothing for a text model
    image_token = getattr(model.config, "image_token_id", None)
    suppress_ids = [image_token] if prompt_inputs and image_token is not None else []
    tokenizer = text_tokenizer(tokenizer)
    draw = sample_with_kv_cache if sampler == "loop" else generate_completions
    was_training = model.training
    model.eval()
    try:
        with amp if amp is not None else contextlib.nullcontext():
            completion_ids = draw(
                model,
                prompt_ids,
                prompt_mask,
                G,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                do_sample=do_sample,
                pad_id=tokenizer.pad_token_id,
                eos_ids=eos_ids,
                prompt_inputs=prompt_inputs,
                suppress_ids=suppress_ids,
            )
    finally:
        model.train(was_training)
    completion_mask = mask_after_eos(completion_ids, eos_ids)
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id)
    return CompletionGroups(
        prompt_ids,
        prompt_mask,
        completion_ids,
        completion_mask,
        prompts=[p for p in prompts for _ in range(G)],
        completions=tokenizer.batch_decode(completion_ids, skip_special_tokens=True),
        rows=[r for r in rows for _ in range(G)],
        prompt_inputs=prompt_inputs,
    )


def truncated_fraction(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> float:
    """Fraction of completions with no EOS: cut at ``max_completion_length`` before they ended.

    Such a completion rarely holds a full answer; when most are cut, rewards go flat (TRL logs
    the same number as ``completions/clipped_ratio``)."""
    eos = torch.tensor(list(eos_ids), device=completion_ids.device)
    ended = torch.isin(completion_ids, eos).any(dim=1)
    return 1.0 - ended.float().mean().item()
