"""One resolver for the files the course ships: a checkout's data/ and bench/results/, or the
copies a wheel carries (``tests/wheel_smoke.py`` runs the installed wheel for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_minimal import shipped
from grpo_minimal.lm_model import SHIPPED_MODELS, resolve_model_name

ROOT = Path(__file__).resolve().parents[1]


def test_a_checkout_reads_its_own_folders():
    assert not shipped.PACKAGED
    assert shipped.data_dir() == ROOT / "data" and shipped.results_dir() == ROOT / "bench/results"
    assert shipped.data_path("arithmetic_test.jsonl") == ROOT / "data/arithmetic_test.jsonl"
    assert shipped.results_path("reasoning.json") == ROOT / "bench/results/reasoning.json"
    for name, folder in shipped.SHIPPED_MODEL_FOLDERS.items():
        assert (shipped.model_path(name) / "config.json").is_file(), folder
    assert {name: Path(resolve_model_name(name)) for name in SHIPPED_MODELS} == SHIPPED_MODELS


def test_setup_py_ships_every_folder_the_resolver_reads():
    """What setup.py copies into the wheel is what shipped.py looks for inside it."""
    setup = (ROOT / "setup.py").read_text()
    for inside, in_checkout in shipped._PLACES.values():
        parts = ", ".join(f'"{p}"' for p in in_checkout.split("/"))
        assert f'"{inside}": HERE / {parts.replace(", ", " / ")}' in setup
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    for _, in_checkout in shipped._PLACES.values():
        assert f"graft {in_checkout}" in manifest  # and so does an sdist


def test_an_install_without_the_files_says_so_in_one_message(monkeypatch, tmp_path):
    monkeypatch.setattr(shipped, "_CHECKOUT_ROOT", tmp_path)
    with pytest.raises(
        shipped.MissingShippedFile,
        match=r"data file 'arithmetic_train.jsonl' is "
        r"not in this checkout .* pip install grpo-minimal",
    ):
        shipped.data_path("arithmetic_train.jsonl")
    with pytest.raises(FileNotFoundError, match="results file 'ablations.json'"):
        shipped.results_path("ablations.json")
    with pytest.raises(ValueError, match="'tiny-typo' is not a shipped model; shipped: tiny, "):
        shipped.model_path("tiny-typo")


def test_the_cli_names_a_missing_model_as_missing(monkeypatch, tmp_path, capsys):
    """``--model tiny`` where the install lacks it: one line saying it is not in the install
    (it used to offer ``tiny`` as the fix)."""
    from grpo_minimal.cli import main

    monkeypatch.setattr(shipped, "_CHECKOUT_ROOT", tmp_path)
    with pytest.raises(SystemExit) as stopped:
        main(["evaluate", "math", "--model", "tiny", "--n", "5"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'tiny_math_lm' is not in this checkout" in err[0], err


def test_the_wheel_layout_is_found_first(monkeypatch, tmp_path):
    """A package with ``_shipped/`` inside reads it, never a data/ it happens to sit beside."""
    (tmp_path / "_shipped" / "data").mkdir(parents=True)
    (tmp_path / "_shipped" / "data" / "x.jsonl").write_text("{}\n")
    monkeypatch.setattr(shipped, "_WHEEL_ROOT", tmp_path / "_shipped")
    monkeypatch.setattr(shipped, "PACKAGED", True)
    assert shipped.data_path("x.jsonl") == tmp_path / "_shipped/data/x.jsonl"
    with pytest.raises(FileNotFoundError, match="is not in the installed package"):
        shipped.data_path("arithmetic_train.jsonl")
