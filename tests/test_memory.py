"""grpo_minimal.course.memory: the planner against one real update counted tensor by tensor (a full
fine-tune and LoRA), the models each algorithm keeps, and the Qwen2.5 sizes it is asked about."""

from __future__ import annotations

import pytest
from transformers import AutoConfig

from grpo_minimal.course.memory import (
    QWEN2_5,
    count_parameters,
    count_update,
    lora_parameters,
    models_of,
    plan_memory,
    plan_update,
    qwen2_config,
)

TINY = AutoConfig.from_pretrained("data/tiny_math_lm")
TINY._attn_implementation = "sdpa"
OTHER = qwen2_config(
    hidden_size=192,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    vocab_size=100,
)


@pytest.mark.parametrize("config", [TINY, OTHER], ids=["tiny", "other"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["stored", "checkpointed"])
def test_the_plan_matches_a_counted_update(config, algo, checkpointing):
    batch, seq_len = 16, 24
    counted = count_update(
        config,
        algo,
        batch,
        seq_len,
        reward_model=algo == "ppo",
        gradient_checkpointing=checkpointing,
    )
    planned = plan_update(
        config,
        algo,
        batch,
        seq_len,
        reward_model=algo == "ppo",
        gradient_checkpointing=checkpointing,
    )
    assert [r.role for r in counted] == [r.role for r in planned]
    for count, plan in zip(counted, planned, strict=True):
        assert (count.parameters, count.weights, count.gradients, count.optimizer) == (
            plan.parameters,
            plan.weights,
            plan.gradients,
            plan.optimizer,
        ), count.role
        # the plan leaves out a few values per token (RMSNorm's 1/rms, ...): at most 8 per layer
        # and 16 outside the layers, 4 bytes each
        slack = batch * seq_len * (8 * config.num_hidden_layers + 16) * 4
        assert abs(count.activations - plan.activations) <= slack, count.role
        assert (count.activations > 0) == count.trained


@pytest.mark.parametrize("config", [TINY, OTHER], ids=["tiny", "other"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["stored", "checkpointed"])
def test_the_lora_plan_matches_a_counted_lora_update(config, checkpointing):
    """A GRPO update with LoRA (peft, rank 8, every block linear), counted as ``lora.add_lora``
    builds it: the base's weights, the adapters' gradients and AdamW states, the activations,
    and no reference model although beta > 0."""
    pytest.importorskip("peft")
    batch, seq_len = 16, 24
    counted = count_update(
        config, "grpo", batch, seq_len, gradient_checkpointing=checkpointing, lora_r=8
    )
    planned = plan_update(
        config, "grpo", batch, seq_len, gradient_checkpointing=checkpointing, lora_r=8
    )
    assert [r.role for r in counted] == [r.role for r in planned] == ["policy"]
    (count,), (plan,) = counted, planned
    assert (count.parameters, count.weights, count.gradients, count.optimizer) == (
        plan.parameters,
        plan.weights,
        plan.gradients,
        plan.optimizer,
    )
    slack = batch * seq_len * (8 * config.num_hidden_layers + 16) * 4
    assert abs(count.activations - plan.activations) <= slack
    full = plan_update(config, "grpo", batch, seq_len, gradient_checkpointing=checkpointing)[0]
    assert plan.gradients < full.gradients / 5 and plan.activations < full.activations


def test_lora_accounting_by_hand():
    """The tiny model (h 128, i 384, 4 layers, 2 key/value heads of 32): each layer's seven
    linears get r (in + out) values, r (2h + 2(h + 64) + 2h + 2(h + i) + (i + h)) =
    8 x 2432 = 19,456 at r 8, so 77,824 in all; float32: 4 bytes each of weight and gradient
    and 8 of AdamW, on top of the frozen base's 4 per weight. Stored activations per token:
    4 x (6h + 4i + 2 x 64 + 7r) + 0 + 18 logits = 9,970 values."""
    assert lora_parameters(TINY, 8) == 4 * 8 * 2432 == 77_824
    n = count_parameters(TINY)
    (policy,) = plan_update(TINY, "grpo", batch_size=2, seq_len=3, beta=0.04, lora_r=8)
    assert policy.parameters == n + 77_824
    assert (policy.weights, policy.gradients, policy.optimizer) == (
        4 * (n + 77_824),
        4 * 77_824,
        8 * 77_824,
    )
    assert policy.activations == 2 * 3 * 9_970 * 4
    with pytest.raises(ValueError, match="lora_r: the planner counts LoRA for GRPO only"):
        plan_update(TINY, "ppo", 1, 8, lora_r=8)


def test_checkpointing_keeps_a_fraction_of_the_activations():
    stored = count_update(TINY, "grpo", 16, 24)[0].activations
    checkpointed = count_update(TINY, "grpo", 16, 24, gradient_checkpointing=True)[0].activations
    assert checkpointed < stored / 5


def test_the_models_each_algorithm_keeps():
    roles = lambda *args: [role for role, _, _ in models_of(*args)]  # noqa: E731
    assert roles("ppo", 0.04, True) == ["policy", "value", "reference", "reward"]
    assert roles("grpo", 0.04, False) == ["policy", "reference"]  # a verifiable reward
    assert roles("grpo", 0.0, False) == ["policy"]  # TRL's default beta
    assert roles("grpo", 0.04, False, True) == ["policy"]  # LoRA: the reference is the base
    with pytest.raises(ValueError, match="algo must be one of"):
        models_of("dpo", 0.0, False)
    with pytest.raises(ValueError, match="precision must be one of"):
        plan_update(TINY, "grpo", 1, 8, precision="fp8")


def test_qwen_sizes_match_their_model_cards():
    """Qwen2.5 model cards: 0.49B, 1.54B and 7.61B parameters."""
    assert count_parameters(qwen2_config(**QWEN2_5["0.5B"])) / 1e9 == pytest.approx(0.49, abs=0.005)
    assert count_parameters(qwen2_config(**QWEN2_5["1.5B"])) / 1e9 == pytest.approx(1.54, abs=0.005)
    assert count_parameters(qwen2_config(**QWEN2_5["7B"])) / 1e9 == pytest.approx(7.61, abs=0.01)


def test_bf16_accounting_by_hand():
    """7B, bf16 mixed precision: per trained parameter 2 (weight) + 2 (gradient) + 12 (float32
    master + two AdamW moments) = 16 bytes; per frozen parameter 2."""
    plan = plan_memory("7B", "grpo", num_generations=8, completion_length=512)
    policy, reference = plan["rows"]
    n = policy["parameters"]
    assert policy["weights"] + policy["gradients"] + policy["optimizer"] == 16 * n
    assert reference["total"] == 2 * n
    ppo = plan_memory(
        "7B",
        "ppo",
        num_generations=1,
        prompts_per_micro_batch=8,
        completion_length=512,
        reward_model=True,
    )
    assert [r["role"] for r in ppo["rows"]] == ["policy", "value", "reference", "reward"]
    assert ppo["total_gb"] > 1.8 * plan["total_gb"]  # a second trained model of the same size


def test_fp32_autocast_accounting_by_hand():
    """The course's own GPU path: float32 weights, gradients and AdamW (4 + 4 + 8 bytes per
    trained parameter), a float32 reference (4), activations at 4 bytes and logits at 2 + 4
    (the autocast output and its float32 copy). With checkpointing a layer keeps its input:
    3 layers x 192 + 3 x 192 = 1152 values per token, and 100 logits."""
    policy, reference = plan_update(
        OTHER,
        "grpo",
        batch_size=2,
        seq_len=5,
        precision="fp32-autocast",
        beta=0.04,
        gradient_checkpointing=True,
    )
    n = policy.parameters
    assert (policy.weights, policy.gradients, policy.optimizer) == (4 * n, 4 * n, 8 * n)
    assert policy.activations == 2 * 5 * (1152 * 4 + 100 * 6)
    assert reference.total == 4 * n
