"""Notebook 06 as a learner with a CUDA GPU runs it, every cell, on this CPU.

With CUDA the notebook builds other configurations than on a CPU (``MathConfig.for_device``'s
``PRESETS["gpu"]``, its section-8 experiment on top of them, the TRL comparison switched off); one
of them once stopped the notebook after the whole real-model run. Here CUDA is faked as in the
precision tests (``torch.cuda.is_available`` says True, the "GPU" is the CPU), the real model is
the stand-in (``data/standin_lm``) and GSM8K the offline sample, and the notebook runs top to
bottom in quick mode: every configuration it builds for CUDA is built and validated.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grpo_minimal.math_config import MathConfig
from grpo_minimal.shipped import model_path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "06_llm_grpo_math.ipynb"
# GSM8K-style problems that are not in the sample the run trains on: its held-out rows
HELD_OUT = [
    {
        "prompt": "Mia has 12 pencils and gives away 5. How many pencils does she have left?",
        "answer": "7",
    },
    {"prompt": "A box holds 6 eggs. How many eggs are in 4 boxes?", "answer": "24"},
    {"prompt": "Sam reads 15 pages a day. How many pages does he read in 3 days?", "answer": "45"},
    {"prompt": "There are 30 students and 12 are boys. How many are girls?", "answer": "18"},
]

FAKE_CUDA = """\
import torch
import grpo_minimal.device
from grpo_minimal.math_config import MathConfig

torch.cuda.is_available = lambda: True  # what the notebook asks to choose its branch
grpo_minimal.device.pick_device = lambda name="auto": torch.device("cpu")  # the "GPU" is this CPU
grpo_minimal.device.gpu_memory_gb = lambda device: {card_gb}  # the card's memory
MathConfig.PRESETS = {{**MathConfig.PRESETS, "gpu": {{**MathConfig.PRESETS["gpu"], "model": {model!r},
                           "dataset": "gsm8k_sample", "eval_split": {held_out!r},
                           "max_completion_length": {length}, "dtype": {dtype!r}}}}}
"""
LENGTH = 12  # the stand-in rarely stops early: 256 new tokens would make the test many times slower


@pytest.fixture
def held_out(tmp_path: Path) -> Path:
    path = tmp_path / "held_out.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in HELD_OUT))
    return path


# a Colab T4 (16 GB, fp16 with loss scaling: section 8 does not fit), the same T4 with LoRA
# (its first cell's LORA_R = 16), and an A100 (bf16)
CARDS = {"T4": (16.0, "float16"), "T4 LoRA": (16.0, "float16"), "A100": (80.0, "bfloat16")}
KNOB = "LORA_R = 0  #"


@pytest.mark.parametrize("card", CARDS)
def test_notebook_06_runs_every_cell_with_the_cuda_settings(card, held_out, tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_QUICK", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    card_gb, dtype = CARDS[card]
    lora = card.endswith("LoRA")
    if lora:  # what a learner edits: the knob in the first code cell
        (first,) = [c for c in notebook.cells if KNOB in c.source]
        first.source = first.source.replace(KNOB, "LORA_R = 16  #")
    fake = FAKE_CUDA.format(
        model=str(model_path("standin")),
        held_out=str(held_out),
        length=LENGTH,
        card_gb=card_gb,
        dtype=dtype,
    )
    setup = next(i for i, c in enumerate(notebook.cells) if c.get("id") == "course-setup")
    notebook.cells.insert(setup + 1, nbformat.v4.new_code_cell(fake))
    NotebookClient(notebook, timeout=900, resources={"metadata": {"path": str(tmp_path)}}).execute()

    printed = {
        "".join(c.source): "".join(o.get("text", "") for o in c.outputs if "text" in o)
        for c in notebook.cells
        if c.cell_type == "code"
    }
    text = "\n".join(printed.values())
    gpu = MathConfig.PRESETS["gpu"]
    # the real-model branch, on the stand-in and the sample with its held-out rows
    assert "Qwen2ForCausalLM" in text and "20 training problems, 4 held-out" in text
    # the run took the GPU settings, and section 8 trained on top of them where the card fits it
    assert f"'temperature': {gpu['temperature']!r}" in text
    learning_rate = 1e-5 if lora else gpu["learning_rate"]
    assert f"'learning_rate': {learning_rate!r}" in text
    # a card under 20 GB (a T4) runs without the reference model (section 9's plan), unless with
    # LoRA, whose reference is the base with the adapter off (no second copy)
    beta = 0.0 if card == "T4" else gpu["beta"]
    assert f"'beta': {beta!r}" in text
    assert ("under 20 GB of GPU memory: beta=0" in text) == (card == "T4")
    assert ("LoRA rank 16: the reference is the base with the adapter off" in text) == lora
    assert f"'max_completion_length': {LENGTH}" in text
    if card_gb < 20:
        assert "skipped: this GPU has 16.0 GB; the experiment needs about 18.8 GB" in text
    else:
        assert "'num_generations': 16, 'prompts_per_step': 4" in text and "in 3 steps" in text
    # the TRL comparison is off with CUDA (it would cost as much as the run)
    (trl_cell,) = [source for source in printed if "make_trl_trainer" in source]
    assert printed[trl_cell] == ""


VLM_NOTEBOOK = ROOT / "notebooks" / "13_grpo_on_a_vision_language_model.ipynb"
VLM_FAKE_CUDA = """\
import torch
import grpo_minimal.device

torch.cuda.is_available = lambda: True  # what the notebook asks to choose its branch
grpo_minimal.device.pick_device = lambda name="auto": torch.device("cpu")  # the "GPU" is this CPU
"""


def test_notebook_13_trains_its_gpu_vlm_with_cuda_faked(tmp_path, monkeypatch):
    """Notebook 13's section 10 as a learner with a CUDA GPU runs it: SmolVLM-256M-Instruct with
    LoRA, here the offline Idefics3 stand-in (``data/standin_vlm``, SmolVLM's classes, chat
    template and tiling) in its place. Only the cells it needs run: the set-up, the imports,
    the data, and section 10."""
    monkeypatch.setenv("GRPO_QUICK", "1")
    notebook = nbformat.read(VLM_NOTEBOOK, as_version=4)
    keep = ("course-setup", "imports", "task", "gpu")
    notebook.cells = [c for c in notebook.cells if c.get("id") in keep]
    (gpu,) = [c for c in notebook.cells if c.get("id") == "gpu"]
    real = '"HuggingFaceTB/SmolVLM-256M-Instruct"'
    assert real in gpu.source
    gpu.source = gpu.source.replace(real, repr(str(ROOT / "data" / "standin_vlm")), 1)
    notebook.cells.insert(1, nbformat.v4.new_code_cell(VLM_FAKE_CUDA))
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in gpu.outputs if "text" in o)
    assert "training " in text and "lora_r=16" in text and "no CUDA GPU here" not in text
    assert "validation accuracy" in text and "after 2 steps" in text
