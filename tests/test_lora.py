"""LoRA (``lora.py``, ``--lora-r``): the reference is the base model with the adapter off, a LoRA
step matches TRL's, the adapter is saved and evaluated, and bad settings are one line."""

from __future__ import annotations

import copy
import json
import warnings

import pytest
import torch

pytest.importorskip("peft")

from numerics import assert_close_float64  # noqa: E402

from grpo_minimal import grpo_loss  # noqa: E402
from grpo_minimal.cli import main  # noqa: E402
from grpo_minimal.lm_grpo import LMGRPOTrainer  # noqa: E402
from grpo_minimal.lm_model import TINY_MODEL, load_model  # noqa: E402
from grpo_minimal.lm_train import MathConfig  # noqa: E402
from grpo_minimal.lm_trainer import completion_logps  # noqa: E402

ROWS = [{"prompt": p, "answer": a} for p, a in (("3+4=", "7"), ("12+30=", "42"), ("99+99=", "198"))]
SAME_LENGTH = [{"prompt": "3+4=", "answer": "7"}, {"prompt": "5+2=", "answer": "7"}]


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_model(str(TINY_MODEL), torch.device("cpu"))
    return model.eval(), tokenizer


def cfg(**overrides) -> MathConfig:
    values = dict(
        model=str(TINY_MODEL),
        device="cpu",
        prompts_per_step=2,
        num_generations=4,
        max_completion_length=5,
        lora_r=4,
        beta=0.04,
    )
    return MathConfig(**(values | overrides))


def randomise_adapters(model, seed: int = 0) -> None:
    """Non-zero adapters (B starts at 0, which would hide a reference that forgot to disable)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "lora_" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=generator))


def test_the_reference_is_the_base_model_with_the_adapter_off(tiny):
    """With LoRA and beta > 0 no copy is made: the reference is the policy's own network, and its
    log-probs equal those of the base model loaded on its own, while the policy's differ."""
    trainer = LMGRPOTrainer(cfg(), copy.deepcopy(tiny[0]), tiny[1])
    assert trainer.reference is None  # no copy: the policy with its adapter off
    randomise_adapters(trainer.model)
    torch.manual_seed(0)
    rollout = trainer.sample(ROWS[:2])
    reference = trainer.reference_logps(rollout)
    policy = trainer.frozen_logps(rollout)
    base, _ = load_model(str(TINY_MODEL), torch.device("cpu"))
    with torch.no_grad():
        separately = completion_logps(base.eval(), rollout)[0]
    torch.testing.assert_close(reference, separately, rtol=0, atol=1e-6)
    assert (policy - separately).abs().max() > 0.1  # the adapter is on outside the reference


def test_no_second_copy_of_the_weights(tiny):
    """A full fine-tune with beta > 0 holds the weights twice (policy and reference); LoRA holds
    them once, plus the adapters."""
    n = sum(p.numel() for p in tiny[0].parameters())
    full = LMGRPOTrainer(cfg(lora_r=0), copy.deepcopy(tiny[0]), tiny[1])
    lora = LMGRPOTrainer(cfg(), copy.deepcopy(tiny[0]), tiny[1])

    def held(trainer):
        models = [trainer.model] + (
            [trainer.reference] if isinstance(trainer.reference, torch.nn.Module) else []
        )
        storages = {
            p.untyped_storage().data_ptr(): p.numel() for m in models for p in m.parameters()
        }
        return sum(storages.values())

    adapters = sum(p.numel() for p in lora.model.parameters() if p.requires_grad)
    assert held(full) == 2 * n
    assert held(lora) == n + adapters and adapters < 0.15 * n
    trained = [name for name, p in lora.model.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in name for name in trained)


@pytest.mark.numerics
def test_a_lora_step_matches_trl(tiny, tmp_path):
    """One LoRA loss and its gradient on the adapters, ours against TRL's ``_compute_loss`` on the
    same batch, with beta > 0 and the reference through the disabled adapter on both sides.

    Prompts of one length: ours numbers a left-padded row's positions from its first real token,
    TRL's model from the padding. Equal in exact arithmetic (rotary attention sees only relative
    positions), but Qwen2 computes its rotary tables in float32 even in a float64 model
    (``numerics.assert_close_float64``), and with two padded positions the adapters' gradients
    differed by 5e-5 of their scale, above the float64 bound (unpadded: 2e-7, below it)."""
    pytest.importorskip("trl")
    from grpo_minimal.trl_bridge import make_trl_trainer

    run_cfg = cfg(lora_alpha=8.0)
    ours = LMGRPOTrainer(run_cfg, copy.deepcopy(tiny[0]), tiny[1])
    randomise_adapters(ours.model)
    trl, _ = make_trl_trainer(
        run_cfg,
        copy.deepcopy(tiny[0]),
        tiny[1],
        ROWS,
        str(tmp_path),
        reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
    )
    randomise_adapters(trl.model)
    # float64 on both sides, so that the two sums of the same terms in different orders agree
    # to far below any bug (a bound on float32 sums taken from the result's scale failed on
    # CI's machine by 6%: a gradient is a sum of terms larger than itself)
    ours.model.double()
    trl.model.double()
    ours.model.eval()
    trl.model.eval()  # eval mode: no gradient-accumulation scaling inside _compute_loss
    our_adapters = {n: p for n, p in ours.model.named_parameters() if "lora_" in n}
    their_adapters = {n: p for n, p in trl.model.named_parameters() if "lora_" in n}
    assert our_adapters.keys() == their_adapters.keys() and our_adapters
    for key in our_adapters:
        assert torch.equal(our_adapters[key], their_adapters[key])

    torch.manual_seed(0)
    rollout = ours.sample(SAME_LENGTH)
    assert bool(rollout.prompt_mask.all())  # no prompt padding: the positions agree (docstring)
    mask = rollout.completion_mask
    reference = ours.reference_logps(rollout)
    with torch.no_grad(), trl.model.disable_adapter():  # TRL's own reference: adapter off
        their_reference = completion_logps(trl.model, rollout)[0]
    torch.testing.assert_close(reference, their_reference, rtol=0, atol=1e-6)
    generator = torch.Generator().manual_seed(1)
    advantages = torch.randn(mask.shape[0], generator=generator)
    with torch.no_grad():
        old = completion_logps(ours.model, rollout)[0] + 0.2 * torch.randn(
            mask.shape, generator=generator
        )

    logps, _ = completion_logps(ours.model, rollout)
    loss, _ = grpo_loss(
        logps,
        old * mask,
        reference * mask,
        advantages,
        mask,
        beta=run_cfg.beta,
        epsilon=0.2,
        loss_type=run_cfg.loss_type,
        max_completion_length=run_cfg.max_completion_length,
        num_items_in_batch=mask.sum(),
    )
    loss.backward()
    G = rollout.num_generations
    inputs = {
        "prompt_ids": rollout.prompt_ids.repeat_interleave(G, 0),
        "prompt_mask": rollout.prompt_mask.repeat_interleave(G, 0),
        "completion_ids": rollout.completion_ids,
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old * mask,
        "ref_per_token_logps": reference * mask,
        "num_items_in_batch": mask.sum(),
    }
    their_loss = trl._compute_loss(trl.model, inputs)
    their_loss.backward()
    assert loss.dtype == their_loss.dtype == torch.float64
    assert_close_float64(loss.detach(), their_loss.detach())
    for key in our_adapters:
        assert_close_float64(our_adapters[key].grad, their_adapters[key].grad)
    assert any(p.grad.abs().sum() > 0 for p in our_adapters.values())


def test_a_lora_run_saves_its_adapter_and_evaluates(tmp_path, capsys):
    out = tmp_path / "lora"
    main(
        [
            "math",
            "--lora-r",
            "4",
            "--learning-rate",
            "1e-3",
            "--max-steps",
            "3",
            "--eval-n",
            "20",
            "--no-progress",
            "--merge",
            "--out",
            str(out),
        ]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    files = {p.name for p in out.iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "grpo_config.json"} <= files
    assert "model.safetensors" not in files  # the adapter alone, not a second full model
    main(["evaluate", "math", "--model", str(out), "--n", "20"])
    result = json.loads(capsys.readouterr().out)
    assert result["accuracy"] == summary["accuracy_after"]
    # --merge: one ordinary model, no adapter files, the same answers
    merged = out / "merged"
    assert summary["merged"] == str(merged)
    files = {p.name for p in merged.iterdir()}
    assert (
        "model.safetensors" in files
        and "config.json" in files
        and "adapter_config.json" not in files
    )
    main(["evaluate", "math", "--model", str(merged), "--n", "20", "--dataset", "arithmetic"])
    assert json.loads(capsys.readouterr().out)["accuracy"] == summary["accuracy_after"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lora-r", "-1"], "lora_r must be in"),
        (
            ["--lora-r", "4", "--ref-update-every", "2"],
            "ref_update_every must be 0 with lora_r > 0",
        ),
        (["--lora-r", "4", "--lora-dropout", "1"], "lora_dropout must be in"),
        (["--lora-r", "4", "--lora-target-modules", "no_such_layer"], "lora_target_modules:"),
        (["--merge"], "--merge writes a LoRA run's adapter"),
    ],
)
def test_bad_lora_flags_are_one_line(flags, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "math",
                *flags,
                "--max-steps",
                "1",
                "--eval-n",
                "2",
                "--no-progress",
                "--out",
                str(tmp_path / "x"),
            ]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_lora_defaults_apply_only_when_lora_is_on():
    """the ``lora:`` presets: a model's LoRA learning rate (chosen on validation) replaces the full
    fine-tune's only when lora_r > 0 and no rate is given; a model with none keeps the full
    fine-tune's and says so in one warning."""
    for model in ("tiny", "smollm2-135m"):
        full = MathConfig.for_device("cpu", model=model)
        lora = MathConfig.for_device("cpu", model=model, lora_r=8)
        assert lora.learning_rate == MathConfig.PRESETS[f"lora:{model}"]["learning_rate"]
        assert lora.learning_rate > full.learning_rate
        assert (
            MathConfig.for_device("cpu", model=model, lora_r=8, learning_rate=2e-4).learning_rate
            == 2e-4
        )
    qwen = MathConfig.for_device("cuda")
    with pytest.warns(
        UserWarning, match="lora_r: no LoRA learning rate was chosen for Qwen/Qwen2.5-0.5B-Instruct"
    ):
        assert MathConfig.for_device("cuda", lora_r=16).learning_rate == qwen.learning_rate
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MathConfig.for_device("cuda", lora_r=16, learning_rate=1e-5)
        MathConfig.for_device("cuda")
