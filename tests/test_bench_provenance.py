"""Results that say how they were made (issue 51): every bench script that writes a results file
stores ``provenance(threads)`` (``bench/provenance.py``) in it, and ``bench/README.md`` says so.

Cheap: the scripts are read as source (``ast``), never run.
"""

from __future__ import annotations

import ast
import datetime
import importlib.util
import platform
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
# a call that writes a file: the scripts' own writes, and the course's append_result
WRITES = re.compile(r"\.write_text\(|json\.dump\(|\bappend_result\(|\bopen\([^)]*[\"']w")
# scripts known to write a results file: the detection below must find at least these
KNOWN_WRITERS = {
    "ablations.py",
    "capstone.py",
    "cpu_share.py",
    "gpu_plan.py",
    "grading.py",
    "hedging.py",
    "helper_patches.py",
    "how_far.py",
    "llm_ppo_vs_grpo.py",
    "lora.py",
    "r1_pipeline.py",
    "real_model.py",
    "reasoning.py",
}
# scripts that print their JSON results record instead of writing a file
PRINTS_RESULTS = {"llm_step.py"}


def writers() -> list[Path]:
    """The bench scripts whose source names results and calls something that writes a file."""
    return sorted(
        path
        for path in BENCH.glob("*.py")
        if "results" in (source := path.read_text()) and WRITES.search(source)
    )


def calls_provenance(path: Path) -> bool:
    """Whether the script calls ``provenance(...)`` (a call in the code, not a mention)."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "provenance"
        for node in ast.walk(ast.parse(path.read_text()))
    )


def test_the_writers_are_found():
    assert KNOWN_WRITERS <= {path.name for path in writers()}


@pytest.mark.parametrize(
    "name", sorted({path.name for path in writers()} | PRINTS_RESULTS), ids=str
)
def test_every_results_writer_records_provenance(name):
    assert calls_provenance(BENCH / name), f"bench/{name} writes results without provenance()"


def test_provenance_says_how_a_result_was_made():
    spec = importlib.util.spec_from_file_location("bench_provenance", BENCH / "provenance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    record = module.provenance(1)
    assert set(record) == {
        "date",
        "machine",
        "cpus",
        "threads",
        "python",
        "torch",
        "transformers",
        "commit",
    }
    date = datetime.datetime.fromisoformat(record["date"])
    assert date.tzinfo is not None
    assert abs(datetime.datetime.now(datetime.UTC) - date) < datetime.timedelta(minutes=5)
    assert isinstance(record["cpus"], int) and record["cpus"] >= 1
    assert record["threads"] == 1
    assert isinstance(record["machine"], str) and record["machine"]
    assert record["python"] == platform.python_version()
    import torch
    import transformers

    assert (record["torch"], record["transformers"]) == (
        torch.__version__,
        transformers.__version__,
    )
    # a short hash (with +changes when tracked files differ), or unknown without git
    assert isinstance(record["commit"], str) and record["commit"]
    assert re.fullmatch(r"([0-9a-f]{7,40}|unknown)(\+changes)?", record["commit"])
    assert module.provenance(None)["threads"] is None


def test_the_bench_readme_says_results_carry_provenance():
    top = (BENCH / "README.md").read_text().split("\n## ", 1)[0]
    assert "provenance" in top and "bench/provenance.py" in top
