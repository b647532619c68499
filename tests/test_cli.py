"""The command line: train, evaluate, and refuse bad flags with one clear line."""

import importlib.util
import json
import subprocess
import sys

import pytest

from grpo_minimal.cli import main
from grpo_minimal.envs import HELD_OUT_SEED
from grpo_minimal.gym_grpo import CartPoleConfig
from grpo_minimal.lm_ppo import GRPO_ONLY, LMPPOConfig
from grpo_minimal.lm_train import MathConfig
from grpo_minimal.ppo import PPOConfig


@pytest.mark.parametrize("cls", [CartPoleConfig, PPOConfig, MathConfig, LMPPOConfig])
def test_every_config_field_has_help_text(cls):
    """``--help`` shows each field's metadata["help"] (HfArgumentParser); inherited fields whose
    default a subclass overrides keep the base class's text (``config.override``)."""
    missing = [f.name for f in cls.__dataclass_fields__.values() if not f.metadata.get("help")]
    assert missing == []


def test_help_lists_every_field_with_its_text_and_default(capsys):
    for argv, cls in (
        (["cartpole"], CartPoleConfig),
        (["cartpole", "--algo", "ppo"], PPOConfig),
        (["math"], MathConfig),
        (["math", "--algo", "ppo"], LMPPOConfig),
    ):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        text = "".join(capsys.readouterr().out.split())  # wrapping depends on the terminal
        for f in cls.__dataclass_fields__.values():
            if cls is LMPPOConfig and f.name in GRPO_ONLY:  # refused for PPO, so not listed
                assert "--" + f.name.replace("_", "-") not in text
                continue
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
        (
            ["cartpole", "--env-id", "CartPoleNoLimitCli-v0", "--loss-type", "dr_grpo"],
            "needs an environment with a time limit",
        ),
        (
            ["math", "--device", "cpu", "--max-completion-length", "100000"],
            "exceeds the model's context",
        ),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--no-progress", "--out", "/nonexistent/never-written"])
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


# Off the default path: every bad input a learner can type ends in one line and exit status 2.
BAD_INPUTS = [
    (["math", "--dataset", "no_such_data.jsonl"], "dataset: no file no_such_data.jsonl"),
    (["math", "--eval-split", "no_such_split.jsonl"], "eval_split: no file no_such_split.jsonl"),
    (["math", "--model", "data/no_such_model"], "model: 'data/no_such_model' is not a folder"),
    (["math", "--model", "data"], "holds no config.json"),
    (
        ["math", "--dataset", "gsm8k_sample", "--allow-eval-overlap", "true"],
        "exceeds the model's context of 32 tokens",
    ),
    # FILE: a short prompt with a letter
    (["math", "--dataset", "FILE", "--allow-eval-overlap", "true"], "does not know: 'a'"),
    (["math", "--prompt-template", "r1"], "needs a tokenizer with a chat template"),
    (["math", "--backend", "trl", "--trl", "disable_tqdm=false"], "--trl disable_tqdm: set by"),
    (["math", "--backend", "trl", "--trl", "reward_weights=[1,0]"], "--trl reward_weights"),
    (["math", "--backend", "trl", "--trl", "ref_model_mixup_alpha=0.5"], "ref_model_mixup_alpha"),
    (["math", "--backend", "trl", "--trl", "warmup_steps=10"], "--trl warmup_steps: set by"),
    (["math", "--backend", "trl", "--trl", "disable_dropout=false"], "--trl disable_dropout"),
    (["math", "--backend", "trl", "--trl", "use_vllm=true"], "needs vLLM"),
    (["evaluate", "math", "--model", "data/no_such_model"], "is not a folder"),
    (["evaluate", "math", "--dataset", "no_such_data.jsonl"], "dataset: no file"),
    (["evaluate", "math", "--eval-split", "no_such_split.jsonl"], "eval_split: no file"),
    (["evaluate", "math", "--max-completion-length", "100"], "exceeds the model's context"),
    (["evaluate", "math", "--device", "cuda"], "torch sees no CUDA GPU"),
    (["cartpole", "--env-id", "NoSuchEnv-v0"], "env_id='NoSuchEnv-v0'"),
    (["evaluate", "cartpole", "--policy", "runs/no_such/policy.pt"], "--policy: no file"),
    (["evaluate", "cartpole", "--policy", "FILE"], "is not a policy written by"),
    (["cartpole", "--out", "FILE"], "is a file, not a folder"),
    (["math", "--out", "FILE"], "is a file, not a folder"),
    (["cartpole", "--gamma", "abc"], "invalid float value: 'abc'"),
    (["cartpole", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["math", "--allow-eval-overlap", "maybe"], "Truthy value expected"),
    (["evaluate", "nothing"], "invalid choice: 'nothing'"),
    (["lab", "build", "--seed", "-1"], "--seed: -1 is negative"),
    (["lab", "build", "--only", "99_nothing"], "no lab source 99_nothing.py"),
    (["lab", "grade", "notebooks/labs", "--grader", "notebooks", "--timeout", "0"], "--timeout: 0"),
    (["lab", "grade", "no_such_folder"], "holds no submitted .ipynb notebooks"),
    (["lab", "grade", "notebooks/labs", "--grader", "notebooks", "--jobs", "0"], "--jobs: 0"),
    (["lab", "check", "notebooks/01_group_relative_advantage.ipynb"], "is not a lab notebook"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_tour_gives_one_line_and_status_2(argv, message, tmp_path, capfd):
    """Caught at the file descriptor (capfd): no traceback, no library warning, one line."""
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: --device cuda is valid here")
    if "use_vllm=true" in argv and importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: use_vllm=true is valid")
    letter = tmp_path / "letter.jsonl"
    letter.write_text('{"prompt": "1+a=", "answer": "2"}\n')
    argv = [str(letter) if a == "FILE" else a for a in argv]
    needs_out = argv[0] in ("math", "cartpole") and "--out" not in argv
    out = ["--out", str(tmp_path / "never")] if needs_out else []
    with pytest.raises(SystemExit) as exc:
        main([*argv, *out])
    err = capfd.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and err.startswith("grpo-minimal") and ": error: " in err, err
    assert message in err


def test_a_checkpoint_saved_on_a_gpu_evaluates_on_the_cpu(tmp_path, capsys):
    """The device a checkpoint trained on is not the one evaluating it: its saved ``device``
    is not reused (a cuda checkpoint used to end in a traceback on a CPU machine)."""
    import shutil

    from grpo_minimal.lm_model import TINY_MODEL

    checkpoint = tmp_path / "ckpt"
    shutil.copytree(TINY_MODEL, checkpoint)
    saved = MathConfig().to_dict()
    saved["device"] = "cuda"
    (checkpoint / "grpo_config.json").write_text(json.dumps(saved))
    assert main(["evaluate", "math", "--model", str(checkpoint), "--n", "20"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["n"] == 20


def test_a_math_run_prints_its_resolved_settings_first(tmp_path, capsys):
    # CleanRL's habit: every setting the run took, presets and defaults resolved, before it starts
    flags = ["--max-steps", "1", "--eval-n", "2", "--prompts-per-step", "2", "--no-progress"]
    main(["math", *flags, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert err.startswith("GRPO settings: num_generations=8 ")
    settings = " ".join(err.split("\n\n")[0].split())  # the wrapped lines, joined
    for expected in ("max_steps=1", "prompts_per_step=2", "eval_n=2", "model=tiny", "device=auto"):
        assert f" {expected} " in f" {settings} ", expected
