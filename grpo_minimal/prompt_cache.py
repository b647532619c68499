"""An optional speed-up of the log-prob passes: encode each prompt once for its G completions.

The G completions of a group share their prompt, so ``lm_trainer.completion_logits`` (one pass over
prompt + completion per row) encodes every prompt G times, as TRL does. ``shared_prompt_logits``
encodes it once, copies its key/value cache G times (``repeat_interleave``, differentiable:
the gradients of all G completions flow back into the one prompt pass) and runs only the
completion tokens from the copies. ``LMGRPOTrainer`` uses it unless activation checkpointing is
on. At the CPU lesson's settings it makes a whole GRPO step faster: ``bench/prompt_cache.py``.
"""

from __future__ import annotations

import torch

from .completions import CompletionGroups, cache_argument, output_cache


def shared_prompt_logits(model, rollout: CompletionGroups) -> torch.Tensor:
    """``lm_trainer.completion_logits`` with each prompt encoded once for its G completions.

    The prompt's key/value cache is copied G times and the completions run on from it: the same
    numbers and gradients (tested), fewer operations. Unusable with activation checkpointing,
    which turns the cache off.
    """
    G, C = rollout.num_generations, rollout.completion_ids.shape[1]
    positions = (rollout.prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    out = model(
        input_ids=rollout.prompt_ids,
        attention_mask=rollout.prompt_mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **rollout.prompt_inputs,  # a VLM's image: its features enter the cache here
    )
    cache = output_cache(out)
    cache.batch_repeat_interleave(G)  # gradients flow back through the copies
    first = out.logits[:, -1:].repeat_interleave(G, dim=0)  # predicts completion token 0
    if C == 1:
        return first
    prompt_mask = rollout.prompt_mask.repeat_interleave(G, dim=0)
    attention_mask = torch.cat([prompt_mask, rollout.completion_mask[:, :-1]], dim=1)
    start = prompt_mask.sum(dim=1, keepdim=True)  # positions go on after the real prompt tokens
    positions = start + torch.arange(C - 1, device=start.device)
    rest = model(
        input_ids=rollout.completion_ids[:, :-1],
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        **{cache_argument(model): cache},
    ).logits
    return torch.cat([first, rest], dim=1)
