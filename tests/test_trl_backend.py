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
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
         "-m", "grpo_minimal", *RUN, "--out", str(out)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
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
