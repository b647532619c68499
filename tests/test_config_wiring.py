"""Every ``MathConfig`` field reaches what it configures, on both backends.

One case per field (``OURS``): change the field and show that what a GRPO step (or the run)
does changes the way the field says. Each case fails if the field is replaced by a literal or
read from the wrong place. Most cases run ``LMGRPOTrainer.step`` on a copy of the shipped tiny
model and compare the step's metrics, its rollout, its advantages or the parameters after it
with a value derived by hand; the run-level fields go through ``train_math``. Where a step-level
difference means nothing on a CPU-only machine (``device``), the case checks where the field
acts (the device the model lands on, or the error for a missing GPU).

For TRL (``TRL_MEANING``): each field reaches TRL's ``GRPOConfig`` with the same meaning
(``trl_bridge.trl_grpo_config``), and for a few fields TRL's trainer or ``train_math_trl`` is
shown doing it. Everything runs on the CPU in a few seconds, offline.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
import torch

from grpo_minimal import group_advantages
from grpo_minimal.device import torch_threads
from grpo_minimal.lm_grpo import LMGRPOTrainer
from grpo_minimal.lm_model import load_model
from grpo_minimal.lm_train import MathConfig, evaluate_accuracy, train_math
from grpo_minimal.lm_trainer import completion_logps

ROWS = [
    {"prompt": f"{a}+{b}=", "answer": str(a + b)}
    for a, b in [(23, 45), (10, 7), (99, 99), (31, 2), (4, 50), (66, 11)]
]
EVAL_ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in [(12, 34), (5, 5), (70, 8)]]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny model's operations are too small for a second thread to help, and on a busy
    machine two spinning threads can make them many times slower. No assertion here depends
    on the thread count."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tiny():
    """One load of the shipped model; every case trains a deep copy."""
    return load_model("tiny", torch.device("cpu"))


def small_cfg(**overrides) -> MathConfig:
    values = dict(
        device="cpu",
        prompts_per_step=2,
        num_generations=4,
        max_steps=2,
        eval_n=2,
        eval_every=0,
        max_completion_length=5,
        learning_rate=1e-3,
        beta=0.0,
    )
    return MathConfig(**(values | overrides))


def spread_reward(completions, **kwargs):
    """Known rewards that vary inside each group of 4, with a different spread in each group:
    0 1 2 3 | 0 2 4 6 | 0 3 6 9 ..., so every step has a learning signal and group and batch
    scaling differ."""
    return [float((i % 4) * (1 + i // 4)) for i in range(len(completions))]


class Spy(LMGRPOTrainer):
    """The trainer, unchanged, keeping what its step saw: the rows, the rollout, the rewards and
    the advantages. ``completions``, when set, replaces the decoded texts the rewards read."""

    completions = None

    def sample(self, rows):
        self.rows = list(rows)
        self.rollout = super().sample(rows)
        if self.completions is not None:
            self.rollout.completions = self.completions(self.rollout)
        return self.rollout

    def advantages(self, rewards, rollout):
        self.rewards = rewards.clone()
        self.advantage_values, mask = super().advantages(rewards, rollout)
        return self.advantage_values, mask


@dataclasses.dataclass
class Step:
    record: dict
    trainer: Spy
    before: list[torch.Tensor]
    after: list[torch.Tensor]
    grads: list[torch.Tensor]  # of the last iteration, after clipping
    model_before: torch.nn.Module

    @property
    def rollout(self):
        return self.trainer.rollout

    def max_change(self) -> float:
        return max((a - b).abs().max().item() for a, b in zip(self.after, self.before, strict=True))


def one_step(
    tiny, tokenizer=None, reward_funcs=(spread_reward,), completions=None, watch=None, **overrides
) -> Step:
    """One GRPO step on a fresh copy of the tiny model with ``small_cfg(**overrides)``, seeded;
    ``watch(model)`` registers hooks on the copy for the step and returns their handles."""
    model = copy.deepcopy(tiny[0])
    model_before = copy.deepcopy(model)
    cfg = small_cfg(**overrides)
    funcs = None if reward_funcs is None else list(reward_funcs)
    trainer = Spy(cfg, model, tokenizer or tiny[1], funcs)
    trainer.completions = completions
    before = [p.detach().clone() for p in model.parameters()]
    handles = watch(model) if watch else []
    torch.manual_seed(0)
    try:
        record, _ = trainer.step(ROWS[: cfg.prompts_per_step])
    finally:
        for handle in handles:
            handle.remove()
    after = [p.detach().clone() for p in model.parameters()]
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]  # LoRA: frozen
    return Step(record, trainer, before, after, grads, model_before)


def run(tiny, train_rows=ROWS, eval_rows=EVAL_ROWS, load=False, **overrides):
    """``train_math`` with the Spy trainer: (trainer, history). ``load`` lets the run load the
    model named by ``cfg.model`` itself (setup: seed, device, dtype, model)."""
    model, tokenizer = (None, None) if load else (copy.deepcopy(tiny[0]), tiny[1])
    kwargs = {k: overrides.pop(k) for k in ("out_dir", "on_step") if k in overrides}
    return train_math(
        small_cfg(**overrides),
        model,
        tokenizer,
        train_rows=train_rows,
        eval_rows=eval_rows,
        reward_funcs=[spread_reward],
        progress=False,
        trainer_cls=Spy,
        **kwargs,
    )


def same_groups(completions: list[str], G: int) -> list[bool]:
    """For each group of G: are its completions all the same text?"""
    return [len(set(completions[i : i + G])) == 1 for i in range(0, len(completions), G)]


def chat_tokenizer(tokenizer):
    """The tiny tokenizer with a chat template whose output it can encode: the number of
    messages, then the first 6 characters of the last one (r1: 2 messages, boxed: 1)."""
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = "{{ messages | length }}{{ messages[-1]['content'][:6] }}"
    return chat


# --- the grpo_minimal backend: one case per field ----------------------------------------------


def case_model(tiny, tmp_path):
    # The reference (beta > 0) is a frozen copy of the model as loaded: it shows which was loaded.
    from grpo_minimal.lm_train import save_checkpoint

    other = copy.deepcopy(tiny[0])
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(0.5)
    save_checkpoint(other, tiny[1], tmp_path / "other")
    for name, expected in (("tiny", tiny[0]), (str(tmp_path / "other"), other)):
        trainer, _ = run(tiny, load=True, model=name, beta=0.1, max_steps=1)
        for p, q in zip(trainer.reference.parameters(), expected.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=0, atol=0)


def case_dataset(tiny, tmp_path):
    # train_math without train_rows reads cfg.dataset: every prompt of the step comes from it
    path = tmp_path / "train.jsonl"
    rows = [{"prompt": f"0{a}+0{a}=", "answer": str(2 * a)} for a in range(1, 5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    trainer, _ = run(tiny, train_rows=None, dataset=str(path), max_steps=1)
    assert trainer.rows and all(r in rows for r in trainer.rows)
    trainer, _ = run(tiny, train_rows=None, dataset="arithmetic", max_steps=1)
    assert not any(r in rows for r in trainer.rows)


def case_eval_split(tiny, tmp_path):
    # train_math without eval_rows reads cfg.eval_split: the "train" split overlaps the training
    # rows (its first rows), "test" does not, a file holds exactly its own rows
    from grpo_minimal.data import load_math_rows

    train = load_math_rows("arithmetic", "train")[:4]
    path = tmp_path / "held_out.jsonl"
    path.write_text(json.dumps(train[0]) + "\n")
    seen = {}
    for split in ("train", "test", str(path)):
        _, history = run(
            tiny,
            train_rows=train,
            eval_rows=None,
            eval_split=split,
            eval_n=2,
            allow_eval_overlap=True,
            max_steps=1,
        )
        seen[split] = (history[0]["eval_n"], history[0]["eval_overlap"])
    assert seen == {"train": (2, 2), "test": (2, 0), str(path): (1, 1)}


def case_prompt_template(tiny, tmp_path):
    # the step samples from the template's text; the rewards see the dataset's prompt
    chat = chat_tokenizer(tiny[1])
    expected = {"plain": "23+45=", "r1": "223+45=", "boxed": "123+45="}
    for template, prompt in expected.items():
        step = one_step(tiny, tokenizer=chat, prompt_template=template)
        assert step.rollout.prompts[0] == prompt
        assert chat.decode(step.rollout.prompt_ids[0], skip_special_tokens=True) == prompt
        assert step.trainer.rows[0]["prompt"] == "23+45="


def case_prompts_per_step(tiny, tmp_path):
    # train_math draws prompts_per_step rows a step; each gets num_generations completions
    for prompts in (1, 3):
        trainer, _ = run(tiny, prompts_per_step=prompts, max_steps=1)
        assert len(trainer.rows) == prompts
        assert trainer.rollout.prompt_ids.shape[0] == prompts
        assert trainer.rollout.completion_ids.shape[0] == prompts * 4


def case_max_completion_length(tiny, tmp_path):
    # sampling: at most max_completion_length new tokens (the normaliser of dr_grpo is in
    # case_loss_type); evaluation; the prompt-length check of train_math
    one = one_step(tiny, max_completion_length=1, temperature=3.0)
    assert one.rollout.completion_ids.shape[1] == 1
    three = one_step(tiny, max_completion_length=3, temperature=3.0)
    assert three.rollout.completion_ids.shape[1] == 3  # at T=3 some completion runs that long
    _, completions = evaluate_accuracy(
        tiny[0], tiny[1], EVAL_ROWS, small_cfg(max_completion_length=1)
    )
    assert all(len(tiny[1](c, add_special_tokens=False)["input_ids"]) <= 1 for c in completions)
    context = tiny[0].config.max_position_embeddings
    long_row = {"prompt": "1+" * ((context - 4) // 2) + "1=", "answer": "0"}
    fits = context - len(tiny[1](long_row["prompt"], add_special_tokens=False)["input_ids"])
    run(tiny, train_rows=[long_row], max_completion_length=fits, max_steps=1)
    with pytest.raises(ValueError, match="exceeds the model's context"):
        run(tiny, train_rows=[long_row], max_completion_length=fits + 1, max_steps=1)


def case_temperature(tiny, tmp_path):
    # sampling at T, and log-probs / entropy of logits / T (recomputed here from the rollout)
    steps = {t: one_step(tiny, temperature=t) for t in (0.5, 2.0)}
    assert not torch.equal(steps[0.5].rollout.completion_ids, steps[2.0].rollout.completion_ids)
    for t, step in steps.items():
        with torch.no_grad():
            _, entropy = completion_logps(
                step.model_before, step.rollout, t, with_entropy=True, share_prompts=False
            )
        mask = step.rollout.completion_mask
        expected = ((entropy * mask).sum() / mask.sum()).item()
        assert step.record["entropy"] == pytest.approx(expected, rel=1e-4)


def case_top_p(tiny, tmp_path):
    # top_p -> 0 keeps only the most likely token: every group's G completions are identical
    narrow = one_step(tiny, top_p=1e-6, temperature=3.0)
    assert all(same_groups(narrow.rollout.completions, 4))
    wide = one_step(tiny, top_p=1.0, temperature=3.0)
    assert not all(same_groups(wide.rollout.completions, 4))


def case_max_steps(tiny, tmp_path):
    # the number of steps, and the linear schedule's horizon: lr (1 - 1/max_steps) after one
    for steps in (1, 3):
        _, history = run(tiny, max_steps=steps)
        assert [r["step"] for r in history[1:]] == list(range(1, steps + 1))
        assert history[1]["learning_rate"] == pytest.approx(1e-3 * (1 - 1 / steps), abs=1e-12)


def case_time_budget_s(tiny, tmp_path):
    # a budget smaller than one step stops after the first step; 0 means no limit
    _, history = run(tiny, max_steps=3, time_budget_s=1e-9)
    assert [r["step"] for r in history[1:]] == [1] and "eval_accuracy" in history[-1]
    _, history = run(tiny, max_steps=3, time_budget_s=0.0)
    assert [r["step"] for r in history[1:]] == [1, 2, 3]


def assert_same_update(a: Step, b: Step) -> None:
    """The same gradient up to float32 rounding (AdamW's first step would magnify rounding in
    gradients near its eps, so the weights are not compared)."""
    scale = max(g.abs().max().item() for g in a.grads)
    for x, y in zip(a.grads, b.grads, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5 * scale)


def training_batch_sizes():
    """The batch size of every forward pass of the model that builds a graph (the training
    passes; sampling and the fixed log-probs run without gradients), and the watch that
    records them."""
    sizes: list[int] = []

    def hook(module, args, kwargs):
        if torch.is_grad_enabled():
            sizes.append(kwargs["input_ids"].shape[0])

    return sizes, lambda model: [model.register_forward_pre_hook(hook, with_kwargs=True)]


def case_gradient_accumulation_steps(tiny, tmp_path):
    # the batch runs through the model in micro-batches of whole groups; the update is the same
    sizes1, watch1 = training_batch_sizes()
    whole = one_step(tiny, gradient_accumulation_steps=1, watch=watch1)
    sizes2, watch2 = training_batch_sizes()
    halves = one_step(tiny, gradient_accumulation_steps=2, watch=watch2)
    assert max(sizes1) == 8 and max(sizes2) == 4 and len(sizes2) == 2 * len(sizes1)
    assert_same_update(whole, halves)


class SavedForBackward:
    """A watch counting the bytes autograd keeps for the backward pass during a step."""

    def __init__(self) -> None:
        self.bytes = 0

    def pack(self, tensor):
        self.bytes += tensor.numel() * tensor.element_size()
        return tensor

    def __call__(self, model):
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)
        self.hooks.__enter__()
        return [self]

    def remove(self) -> None:
        self.hooks.__exit__(None, None, None)


def case_gradient_checkpointing(tiny, tmp_path):
    # activations are recomputed in the backward pass instead of stored: far less is saved for
    # the backward pass, and the gradient is the same
    saved = {on: SavedForBackward() for on in (False, True)}
    steps = {on: one_step(tiny, gradient_checkpointing=on, watch=saved[on]) for on in saved}
    assert saved[True].bytes < 0.25 * saved[False].bytes
    assert_same_update(steps[True], steps[False])


def case_weight_decay(tiny, tmp_path):
    # AdamW's decoupled decay: the same step with decay w moves each decayed weight by
    # -lr * w * weight; biases and norm gains are not decayed (as in TRL: the tests below)
    plain = one_step(tiny, weight_decay=0.0)
    decayed = one_step(tiny, weight_decay=0.5)
    assert [g["weight_decay"] for g in decayed.trainer.optimizer.param_groups] == [0.5, 0.0]
    names = [name for name, _ in decayed.trainer.model.named_parameters()]
    spared = {name for name in names if name.endswith(".bias") or "norm" in name}
    assert 0 < len(spared) < len(names)  # the tiny Qwen2 has q/k/v biases and RMSNorm gains
    for name, a, b, p in zip(names, decayed.after, plain.after, plain.before, strict=True):
        expected = torch.zeros_like(p) if name in spared else -1e-3 * 0.5 * p
        torch.testing.assert_close(a - b, expected, rtol=1e-3, atol=1e-8, msg=name)


def case_lr_scheduler_type(tiny, tmp_path):
    # linear falls to 0 at max_steps (half way after one of two steps); constant stays
    assert one_step(tiny, lr_scheduler_type="linear").record["learning_rate"] == pytest.approx(5e-4)
    assert one_step(tiny, lr_scheduler_type="constant").record["learning_rate"] == pytest.approx(
        1e-3
    )


def case_format_weight(tiny, tmp_path):
    # reward = accuracy + format_weight * format: half the completions are right and in the R1
    # form, half right and bare (the texts the rewards read are set by hand)
    def texts(rollout):
        return [
            f"<think>x</think><answer>{r['answer']}</answer>" if i % 2 == 0 else r["answer"]
            for i, r in enumerate(rollout.rows)
        ]

    for weight in (0.0, 0.3):
        step = one_step(tiny, reward_funcs=None, completions=texts, format_weight=weight)
        assert step.trainer.rewards.tolist() == pytest.approx([1 + weight, 1.0] * 4)
        assert step.record["reward_mean"] == pytest.approx(1 + weight / 2)


def case_eval_n(tiny, tmp_path):
    # held-out accuracy on the first eval_n rows
    for n in (1, 3):
        _, history = run(tiny, eval_n=n, max_steps=1)
        assert history[0]["eval_n"] == n


def case_allow_eval_overlap(tiny, tmp_path):
    # evaluation rows that are training rows: refused, or measured and counted
    with pytest.raises(ValueError, match="also training prompts"):
        run(tiny, eval_rows=ROWS[:2], allow_eval_overlap=False, max_steps=1)
    _, history = run(tiny, eval_rows=ROWS[:2], allow_eval_overlap=True, max_steps=1)
    assert history[0]["eval_overlap"] == 2


def case_eval_every(tiny, tmp_path):
    # held-out accuracy also every eval_every steps (always before and after)
    for every, expected in ((0, [0, 3]), (1, [0, 1, 2, 3]), (2, [0, 2, 3])):
        _, history = run(tiny, eval_every=every, max_steps=3)
        assert [r["step"] for r in history if "eval_accuracy" in r] == expected


def case_save_every(tiny, tmp_path):
    # a checkpoint every save_every steps: after step 1 the weights are on disk before the end
    for every in (0, 1):
        out = tmp_path / f"every{every}"
        on_disk = {}
        run(
            tiny,
            save_every=every,
            max_steps=2,
            out_dir=out,
            on_step=lambda r, _, out=out, on_disk=on_disk: on_disk.setdefault(
                r["step"], any(out.glob("*.safetensors"))
            ),
        )
        assert on_disk[2] is (every == 1)
        assert any(out.glob("*.safetensors"))  # and at the end, always


def case_device(tiny, tmp_path):
    # acts where the model is loaded: cpu puts it on the CPU; cuda needs a GPU (an error here)
    trainer, _ = run(tiny, load=True, device="cpu", max_steps=1)
    assert trainer.device == torch.device("cpu")
    assert next(trainer.model.parameters()).device == torch.device("cpu")
    if torch.cuda.is_available():
        trainer, _ = run(tiny, load=True, device="cuda", max_steps=1)
        assert next(trainer.model.parameters()).device.type == "cuda"
    else:
        with pytest.raises(ValueError, match="CUDA"):
            run(tiny, load=True, device="cuda", max_steps=1)


def case_dtype(tiny, tmp_path):
    # the forward passes run in bfloat16 under autocast: other log-probs, another gradient
    fp32 = one_step(tiny, dtype="float32")
    bf16 = one_step(tiny, dtype="bfloat16")
    assert (fp32.trainer.dtype, bf16.trainer.dtype) == (torch.float32, torch.bfloat16)
    assert all(p.dtype == torch.float32 for p in bf16.after)  # weights stay float32
    assert abs(bf16.record["grad_norm"] / fp32.record["grad_norm"] - 1) > 1e-4


def case_num_generations(tiny, tmp_path):
    # G completions per prompt, grouped in consecutive blocks of G for the advantages
    for G in (2, 4):
        step = one_step(tiny, num_generations=G)
        assert step.rollout.completion_ids.shape[0] == 2 * G
        assert step.rollout.prompts == [r["prompt"] for r in ROWS[:2] for _ in range(G)]
        expected = group_advantages(step.trainer.rewards, G, "group")
        torch.testing.assert_close(step.trainer.advantage_values, expected)


def case_scale_rewards(tiny, tmp_path):
    # the advantages are the rewards scaled as asked (the groups' spreads differ)
    seen = []
    for scale in ("group", "batch", "none"):
        step = one_step(tiny, scale_rewards=scale)
        expected = group_advantages(step.trainer.rewards, 4, scale)
        torch.testing.assert_close(step.trainer.advantage_values, expected)
        seen.append(expected)
    assert not torch.allclose(seen[0], seen[1]) and not torch.allclose(seen[1], seen[2])


def case_loss_type(tiny, tmp_path):
    # the same rollout, two aggregations: dr_grpo's gradient is dapo's times T / (N * L)
    # (T tokens in the batch, N completions, L = max_completion_length, here 7, not the default)
    dapo = one_step(tiny, loss_type="dapo", max_completion_length=7)
    dr = one_step(tiny, loss_type="dr_grpo", max_completion_length=7)
    assert torch.equal(dapo.rollout.completion_ids, dr.rollout.completion_ids)
    mask = dapo.rollout.completion_mask
    factor = mask.sum().item() / (mask.shape[0] * 7)
    assert dr.record["grad_norm"] == pytest.approx(dapo.record["grad_norm"] * factor, rel=1e-5)


def case_learning_rate(tiny, tmp_path):
    # AdamW's first step moves a weight with a clear gradient by lr: the largest move is lr
    for lr in (1e-3, 1e-2):
        step = one_step(tiny, learning_rate=lr, lr_scheduler_type="constant")
        assert step.max_change() == pytest.approx(lr, rel=1e-3)


def case_max_grad_norm(tiny, tmp_path):
    # clipping to 1e-12 leaves every gradient far below AdamW's eps (1e-8): the step barely
    # moves; 0 turns clipping off (the step moves by lr)
    clipped = one_step(tiny, max_grad_norm=1e-12)
    free = one_step(tiny, max_grad_norm=0.0)
    assert clipped.record["grad_norm"] == pytest.approx(free.record["grad_norm"])  # before clip
    assert free.max_change() == pytest.approx(1e-3, rel=1e-3)
    assert clipped.max_change() < 1e-3 * 1e-3


def case_num_iterations(tiny, tmp_path):
    # num_iterations optimizer steps on each sampled batch
    for iterations in (1, 3):
        step = one_step(tiny, num_iterations=iterations)
        first = next(iter(step.trainer.model.parameters()))
        assert int(step.trainer.optimizer.state[first]["step"]) == iterations


def case_ref_update_every(tiny, tmp_path):
    # the reference becomes a copy of the policy every ref_update_every steps; 0 keeps it
    frozen = one_step(tiny, beta=0.1, ref_update_every=0)
    synced = one_step(tiny, beta=0.1, ref_update_every=1)
    for ref, before in zip(frozen.trainer.reference.parameters(), frozen.before, strict=True):
        assert torch.equal(ref, before)
    for ref, after in zip(synced.trainer.reference.parameters(), synced.after, strict=True):
        assert torch.equal(ref, after)
    assert synced.max_change() > 0


def case_beta(tiny, tmp_path):
    # beta 0: no reference. beta > 0: the loss is the policy loss + beta * KL. The KL is 0 (and
    # its gradient 0) until the policy moves, so the second of two iterations shows it: the
    # logged loss (the mean of the two) differs by (beta2 - beta1) * the logged KL (their mean).
    assert one_step(tiny, beta=0.0).trainer.reference is None
    low = one_step(tiny, beta=0.1, num_iterations=2, learning_rate=1e-2)
    high = one_step(tiny, beta=0.5, num_iterations=2, learning_rate=1e-2)
    assert low.record["kl"] == pytest.approx(high.record["kl"], rel=1e-4) and low.record["kl"] > 0
    difference = high.record["loss"] - low.record["loss"]
    assert difference == pytest.approx((0.5 - 0.1) * low.record["kl"], rel=1e-3)


def moved(tiny, **overrides) -> Step:
    """A step of two iterations: the second sees ratios away from 1 (the first moved the
    policy), with a temperature that leaves room for the ratio to rise above 1."""
    return one_step(tiny, num_iterations=2, learning_rate=1e-4, temperature=2.0, **overrides)


def case_epsilon(tiny, tmp_path):
    # the ratio leaves [1 - eps, 1 + eps] for more tokens when eps is small; with epsilon_high
    # set, epsilon still sets the lower bound
    clip = {
        (eps, high): moved(tiny, epsilon=eps, epsilon_high=high).record["clip_fraction"]
        for eps in (0.01, 0.9)
        for high in (None, 0.01)
    }
    assert clip[0.01, None] > clip[0.9, None]
    assert clip[0.01, 0.01] > clip[0.9, 0.01]


def case_epsilon_high(tiny, tmp_path):
    # clip-higher moves only the upper bound (None means epsilon's, here 0.9)
    same = moved(tiny, epsilon=0.9, epsilon_high=None).record["clip_fraction"]
    tight = moved(tiny, epsilon=0.9, epsilon_high=0.01).record["clip_fraction"]
    wide = moved(tiny, epsilon=0.9, epsilon_high=5.0).record["clip_fraction"]
    assert tight > same >= wide


def case_use_bias_correction_kl(tiny, tmp_path):
    # the KL term times the ratio: once the policy moves (second iteration) the loss differs
    plain = one_step(tiny, beta=0.5, num_iterations=2, learning_rate=1e-2)
    corrected = one_step(
        tiny, beta=0.5, num_iterations=2, learning_rate=1e-2, use_bias_correction_kl=True
    )
    assert corrected.record["loss"] != pytest.approx(plain.record["loss"], rel=1e-6, abs=1e-9)
    assert any(not torch.equal(a, b) for a, b in zip(plain.after, corrected.after, strict=True))


def lora_layers(model) -> dict:
    """name -> peft LoRA layer, for every module that got an adapter."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def case_lora_r(tiny, tmp_path):
    # 0: every weight trains. r > 0: only the adapters, of rank r, and with beta > 0 the
    # reference is the policy with its adapter off (LMTrainer.reference_logps), not a copy
    full = one_step(tiny)
    assert full.trainer.model is not None and not lora_layers(full.trainer.model)
    step = one_step(tiny, lora_r=4, beta=0.04, learning_rate=1e-2)
    layers = lora_layers(step.trainer.model)
    assert layers and {m.r["default"] for m in layers.values()} == {4}
    trained = {n for n, p in step.trainer.model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    assert step.trainer.reference is None


def case_lora_alpha(tiny, tmp_path):
    # the adapter's output is scaled by lora_alpha / lora_r (None: 2 * lora_r, a scale of 2)
    for alpha, scale in ((None, 2.0), (12.0, 3.0)):
        layers = lora_layers(one_step(tiny, lora_r=4, lora_alpha=alpha).trainer.model)
        assert {m.scaling["default"] for m in layers.values()} == {scale}


def case_lora_dropout(tiny, tmp_path):
    for p in (0.0, 0.25):
        layers = lora_layers(one_step(tiny, lora_r=4, lora_dropout=p).trainer.model)
        drops = {getattr(m.lora_dropout["default"], "p", 0.0) for m in layers.values()}
        assert drops == {p}


def case_lora_target_modules(tiny, tmp_path):
    every = lora_layers(one_step(tiny, lora_r=4).trainer.model)
    assert {n.rsplit(".", 1)[-1] for n in every} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }  # not lm_head
    two = lora_layers(one_step(tiny, lora_r=4, lora_target_modules="q_proj, v_proj").trainer.model)
    assert {n.rsplit(".", 1)[-1] for n in two} == {"q_proj", "v_proj"}


def case_seed(tiny, tmp_path):
    # the shuffled order of the training rows, and the sampling
    for seed in (0, 1):
        trainer, _ = run(tiny, seed=seed, max_steps=1)
        order = torch.randperm(len(ROWS), generator=torch.Generator().manual_seed(seed))
        assert trainer.rows == [ROWS[i] for i in order[:2].tolist()]
    for load in (False, True):  # the model given, or loaded by the run (setup seeds first)
        texts = [
            run(tiny, train_rows=ROWS[:1], load=load, seed=seed, max_steps=1, temperature=2.0)[
                0
            ].rollout.completions
            for seed in (0, 0, 1)
        ]
        assert texts[0] == texts[1] != texts[2]


OURS = {name[len("case_") :]: func for name, func in globals().items() if name.startswith("case_")}


def test_every_field_has_a_case():
    assert set(OURS) == {f.name for f in dataclasses.fields(MathConfig)}


@pytest.mark.parametrize("field", sorted(OURS))
def test_our_trainer_honours(field, tiny, tmp_path):
    OURS[field](tiny, tmp_path)


# --- the TRL backend ---------------------------------------------------------------------------


def batch_split(c: MathConfig) -> dict:
    """TRL's names for one step's batch: P x G completions, in gradient_accumulation_steps
    micro-batches (one process)."""
    batch = c.prompts_per_step * c.num_generations
    return {
        "generation_batch_size": batch,
        "per_device_train_batch_size": batch // c.gradient_accumulation_steps,
    }


def same_name(field: str):
    return lambda c: {field: getattr(c, field)}


# field: (another value, what TRL's GRPOConfig must hold for a config c)
TRL_MEANING = {
    "prompts_per_step": (4, batch_split),
    "num_generations": (2, lambda c: {"num_generations": c.num_generations, **batch_split(c)}),
    "gradient_accumulation_steps": (
        2,
        lambda c: {"gradient_accumulation_steps": c.gradient_accumulation_steps, **batch_split(c)},
    ),
    "max_completion_length": (7, same_name("max_completion_length")),
    "temperature": (0.7, same_name("temperature")),
    "top_p": (0.9, same_name("top_p")),
    # TRL counts optimizer steps: num_iterations of them per sampled batch
    "max_steps": (3, lambda c: {"max_steps": c.max_steps * c.num_iterations}),
    "num_iterations": (
        2,
        lambda c: {
            "num_iterations": c.num_iterations,
            "max_steps": c.max_steps * c.num_iterations,
            "ref_model_sync_steps": max(c.ref_update_every, 1) * c.num_iterations,
        },
    ),
    "ref_update_every": (
        3,
        lambda c: {
            "sync_ref_model": c.ref_update_every > 0 and c.beta > 0,
            "ref_model_sync_steps": max(c.ref_update_every, 1) * c.num_iterations,
            "ref_model_mixup_alpha": 1.0,
        },
    ),  # the reference becomes a copy of the policy, as ours
    "gradient_checkpointing": (
        True,
        lambda c: {
            "activation_checkpointing": c.gradient_checkpointing,
            "gradient_checkpointing": c.gradient_checkpointing,
        },
    ),
    "weight_decay": (0.1, same_name("weight_decay")),
    "lr_scheduler_type": ("constant", same_name("lr_scheduler_type")),
    "learning_rate": (3e-5, same_name("learning_rate")),
    "max_grad_norm": (0.5, same_name("max_grad_norm")),  # 0 (no clipping): test below
    "seed": (3, lambda c: {"seed": c.seed, "data_seed": c.seed}),
    "dtype": ("bfloat16", lambda c: {"bf16": c.dtype == "bfloat16", "fp16": False}),  # on a CPU
    "beta": (0.0, same_name("beta")),
    "epsilon": (0.3, same_name("epsilon")),
    "epsilon_high": (0.28, same_name("epsilon_high")),
    "loss_type": ("dr_grpo", same_name("loss_type")),
    "scale_rewards": ("batch", same_name("scale_rewards")),
    "use_bias_correction_kl": (True, same_name("use_bias_correction_kl")),
}
# fields that act outside TRL's GRPOConfig, and where this file shows them acting
TRL_ELSEWHERE = {
    "device": "test_trl_device",
    "format_weight": "test_trl_trainer_weighs_the_format_reward",
    "prompt_template": "test_trl_trainer_samples_from_the_template",
    "time_budget_s": "test_train_math_trl_budget_and_held_out_rows",
    "eval_n": "test_train_math_trl_budget_and_held_out_rows",
    "allow_eval_overlap": "test_train_math_trl_budget_and_held_out_rows",
    "eval_every": "test_train_math_trl_evaluates_every_eval_every_steps",
    "save_every": "test_train_math_trl_saves_every_save_every_steps",
    "lora_r": "test_trl_trainer_gets_the_same_lora_adapters",
    "lora_alpha": "test_trl_trainer_gets_the_same_lora_adapters",
    "lora_dropout": "test_trl_trainer_gets_the_same_lora_adapters",
    "lora_target_modules": "test_trl_trainer_gets_the_same_lora_adapters",
    # the caller loads the model and the rows from these (cli.prepare_math, the same code for
    # both backends; train_math_trl takes the model and rows)
    "model": "cli.prepare_math",
    "dataset": "cli.prepare_math",
    "eval_split": "cli.prepare_math",
}


def trl_cfg(**overrides) -> MathConfig:
    return MathConfig(
        **(
            {
                "device": "cpu",
                "prompts_per_step": 2,
                "num_generations": 4,
                "max_steps": 2,
                "eval_n": 2,
            }
            | overrides
        )
    )


def test_every_field_reaches_trl():
    assert set(TRL_MEANING) | set(TRL_ELSEWHERE) == {f.name for f in dataclasses.fields(MathConfig)}
    assert not set(TRL_MEANING) & set(TRL_ELSEWHERE)


@pytest.mark.parametrize("field", sorted(TRL_MEANING))
def test_trl_config_carries(field, tmp_path):
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import trl_grpo_config

    value, meaning = TRL_MEANING[field]
    configs = [trl_cfg(), trl_cfg(**{field: value})]
    expected = [meaning(c) for c in configs]
    assert expected[0] != expected[1]  # the change is visible in TRL's settings
    for cfg, want in zip(configs, expected, strict=True):
        trl = trl_grpo_config(cfg, str(tmp_path))
        assert {key: getattr(trl, key) for key in want} == want


def test_trl_max_grad_norm_zero_turns_clipping_off(tmp_path):
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import trl_grpo_config

    assert trl_grpo_config(trl_cfg(max_grad_norm=0.0), str(tmp_path)).max_grad_norm >= 1e6


def test_trl_device(tmp_path):
    # device acts as TRL's use_cpu: cpu is the CPU; cuda needs a GPU (an error on a CPU-only
    # machine, as in our backend) or runs on it
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import trl_grpo_config

    assert trl_grpo_config(trl_cfg(device="cpu"), str(tmp_path)).use_cpu is True
    if torch.cuda.is_available():
        assert trl_grpo_config(trl_cfg(device="cuda"), str(tmp_path)).use_cpu is False
    else:
        try:
            use_cpu = trl_grpo_config(trl_cfg(device="cuda"), str(tmp_path)).use_cpu
        except ValueError as err:
            assert "CUDA" in str(err)
        else:
            assert use_cpu is False


def trl_trainer(tiny, tmp_path, **overrides):
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import make_trl_trainer

    tokenizer = overrides.pop("tokenizer", tiny[1])
    trainer, _ = make_trl_trainer(
        trl_cfg(**overrides), copy.deepcopy(tiny[0]), tokenizer, ROWS, str(tmp_path)
    )
    return trainer


def test_trl_trainer_weighs_the_format_reward(tiny, tmp_path):
    # reward = accuracy + format_weight * format, in TRL's reward_weights
    def names(trainer):
        return [getattr(f, "__name__", None) for f in trainer.reward_funcs]

    plain = trl_trainer(tiny, tmp_path, format_weight=0.0)
    assert names(plain) == ["accuracy_reward"] and plain.reward_weights.tolist() == [1.0]
    weighted = trl_trainer(tiny, tmp_path, format_weight=0.3)
    assert names(weighted) == ["accuracy_reward", "format_reward"]
    assert weighted.reward_weights.tolist() == pytest.approx([1.0, 0.3])


def test_trl_trainer_samples_from_the_template(tiny, tmp_path):
    chat = chat_tokenizer(tiny[1])
    for template, prompt in {"plain": "23+45=", "r1": "223+45=", "boxed": "123+45="}.items():
        trainer = trl_trainer(tiny, tmp_path, tokenizer=chat, prompt_template=template)
        assert trainer.train_dataset[0]["prompt"] == prompt


def test_trl_trainer_gets_the_same_lora_adapters(tiny, tmp_path):
    """TRL receives the run's peft config: rank, scale, dropout and target modules; with LoRA
    and beta > 0 it keeps no reference copy (the adapter is disabled instead)."""
    settings = dict(
        lora_r=4, lora_alpha=12.0, lora_dropout=0.25, lora_target_modules="q_proj,v_proj"
    )
    trainer = trl_trainer(tiny, tmp_path, beta=0.04, **settings)
    layers = lora_layers(trainer.model)
    assert {n.rsplit(".", 1)[-1] for n in layers} == {"q_proj", "v_proj"}
    assert {m.r["default"] for m in layers.values()} == {4}
    assert {m.scaling["default"] for m in layers.values()} == {3.0}
    assert {m.lora_dropout["default"].p for m in layers.values()} == {0.25}
    assert trainer.ref_model is None
    assert not lora_layers(trl_trainer(tiny, tmp_path, beta=0.04).model)


def test_trl_trainer_keeps_a_reference_only_with_beta(tiny, tmp_path):
    assert trl_trainer(tiny, tmp_path, beta=0.0).ref_model is None
    assert trl_trainer(tiny, tmp_path, beta=0.04).ref_model is not None


def decay_split(model, optimizer) -> tuple[set[str], set[str]]:
    """The names of the parameters ``optimizer`` decays, and of those it does not."""
    names = {id(p): name for name, p in model.named_parameters()}
    split: tuple[set[str], set[str]] = (set(), set())
    for group in optimizer.param_groups:
        split[group["weight_decay"] == 0].update(names[id(p)] for p in group["params"])
    return split


def gpt2_model():
    """A small random GPT-2: its norms are ``nn.LayerNorm`` modules whose names (``ln_1``, ``ln_f``)
    hold no "norm", and every linear layer has a bias."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(
        GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=2, n_head=2)
    )


def test_weight_decay_spares_what_trl_spares(tiny, tmp_path):
    # TRL's GRPOTrainer builds its AdamW with the HF Trainer's create_optimizer: two groups, no
    # decay on biases and norm gains, chosen by name. Ours decays what has 2 or more dimensions
    # (nanoGPT's rule): the same two groups on the shipped model and on a GPT-2 (nn.LayerNorm
    # by type rather than by name).
    from transformers import Trainer, TrainingArguments

    from grpo_minimal.lm_trainer import adamw_groups

    def decay_parameter_names(model):
        decayed = {id(p) for p in adamw_groups(model, 0.1)[0]["params"]}
        return {name for name, p in model.named_parameters() if id(p) in decayed}

    trl = trl_trainer(tiny, tmp_path, weight_decay=0.1)
    ours = LMGRPOTrainer(trl_cfg(weight_decay=0.1), copy.deepcopy(tiny[0]), tiny[1])
    expected = decay_split(trl.model, trl.create_optimizer())
    assert expected[0] and expected[1]
    assert decay_split(ours.model, ours.optimizer) == expected
    gpt2 = gpt2_model()
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"), weight_decay=0.1, use_cpu=True, report_to=[]
    )
    hf = decay_split(gpt2, Trainer(model=gpt2, args=args).create_optimizer())
    assert any(".ln_" in name for name in hf[1]) and any(".bias" in name for name in hf[1])
    assert decay_parameter_names(gpt2) == hf[0]


def test_weight_decay_updates_as_trl(tiny, tmp_path):
    # the same gradients, two AdamW steps with weight_decay 0.1: the same weights as TRL's
    trl = trl_trainer(tiny, tmp_path, weight_decay=0.1, learning_rate=1e-2)
    theirs = trl.create_optimizer()
    ours = LMGRPOTrainer(
        trl_cfg(weight_decay=0.1, learning_rate=1e-2), copy.deepcopy(tiny[0]), tiny[1]
    )
    pairs = list(zip(ours.model.parameters(), trl.model.parameters(), strict=True))
    generator = torch.Generator().manual_seed(0)
    for _ in range(2):
        for a, b in pairs:
            a.grad = torch.randn(a.shape, generator=generator)
            b.grad = a.grad.clone()
        ours.optimizer.step()
        theirs.step()
    names = [name for name, _ in ours.model.named_parameters()]
    for name, (a, b) in zip(names, pairs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)


def train_trl(tiny, tmp_path, eval_rows=EVAL_ROWS, **overrides):
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import train_math_trl

    return train_math_trl(
        trl_cfg(**overrides),
        copy.deepcopy(tiny[0]),
        tiny[1],
        ROWS,
        eval_rows,
        tmp_path / "out",
        progress=False,
    )


def test_train_math_trl_budget_and_held_out_rows(tiny, tmp_path):
    # time_budget_s stops TRL after the first step (of 3); eval_n rows are evaluated; rows that
    # are also training rows are refused unless allow_eval_overlap, and then counted
    with pytest.raises(ValueError, match="also training prompts"):
        train_trl(tiny, tmp_path, eval_rows=ROWS[:2], allow_eval_overlap=False)
    _, history = train_trl(
        tiny,
        tmp_path,
        eval_rows=[ROWS[0], *EVAL_ROWS],
        eval_n=3,
        allow_eval_overlap=True,
        max_steps=3,
        time_budget_s=1e-9,
    )
    assert [r["step"] for r in history] == [0, 1]
    assert (history[0]["eval_n"], history[0]["eval_overlap"]) == (3, 1)


def test_train_math_trl_evaluates_every_eval_every_steps(tiny, tmp_path):
    _, history = train_trl(tiny, tmp_path, max_steps=2, eval_every=1)
    assert [r["step"] for r in history if "eval_accuracy" in r] == [0, 1, 2]


def test_train_math_trl_saves_every_save_every_steps(tiny, tmp_path, monkeypatch):
    from grpo_minimal import lm_train

    saves, save = [], lm_train.save_checkpoint

    def counted(*args, **kwargs):
        saves.append(1)
        return save(*args, **kwargs)

    monkeypatch.setattr(lm_train, "save_checkpoint", counted)
    train_trl(tiny, tmp_path, max_steps=2, save_every=1)
    assert len(saves) >= 2  # after step 1, and at the end (our backend: 1, 2 and the end)
