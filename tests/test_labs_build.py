"""The labs as a whole: the committed student notebooks are what `make labs` writes; the grader
gives the solutions full marks and the unfilled stubs zero; `grpo-minimal lab check` passes a
notebook filled with the package's own functions and fails one with a single wrong function."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from grpo_minimal import cli
from grpo_minimal.labs.build import STUDENT_DIR, build_labs, lab_sources

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One fresh build of every lab into a temporary folder."""
    out = tmp_path_factory.mktemp("labs")
    names = build_labs(ROOT / "instructor/labs", out / "student", out / "grader")
    return out, names


def test_every_lab_is_built(built):
    _, names = built
    assert names == [s.stem for s in lab_sources(ROOT / "instructor/labs")]
    assert len(names) >= 1


def test_committed_student_notebooks_match_the_build(built):
    out, names = built
    stale = [
        name
        for name in names
        if (ROOT / STUDENT_DIR / f"{name}.ipynb").read_text()
        != (out / "student" / f"{name}.ipynb").read_text()
    ]
    assert not stale, f"stale student notebooks {stale}: run `make labs` and commit"
    committed = sorted(p.stem for p in (ROOT / STUDENT_DIR).glob("*.ipynb"))
    assert committed == names, "a student notebook without a source in instructor/labs"


def test_student_notebooks_hold_no_solutions_or_hidden_checks(built):
    out, names = built
    for name in names:
        text = (out / "student" / f"{name}.ipynb").read_text()
        assert "BEGIN SOLUTION" not in text and "# SOLUTION" not in text, name
        tests = json.loads(text)["metadata"]["otter"]["tests"]
        assert "hidden=True" not in "".join(tests.values()), name


def test_grader_full_marks_for_solutions_zero_for_stubs(built, tmp_path):
    out, names = built
    submissions = tmp_path / "submissions"
    submissions.mkdir()
    for name in names:
        shutil.copy(
            out / "grader" / "solutions" / f"{name}.ipynb", submissions / f"{name}-solution.ipynb"
        )
        shutil.copy(out / "student" / f"{name}.ipynb", submissions / f"{name}-stub.ipynb")
    grades = tmp_path / "grades.csv"
    code = cli.main(["lab", "grade", str(submissions), "--out", str(grades),
                     "--grader", str(out / "grader")])  # fmt: skip
    assert code == 0
    rows = {row["notebook"]: row for row in csv.DictReader(grades.open())}
    assert len(rows) == 2 * len(names)
    for name in names:
        solution, stub = rows[f"{name}-solution.ipynb"], rows[f"{name}-stub.ipynb"]
        assert float(solution["possible"]) > 0
        assert float(solution["total"]) == float(solution["possible"]), solution
        assert float(stub["total"]) == 0.0, stub


def _filled(student: Path, answers: dict[int, str], dest: Path) -> Path:
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
    "advantage_unbiased = group_advantages(seed_group, 4)[0].item()",
}


def test_lab_check_passes_package_functions_and_fails_one_wrong(tmp_path, capsys):
    student = ROOT / STUDENT_DIR / "01_advantages.ipynb"
    shutil.copy(student, tmp_path / "01_advantages.ipynb")  # otter.Notebook reads it by name
    good = _filled(student, PACKAGE_ANSWERS_01, tmp_path / "01_advantages.ipynb")
    assert cli.main(["lab", "check", str(good)]) == 0
    assert "FAIL" not in capsys.readouterr().out

    wrong = dict(PACKAGE_ANSWERS_01)
    wrong[1] = (  # RLOO with the sample itself in its baseline: the mean-centred advantage
        "from grpo_minimal.advantages import group_advantages as _g\n"
        "def rloo_advantages(rewards, num_generations):\n"
        "    return _g(rewards, num_generations, 'none')"
    )
    bad = _filled(student, wrong, tmp_path / "01_advantages.ipynb")
    assert cli.main(["lab", "check", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "PASS  group_advantages" in out and "FAIL  rloo_advantages" in out
    assert "case:" in out and "expected:" in out and "got:" in out


def test_lab_check_refuses_a_non_lab_notebook():
    with pytest.raises(SystemExit) as exited:
        cli.main(["lab", "check", str(ROOT / "notebooks/01_group_relative_advantage.ipynb")])
    assert exited.value.code == 2
