"""Float64 parity with TRL 1.16's GRPOTrainer on the tiny vision-language model (CPU, no download).

The text parity (``test_trl_parity.py``) compares float32 sums; here both models run in float64,
so loss and gradients agree to rounding (about 1e-16), and a dropped image, a wrong position or a
missing gradient path shows at once.

- The same hand-made batch (4 shapes images x G=4, digit completions with EOS at different places
  and one without, old and reference log-probs away from the current ones so that clipping and KL
  act, beta 0.04, ``use_bias_correction_kl=False``) goes through the course's code
  (``vlm.encode_prompts`` into ``CompletionGroups.prompt_inputs``, ``completion_logps`` with the
  shared prompt cache and per row, ``grpo_loss`` called as ``LMGRPOTrainer.loss`` calls it) and
  through TRL's ``_compute_loss`` (``trl_bridge.make_trl_trainer``; ``pixel_values`` repeated
  per completion, model in eval mode so its gradient-accumulation normaliser is 1).
- TRL's chunked log-prob kernel accumulates in float32 whatever the model's dtype, so for this
  test only ``trl.trainer.utils._ChunkedLogProbFunction`` is replaced by a float64 log-softmax
  (``PlainLogProb``); the rest of TRL's loss path is its own.
- Gradients are compared by absolute difference: some are exactly 0 in exact arithmetic (the
  attention key biases), so a relative difference there is noise over noise.
- Image tokens carry no loss, yet the vision tower learns through attention: its parameters get
  nonzero gradients on both sides.

Skipped when TRL (the dev extra) is not installed.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl")
pytest.importorskip("datasets")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # transformers 5 renames in TRL

import trl.trainer.utils as trl_utils  # noqa: E402

from grpo_minimal.advantages import group_advantages  # noqa: E402
from grpo_minimal.completions import CompletionGroups, mask_after_eos  # noqa: E402
from grpo_minimal.data import load_shapes  # noqa: E402
from grpo_minimal.lm_model import format_prompt, load_model  # noqa: E402
from grpo_minimal.lm_trainer import completion_logps  # noqa: E402
from grpo_minimal.losses import grpo_loss  # noqa: E402
from grpo_minimal.math_config import MathConfig  # noqa: E402
from grpo_minimal.trl_bridge import make_trl_trainer  # noqa: E402
from grpo_minimal.vlm import encode_prompts  # noqa: E402

G, MAX_COMPLETION, BETA = 4, 3, 0.04
# the EOS position of each of the 16 completions; row 3 has none (cut at MAX_COMPLETION)
EOS_AT = [0, 1, 2, None, 1, 0, 2, 1, 0, 1, 2, 2, 1, 0, 1, 2]
LOSS_TYPES = ("grpo", "dapo", "bnpo", "dr_grpo")
TOLERANCE = 1e-10  # absolute, on gradients up to about 1; float64 rounding is about 1e-16


class PlainLogProb:
    """Drop-in for TRL's ``_ChunkedLogProbFunction.apply``: log-probs (and entropy) by a full
    log-softmax in the hidden states' dtype (TRL's kernel keeps float32 accumulators)."""

    @staticmethod
    def apply(
        hidden,
        weight,
        bias,
        targets,
        temperature,
        chunk_size,
        softcap=None,
        scale=1.0,
        outputs=("log_probs",),
    ):
        logits = hidden @ weight.t() + (0 if bias is None else bias)
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        logp = torch.log_softmax(logits * scale / temperature, dim=-1)
        token = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp.exp() * logp).sum(-1) if "entropy" in outputs else None
        return token, entropy, None, None, None


@pytest.fixture(scope="module")
def vlm():
    model, processor = load_model("tiny-vlm", torch.device("cpu"))
    return model.double().eval(), processor


@pytest.fixture(scope="module")
def rows():
    return load_shapes("validation")[:4]


@pytest.fixture(scope="module")
def batch(vlm, rows):
    """Our rollout (each prompt and image once) and TRL's inputs (a row per completion)."""
    model, processor = vlm
    tokenizer = processor.tokenizer
    prompts = [format_prompt(row["prompt"], processor, "plain") for row in rows]
    enc = encode_prompts(processor, prompts, [row["image"] for row in rows], torch.device("cpu"))
    prompt_ids, prompt_mask = enc.pop("input_ids"), enc.pop("attention_mask")
    prompt_inputs = {name: value.double() for name, value in enc.items()}
    assert set(prompt_inputs) == {"pixel_values"}
    gen = torch.Generator().manual_seed(0)
    digits = torch.tensor(tokenizer.convert_tokens_to_ids(list("0123456789")))
    completion = digits[torch.randint(0, 10, (len(EOS_AT), MAX_COMPLETION), generator=gen)]
    for row, eos_at in enumerate(EOS_AT):
        if eos_at is not None:
            completion[row, eos_at] = tokenizer.eos_token_id
    mask = mask_after_eos(completion, [tokenizer.eos_token_id])
    completion = completion.masked_fill(mask == 0, tokenizer.pad_token_id)
    rollout = CompletionGroups(
        prompt_ids, prompt_mask, completion, mask, prompt_inputs=prompt_inputs
    )
    with torch.no_grad():
        logps, _ = completion_logps(model, rollout)
    noise = lambda scale: scale * torch.randn(logps.shape, generator=gen, dtype=torch.float64)  # noqa: E731
    rewards = torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0] + [0.0, 1.0, 1.0, 0.0] * 2)
    return {
        "rollout": rollout,
        "prompt_ids": prompt_ids.repeat_interleave(G, 0),
        "prompt_mask": prompt_mask.repeat_interleave(G, 0),
        "pixel_values": prompt_inputs["pixel_values"].repeat_interleave(G, 0),
        "num_images": [1] * len(EOS_AT),
        "completion_ids": completion,
        "completion_mask": mask,
        "advantages": group_advantages(rewards, G, "group").double(),
        # old and reference log-probs away from the current ones: ratios up to ~exp(0.6)
        "old_per_token_logps": (logps + noise(0.3)) * mask,
        "ref_per_token_logps": (logps + noise(0.5)) * mask,
        "num_items_in_batch": mask.sum(),
    }


@pytest.fixture(scope="module")
def trl_trainer(vlm, rows, tmp_path_factory):
    processor = vlm[1]
    cfg = MathConfig.for_device(
        "cpu",
        model="tiny-vlm",
        dataset="shapes",
        max_completion_length=MAX_COMPLETION,
        prompts_per_step=4,
        num_generations=G,
        beta=BETA,
        use_bias_correction_kl=False,
    )
    trl_model, _ = load_model("tiny-vlm", torch.device("cpu"))  # TRL patches its forward
    trainer, _ = make_trl_trainer(
        cfg,
        trl_model.double(),
        processor,
        rows,
        str(tmp_path_factory.mktemp("trl_vlm")),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
    )
    trainer.model.eval()  # eval mode: no gradient-accumulation scaling inside _compute_loss
    return trainer


def rms_norm_in_its_dtype(self, hidden_states):
    """Qwen2's RMSNorm without its cast to float32 (which, on a float64 model, rounds every
    normalised activation and its gradient to float32)."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


@pytest.fixture
def float64_throughout(monkeypatch, vlm):
    """For one test, then restored: TRL's log-prob kernel swapped for a float64 log-softmax, and
    the text tower's RMSNorm kept in float64 (both models, ours and TRL's, use the class).

    The second matters for the shared prompt cache only: transformers' Qwen2RMSNorm computes in
    float32 whatever the input's dtype, so the per-row path (the same operations as TRL's) still
    matches TRL to the last bit, but the shared path, which sums the G completions' gradients
    before the prompt's norms rather than after, differs by float32 rounding (~1e-7 relative)."""
    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", PlainLogProb)
    norm = type(vlm[0].model.language_model.norm)
    assert norm.__name__ == "Qwen2RMSNorm"
    monkeypatch.setattr(norm, "forward", rms_norm_in_its_dtype)


def gradients(model) -> dict[str, torch.Tensor | None]:
    """Each parameter's gradient; None where no path reaches it (CLIP's unused pooler norm)."""
    return {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


def our_loss(model, batch, loss_type: str, share_prompts: bool):
    """``LMGRPOTrainer.loss``'s call, on the hand-made batch (one micro-batch)."""
    model.zero_grad()
    logps, _ = completion_logps(model, batch["rollout"], 1.0, share_prompts=share_prompts)
    loss, _ = grpo_loss(
        logps,
        batch["old_per_token_logps"],
        batch["ref_per_token_logps"],
        batch["advantages"],
        batch["completion_mask"],
        beta=BETA,
        epsilon=0.2,
        epsilon_high=None,
        loss_type=loss_type,
        max_completion_length=MAX_COMPLETION,
        num_items_in_batch=batch["num_items_in_batch"],
        use_bias_correction_kl=False,
    )
    loss.backward()
    return loss.detach(), gradients(model)


def trl_loss(trainer, batch):
    trainer.model.zero_grad()
    inputs = {k: v for k, v in batch.items() if k != "rollout"}
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    return loss.detach(), gradients(trainer.model)


@pytest.mark.numerics
@pytest.mark.parametrize("share_prompts", [True, False], ids=["shared-prompt", "per-row"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_vlm_loss_and_gradient_match_trl_in_float64(
    loss_type, share_prompts, vlm, batch, trl_trainer, float64_throughout
):
    trl_trainer.loss_type = trl_trainer.args.loss_type = loss_type
    trl_trainer.epsilon_low = trl_trainer.epsilon_high = 0.2
    model = vlm[0]
    for (name, p), (other, q) in zip(
        model.named_parameters(), trl_trainer.model.named_parameters(), strict=True
    ):
        assert name == other and p.dtype == q.dtype == torch.float64 and torch.equal(p, q)
    ours, our_grads = our_loss(model, batch, loss_type, share_prompts)
    theirs, their_grads = trl_loss(trl_trainer, batch)
    assert ours.dtype == theirs.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=0)
    # the same parameters are reached: all but CLIP's pooler norm, which LLaVA never reads
    unreached = {n for n, g in our_grads.items() if g is None}
    assert unreached == {n for n, g in their_grads.items() if g is None}
    assert unreached == {n for n in our_grads if "post_layernorm" in n}
    reached = [n for n in our_grads if n not in unreached]
    worst = max(reached, key=lambda n: (our_grads[n] - their_grads[n]).abs().max())
    diff = (our_grads[worst] - their_grads[worst]).abs().max().item()
    assert diff < TOLERANCE, f"{worst}: max |gradient difference| {diff:.2e}"
    # the image tokens carry no loss, but the vision tower learns through attention
    vision = {n: our_grads[n] for n in reached if "vision_tower" in n}
    assert vision and all(their_grads[n].abs().max() > 0 for n in vision)
    learning = [n for n, g in vision.items() if g.abs().max() > 1e-6]
    assert any("encoder.layers.0." in n for n in learning)
    assert any("encoder.layers.1." in n for n in learning)
    assert any("embeddings" in n for n in learning)
    assert any("multi_modal_projector" in n and our_grads[n].abs().max() > 1e-6 for n in reached)


def test_clipping_and_kl_are_active_in_the_batch(vlm, batch):
    """Guard against a vacuous parity test: the ratio pi / pi_old leaves [0.8, 1.2] on both
    sides, the KL to the reference is far from 0, and completions end at different places."""
    mask = batch["completion_mask"].bool()
    with torch.no_grad():
        logps, _ = completion_logps(vlm[0], batch["rollout"])
    ratio = torch.exp(logps - batch["old_per_token_logps"])[mask]
    assert (ratio < 0.8).sum() >= 2 and (ratio > 1.2).sum() >= 2 and ((ratio - 1).abs() < 0.2).any()
    kl = (
        torch.exp(batch["ref_per_token_logps"] - logps) - (batch["ref_per_token_logps"] - logps) - 1
    )
    assert kl[mask].mean() > 0.05
    assert set(mask.sum(1).tolist()) == {1, 2, 3} and batch["advantages"].abs().sum() > 0


def test_trl_kernel_is_float32_without_the_patch(vlm, batch, trl_trainer):
    """Why the patch: TRL's own kernel brings float64 log-probs down to float32 accuracy."""
    trl_trainer.loss_type = trl_trainer.args.loss_type = "grpo"
    trl_trainer.epsilon_low = trl_trainer.epsilon_high = 0.2
    ours, _ = our_loss(vlm[0], batch, "grpo", True)
    with torch.no_grad():
        theirs = trl_trainer._compute_loss(
            trl_trainer.model, {k: v for k, v in batch.items() if k != "rollout"}
        )
    assert 1e-12 < abs(ours - theirs).item() < 1e-5
