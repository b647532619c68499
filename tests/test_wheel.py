"""The roads a learner takes without a checkout (``tests/wheel_smoke.py``) as one test of the
suite, so that it shares the CPUs with the others under pytest-xdist. It builds the sdist and the
wheel, installs the wheel into a fresh venv and runs every command and every course notebook
from empty folders: minutes, so it runs only when asked, as ``make test`` does
(``GRPO_WHEEL_SMOKE=1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(
    os.environ.get("GRPO_WHEEL_SMOKE") != "1",
    reason="make test runs it (GRPO_WHEEL_SMOKE=1): building and installing the "
    "wheel takes minutes",
)
def test_the_wheel_takes_every_road_from_an_empty_folder():
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "wheel_smoke.py")],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert done.returncode == 0, f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    assert done.stdout.strip().endswith("wheel smoke: passed")
