"""What crosses from a class folder to the instructor's files and terminal (issue 39, item 5, in
part): a submission that is no regular file, or too large, is a row of its own and is never
opened; a file name or exception text cannot put escape sequences on a terminal or a formula in
a spreadsheet. Fast: nothing here starts a kernel or a sandbox."""

from __future__ import annotations

import csv
import json
import os
import threading

import pytest

from grpo_minimal.instructor import classroom
from grpo_minimal.instructor.feedback import csv_cell, feedback_text, printable
from grpo_minimal.instructor.feedback import row as make_row
from grpo_minimal.instructor.grading import ExerciseResult, Graded

ESC = "\x1b[2J\x1b]0;owned\x07"  # clear the screen, retitle the terminal, ring the bell


def test_printable_shows_control_characters_as_escapes_and_keeps_lines():
    assert printable(f"a{ESC}b") == "a\\x1b[2J\\x1b]0;owned\\x07b"
    assert printable("line one\n\tline two") == "line one\n\tline two"
    assert printable("\r\x00\x7f\x9b") == "\\x0d\\x00\\x7f\\x9b"  # \x9b: the 8-bit CSI


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", '=HYPERLINK("http://x")'])
def test_csv_cells_that_a_spreadsheet_would_compute_start_with_a_quote(text):
    assert csv_cell(text) == "'" + text
    assert csv_cell("a=1") == "a=1" and csv_cell(-1.0) == -1.0  # numbers stay numbers


def test_a_row_and_a_feedback_file_carry_no_raw_learner_control_text(tmp_path):
    failure = f"case: {ESC}\n  hint: =cmd|' /C calc'!A0"
    exercise = ExerciseResult("group_advantages", 0.0, 2.0, [failure], [True])
    graded = Graded(f"=evil{ESC}.ipynb", "01_advantages", [exercise], [], f"-boom\n{ESC}")
    cells = make_row(graded, {"group_advantages": 2.0}, lambda lab, name: name)
    for value in cells.values():
        assert not isinstance(value, str) or ("\x1b" not in value and "\n" not in value)
    assert cells["notebook"].startswith("'=") and cells["problem"].startswith("'-")
    for learner in (True, False):
        assert "\x1b" not in feedback_text(graded, learner)


def test_links_fifos_folders_and_huge_files_are_rows_of_their_own(tmp_path, monkeypatch):
    folder = tmp_path / "class"
    folder.mkdir()
    solution = tmp_path / "solution.ipynb"
    solution.write_text('{"metadata": {"otter": {"assignment_name": "01_advantages"}}}')
    (folder / "link.ipynb").symlink_to(solution)
    (folder / "zero.ipynb").symlink_to("/dev/zero")
    os.mkfifo(folder / "pipe.ipynb")
    (folder / "folder.ipynb").mkdir()
    with (folder / "huge.ipynb").open("wb") as handle:  # sparse: no disk used
        handle.truncate(classroom.MAX_SUBMISSION_BYTES + 1)
    opened = []
    monkeypatch.setattr(classroom, "lab_name", lambda path: opened.append(path))
    out = tmp_path / "grades.csv"
    done = []  # a FIFO opened for reading would block forever: grade in a thread, and wait
    thread = threading.Thread(
        target=lambda: done.append(
            classroom.grade_folder(folder, out, tmp_path / "graders", 60, 1, use_sandbox=False)
        ),
        daemon=True,
    )
    thread.start()
    thread.join(timeout=60)
    assert done, "grading did not end: a FIFO in the class folder was opened"
    (rows,) = done
    problems = {row["notebook"]: row["problem"] for row in rows}
    assert opened == []  # none of them was read to find out what lab it is
    assert problems["link.ipynb"].startswith("a symbolic link")
    assert problems["zero.ipynb"].startswith("a symbolic link")
    assert problems["pipe.ipynb"].startswith("not a regular file")
    assert problems["folder.ipynb"].startswith("not a regular file")
    assert "over the 16 MiB" in problems["huge.ipynb"]
    assert {row["total"] for row in rows} == {0}
    written = list(csv.DictReader(out.open()))
    assert sorted(r["notebook"] for r in written) == sorted(problems)


POINTS = {"group_advantages": 2.0, "rloo_advantages": 1.0}
HONEST = {
    "exercises": [
        {"name": "group_advantages", "score": 2.0, "possible": 2.0, "failures": [], "hidden": []},
        {
            "name": "rloo_advantages",
            "score": 0.0,
            "possible": 1.0,
            "failures": ["case: x"],
            "hidden": [True],
        },
    ],
    "reports": ["measured: 1"],
    "cell_errors": [{"cell": "x = 1", "error": "ValueError: no", "traceback": "..."}],
    "syntax_errors": ["cell 3, line 1: SyntaxError: invalid syntax: def f()"],
}


def _forged(**change) -> dict:
    import copy

    outcome = copy.deepcopy(HONEST)
    exercise = outcome["exercises"][0]
    for key, value in change.items():
        top = key in ("reports", "cell_errors", "exercises", "syntax_errors")
        (outcome if top else exercise)[key] = value
    return outcome


@pytest.mark.parametrize(
    ("forgery", "reason"),
    [
        (_forged(score=8e6), "outside 0 to 2"),
        (_forged(score="8"), "not numbers"),
        (_forged(score=float("nan")), "not numbers"),
        (_forged(score=True), "not numbers"),
        (_forged(score=-1.0), "outside 0 to 2"),
        (_forged(possible=8.0, score=8.0), "not what the lab gives"),
        (_forged(name="bonus"), "does not have"),
        (_forged(exercises=[HONEST["exercises"][0]] * 2), "does not have, or named twice"),
        (_forged(extra=1), "fields are not the grader's"),
        (_forged(failures="case: x"), "failures are not"),
        (_forged(hidden=[True, False, True]), "failures are not"),
        (_forged(reports="all good"), "reports are not"),
        (_forged(cell_errors=[{"cell": 1}]), "cell errors are not"),
        (_forged(syntax_errors="none"), "syntax errors are not"),
        (_forged(syntax_errors=["x" * 301]), "syntax errors are not"),
        (_forged(syntax_errors=["x"] * 51), "syntax errors are not"),
        ({"exercises": "all", "syntax_errors": []}, "no list"),
        ({"syntax_errors": []}, "no exercises and no error"),
    ],
)
def test_a_result_that_no_honest_grading_writes_is_refused(forgery, reason):
    assert classroom.invalid_result(HONEST, POINTS) is None
    assert reason in classroom.invalid_result(forgery, POINTS)


def test_the_result_channel_is_read_no_further_than_its_limit(tmp_path):
    import subprocess
    import sys

    flood = "import sys\nwhile True: sys.stdout.write('x' * 65536)"
    process = subprocess.Popen(
        [sys.executable, "-c", flood], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        out = classroom._bounded_exchange(
            process, os.dup(process.stdout.fileno()), b"{}", timeout_s=60
        )
    finally:
        process.kill()
        process.wait()
    assert len(out) == classroom.MAX_RESULT_BYTES + 1  # then the caller ends the process
    silent = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            classroom._bounded_exchange(silent, os.dup(silent.stdout.fileno()), b"{}", timeout_s=1)
    finally:
        silent.kill()
        silent.wait()


def test_only_a_result_signed_with_the_jobs_key_is_believed():
    from grpo_minimal.instructor.grading import signed, signed_outcome

    key, other = b"k" * 32, b"o" * 32
    honest, forged = dict(HONEST), _forged(score=2.0)
    line = signed(honest, key)
    assert signed_outcome(f"{line}\n".encode(), key) == honest
    # a full-marks line written to the channel, signed with no key or another: not believed
    for fake in (json.dumps(forged), signed(forged, other)):
        assert signed_outcome(f"{fake}\n".encode(), key) is None
        assert signed_outcome(f"{line}\n{fake}\n".encode(), key) == honest
    # an unfinished line before it (the grading process starts its own line) breaks nothing
    assert signed_outcome(f'{{"broken": \n{line}\n'.encode(), key) == honest
    # the signature covers the outcome: an edited one is refused
    edited = json.loads(line)
    edited["outcome"] = edited["outcome"].replace('"score": 0.0', '"score": 1.0')
    assert signed_outcome(f"{json.dumps(edited)}\n".encode(), key) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="job user ids are drawn only when grading as root")
def test_a_job_never_grades_as_a_user_id_that_is_taken(monkeypatch):
    """Job k grades as user id 61000 + k: never one that is an account's, or a live process's
    (one left by a grading that crashed)."""
    import pwd
    import subprocess
    import time

    from grpo_minimal.instructor import sandbox

    assert sandbox.uid_in_use(0)  # root's account
    account = sandbox.SANDBOX_UID_BASE + 990  # as if an account had that id
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: real(0) if uid == account else real(uid))
    running = sandbox.SANDBOX_UID_BASE + 991  # no account, but a process of it is alive
    sleeper = subprocess.Popen(
        ["setpriv", f"--reuid={running}", f"--regid={running}", "--clear-groups", "sleep", "60"]
    )
    try:
        for _ in range(200):  # until setpriv has become that user
            if sandbox.uid_in_use(running):
                break
            time.sleep(0.05)
        assert sandbox.uid_in_use(account) and sandbox.uid_in_use(running)
        assert not sandbox.uid_in_use(sandbox.SANDBOX_UID_BASE + 992)
        slot, lock = sandbox.claim_slot(set(range(990)))  # every lower job number busy
        lock.close()
        assert slot == 992
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("cgroup", [None, "not root", "switched off"])
def test_lab_grade_says_in_one_line_which_bound_holds(cgroup, tmp_path, capsys, monkeypatch):
    import argparse

    from grpo_minimal.instructor import cgroups, commands, sandbox

    if sandbox.missing_tools() or sandbox.probe():
        pytest.skip("needs a working bubblewrap sandbox (.ci/run installs it)")
    monkeypatch.setattr(cgroups, "available", lambda: None if cgroup == "switched off" else cgroup)
    (tmp_path / "a.ipynb").write_text("{}")
    args = argparse.Namespace(
        folder=str(tmp_path),
        grader=str(tmp_path),
        timeout=60,
        jobs=2,
        no_sandbox=False,
        job_memory="1.5G",
        job_processes=64,
        no_cgroup=cgroup == "switched off",
    )
    commands.prepare_lab_grade(args)
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "1.5 GiB of memory and 64 processes together" in err, err
    if cgroup is None:
        assert "cgroup (v1) of its own" in err and "watchdog" not in err, err
    else:
        assert f"no cgroup per job here ({cgroup})" in err and "the watchdog bounds" in err, err
        assert f"({os.cpu_count()} cores here" in err, err


@pytest.mark.parametrize(
    "value",
    [
        "--job-memory=12X",
        "--job-memory=100M",
        "--job-memory=9999T",
        "--job-processes=0",
        "--job-processes=x",
    ],
)
def test_a_bad_job_bound_is_one_line(value, tmp_path, capsys):
    from grpo_minimal import cli

    (tmp_path / "a.ipynb").write_text("{}")
    with pytest.raises(SystemExit) as exited:
        cli.main(["lab", "grade", str(tmp_path), "--grader", str(tmp_path), value])
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1 and value.split("=")[0] in err[0], err
    assert not (tmp_path / "grades.csv").exists()


def test_a_job_that_reaches_a_limit_says_which_in_its_row():
    errors = [
        {"cell": "fill()", "error": "OSError: [Errno 28] No space left on device", "traceback": ""},
        {"cell": "big()", "error": "MemoryError", "traceback": ""},
        {
            "cell": "again()",
            "error": "OSError: [Errno 28] No space left on device",
            "traceback": "",
        },
        {"cell": "x", "error": "ValueError: no", "traceback": ""},
    ]
    found = classroom.limits_reached(errors)
    assert [problem.split(":")[0] for problem in found] == ["disk limit", "memory limit"]
    assert "1 GiB each" in found[0]
    assert classroom.limits_reached(errors[3:]) == []


def test_a_notebooks_errors_are_bounded_in_its_result():
    """A right answer that also shows 36,000 errors: the result keeps the first
    ``MAX_CELL_ERRORS``, each cut, and counts the rest, so it stays far below the 1 MiB a result
    may be and the row is the same in every mode (whole, it passed 1 MiB as an ordinary user)."""
    import nbformat

    from grpo_minimal.instructor.grading import LIMIT_ERRORS, MAX_CELL_ERRORS, cell_errors

    error = nbformat.v4.new_output(
        "error", ename="ValueError", evalue="noise " * 200, traceback=["Traceback " + "x" * 9000]
    )
    cell = nbformat.v4.new_code_cell("for i in range(36000): show()", outputs=[error] * 36_000)
    errors = cell_errors(nbformat.v4.new_notebook(cells=[cell]))
    assert len(errors) == MAX_CELL_ERRORS + 1, len(errors)
    assert errors[-1]["error"] == f"and {36_000 - MAX_CELL_ERRORS} more errors, not kept"
    assert all(len(e["error"]) <= 200 and len(e["traceback"]) <= 4000 for e in errors)
    outcome = {"exercises": [], "reports": [], "cell_errors": errors, "syntax_errors": []}
    assert len(json.dumps(outcome)) < classroom.MAX_RESULT_BYTES // 8
    assert classroom.invalid_result(outcome, {}) is None
    text = feedback_text(Graded("a.ipynb", "01_advantages", [], [], None, "", errors), True, 8)
    assert f"  and {36_000 - MAX_CELL_ERRORS} more errors, not kept" in text.splitlines()
    # a limit met after the noise still names the row's problem (one of each kept past the cap)
    memory = nbformat.v4.new_output("error", ename="MemoryError", evalue="", traceback=[])
    late = nbformat.v4.new_code_cell("x = [0] * 10**12", outputs=[memory, memory])
    errors = cell_errors(nbformat.v4.new_notebook(cells=[cell, late]))
    assert len(errors) == MAX_CELL_ERRORS + 2 and errors[-2]["error"] == "MemoryError"
    assert errors[-1]["error"] == f"and {36_000 - MAX_CELL_ERRORS + 1} more errors, not kept"
    assert classroom.limits_reached(errors) == [classroom.LIMIT_SIGNS["MemoryError"]]
    assert classroom.invalid_result({**outcome, "cell_errors": errors}, {}) is None
    assert set(classroom.LIMIT_SIGNS) == set(LIMIT_ERRORS)
