"""The multi-GPU recipes in recipes/: every accelerate config loads with accelerate's own loader and
every nested key reaches accelerate's launcher; every launch command is a valid
`grpo-minimal math --backend trl` run whose settings agree with its config (processes, mixed
precision, the batch split over the processes); what each recipe runs is declared by the install
line it names; and vllm_server.sh waits for the server and stops it, checked with stand-ins."""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("trl")

import accelerate.utils.launch  # noqa: E402
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file  # noqa: E402
from accelerate.commands.launch import _validate_launch_command, launch_command_parser  # noqa: E402
from accelerate.utils import (  # noqa: E402
    DeepSpeedPlugin,
    FullyShardedDataParallelPlugin,
    patch_environment,
)
from packaging.requirements import Requirement  # noqa: E402
from packaging.utils import canonicalize_name  # noqa: E402

from grpo_minimal import cli  # noqa: E402
from grpo_minimal.trl_bridge import parse_trl_overrides, per_device_batch_size  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"
CONFIGS = sorted((RECIPES / "accelerate").glob("*.yaml"))
SCRIPTS = sorted([*RECIPES.glob("*.sh"), *RECIPES.glob("*.sbatch")])
PRECISION = {"bf16": "bfloat16", "fp16": "float16", "no": "float32"}
SLURM_EXAMPLE = {"$SLURM_NODEID": "1", "$MASTER_ADDR": "10.0.0.1"}  # what srun would expand
# A nested section of an accelerate config becomes flags of one group of `accelerate launch`.
# The recipes use these two; a config with another section needs its group named here.
SECTION_GROUPS = {"fsdp_config": "FSDP Arguments", "deepspeed_config": "DeepSpeed Arguments"}
# The module each package's part of a launch starts from, imported below where it is installed:
# accelerate's launcher; the `trl` command (trl vllm-serve); the Hub data set loader (--dataset
# gsm8k, trl_bridge); what accelerate's DeepSpeed launcher imports; what `trl vllm-serve` runs;
# what TRL's vLLM client imports.
ENTRY_MODULES = {
    "accelerate": "accelerate.commands.launch",
    "trl": "trl.cli",
    "datasets": "datasets",
    "deepspeed": "deepspeed.launcher.runner",
    "vllm": "vllm.entrypoints.cli.main",
    "requests": "requests",
}


def code_of(script: Path) -> str:
    """The script without its comments, continuation lines joined."""
    lines = script.read_text().replace("\\\n", " ").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def expand_defaults(line: str, script: Path) -> str:
    """`$NAME` replaced by its default where the script sets `NAME="${NAME:-default}"`."""
    defaults = re.findall(r'^(\w+)="\$\{\1:-([^}]*)\}"$', script.read_text(), re.M)
    for name, value in defaults:
        line = re.sub(rf"\$\{{{name}\}}|\${name}\b", value, line)
    return line


def command_line(script: Path, command: str) -> list[str]:
    """The words of the script's one line that runs `command` (e.g. "accelerate launch")."""
    lines = [line for line in code_of(script).splitlines() if command in line]
    assert len(lines) == 1, f"{script.name}: one {command} command expected"
    return shlex.split(expand_defaults(lines[0], script))


def launch_command(script: Path) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment assignments, accelerate launch flags, grpo_minimal flags) of the script's
    one `accelerate launch` command."""
    tokens = command_line(script, "accelerate launch")
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


@pytest.fixture(autouse=True)
def no_port_probe(monkeypatch):
    """accelerate's launcher probes its rendezvous port on localhost; what it decides from the
    answer is not what these tests are about (and another test may hold the port)."""
    monkeypatch.setattr(accelerate.utils.launch, "is_port_in_use", lambda port=None: False)


def launcher_view(launch_flags: list[str]) -> SimpleNamespace:
    """What `accelerate launch` makes of these flags and the config they name, by accelerate's own
    code: its parser; the names on its namespace after `_validate_launch_command`, which copies
    every config key onto it, nested ones included; the loaded config; the namespace; the
    environment its launcher hands to each process; and the plugin each process builds from that
    environment (None for plain DDP)."""
    parser = launch_command_parser()
    args = parser.parse_args([*launch_flags, "-m", "grpo_minimal", "math"])
    args, config, mp_from_config = _validate_launch_command(args)
    names = set(vars(args))
    if args.use_deepspeed:  # as accelerate's launch_command does before its DeepSpeed launcher
        fields = [*config.deepspeed_config, *(["mixed_precision"] if mp_from_config else [])]
        args.deepspeed_fields_from_accelerate_config = ",".join(fields)
        _, env = accelerate.utils.launch.prepare_deepspeed_cmd_env(args)
        plugin_class = DeepSpeedPlugin
    else:
        env = accelerate.utils.launch.prepare_multi_gpu_env(args)
        plugin_class = FullyShardedDataParallelPlugin if args.use_fsdp else None
    env = {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}
    plugin = None
    if plugin_class is not None:
        with patch_environment(**env):
            plugin = plugin_class()  # reads and validates the values from the environment
    return SimpleNamespace(parser=parser, names=names, config=config, args=args, plugin=plugin)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_accelerate_config_loads(path):
    config = load_config_from_file(str(path))  # refuses unknown top-level keys and bad enum values
    assert isinstance(config, ClusterConfig)
    assert config.num_processes >= 1 and config.num_processes % config.num_machines == 0
    assert config.mixed_precision in PRECISION and not config.use_cpu
    header = path.read_text().split("compute_environment")[0]
    assert "Written for:" in header and "Run here:" in header, path.name


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_nested_config_key_reaches_the_launcher(path):
    """The loader accepts any key inside fsdp_config or deepspeed_config, and `accelerate launch`
    copies each onto its namespace, where a misspelled one (fsdp_reshard_after_forwad) is set and
    never read: the run starts with the default. Every nested key must be a flag of its section's
    group in accelerate's launch parser."""
    view = launcher_view(["--config_file", str(path)])
    flags = {action.dest for action in view.parser._actions}
    top_level = set(ClusterConfig.__dataclass_fields__)  # checked by the loader
    ignored = sorted(view.names - flags - top_level - {"nondefault"})
    assert not ignored, f"{path.name}: accelerate launch ignores {ignored}"
    groups = {g.title: {a.dest for a in g._group_actions} for g in view.parser._action_groups}
    for section in top_level:
        keys = getattr(view.config, section)
        if not isinstance(keys, dict) or not keys:
            continue
        assert section in SECTION_GROUPS, f"{path.name}: name the launch-flag group of {section}"
        unknown = sorted(set(keys) - groups[SECTION_GROUPS[section]])
        assert not unknown, f"{path.name}: {section} keys unknown to accelerate launch: {unknown}"


def test_the_configs_are_what_their_names_say():
    """Read from the plugin each process would build, not only from the YAML."""
    view = {p.stem: launcher_view(["--config_file", str(p)]) for p in CONFIGS}
    assert view["ddp"].args.multi_gpu and view["ddp"].plugin is None
    assert view["zero2"].plugin.zero_stage == 2
    for name in ("zero3", "server7", "multinode"):  # the checkpoint needs the gathered weights
        plugin = view[name].plugin
        assert plugin.zero_stage == 3 and plugin.zero3_init_flag is True
        zero = plugin.deepspeed_config["zero_optimization"]
        assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    fsdp = view["fsdp2"].plugin
    assert fsdp.fsdp_version == 2 and fsdp.reshard_after_forward is True
    assert fsdp.state_dict_type.name == "FULL_STATE_DICT"
    assert fsdp.activation_checkpointing is False  # --gradient-checkpointing asks for it instead
    assert view["server7"].config.num_processes == 7
    multinode = view["multinode"].config
    assert (multinode.num_machines, multinode.num_processes) == (2, 16)


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
    if overrides.get("vllm_mode") == "server":  # the trainer asks the port the server listens on
        serve = command_line(script, "trl vllm-serve")
        assert int(flag(serve, "--port")) == overrides["vllm_server_port"]
    if "CUDA_VISIBLE_DEVICES" in env:
        assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == config.num_processes
    text = script.read_text()
    assert "Written for:" in text and "Not run here" in text, script.name
    nodes = re.search(r"#SBATCH --nodes=(\d+)", text)
    if nodes:
        gpus = int(re.search(r"#SBATCH --gpus-per-node=(\d+)", text).group(1))
        assert int(nodes.group(1)) == config.num_machines
        assert int(nodes.group(1)) * gpus == config.num_processes


def install_line(script: Path) -> str:
    found = re.findall(r"^# Install: (pip install .+)$", script.read_text(), re.M)
    assert len(found) == 1, f"{script.name}: one '# Install: pip install ...' line expected"
    return found[0]


def declared(install: str) -> dict[str, Requirement]:
    """The requirements an install line asks for directly, by name: this project's (".[extra]",
    read from pyproject.toml) and other packages with their extras (read from their metadata)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = []
    for word in shlex.split(install)[2:]:
        if word == "-e":
            continue
        if word.startswith(".["):
            lines += project["dependencies"]
            lines += [
                r
                for extra in word[2:-1].split(",")
                for r in project["optional-dependencies"][extra]
            ]
            continue
        package = Requirement(word)
        lines.append(word)
        for line in metadata.requires(package.name) or []:  # a package named here is installed
            marker = Requirement(line).marker
            if marker and any(marker.evaluate({"extra": extra}) for extra in package.extras):
                lines.append(line)
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in lines}


def needed(script: Path) -> set[str]:
    """What the script's launch needs installed besides torch and transformers: the package of
    each command it runs; TRL and datasets for `--backend trl` and GSM8K; DeepSpeed when
    accelerate picks its DeepSpeed launcher for the config; vLLM when the server is `trl
    vllm-serve` or TRL is told to generate with it (and requests for TRL's client to the server)."""
    code = code_of(script)
    needs = {"accelerate"} if "accelerate launch" in code else set()
    _, launch_flags, math_flags = launch_command(script)
    args = cli.build_parser().parse_args(math_flags)
    if args.backend == "trl" or args.dataset == "gsm8k":
        needs |= {"trl", "datasets"}
    if launcher_view([SLURM_EXAMPLE.get(t, t) for t in launch_flags]).args.use_deepspeed:
        needs.add("deepspeed")
    overrides = parse_trl_overrides(args.trl)
    if "trl vllm-serve" in code or overrides.get("use_vllm"):
        needs |= {"trl", "vllm"}
    if overrides.get("vllm_mode") == "server":
        needs.add("requests")
    return needs


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_what_each_recipe_runs_is_installed_by_its_install_line(script):
    """Every package the launch needs is declared by the install line the script and the recipes'
    README give; where it is installed here, its version meets the declaration and the module
    the launch starts from imports (DeepSpeed and vLLM are not installed in CI: for them the
    declaration is what is checked)."""
    install = install_line(script)
    assert f"`{install}`" in (RECIPES / "README.md").read_text(), f"README: {install}"
    requirements = declared(install)
    for name in sorted(needed(script)):
        assert name in requirements, f"{script.name} needs {name}: `{install}` does not install it"
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        assert requirements[name].specifier.contains(version, prereleases=True), (name, version)
        importlib.import_module(ENTRY_MODULES[name])


def test_vllm_stays_out_of_the_gpu_extra():
    """vLLM pins one torch build, so it is not in [gpu]: the recipes that need it say so."""
    assert "vllm" not in declared('pip install -e ".[gpu]"')
    assert {"vllm", "requests"} <= set(declared('pip install -e ".[gpu]" "trl[vllm]"'))


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


# vllm_server.sh with stand-ins on PATH: a `trl` whose server answers /health after a while (or
# never, or dies), an `accelerate` that records whether the server was up when training started.
FAKE_TRL = """\
import http.server, os, sys, time
if os.environ["FAKE_SERVER"] == "dies":
    sys.exit(3)
time.sleep(0.5)  # loading the model
if os.environ["FAKE_SERVER"] == "never":
    time.sleep(60)
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
port = int(sys.argv[sys.argv.index("--port") + 1])
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""
FAKE_ACCELERATE = """\
import os, sys, urllib.request
port = next(a.split("=")[1] for a in sys.argv if a.startswith("vllm_server_port="))
status = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status
open(os.path.join(os.environ["FAKE_DIR"], "trained"), "w").write(str(status))
"""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def run_server_recipe(tmp_path: Path, server: str, wait_s: int):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("trl", FAKE_TRL), ("accelerate", FAKE_ACCELERATE)):
        (bin_dir / f"{name}.py").write_text(body)
    # `trl` writes its pid from sh before Python starts: a loaded machine can take longer than
    # VLLM_WAIT_S to start Python, and the trap may stop the server before Python runs a line
    (bin_dir / "trl").write_text(
        f'#!/bin/sh\necho $$ > "$FAKE_DIR/server.pid"\nexec "{sys.executable}" "{bin_dir}/trl.py" "$@"\n'
    )
    (bin_dir / "accelerate").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" "{bin_dir}/accelerate.py" "$@"\n'
    )
    for name in ("trl", "accelerate"):
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_DIR": str(tmp_path),
        "FAKE_SERVER": server,
        "VLLM_PORT": str(port),
        "VLLM_WAIT_S": str(wait_s),
    }
    # output to files, not pipes: a server left running would hold a pipe open past the script
    try:
        with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
            returncode = subprocess.run(
                ["bash", str(RECIPES / "vllm_server.sh")],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=err,
                timeout=60,
            ).returncode
        stopped = not running(int((tmp_path / "server.pid").read_text()))
    finally:  # never leave a stand-in server behind, whatever failed
        if (tmp_path / "server.pid").exists():
            pid = int((tmp_path / "server.pid").read_text())
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    trained = tmp_path / "trained"
    stderr = (tmp_path / "err").read_text()
    return returncode, stderr, stopped, trained.read_text() if trained.exists() else None


def test_vllm_server_recipe_trains_once_the_server_is_healthy_then_stops_it(tmp_path):
    returncode, stderr, stopped, trained = run_server_recipe(tmp_path, "healthy", wait_s=30)
    assert returncode == 0, stderr
    assert trained == "200"  # the server answered /health when training started
    assert stopped  # the trap stopped the server when the script ended


@pytest.mark.parametrize("server", ["never", "dies"])
def test_vllm_server_recipe_gives_up_with_one_clear_line(tmp_path, server):
    # a server that dies is seen at once, long before this wait runs out
    wait_s = 2 if server == "never" else 30
    returncode, stderr, stopped, trained = run_server_recipe(tmp_path, server, wait_s)
    assert returncode == 1 and trained is None  # training never started
    message = stderr.strip().splitlines()[-1]
    assert message.startswith("vllm_server.sh:") and "/health" in message
    if server == "never":
        assert "VLLM_WAIT_S" in message
    else:
        assert "exited" in message
    assert stopped
