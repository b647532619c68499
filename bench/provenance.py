"""How a results file was made: date, machine, CPUs, threads, versions and commit.

Every bench script that writes a results file puts ``provenance(threads)`` in it, so that a
number can be traced to the code and the machine that measured it.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The checked-out commit, with ``+changes`` when the work tree differs from it."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return (sha or "unknown") + ("+changes" if dirty else "")


def provenance(threads: int | None) -> dict:
    """Date, machine, CPU count, torch threads per run, Python/torch/transformers, commit."""
    import torch
    import transformers

    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        "threads": threads,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "commit": commit(),
    }
