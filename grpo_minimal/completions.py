"""Step 1 of the LLM GRPO step: sample G completions of each prompt, as ``CompletionGroups``.

``sample_completions`` draws all groups in one batched ``generate`` call and masks everything
after each completion's first EOS, equation (15) (symbols as in ``lm_grpo.py`` and notebook 06).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .lm_model import eos_token_ids


@dataclass
class CompletionGroups:
    """P distinct prompts x G completions = N rows; completion i answers prompt i // G.

    Prompts are stored once (left-padded), completions right-padded.
    """

    prompt_ids: torch.Tensor  # [P, Lp], one row per distinct prompt
    prompt_mask: torch.Tensor  # [P, Lp]
    completion_ids: torch.Tensor  # [N, C]
    completion_mask: torch.Tensor  # [N, C], equation (15)
    prompts: list[str] = field(default_factory=list)  # N prompt texts (each repeated G times)
    completions: list[str] = field(default_factory=list)  # N decoded completions
    rows: list[dict] = field(default_factory=list)  # N dataset rows, for the reward functions

    @property
    def num_generations(self) -> int:
        return self.completion_ids.shape[0] // self.prompt_ids.shape[0]

    def split(self, parts: int) -> list[tuple[slice, CompletionGroups]]:
        """``parts`` equal micro-batches of whole groups: (their rows, the micro-rollout)."""
        G, prompts = self.num_generations, self.prompt_ids.shape[0]
        if prompts % parts:  # unequal micro-batches would weight the loss unevenly
            raise ValueError(
                f"gradient_accumulation_steps={parts} must divide the number of prompts in a "
                f"step, got {prompts} prompts"
            )
        size, micro = prompts // parts, []
        for start in range(0, prompts, size):
            p, r = slice(start, start + size), slice(start * G, (start + size) * G)
            micro.append((r, CompletionGroups(self.prompt_ids[p], self.prompt_mask[p],
                                     self.completion_ids[r], self.completion_mask[r],
                                     self.prompts[r], self.completions[r], self.rows[r])))  # fmt: skip
        return micro


def mask_after_eos(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> torch.Tensor:
    """Equation (15): 1 up to and including the first EOS of each row, 0 after it."""
    is_eos = torch.isin(completion_ids, torch.tensor(list(eos_ids), device=completion_ids.device))
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # an EOS earlier in the row
    return (~seen_before).long()


@torch.no_grad()
def sample_completions(
    model, tokenizer, rows: Sequence[dict], prompts: Sequence[str], *, num_generations: int,
    max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, do_sample: bool = True,
    eos_ids: Sequence[int] | None = None, amp=None,
) -> CompletionGroups:  # fmt: skip
    """Step 1: G completions of each prompt, all in one batched ``generate`` call.

    The sampling settings are a fresh ``GenerationConfig`` that stands in for the model's own
    during the call: transformers fills every setting left unset from the model's generation
    config, so a chat model's ``top_k=20``, ``min_p`` or ``repetition_penalty`` would otherwise
    change the distribution whose log-probs the loss uses.
    """
    from transformers import GenerationConfig

    G = num_generations
    device = next(model.parameters()).device
    eos_ids = list(eos_ids or eos_token_ids(model, tokenizer))
    enc = tokenizer(list(prompts), return_tensors="pt", padding=True, add_special_tokens=False)
    prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)
    sampling = {"temperature": temperature, "top_p": top_p, "top_k": 0} if do_sample else {}
    config = GenerationConfig(do_sample=do_sample, max_new_tokens=max_new_tokens,
                              pad_token_id=tokenizer.pad_token_id, eos_token_id=eos_ids,
                              **sampling)  # fmt: skip
    own_config, was_training = model.generation_config, model.training
    model.generation_config = config
    model.eval()
    try:
        with amp if amp is not None else contextlib.nullcontext():
            output = model.generate(input_ids=prompt_ids.repeat_interleave(G, dim=0),
                                    attention_mask=prompt_mask.repeat_interleave(G, dim=0),
                                    generation_config=config)  # fmt: skip
    finally:
        model.generation_config = own_config
        model.train(was_training)
    completion_ids = output[:, prompt_ids.shape[1] :]
    completion_mask = mask_after_eos(completion_ids, eos_ids)
    completion_ids = completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id)
    return CompletionGroups(
        prompt_ids, prompt_mask, completion_ids, completion_mask,
        prompts=[p for p in prompts for _ in range(G)],
        completions=tokenizer.batch_decode(completion_ids, skip_special_tokens=True),
        rows=[r for r in rows for _ in range(G)],
    )  # fmt: skip


def truncated_fraction(completion_ids: torch.Tensor, eos_ids: Sequence[int]) -> float:
    """Fraction of completions with no EOS: cut at ``max_completion_length`` before they ended.

    Such a completion rarely holds a full answer; when most are cut, rewards go flat (TRL logs
    the same number as ``completions/clipped_ratio``)."""
    eos = torch.tensor(list(eos_ids), device=completion_ids.device)
    ended = torch.isin(completion_ids, eos).any(dim=1)
    return 1.0 - ended.float().mean().item()
