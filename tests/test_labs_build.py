"""The labs as a whole: the committed student notebooks are what `make labs` writes; the grader
gives the solutions full marks and the unfilled stubs zero, with a feedback file for each; each
lab's seed, derived from one secret, reaches only its grader's material; a rebuild never
overwrites a learner's notebook; `grpo-minimal lab check` passes a notebook filled with the
package's own functions and shows a learner's wrong function, exception and syntax error as they
are. Bad and hostile submissions: tests/test_grading_trust.py."""

from __future__ import annotations

import csv
import importlib
import json
import pkgutil
import shutil
import zipfile
from pathlib import Path

import pytest
from lab_helpers import GRADER_SECRET, PACKAGE_ANSWERS_01, filled_lab

import grpo_minimal
from grpo_minimal import cli
from grpo_minimal.instructor import grading
from grpo_minimal.instructor.build import (
    STUDENT_DIR,
    build_labs,
    lab_seed,
    lab_sources,
    refuse_to_overwrite,
    unchanged_since_build,
)

ROOT = Path(__file__).resolve().parent.parent
SEED = GRADER_SECRET


@pytest.fixture(autouse=True)
def _say_the_secret():
    print(f"repeat with GRPO_GRADER_SECRET={SEED}")  # shown with a failing test's output


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One fresh build of every lab into a temporary folder, with a freshly drawn secret."""
    out = tmp_path_factory.mktemp("labs")
    names, seed = build_labs(ROOT / "instructor/labs", out / "student", out / "grader", seed=SEED)
    assert seed == SEED
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
    code = cli.main(
        [
            "lab",
            "grade",
            str(submissions),
            "--out",
            str(grades),
            "--grader",
            str(out / "grader"),
            "--jobs",
            "2",
        ]
    )
    assert code == 0
    rows = {row["notebook"]: row for row in csv.DictReader(grades.open())}
    assert len(rows) == 2 * len(names)
    feedback = tmp_path / "grades-feedback"
    for name in names:
        solution, stub = rows[f"{name}-solution.ipynb"], rows[f"{name}-stub.ipynb"]
        assert float(solution["possible"]) > 0
        assert float(solution["total"]) == float(solution["possible"]), solution
        assert float(stub["total"]) == 0.0, stub
        assert not solution["problem"] and not stub["problem"]
        exercises = [k for k, v in stub.items() if f"{k} first failure" in stub and v != ""]
        assert exercises and all(stub[f"{e} first failure"] for e in exercises), stub
        assert not any(solution[f"{e} first failure"] for e in exercises), solution
        stub_text = (feedback / f"{name}-stub.txt").read_text()
        assert "FAIL" in stub_text and "case:" in stub_text and "hint:" in stub_text
        assert "FAIL" not in (feedback / f"{name}-solution.txt").read_text()
    capstone = (feedback / "07_capstone-solution.txt").read_text()
    assert "measured:" in capstone and "untrained" in capstone and "target of +" in capstone


def _installed_files() -> list[Path]:
    return [p for p in Path(grpo_minimal.__file__).parent.rglob("*") if p.is_file()]


def test_the_grader_seed_reaches_only_the_autograder_zips(built):
    out, names = built
    for name in names:
        with zipfile.ZipFile(out / "grader" / f"{name}-autograder.zip") as autograder:
            tests = "".join(
                autograder.read(n).decode() for n in autograder.namelist() if n.startswith("tests/")
            )
        seed = lab_seed(SEED, name)
        assert "GRADER_SEED" not in tests, name
        assert f"seed={seed}" in tests, f"{name}: its hidden checks do not use its own seed"
        assert str(SEED) not in tests, f"{name}: the secret itself reached its zip"
        for secret in (SEED, seed):
            assert str(secret) not in (out / "student" / f"{name}.ipynb").read_text(), name
    for path in _installed_files():  # the package a learner installs never holds a seed
        assert str(SEED).encode() not in path.read_bytes(), path
        for name in names:
            assert str(lab_seed(SEED, name)).encode() not in path.read_bytes(), path


def test_nothing_a_learner_imports_holds_hidden_cases():
    """No module of the package holds a hidden case list; the graded cases and problems are drawn
    from the grader's seed, and what a learner can draw without it (seed 0, the public twins,
    or any module attribute) is not the graded set."""
    from grpo_minimal.labs import capstone

    for info in pkgutil.walk_packages(grpo_minimal.__path__, "grpo_minimal."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        hidden = [n for n in vars(module) if "HIDDEN" in n.upper() or n == "GRADER_SEED"]
        assert not hidden, f"{info.name} ships {hidden}"
    graded = {row["prompt"] for row in capstone.graded_problems(SEED)}
    assert len(graded) == sum(capstone.GRADED_COUNTS.values())
    assert graded != {row["prompt"] for row in capstone.graded_problems(0)}


def test_a_rebuild_never_overwrites_a_learners_notebook(built, tmp_path):
    out, names = built
    student = tmp_path / "student"
    shutil.copytree(out / "student", student)
    assert all(unchanged_since_build(student / f"{n}.ipynb") for n in names)
    assert all(unchanged_since_build(ROOT / STUDENT_DIR / f"{n}.ipynb") for n in names)
    sources = lab_sources(ROOT / "instructor/labs")
    refuse_to_overwrite(student, sources)  # fresh builds may be rebuilt
    filled = student / "01_advantages.ipynb"
    notebook = json.loads(filled.read_text())
    notebook["cells"][3]["source"] = "# my work"
    filled.write_text(json.dumps(notebook))
    with pytest.raises(FileExistsError, match="01_advantages.ipynb has changed since it was built"):
        build_labs(ROOT / "instructor/labs", student, tmp_path / "grader", only="01_advantages")
    assert json.loads(filled.read_text())["cells"][3]["source"] == "# my work"


def test_lab_check_passes_package_functions_and_shows_the_learners_errors(
    tmp_path, capfd, monkeypatch
):
    student = ROOT / STUDENT_DIR / "01_advantages.ipynb"
    good = filled_lab(student, PACKAGE_ANSWERS_01, tmp_path / "01_advantages.ipynb")
    assert cli.main(["lab", "check", str(good)]) == 0
    out, err = capfd.readouterr()
    assert "FAIL" not in out and "ERROR" not in out
    assert "WARNING" not in out + err, "the kernel's warning reached the learner"

    wrong = {
        0: "def group_advantages(rewards, num_generations, scale_rewards='group', eps=1e-4):\n"
        "    grouped = rewards.float().view(-1, num_generations)\n"
        "    return (grouped - grouped.mean(dim=1, keepdim=Tru)) / (grouped.std() + eps)",
        1: "from grpo_minimal.advantages import group_advantages as _g\n"  # RLOO with the sample
        "def rloo_advantages(rewards, num_generations):\n"  # in its own baseline, and a change
        "    torch.seen_by_grading = True\n"  # to a module that grading will not run
        "    return _g(rewards, num_generations, 'none')",
        2: "advantage_population = (1.0\n",  # unclosed parenthesis
    }
    bad = filled_lab(student, wrong, tmp_path / "01_advantages.ipynb")
    # as if lab 01 measured its functions apart (labs 03, 05, 06 do): the policy is said too
    monkeypatch.setattr(grading, "MEASURED_APART", frozenset({"01_advantages"}))
    assert cli.main(["lab", "check", str(bad)]) == 1
    out, err = capfd.readouterr()
    assert "FAIL  group_advantages" in out and "FAIL  rloo_advantages" in out
    assert "raised NameError: name 'Tru' is not defined" in out  # the learner's own exception...
    assert "line 3 of your code" in out and "keepdim=Tru" in out  # ...and the line that raised it
    assert "case:" in out and "expected:" in out and "got:" in out
    assert "ERROR cell" in out and "SyntaxError" in out  # the parse error, said as such
    assert (
        "not run by grading: `rloo_advantages` or what it uses changes the attribute "
        "`seen_by_grading` of something not its own (line 3)" in out
    )  # as grading will say
    assert "WARNING" not in out + err


def test_lab_check_refuses_a_non_lab_notebook():
    with pytest.raises(SystemExit) as exited:
        cli.main(["lab", "check", str(ROOT / "notebooks/01_group_relative_advantage.ipynb")])
    assert exited.value.code == 2
