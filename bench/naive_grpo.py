"""NAIVE BASELINE for the benchmark (``bench/llm_step.py``) -- not how to write GRPO.

A re-implementation, written for this project, of the per-sample training loop of the
``GRPO`` class in the GRPO paper review (seed document 000). It is here so the benchmark can
measure what batching buys; the course's implementation is ``grpo_minimal/lm_grpo.py``.

What makes it naive, kept on purpose because that is what is measured:

- **one ``generate`` call per sample**: a group of G completions is G calls that each sample
  one sequence, instead of one call for every prompt x G;
- **one forward per response**, several times over: each completion is re-tokenized from its
  text and pushed through the policy alone, once without gradient for the "old" log-prob,
  once with gradient (and once through the reference when ``kl_coef > 0``), then a backward
  per completion;
- **a full log-softmax** over the vocabulary at every position of the sequence.

Two behaviours of the original, and what this copy does with them:

- the "old" log-probs are computed with the *current* policy just before the update, so the
  ratio is always 1 and clipping never acts. With one update per batch that is what TRL does
  too (``num_iterations=1``), so the gradient is right; it is a bug only for ``num_iterations
  > 1``. Kept: it costs the extra forward the original pays.
- the KL penalty was ``old_log_prob - ref_log_prob``, a quantity with no gradient with respect
  to the policy (both are computed without it), so it penalised nothing. Fixed here: k3 on the
  sequence log-probs of the current policy (costs the same forward).

Like the original it works on sequence log-probs (the sum over the completion's tokens) and
normalises advantages with ``std + 1e-8``; it drops the EOS token from the trained tokens,
because it re-tokenizes the decoded text with special tokens skipped.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class NaiveGRPO:
    """The per-sample GRPO loop (see the module docstring). For benchmarking only."""

    def __init__(
        self,
        model,
        tokenizer,
        reward_fn,
        group_size: int = 8,
        clip_epsilon: float = 0.2,
        kl_coef: float = 0.0,
        lr: float = 1e-6,
        max_new_tokens: int = 5,
        temperature: float = 1.0,
        top_p: float = 1.0,
        ref_model=None,
    ) -> None:
        self.policy, self.tokenizer, self.reward_fn = model, tokenizer, reward_fn
        self.ref_model = ref_model
        self.group_size, self.clip_epsilon, self.kl_coef = group_size, clip_epsilon, kl_coef
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    @torch.no_grad()
    def sample_group(self, prompt: str) -> list[str]:
        """G completions of one prompt: one ``generate`` call per completion."""
        inputs = self.tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        responses = []
        for _ in range(self.group_size):
            output = self.policy.generate(
                **inputs,
                max_new_tokens=self.max_new_tokens,
                do_sample=True,
                temperature=self.temperature,
                top_p=self.top_p,
                top_k=0,
                pad_token_id=self.tokenizer.pad_token_id,
            )
            responses.append(
                self.tokenizer.decode(
                    output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
                )
            )
        return responses

    def sequence_log_prob(self, model, input_ids: torch.Tensor, prompt_length: int):
        """Sum of the response tokens' log-probs, from a full log-softmax over all positions."""
        logits = model(input_ids=input_ids).logits / self.temperature
        log_probs = F.log_softmax(logits[:, :-1], dim=-1)
        token_log_probs = log_probs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        return token_log_probs[:, prompt_length - 1 :].sum(dim=-1)

    def train_step(self, prompts: list[str], answers: list[str]) -> dict:
        """One update: for each prompt, sample its group, score it, and backprop each response."""
        self.policy.train()
        total_loss, total_reward, count = 0.0, 0.0, 0
        for prompt, answer in zip(prompts, answers, strict=True):
            responses = self.sample_group(prompt)
            rewards = torch.tensor(
                self.reward_fn(responses, [answer] * len(responses)), dtype=torch.float32
            )
            advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-8)
            prompt_length = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
            for response, advantage in zip(responses, advantages, strict=True):
                input_ids = self.tokenizer(
                    prompt + response, return_tensors="pt", add_special_tokens=False
                )["input_ids"]
                if input_ids.shape[1] <= prompt_length:
                    continue  # an empty response has no tokens to train
                with torch.no_grad():  # "old" policy = the current one (see module docstring)
                    old_log_prob = self.sequence_log_prob(self.policy, input_ids, prompt_length)
                new_log_prob = self.sequence_log_prob(self.policy, input_ids, prompt_length)
                ratio = torch.exp(new_log_prob - old_log_prob)
                clipped = torch.clamp(ratio, 1 - self.clip_epsilon, 1 + self.clip_epsilon)
                loss = -torch.min(ratio * advantage, clipped * advantage)
                if self.kl_coef > 0 and self.ref_model is not None:
                    with torch.no_grad():
                        ref_log_prob = self.sequence_log_prob(
                            self.ref_model, input_ids, prompt_length
                        )
                    x = ref_log_prob - new_log_prob
                    loss = loss + self.kl_coef * (torch.exp(x) - x - 1)
                loss.sum().backward()
                total_loss += loss.item()
                count += 1
            total_reward += rewards.mean().item()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return {"loss": total_loss / max(count, 1), "reward": total_reward / len(prompts)}
