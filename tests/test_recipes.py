"""The multi-GPU recipes in recipes/: every accelerate config loads with accelerate's own loader,
and every launch command is a valid `grpo-minimal math --backend trl` run whose settings agree
with its config (processes, mixed precision, the batch split over the processes)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("trl")

from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file  # noqa: E402
from accelerate.commands.launch import launch_command_parser  # noqa: E402

from grpo_minimal import cli  # noqa: E402
from grpo_minimal.trl_bridge import parse_trl_overrides, per_device_batch_size  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
CONFIGS = sorted((RECIPES / "accelerate").glob("*.yaml"))
SCRIPTS = sorted([*RECIPES.glob("*.sh"), *RECIPES.glob("*.sbatch")])
PRECISION = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}
SLURM_EXAMPLE = {"$SLURM_NODEID": "1", "$MASTER_ADDR": "10.0.0.1"}  # what srun would expand


def launch_command(script: Path) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment assignments, accelerate launch flags, grpo_minimal flags) of the script's
    one `accelerate launch` command."""
    text = script.read_text().replace("\\\n", " ")
    lines = [
        line
        for line in text.splitlines()
        if "accelerate launch" in line and not line.lstrip().startswith("#")
    ]
    assert len(lines) == 1, f"{script.name}: one accelerate launch command expected"
    tokens = shlex.split(lines[0])
    if tokens[:1] == ["srun"]:  # srun bash -c '...': the command is the last word
        tokens = shlex.split(tokens[-1])
    env = {}
    while "=" in tokens[0] and not tokens[0].startswith("-"):
        key, _, value = tokens.pop(0).partition("=")
        env[key] = value
    assert tokens[:2] == ["accelerate", "launch"], script.name
    split = tokens.index("-m")
    assert tokens[split + 1] == "grpo_minimal", script.name
    return env, tokens[2:split], tokens[split + 2 :]


def flag(flags: list[str], name: str) -> str:
    return flags[flags.index(name) + 1]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_accelerate_config_loads(path):
    config = load_config_from_file(str(path))  # refuses unknown keys and bad enum values
    assert isinstance(config, ClusterConfig)
    assert config.num_processes >= 1 and config.num_processes % config.num_machines == 0
    assert config.mixed_precision in PRECISION and not config.use_cpu
    header = path.read_text().split("compute_environment")[0]
    assert "Written for:" in header and "Run here:" in header, path.name


def test_the_configs_are_what_their_names_say():
    load = {p.stem: load_config_from_file(str(p)) for p in CONFIGS}
    assert load["ddp"].distributed_type == "MULTI_GPU"
    assert load["zero2"].deepspeed_config["zero_stage"] == 2
    for name in ("zero3", "server7", "multinode"):  # the checkpoint needs the gathered weights
        assert load[name].deepspeed_config["zero_stage"] == 3
        assert load[name].deepspeed_config["zero3_save_16bit_model"] is True
    assert load["fsdp2"].fsdp_config["fsdp_version"] == 2
    assert load["fsdp2"].fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    assert load["server7"].num_processes == 7
    assert (load["multinode"].num_machines, load["multinode"].num_processes) == (2, 16)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_launch_command_agrees_with_its_config(script):
    env, launch_flags, math_flags = launch_command(script)
    launched = launch_command_parser().parse_args(  # accelerate's own parser: valid flags
        [SLURM_EXAMPLE.get(t, t) for t in launch_flags] + ["-m", "grpo_minimal", *math_flags]
    )
    assert launched.module and launched.training_script == "grpo_minimal"
    assert launched.training_script_args == math_flags
    config_path = ROOT / flag(launch_flags, "--config_file")
    config = load_config_from_file(str(config_path))
    assert math_flags[0] == "math"
    args = cli.build_parser().parse_args(math_flags)
    assert args.backend == "trl"
    cfg = cli._math_config(args)  # validated, as the CLI would
    assert cfg.dtype == PRECISION[config.mixed_precision], "--dtype and mixed_precision differ"
    assert per_device_batch_size(cfg, config.num_processes) >= 1  # raises if it cannot split
    overrides = parse_trl_overrides(args.trl)  # TRL-only settings, real GRPOConfig fields
    if "vllm" in script.name:
        assert overrides["use_vllm"] is True
        assert overrides["vllm_mode"] in script.name
    if "CUDA_VISIBLE_DEVICES" in env:
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == config.num_processes
    text = script.read_text()
    assert "Written for:" in text and "Not run here" in text, script.name
    nodes = re.search(r"#SBATCH --nodes=(\d+)", text)
    if nodes:
        gpus = int(re.search(r"#SBATCH --gpus-per-node=(\d+)", text).group(1))
        assert int(nodes.group(1)) == config.num_machines
        assert int(nodes.group(1)) * gpus == config.num_processes


def test_every_config_is_used_by_a_recipe():
    used = {flag(launch_command(s)[1], "--config_file") for s in SCRIPTS}
    assert used == {str(p.relative_to(ROOT)) for p in CONFIGS}


def test_a_batch_that_cannot_split_is_caught():
    """The check the recipes rely on: 16 prompts x 8 do not split over 7 GPUs x 2 micro-batches."""
    env, launch_flags, math_flags = launch_command(RECIPES / "vllm_server.sh")
    math_flags[math_flags.index("--prompts-per-step") + 1] = "16"
    cfg = cli._math_config(cli.build_parser().parse_args(math_flags))
    with pytest.raises(ValueError, match="128 completions"):
        per_device_batch_size(cfg, 7)
