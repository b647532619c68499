"""Check one learner's notebook, or grade a folder of submissions, with otter-grader.

``check_notebook`` runs the public checks stored in the student notebook's own metadata (what
``grader.check`` runs inside the notebook). ``grade_folder`` runs every check, hidden ones
included, from the autograder zips ``make labs`` writes, through otter's non-containerised
runner (``otter.api.grade_submission``; ``otter grade`` itself needs Docker), and writes one CSV
row per notebook.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grpo_minimal.labs.build import GRADER_DIR


@dataclass
class ExerciseResult:
    name: str
    score: float
    possible: float
    first_failure: str | None  # otter's message for the first failing case, None when passed

    @property
    def passed(self) -> bool:
        return self.first_failure is None


def _exercises(results) -> list[ExerciseResult]:
    out = []
    for name, test_file in results.results.items():
        failures = [r.message for r in test_file.test_case_results if not r.passed]
        out.append(
            ExerciseResult(
                name,
                float(test_file.score),
                float(test_file.possible),
                failures[0] if failures else None,
            )
        )
    return out


def lab_name(notebook: Path) -> str:
    metadata = json.loads(Path(notebook).read_text()).get("metadata", {})
    name = metadata.get("otter", {}).get("assignment_name")
    if not name:
        raise ValueError(
            f"{notebook} is not a lab notebook (no otter.assignment_name in its metadata); "
            "submit a notebook from notebooks/labs/"
        )
    return name


def check_notebook(notebook: Path) -> list[ExerciseResult]:
    """Execute ``notebook`` top to bottom and run its public checks; one result per exercise."""
    from otter.execute import grade_notebook

    notebook = Path(notebook)
    if not notebook.is_file():
        raise FileNotFoundError(f"no notebook at {notebook}")
    lab_name(notebook)
    tests = json.loads(notebook.read_text())["metadata"]["otter"]["tests"]
    with tempfile.TemporaryDirectory(prefix="lab-check-") as tests_dir:
        paths = []
        for name, source in tests.items():
            path = Path(tests_dir) / f"{name}.py"
            path.write_text(source)
            paths.append(str(path))
        with _quiet():
            results = grade_notebook(
                str(notebook), tests_glob=paths, test_dir=tests_dir, cwd=str(notebook.parent)
            )
    return _exercises(results)


def grade_notebook_file(notebook: Path, grader_dir: Path = GRADER_DIR) -> list[ExerciseResult]:
    """Every check, hidden ones included, for one submitted notebook."""
    from otter.api import grade_submission

    name = lab_name(notebook)
    autograder = Path(grader_dir) / f"{name}-autograder.zip"
    if not autograder.is_file():
        raise FileNotFoundError(
            f"no grader for lab {name!r} at {autograder}: run `make labs` first"
        )
    with _quiet():
        results = grade_submission(str(notebook), str(autograder), quiet=True)
    return _exercises(results)


def grade_folder(folder: Path, out: Path, grader_dir: Path = GRADER_DIR) -> list[dict]:
    """Grade every ``*.ipynb`` in ``folder``; write ``out`` (CSV) and return its rows.

    Columns: notebook, lab, one per exercise (points scored), total, possible.
    """
    notebooks = sorted(Path(folder).glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no .ipynb files in {folder}")
    rows, exercise_names = [], []
    for notebook in notebooks:
        exercises = grade_notebook_file(notebook, grader_dir)
        row = {"notebook": notebook.name, "lab": lab_name(notebook)}
        for exercise in exercises:
            row[exercise.name] = exercise.score
            if exercise.name not in exercise_names:
                exercise_names.append(exercise.name)
        row["total"] = sum(e.score for e in exercises)
        row["possible"] = sum(e.possible for e in exercises)
        rows.append(row)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(
            handle, ["notebook", "lab", *exercise_names, "total", "possible"], restval=""
        )
        writer.writeheader()
        writer.writerows(rows)
    return rows


@contextlib.contextmanager
def _quiet():
    """otter prints its logo and kernel warnings; the CLI prints its own summary."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        yield
