"""`grpo-minimal math --backend trl`: the same run on TRL's GRPOTrainer, in one process and as
two data-parallel CPU ranks under torchrun; its output is what `evaluate math` reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from grpo_minimal import cli  # noqa: E402
from grpo_minimal.lm_train import MathConfig  # noqa: E402
from grpo_minimal.trl_bridge import parse_trl_overrides, per_device_batch_size  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RUN = ["math", "--backend", "trl", "--max-steps", "2", "--eval-n", "40", "--no-progress"]


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def evaluate(out: Path, capsys) -> dict:
    assert cli.main(["evaluate", "math", "--model", str(out), "--n", "40"]) == 0
    return last_json(capsys.readouterr().out)


def test_one_process_writes_what_evaluate_reads(tmp_path, capsys):
    out = tmp_path / "trl"
    assert cli.main([*RUN, "--out", str(out)]) == 0
    summary = last_json(capsys.readouterr().out)
    assert summary["backend"] == "trl" and summary["world_size"] == 1
    assert summary["steps"] == 2 and summary["eval_n"] == 40
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    for record in records[1:]:  # our names, as the grpo_minimal backend writes them
        assert {"reward_mean", "kl", "loss", "train_s", "completion_length"} <= record.keys()
    assert records[0]["eval_accuracy"] == summary["accuracy_before"]
    assert records[-1]["eval_accuracy"] == summary["accuracy_after"]
    assert json.loads((out / "grpo_config.json").read_text())["max_steps"] == 2
    # the checkpoint, greedy on the same 40 problems, scores what training measured
    assert evaluate(out, capsys)["accuracy"] == summary["accuracy_after"]


def test_two_cpu_ranks_under_torchrun(tmp_path, capsys):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            "2",
            "-m",
            "grpo_minimal",
            *RUN,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout  # rank 0 alone prints the summary
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["world_size"] == 2 and summary["backend"] == "trl"
    assert evaluate(out, capsys)["accuracy"] == summary["accuracy_after"]


def test_batch_must_split_over_the_processes():
    cfg = MathConfig(prompts_per_step=8, num_generations=8, gradient_accumulation_steps=2)
    assert per_device_batch_size(cfg, 1) == 32
    assert per_device_batch_size(cfg, 2) == 16  # 64 = 2 micro-batches x 2 ranks x 16
    with pytest.raises(ValueError, match=r"64 completions.*processes \(3\)"):
        per_device_batch_size(cfg, 3)


def test_our_backend_refuses_several_processes(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exited:
        cli.main(["math", "--max-steps", "1", "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert "--backend trl" in capsys.readouterr().err


def test_trl_overrides_are_trl_only_settings():
    assert parse_trl_overrides(["use_vllm=true", "vllm_mode=colocate", "report_to=wandb"]) == {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "report_to": "wandb",
    }
    for pair, message in [
        ("beta=0.1", "use its grpo-minimal flag"),  # the course has a name for it
        ("num_generations=4", "use its grpo-minimal flag"),
        ("not_a_setting=1", "not a field of TRL's GRPOConfig"),
        ("use_vllm", "KEY=VALUE"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_trl_overrides([pair])


def test_trl_overrides_need_the_trl_backend(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["math", "--trl", "use_vllm=true", "--out", str(tmp_path)])
    assert exited.value.code == 2
    assert "needs --backend trl" in capsys.readouterr().err


# --- one precision rule for both backends ---------------------------------------------------------


@pytest.mark.parametrize(
    ("card", "capability", "dtype"),
    [
        ("T4", (7, 5), "float16"),
        ("V100", (7, 0), "float16"),
        ("A100", (8, 0), "bfloat16"),
        ("H100", (9, 0), "bfloat16"),
    ],
)
def test_gpu_precision_follows_the_compute_capability(monkeypatch, card, capability, dtype):
    """A T4 or V100 emulates bfloat16 (``torch.cuda.is_bf16_supported()`` still says True in
    torch 2.13): it gets float16 with loss scaling, in our trainer and in TRL's alike."""
    import torch

    from grpo_minimal.device import grad_scaler, pick_dtype
    from grpo_minimal.trl_bridge import trl_config_values

    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts
    monkeypatch.setattr(
        torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or capability
    )
    expected = getattr(torch, dtype)
    assert pick_dtype(torch.device("cuda", 1)) == expected
    assert asked == [torch.device("cuda", 1)]  # the device asked for, not the current one
    assert grad_scaler(torch.device("cpu"), expected).is_enabled() == (dtype == "float16")
    values = trl_config_values(MathConfig(device="auto"), "out", processes=1)
    assert (values["use_cpu"], values["bf16"], values["fp16"]) == (
        False,
        dtype == "bfloat16",
        dtype == "float16",
    )


def test_trl_on_the_cpu_computes_in_float32():
    from grpo_minimal.trl_bridge import trl_config_values

    values = trl_config_values(MathConfig(device="cpu"), "out", processes=1)
    assert values["use_cpu"] and not values["bf16"] and not values["fp16"]


# --- --trl: TRL-only settings; what the course decides is refused ---------------------------------


def test_every_setting_the_course_derives_is_refused_by_trl_overrides():
    """The refused keys are the keys the mapping writes, not a copy kept by hand."""
    from grpo_minimal.trl_bridge import COURSE_SETTINGS, trl_config_values

    derived = trl_config_values(MathConfig(device="cpu"), "out", processes=1)
    assert set(derived) <= COURSE_SETTINGS
    for key in [*derived, "reward_weights", "disable_tqdm", "gradient_checkpointing"]:
        if key != "output_dir":  # --out
            with pytest.raises(ValueError, match=f"--trl {key}: set by grpo-minimal"):
                parse_trl_overrides([f"{key}=1"])


def test_train_math_trl_refuses_a_course_setting_from_python_too(tmp_path):
    from grpo_minimal.trl_bridge import train_math_trl

    with pytest.raises(ValueError, match="--trl disable_tqdm"):
        train_math_trl(MathConfig(device="cpu"), None, None, [], [], tmp_path, disable_tqdm=False)
