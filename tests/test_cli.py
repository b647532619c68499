"""The command line: train, evaluate, and refuse bad flags with one clear line."""

import json
import subprocess
import sys

import pytest

from grpo_minimal.cli import main
from grpo_minimal.envs import HELD_OUT_SEED
from grpo_minimal.gym_grpo import CartPoleConfig
from grpo_minimal.lm_train import MathConfig
from grpo_minimal.ppo import PPOConfig


@pytest.mark.parametrize("cls", [CartPoleConfig, PPOConfig, MathConfig])
def test_every_config_field_has_help_text(cls):
    """``--help`` shows each field's metadata["help"] (HfArgumentParser); inherited fields whose
    default a subclass overrides keep the base class's text (``config.override``)."""
    missing = [f.name for f in cls.__dataclass_fields__.values() if not f.metadata.get("help")]
    assert missing == []


def test_help_lists_every_field_with_its_text_and_default(capsys):
    for argv, cls in ((["cartpole"], CartPoleConfig), (["cartpole", "--algo", "ppo"], PPOConfig),
                      (["math"], MathConfig)):  # fmt: skip
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        text = "".join(capsys.readouterr().out.split())  # wrapping depends on the terminal
        for f in cls.__dataclass_fields__.values():
            assert "--" + f.name.replace("_", "-") in text
            assert "".join(f.metadata["help"].split())[:40] in text
            assert f"(default:{f.default})" in text


def test_train_then_evaluate(tmp_path, capsys):
    out = tmp_path / "run"
    main(
        ["cartpole", "--seed", "1", "--total-env-steps", "3000", "--no-progress", "--out", str(out)]
    )
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["algo"] == "grpo" and summary["env_steps"] >= 3000
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == summary["updates"] and "return_mean" in json.loads(lines[0])
    assert (out / "learning_curve.png").stat().st_size > 1000
    # the reported figure comes from the held-out start states, which decide nothing
    assert summary["held_out_seeds"] == f"{HELD_OUT_SEED}-{HELD_OUT_SEED + 99}"
    main(["evaluate", "cartpole", "--policy", str(out / "policy.pt"), "--episodes", "100"])
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 100 and result["seed"] == HELD_OUT_SEED
    assert result["mean_return"] == summary["held_out_return"]


def test_a_bug_inside_training_keeps_its_traceback(tmp_path, monkeypatch):
    """Only bad input becomes one clear line; an error raised while training is a bug and
    must reach the user (or the test) with its traceback, not as 'error: ...'."""
    import grpo_minimal.gym_grpo as gym_grpo

    def broken(*args, **kwargs):
        raise ValueError("a bug deep inside training")

    monkeypatch.setattr(gym_grpo, "train_cartpole", broken)
    with pytest.raises(ValueError, match="a bug deep inside training"):
        main(["cartpole", "--no-progress", "--out", str(tmp_path)])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--gamma", "1.5"], "gamma must be in (0.0, 1.0], got 1.5"),
        (["--num-generations", "1"], "num_generations must be in [2, inf), got 1"),
        (["--env-id", "Pendulum-v1"], "Discrete action space"),
    ],
)
def test_bad_flags_give_one_clear_line(tmp_path, flags, message):
    proc = subprocess.run(
        [sys.executable, "-m", "grpo_minimal", "cartpole", "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_input_checks_inside_training_are_one_clear_line_too(capsys):
    """Checks that need the environment or the model (dr_grpo's time limit, a prompt longer than
    the context) run before training, so they too end as one line, not a traceback."""
    import gymnasium as gym
    from gymnasium.envs.classic_control import CartPoleEnv

    if "CartPoleNoLimitCli-v0" not in gym.registry:
        gym.register("CartPoleNoLimitCli-v0", entry_point=CartPoleEnv)
    cases = [
        (["cartpole", "--env-id", "CartPoleNoLimitCli-v0", "--loss-type", "dr_grpo"],
         "needs an environment with a time limit"),
        (["math", "--device", "cpu", "--max-completion-length", "100000"],
         "exceeds the model's context"),
    ]  # fmt: skip
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--no-progress", "--out", "/nonexistent/never-written"])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err
