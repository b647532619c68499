"""Issue 39's attack on the measuring helpers, graded: each wrong notebook plain and with a cell
that makes lab 03, 05 and 06's measuring helpers measure the package's functions instead of the
learner's (the cells ``tests/test_judge.py`` grades: ``PATCHED_GRADIENT_03``,
``PATCHED_HELPERS_05``, ``PATCHED_HELPERS_06``).

    .venv/bin/python bench/helper_patches.py --label this-code

Run it once on the package as it is and once on an older package (``git checkout OLD --
grpo_minimal``, run with ``--label OLD``, then ``git checkout HEAD -- grpo_minimal``): where the
helpers ran in the learner's kernel, the patched notebooks score more than the plain ones; with
the measurer, the same. Each run is added to ``bench/results/helper_patches.json`` under its
label. Notebooks are graded in this process (``grade_notebook_file``, no sandbox: they are this
file's own).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from lab_helpers import filled_lab  # noqa: E402
from provenance import provenance  # noqa: E402  (bench/ is on the path when a script here runs)
from test_judge import (  # noqa: E402
    MISTAKES,
    MISTAKES_06,
    PATCHED_GRADIENT_03,
    PATCHED_HELPERS_05,
    PATCHED_HELPERS_06,
)

from grpo_minimal.instructor import grading  # noqa: E402
from grpo_minimal.instructor.build import build_labs  # noqa: E402

OUT = ROOT / "bench/results/helper_patches.json"
NOTEBOOKS = {  # lab: (the wrong answers, the answer cell the patch is added to, the patch)
    "03_objective": ({0: MISTAKES["03_objective"][0]}, 0, PATCHED_GRADIENT_03),
    "05_find_the_bugs": ({}, 1, PATCHED_HELPERS_05),  # the shipped notebook: all five bugs
    "06_llm_step": (dict(MISTAKES_06), 2, PATCHED_HELPERS_06),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True, help="what package this run graded")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs = json.loads(args.out.read_text())["runs"] if args.out.exists() else {}
    scores: dict[str, dict[str, float]] = {}
    possible: dict[str, float] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="helper-patches-") as folder:
        built = Path(folder)
        for lab, (answers, cell, patch) in NOTEBOOKS.items():
            build_labs(
                ROOT / "instructor/labs", built / "student", built / "grader", only=lab, seed=1
            )
            for kind in ("plain", "patched"):
                filled = dict(answers)
                if kind == "patched":
                    filled[cell] = (filled[cell] + "\n" if cell in filled else "") + patch
                (built / kind).mkdir(exist_ok=True)
                notebook = filled_lab(
                    built / "student" / f"{lab}.ipynb", filled, built / kind / f"{lab}.ipynb"
                )
                exercises, _, _ = grading.grade_notebook_file(notebook, built / "grader")
                scores[f"{lab} {kind}"] = {e.name: e.score for e in exercises}
                total = sum(scores[f"{lab} {kind}"].values())
                possible[lab] = sum(e.possible for e in exercises)
                print(f"{lab:18} {kind:8} {total:g} / {possible[lab]:g}", flush=True)
    changed = subprocess.run(
        ["git", "status", "--short", "grpo_minimal"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    runs[args.label] = {
        "package_differs_from_checkout": bool(changed),  # an older grpo_minimal/ checked out
        "possible": possible,
        "scores": scores,
        "seconds": round(time.perf_counter() - start, 1),
        "provenance": provenance(threads=None),  # date, machine, CPUs, commit (the checkout)
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
