"""Each optional road names its extra in one line when it is missing, and the extras that
``grpo_minimal.extras`` names are the ones ``pyproject.toml`` defines."""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

from grpo_minimal import extras
from grpo_minimal.cli import main

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# the distribution that provides each module the code imports
PROVIDES = {
    "otter": "otter-grader",
    "trl": "trl",
    "datasets": "datasets",
    "accelerate": "accelerate",
    "gguf": "gguf",
    "peft": "peft",
}


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_every_extra_installs_the_modules_it_is_named_for():
    defined = PROJECT["optional-dependencies"]
    assert set(extras.EXTRAS) | {"dev"} == set(defined)
    for extra, modules in extras.EXTRAS.items():
        assert {PROVIDES[m] for m in modules} <= _names(defined[extra]), extra
    # dev holds everything the suite needs: the labs, trl, fetch and lora extras whole
    needed = _names(defined["labs"]) | _names(defined["trl"]) | _names(defined["fetch"])
    needed |= _names(defined["lora"])
    assert needed <= _names(defined["dev"])


@pytest.fixture
def without(monkeypatch):
    """Make some modules look uninstalled (as on a base install)."""

    def hide(*modules: str) -> None:
        real = importlib.util.find_spec
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda name, *a: None if name in modules else real(name, *a),
        )

    return hide


def test_fetch_without_its_extra_is_one_line_naming_it(without, tmp_path, capsys):
    without("gguf")
    with pytest.raises(SystemExit) as exit_:
        main(["fetch", "smollm2-135m", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert "grpo-minimal fetch smollm2-135m needs the [fetch] extra (missing: gguf)" in err
    assert list(tmp_path.iterdir()) == []


def test_a_missing_extra_is_one_line_naming_it(without):
    assert extras.missing_extra_message("labs", "x") == ""
    without("otter")
    message = extras.missing_extra_message("labs", "grpo-minimal lab check")
    # the command installs the extra's requirements: it works whether the package came from a
    # wheel, the repository or a clone (grpo-minimal itself is not on PyPI)
    assert message == (
        "grpo-minimal lab check needs the [labs] extra (missing: otter): "
        "pip install 'otter-grader>=7.0' 'jsonschema<4.25' 'psutil>=5.9'"
    )
    with pytest.raises(extras.MissingExtra, match=re.escape(message)):
        extras.require("labs", "grpo-minimal lab check")
    with pytest.raises(ValueError, match="'lab' is not one of labs, trl, gpu"):
        extras.require("lab", "x")


@pytest.mark.parametrize(
    ("argv", "hidden", "extra"),
    [
        (["lab", "check", "notebooks/labs/01_advantages.ipynb"], ("otter",), "labs"),
        (["lab", "grade", "notebooks/labs"], ("otter",), "labs"),
        (["lab", "build", "--check"], ("otter",), "labs"),
        (["math", "--backend", "trl", "--max-steps", "1", "--out", "OUT"], ("trl",), "trl"),
    ],
)
def test_each_command_names_its_missing_extra(argv, hidden, extra, without, tmp_path, capsys):
    without(*hidden)
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"needs the [{extra}] extra" in err[0], err


def test_load_gsm8k_names_the_gpu_extra(monkeypatch):
    from grpo_minimal.data import load_gsm8k

    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(extras.MissingExtra, match=r"needs the \[gpu\] extra \(missing: datasets"):
        load_gsm8k("test")


def test_lora_without_peft_is_one_line_naming_the_extra(without, capsys, tmp_path):
    from grpo_minimal.cli import main

    without("peft")
    with pytest.raises(SystemExit) as exit_info:
        main(["math", "--lora-r", "4", "--max-steps", "1", "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "lora" in err and len(err.strip().splitlines()) == 1
