"""Where the files the course ships are: data splits, models and committed results.

One resolver for every road a learner takes. In a checkout (or an editable install) they are the
repository's own ``data/`` and ``bench/results/``, the sources, beside the scripts that made
them. An installed wheel carries copies of both inside the package, in ``grpo_minimal/_shipped/``
(``setup.py`` copies them at build time), found through ``importlib.resources``. A wheel's copy
wins over a checkout, so that an installed package never reads a folder it happens to sit beside.

``data_path("arithmetic_train.jsonl")``, ``model_path("tiny")`` and
``results_path("reasoning.json")`` give a file's path; a file the install does not carry is a
``MissingShippedFile`` (a ``FileNotFoundError``) whose message says where it looked and how to get
an install that has it.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

__all__ = [
    "MissingShippedFile",
    "PACKAGED",
    "SHIPPED_MODEL_FOLDERS",
    "data_dir",
    "data_path",
    "model_path",
    "results_dir",
    "results_path",
]

# where each kind of shipped file lives: (inside a wheel, in a checkout of the repository)
_PLACES = {"data": ("data", "data"), "results": ("results", "bench/results")}

SHIPPED_MODEL_FOLDERS = {
    "tiny": "tiny_math_lm",
    "tiny-reasoning": "tiny_reasoning_lm",
    "tiny-direct": "tiny_direct_lm",
    "standin": "standin_lm",
    "tiny-vlm": "tiny_vlm",
}
"""Short names of the models in ``data/``: the tiny math model (``make_tiny_model.py``),
notebook 10's cold starts (``make_reasoning_model.py``), the stand-in for the real model
(``make_standin_model.py``) and notebook 13's tiny vision-language model (``make_tiny_vlm.py``)."""

_PACKAGE = Path(str(importlib.resources.files("grpo_minimal")))
_WHEEL_ROOT = _PACKAGE / "_shipped"
_CHECKOUT_ROOT = _PACKAGE.parent

PACKAGED = _WHEEL_ROOT.is_dir()
"""True in an installed wheel (the course's files are package data), False in a checkout."""


class MissingShippedFile(FileNotFoundError):
    """A file the course ships is not in this install."""


def _root(kind: str) -> Path:
    inside_wheel, in_checkout = _PLACES[kind]
    return _WHEEL_ROOT / inside_wheel if PACKAGED else _CHECKOUT_ROOT / in_checkout


def data_dir() -> Path:
    """The folder of the shipped data and models (``data/`` in a checkout)."""
    return _root("data")


def results_dir() -> Path:
    """The folder of the committed benchmark results (``bench/results/`` in a checkout)."""
    return _root("results")


def _existing(kind: str, name: str) -> Path:
    path = _root(kind) / name
    if not path.exists():
        where = "the installed package" if PACKAGED else "this checkout"
        raise MissingShippedFile(
            f"{kind} file {name!r} is not in {where} ({path} does not exist). The course's files "
            "come with the package: pip install grpo-minimal from a wheel or from the repository "
            "(docs/install.md, 'Without a clone'), not a copy of grpo_minimal/ alone"
        )
    return path


def data_path(name: str) -> Path:
    """A shipped data file or model folder, e.g. ``data_path("arithmetic_test.jsonl")``."""
    return _existing("data", name)


def results_path(name: str) -> Path:
    """A committed results file, e.g. ``results_path("ablations.json")`` (notebooks 07, 08, 10)."""
    return _existing("results", name)


def model_path(name: str) -> Path:
    """The folder of a shipped model by its short name (``SHIPPED_MODEL_FOLDERS``)."""
    if name not in SHIPPED_MODEL_FOLDERS:
        raise ValueError(
            f"model: {name!r} is not a shipped model; shipped: {', '.join(SHIPPED_MODEL_FOLDERS)}"
        )
    return data_path(SHIPPED_MODEL_FOLDERS[name])
