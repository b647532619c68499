"""Shared assertions for the lab tests: a wrong implementation must fail with useful feedback.

The grader's seed is drawn when ``lab build`` runs; ``GRADER_SEEDS`` stand in for it. Two bars
from the labs issue: a correct function earns every point whatever the seed, and a wrong one is
caught by ``lab check`` (the public cases), never first at grading.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from grpo_minimal.labs.checking import CheckFailed

GRADER_SEEDS = (1, 12_345)

GRADER_SECRET = int(os.environ.get("GRPO_GRADER_SECRET") or secrets.randbits(128))
"""The secret the lab builds of the tests draw from (as `lab build` draws one: no file can hold it
already), unless GRPO_GRADER_SECRET repeats a run's; the tests that use it print it."""


def assert_passes(check: Callable, fn: Callable) -> None:
    """Public cases pass, and so do the hidden twins for every stand-in grader seed."""
    check(fn)
    for seed in GRADER_SEEDS:
        check(fn, seed=seed)


def assert_fails(check: Callable, fn: Callable, seed: int | None = None) -> str:
    """The check rejects ``fn`` and says which case, the input, expected, got and a hint."""
    with pytest.raises(CheckFailed) as failed:
        check(fn, seed=seed)
    message = str(failed.value)
    for field in ("case:", "input:", "expected:", "got:", "hint:"):
        assert field in message, f"feedback lacks {field!r}:\n{message}"
    return message


def assert_told(check: Callable, fn: Callable, hint: str, seed: int | None = None) -> None:
    """The check rejects ``fn`` with a hint holding ``hint`` (the mistake made, named)."""
    message = assert_fails(check, fn, seed)
    assert hint in message.split("  hint:", 1)[1], message


def assert_caught_publicly(check: Callable, fn: Callable) -> str:
    """``lab check`` rejects the mistake, and grading rejects it too (no lost point unexplained)."""
    message = assert_fails(check, fn)
    for seed in GRADER_SEEDS:
        assert_fails(check, fn, seed=seed)
    return message


def assert_same_verdict(check: Callable, fn: Callable) -> None:
    """Passing ``lab check`` means passing the hidden twins: nothing graded that was not shown."""
    try:
        check(fn)
    except CheckFailed:
        return
    for seed in GRADER_SEEDS:
        try:
            check(fn, seed=seed)
        except CheckFailed as failed:
            raise AssertionError(
                f"passes the public cases but loses points at grading (seed {seed}):{failed}"
            ) from None


def filled_lab(student: Path, answers: dict[int, str], dest: Path) -> Path:
    """The student notebook with its answer cells (in order) replaced by ``answers``."""
    notebook = json.loads(student.read_text())
    cells = [c for c in notebook["cells"] if "otter_answer_cell" in c["metadata"].get("tags", [])]
    for index, source in answers.items():
        cells[index]["source"] = source
    dest.write_text(json.dumps(notebook))
    return dest


PACKAGE_ANSWERS_01 = {
    0: "from grpo_minimal.advantages import group_advantages",
    1: "from grpo_minimal.advantages import rloo_advantages",
    2: "from grpo_minimal.advantages import population_std_advantages\n"
    "seed_group = torch.tensor(checks.SEED_GROUP)\n"
    "advantage_population = population_std_advantages(seed_group, 4)[0].item()\n"
    "advantage_sample = group_advantages(seed_group, 4)[0].item()",
}
"""Lab 01 filled with the package's own functions: a solved lab."""

TAMPERING = (  # a lab 01 notebook's attempt to score without solving: the
    # checks and otter's scoring replaced in its kernel
    "import grpo_minimal.labs.advantages as checks, grpo_minimal.labs.checking as checking\n"
    "checks.check_group_advantages = checks.check_rloo_advantages = lambda *a, **k: None\n"
    "checks.check_std_question = lambda *a, **k: None\n"
    "checking.run_cases = checking.raise_first = lambda *a, **k: None\n"
    "import otter.test_files.abstract_test as abstract\n"
    "abstract.TestFile.score = property(lambda self: self.possible)\n"
    "abstract.TestFile.passed_all = property(lambda self: True)\n"
)
"""Code a lab 01 notebook runs to change its own score (tests/test_judge.py, the hostile class)."""
