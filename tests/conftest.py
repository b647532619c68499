"""Threads and order under pytest-xdist (``make test`` runs the suite on several workers).

Each worker gets an equal share of torch's threads (one each for two workers on two cores), and
so do the processes it starts (CLI runs, lab kernels, torchrun) through ``OMP_NUM_THREADS``:
two workers with every thread each oversubscribe the cores, and OpenMP's waiting threads then
slow both several-fold. Tests marked ``numerics`` keep torch's default thread count, so the
first pass of ``make test`` still compares their floats under several threads and the second
(``OMP_NUM_THREADS=1``) under one. Without xdist nothing changes.

The slowest files are collected first (``SLOW_FIRST``; ``make test`` hands out whole files, in
collection order): the longest ones start while the other workers take the many short ones,
and no long file starts last, when the other workers have run out of work.
"""

from __future__ import annotations

import os

import pytest
import torch

from grpo_minimal.device import torch_threads

DEFAULT_THREADS = torch.get_num_threads()
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
WORKER_THREADS = max(1, DEFAULT_THREADS // WORKERS)
# slowest first (a file's seconds on one of two workers); the rest keep their order after these
SLOW_FIRST = (
    "tests/test_wheel.py",  # ~400: builds and installs the wheel, runs every notebook alone
    "tests/test_labs_build.py",  # ~250: grades 20 lab notebooks, the capstone trains 300 steps
    "tests/test_hacking.py",  # ~170
    "tests/test_grading_trust.py",  # ~160: a hostile class graded in sandboxes, an endless loop
    "tests/test_real_model.py",  # ~150: SmolLM2-135M read from its GGUF, trained on both backends
    "notebooks/02_cartpole_grpo.ipynb",  # ~130
    "notebooks/03_ppo_vs_grpo.ipynb",  # ~110
    "tests/test_math_learning.py",  # ~70
    "tests/test_reasoning.py",  # ~80: the learning test trains 100 steps
    "notebooks/08_beyond_one_sample.ipynb",  # ~65
)

if os.environ.get("PYTEST_XDIST_WORKER") and WORKER_THREADS < DEFAULT_THREADS:
    torch.set_num_threads(WORKER_THREADS)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(WORKER_THREADS)


@pytest.fixture(autouse=True)
def _numerics_on_default_threads(request):
    """A ``numerics`` test runs with torch's default threads, whatever the worker's share."""
    if request.node.get_closest_marker("numerics") is None:
        yield
        return
    with torch_threads(DEFAULT_THREADS):
        yield


def pytest_collection_modifyitems(config, items):
    """``SLOW_FIRST`` files first, in that order; a stable sort keeps each file's own order."""
    rank = {path: index for index, path in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
