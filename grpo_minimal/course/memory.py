"""Memory of one RL update of a causal LM: PPO against GRPO, counted and planned.

PPO for LLMs keeps four models: the policy and a value model (both trained), a frozen reference
(for the KL) and a frozen reward model. GRPO drops the value model; with a verifiable reward
(notebook 05) it needs no reward model either, and with ``beta = 0`` no reference. Each model's
memory is four parts:

- **weights**: every parameter;
- **gradients**: one per trained parameter;
- **optimizer**: AdamW's two moments per trained parameter (plus a float32 master copy of the
  weights in bf16 mixed precision);
- **activations**: what the training forward saves for the backward pass.

``count_update`` runs one real update (policy loss, plus the value loss for PPO, one backward,
one AdamW step) and counts the bytes of every tensor in each part: activations through
``torch.autograd.graph.saved_tensors_hooks``, the rest from the parameters and the optimizer
state. ``plan_update`` computes the same parts from the architecture alone, so it can be asked
about models that do not fit here (``QWEN2_5``); the tests check it against ``count_update``.

**LoRA** (``lora_r > 0``, ``lora.py``, on every block linear: the course's default
``lora_target_modules``): the policy's base weights are frozen and only the adapters train, so
gradients and AdamW's states are the adapters' alone, r (in + out) values per adapted linear
layer (``lora_parameters``); no reference copy is kept (the reference is the base with the
adapter off). Activations shrink less than the rest: a frozen weight saves nothing for its own
gradient (the RMSNorms' normalised inputs, the head's input), while each adapter keeps its
r-wide A x. PPO with LoRA is not planned (``lm_ppo`` trains no adapters).

The four parts are summed as if they were all held at once, which over-counts (gradients are
allocated while activations are freed), and some memory is not counted at all: transient
tensors (the logits of the frozen models' forward passes under ``no_grad``, temporaries inside
one operation), the KV cache of generation, and the allocator's overhead. So a plan bounds
nothing, from above or below: measured peaks have come out some 800 MiB below a plan (GRPO on
SmolLM2-135M, a CPU) and 980 MiB above one (PPO, the same runs), and 2.6 to 4.8 GB above on a
GPU (``bench/README.md``, ``llm_ppo_vs_grpo.py`` and ``gpu_plan.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

ALGOS = ("grpo", "ppo")

# Architectures of the Qwen2.5 instruct models (their config.json on the Hugging Face Hub).
QWEN2_5 = {
    "0.5B": dict(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "1.5B": dict(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "7B": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
}

# Bytes per value: weights, gradients, optimizer state per trained parameter, saved activations,
# and per logit (a bf16 logit is also kept as the float32 copy the log-softmax runs in).
# "fp32-autocast" is the course's own GPU path (lm_grpo, device.py): float32 weights, gradients
# and AdamW, forward passes under bf16 / fp16 autocast. The logits come out of the autocast
# matmul in 2 bytes and get the float32 copy; saved activations are counted at 4 bytes, exact for
# what gradient checkpointing keeps (each layer's input: the float32 residual stream), an upper
# bound without it (autocast saves the matmuls' inputs in 2 bytes).
PRECISIONS = {
    "float32": dict(weight=4, gradient=4, optimizer=8, activation=4, logit=4),
    "bf16-mixed": dict(weight=2, gradient=2, optimizer=12, activation=2, logit=6),
    "fp32-autocast": dict(weight=4, gradient=4, optimizer=8, activation=4, logit=6),
}


@dataclass
class ModelMemory:
    """One model's share of an update, in bytes."""

    role: str
    trained: bool
    parameters: int
    weights: int
    gradients: int
    optimizer: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations


def models_of(
    algo: str, beta: float, reward_model: bool, lora: bool = False
) -> list[tuple[str, bool, str]]:
    """(role, trained, head) of each model an update keeps; head ``lm`` (next-token logits) or
    ``value`` (one number per token). With LoRA the reference is the policy's own frozen base."""
    if algo not in ALGOS:
        raise ValueError(f"algo must be one of {ALGOS}, got {algo!r}")
    if lora and algo != "grpo":
        raise ValueError(
            "lora_r: the planner counts LoRA for GRPO only (lm_ppo trains no adapters)"
        )
    models = [("policy", True, "lm")]
    if algo == "ppo":
        models.append(("value", True, "value"))
    if beta > 0 and not lora:
        models.append(("reference", False, "lm"))
    if reward_model:
        models.append(("reward", False, "value"))
    return models


def qwen2_config(**architecture):
    """A transformers ``Qwen2Config`` with sdpa attention (what ``count_update`` measures)."""
    from transformers import Qwen2Config

    config = Qwen2Config(max_position_embeddings=4096, **architecture)
    config._attn_implementation = "sdpa"
    return config


def block_linears(config) -> dict[str, tuple[int, int]]:
    """(in, out) of each linear layer of a Qwen2 / Llama decoder block, by its module name."""
    h, i = config.hidden_size, config.intermediate_size
    d_kv = config.num_key_value_heads * (h // config.num_attention_heads)
    return {
        "q_proj": (h, h),
        "k_proj": (h, d_kv),
        "v_proj": (h, d_kv),
        "o_proj": (h, h),
        "gate_proj": (h, i),
        "up_proj": (h, i),
        "down_proj": (i, h),
    }


def lora_parameters(config, lora_r: int) -> int:
    """Trained values of LoRA on every block linear (peft's ``"all-linear"``, the course's
    default; the output head is left out): A [r, in] and B [out, r], r (in + out) per linear."""
    per_layer = sum(lora_r * (n_in + n_out) for n_in, n_out in block_linears(config).values())
    return config.num_hidden_layers * per_layer


def saved_activation_bytes(forward: Callable[[], torch.Tensor], parameters) -> tuple:
    """Run ``forward`` and count the bytes it saves for backward: (its result, bytes).

    Each storage counts once (views share one); the parameters are left out (they are weights).
    """
    params = {p.untyped_storage().data_ptr() for p in parameters}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = forward()
    return result, sum(saved.values())


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def count_update(
    config,
    algo: str,
    batch_size: int,
    seq_len: int,
    beta: float = 0.04,
    reward_model: bool = False,
    gradient_checkpointing: bool = False,
    seed: int = 0,
    lora_r: int = 0,
) -> list[ModelMemory]:
    """One float32 update on random tokens ``[batch_size, seq_len]``, counted model by model.

    The policy loss is -mean(A * log pi) over the tokens (log pi by gather minus logsumexp, as
    ``lm_trainer.completion_logps``); PPO adds 0.5 * mean((V - R)^2) and backpropagates both in one
    backward, as a shared policy-and-value step does. The frozen models run under ``no_grad``.
    With ``lora_r`` the policy is wrapped by ``lora.add_lora``, as a LoRA run's is.
    """
    from transformers import AutoModelForCausalLM

    from ..lm_model import enable_activation_checkpointing
    from ..lm_ppo import ValueModel
    from ..lora import add_lora, lora_config

    torch.manual_seed(seed)
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len))
    targets = torch.randn(batch_size, seq_len)
    built = {}
    for role, trained, head in models_of(algo, beta, reward_model, lora=lora_r > 0):
        if head == "lm":
            model = AutoModelForCausalLM.from_config(config)
        else:
            model = ValueModel.from_config(config)
        if role == "policy" and lora_r:
            model = add_lora(model, lora_config(lora_r))
        if gradient_checkpointing and trained:
            model_ = model if head == "lm" else model.body
            model_.config.use_cache = False  # no KV cache in a training forward
            enable_activation_checkpointing(model_)
        if not (role == "policy" and lora_r):  # peft froze the base and left the adapters trained
            model.requires_grad_(trained)
        built[role] = (model.train(trained), trained, head)

    activations = dict.fromkeys(built, 0)
    losses = []
    for role, (model, trained, head) in built.items():
        if not trained:
            with torch.no_grad():
                model(input_ids=ids)
            continue
        if head == "lm":

            def policy_loss(model=model):
                logits = model(input_ids=ids).logits.float()
                logps = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
                logps = logps - torch.logsumexp(logits, dim=-1)
                return -(targets * logps).mean()

            loss, activations[role] = saved_activation_bytes(policy_loss, model.parameters())
        else:

            def value_loss(model=model):
                return 0.5 * (model(ids).logits.squeeze(-1) - targets).pow(2).mean()

            loss, activations[role] = saved_activation_bytes(value_loss, model.parameters())
        losses.append(loss)
    sum(losses).backward()
    rows = []
    for role, (model, trained, _) in built.items():
        params = list(model.parameters())
        optimizer_bytes = gradient_bytes = 0
        if trained:
            optimizer = torch.optim.AdamW([p for p in params if p.requires_grad], lr=1e-6)
            optimizer.step()
            gradient_bytes = _bytes(p.grad for p in params if p.grad is not None)
            optimizer_bytes = _bytes(
                value
                for state in optimizer.state.values()
                for key, value in state.items()
                if key != "step"  # AdamW's step counter: one scalar per tensor
            )
        rows.append(
            ModelMemory(
                role,
                trained,
                sum(p.numel() for p in params),
                _bytes(params),
                gradient_bytes,
                optimizer_bytes,
                activations[role],
            )
        )
    return rows


def count_parameters(config, head: str = "lm") -> int:
    """Exact parameter count of the model ``config`` describes, built on the meta device (no
    memory): tied input and output embeddings count once."""
    from transformers import AutoModelForCausalLM

    from ..lm_ppo import ValueModel

    with torch.device("meta"):
        if head == "lm":
            model = AutoModelForCausalLM.from_config(config)
        else:
            model = ValueModel.from_config(config)
    return sum(p.numel() for p in model.parameters())


def activation_values_per_token(
    config,
    head: str = "lm",
    gradient_checkpointing: bool = False,
    lora_r: int = 0,
):
    """Values saved for backward per token: a decoder layer saves 8h + 4i + 2 d_kv (the two
    RMSNorms' inputs and outputs, q, k, v and their rotary forms, the attention output; the MLP's
    gate, up, activation and product), the rest 3h + the logits (V per token; 1 for a value
    head). With gradient checkpointing a layer keeps only its input, h. h = hidden_size,
    i = intermediate_size, d_kv = key/value width. Returns (layer values, logit values).

    With LoRA (on every block linear) a frozen weight saves nothing for its own gradient: a layer
    keeps 2h fewer (its RMSNorms' normalised inputs) and r more per adapter (A x); outside the
    layers the final norm's normalised input and the head's input go, and so does the first
    layer's input (the frozen embeddings need no gradient), leaving 0; with checkpointing every
    layer keeps its input and only the final norm's, h, stays outside.
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    d_kv = config.num_key_value_heads * (h // config.num_attention_heads)
    per_layer = h if gradient_checkpointing else 8 * h + 4 * i + 2 * d_kv
    outside = 3 * h
    if lora_r:
        if not gradient_checkpointing:
            per_layer += -2 * h + lora_r * len(block_linears(config))
        outside = h if gradient_checkpointing else 0
    return layers * per_layer + outside, config.vocab_size if head == "lm" else 1


def plan_update(
    config,
    algo: str,
    batch_size: int,
    seq_len: int,
    precision: str = "float32",
    beta: float = 0.04,
    reward_model: bool = False,
    gradient_checkpointing: bool = False,
    lora_r: int = 0,
) -> list[ModelMemory]:
    """``count_update``'s parts computed from the architecture (``activation_values_per_token``)
    and the bytes per value of ``precision`` (``PRECISIONS``). With ``lora_r`` the policy's
    trained values are its adapters' (``lora_parameters``); its frozen base still counts as
    weights (a LoRA adapter's bytes are those of any trained value: in bf16 mixed precision
    2 + 2 + 12, the same 16 as peft's float32 adapters' 4 + 4 + 8)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    size = PRECISIONS[precision]
    tokens = batch_size * seq_len
    rows = []
    for role, trained, head in models_of(algo, beta, reward_model, lora=lora_r > 0):
        n = count_parameters(config, head)
        adapter = lora_parameters(config, lora_r) if role == "policy" else 0
        trained_n = adapter or n  # with LoRA only the adapter trains
        values, logits = activation_values_per_token(
            config, head, gradient_checkpointing, lora_r if adapter else 0
        )
        activations = tokens * (values * size["activation"] + logits * size["logit"])
        rows.append(
            ModelMemory(
                role,
                trained,
                n + adapter,
                (n + adapter) * size["weight"],
                trained_n * size["gradient"] if trained else 0,
                trained_n * size["optimizer"] if trained else 0,
                activations if trained else 0,
            )
        )
    return rows


def plan_memory(
    model: str | dict,
    algo: str = "grpo",
    num_generations: int = 8,
    prompts_per_micro_batch: int = 1,
    prompt_length: int = 200,
    completion_length: int = 512,
    precision: str = "bf16-mixed",
    gradient_checkpointing: bool = True,
    beta: float = 0.04,
    reward_model: bool = False,
    lora_r: int = 0,
) -> dict:
    """Estimated memory of one update on one GPU without sharding: a ``QWEN2_5`` size
    ("0.5B", "1.5B", "7B") or an architecture dict, fully fine-tuned or (``lora_r > 0``) with
    LoRA adapters. One micro-batch holds ``prompts_per_micro_batch x
    num_generations`` sequences of ``prompt_length + completion_length`` tokens (PPO samples one
    completion per prompt: pass ``num_generations=1`` and more prompts for the same batch).

    Returns the rows (``ModelMemory`` as dicts) and ``total_gb`` (10^9 bytes).
    """
    architecture = QWEN2_5[model] if isinstance(model, str) else model
    rows = plan_update(
        qwen2_config(**architecture),
        algo,
        prompts_per_micro_batch * num_generations,
        prompt_length + completion_length,
        precision,
        beta,
        reward_model,
        gradient_checkpointing,
        lora_r,
    )
    return {
        "rows": [asdict(row) | {"total": row.total} for row in rows],
        "total_gb": sum(row.total for row in rows) / 1e9,
    }
