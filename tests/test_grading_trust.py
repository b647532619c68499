"""Grading a class you can trust (lab 01, built here): malformed and hostile submissions graded in
one folder with correct ones, as the tests run (root in CI) and by a real ordinary user. Every
correct one gets its full points and every bad one a row with its reason, none above its honest
score; no submitted file is lost; no process, temporary folder or secret is left behind; a
learner's feedback holds no hidden input or expected value; Ctrl-C leaves the rows written so far
and no process.

The grader's secret is drawn here (as ``lab build`` draws it) unless GRPO_GRADER_SECRET gives it;
a failing test prints it, so the run can be repeated."""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import psutil
import pytest
from lab_helpers import GRADER_SECRET, PACKAGE_ANSWERS_01, TAMPERING, filled_lab
from ordinary_user import NOBODY, ORDINARY_GID, as_nobody, can_run_as_nobody

from grpo_minimal import cli
from grpo_minimal.instructor import cgroups, sandbox, watchdog
from grpo_minimal.instructor.build import GRADE_WITH, STUDENT_DIR, build_labs, lab_seed
from grpo_minimal.instructor.feedback import learner_message
from grpo_minimal.instructor.grading import checks_at_the_end, lab_exercises

ROOT = Path(__file__).resolve().parent.parent
SECRET = GRADER_SECRET
LAB = "01_advantages"
CANARY = "canary-" + secrets.token_hex(8)  # in the instructor's environment: no learner reads it
MARK = "grpo-trust-" + secrets.token_hex(6)  # in every process a hostile submission starts
TIMEOUT_S = 60  # the endless loop holds a job this long; right notebooks take ~10 s

needs_bwrap = pytest.mark.skipif(
    bool(sandbox.missing_tools()), reason="bubblewrap is not installed (.ci/run installs it)"
)


@pytest.fixture(autouse=True)
def _say_the_secret():
    print(f"repeat with GRPO_GRADER_SECRET={SECRET}")  # shown with a failing test's output


@pytest.fixture(scope="module")
def grader(tmp_path_factory):
    out = tmp_path_factory.mktemp("trust-labs")
    build_labs(ROOT / "instructor/labs", out / "student", out / "grader", only=LAB, seed=SECRET)
    return out / "grader"


def _sleeper_argv() -> str:
    return f"['python3', '-c', 'import time; time.sleep(600)', '{MARK}']"


def _sleeper(how: str) -> str:
    """Python that leaves a process sleeping, started ``how``; its command line holds MARK."""
    sleep = _sleeper_argv()
    return {
        "session": f"import subprocess\nsubprocess.Popen({sleep}, start_new_session=True)\n",
        "double fork": (
            "import os, subprocess\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            f"    subprocess.Popen({sleep})\n"
            "    os._exit(0)\n"
        ),
    }[how]


FLOODS = (  # after cell 0's answer: a 12 MiB cell, floods of output and of an error, the channel
    "\npad = '" + "p" * (12 << 20) + "'\n"
    "import sys\nsys.stdout.write('x' * 5 * 10**7)\nsys.stderr.write('y' * 5 * 10**7)\n"
    "try:\n    with open('/proc/1/fd/1', 'w') as channel:  # init's copy of the result pipe\n"
    "        for _ in range(1024):\n            channel.write('z' * (1 << 20))\n"
    "except OSError:\n    pass\n"
    "raise ValueError('e' * 5 * 10**7)"
)


def _class_folder(folder: Path, grader: Path, scratch: Path) -> dict[str, bytes]:
    """The class: a right notebook and the reference solution around the hostile and malformed
    ones; returns each file's bytes as submitted."""
    student = ROOT / STUDENT_DIR / f"{LAB}.ipynb"
    right = dict(PACKAGE_ANSWERS_01)

    def hostile(name: str, *codes: str) -> None:  # each harm tried, then the right answers
        answers = dict(right)
        tried = [
            "try:\n"
            + "".join(f"    {line}\n" for line in code.splitlines())
            + "except Exception:\n    pass\n"
            for code in codes
        ]
        answers[0] = "".join(tried) + right[0]
        filled_lab(student, answers, folder / name)

    filled_lab(student, right, folder / "a-right.ipynb")
    # one notebook for the harms to files (a kernel each would cost CI a minute)
    hostile(
        "h-files.ipynb",
        # the class folder, found from its absolute path
        f"import os\nfor n in os.listdir({str(folder)!r}):\n"
        f"    os.remove(os.path.join({str(folder)!r}, n))",
        # folders no one may enter, then a file in the class folder
        "import os\nfor where in ('locked', '/tmp/locked', '/dev/shm/locked'):\n"
        "    os.makedirs(where + '/inner')\n    os.chmod(where, 0)\n"
        f"open({str(folder / 'planted.ipynb')!r}, 'w').write('x')",
        # every autograder zip turned into one that passes anything
        f"import glob\nfor z in glob.glob({str(grader)!r} + '/*.zip'):\n"
        "    open(z, 'wb').write(b'PK')",
        # classmates' copies, where grading keeps them and wherever temp files go
        f"import glob, tempfile\nfor where in ({str(scratch)!r}, tempfile.gettempdir()):\n"
        "    for p in glob.glob(where + '/lab-*/**', recursive=True):\n"
        "        open(p, 'w').write('{}') if p.endswith('.ipynb') else None",
        # 1,000 errors shown beside the right answer (3 MB of tracebacks, past the 1 MiB a
        # result may be; a result keeps 20): its row is any right one's, in every mode
        "from IPython import get_ipython\nfor i in range(1000):\n    try:\n"
        "        raise ValueError('noise ' * 200)\n    except ValueError:\n"
        "        get_ipython().showtraceback()",
    )
    hostile("h-sleepers.ipynb", _sleeper("session"), _sleeper("double fork"))
    # each process under the 8 GiB one may hold, together past the job's memory
    hostile(
        "h-processes-memory.ipynb",
        "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n"
        "        held = b'x' * (800 << 20)\n        time.sleep(600)\n        os._exit(0)\n"
        "time.sleep(30)",
    )
    # each memory file system under its size, with the kernel's own memory past the job's
    hostile(
        "h-files-memory.ipynb",
        "import time\nfor where in ('/dev/shm/fill', '/tmp/fill'):\n"
        "    with open(where, 'wb') as fill:\n        for _ in range(800):\n"
        "            fill.write(b'f' * (1 << 20))\nheld = b'x' * (600 << 20)\ntime.sleep(30)",
    )
    # 400 busy processes: the classmate beside it must not be starved past its time limit
    hostile(
        "h-cpu.ipynb",
        "import os, time\nfor _ in range(400):\n    if os.fork() == 0:\n"
        "        while True:\n            pass\ntime.sleep(60)",
    )
    # starts processes until the process limit refuses, each a small sleeping program (a storm
    # of os.fork() copies of the kernel instead is a CPU hog for as long as their pages take to
    # copy: ended at the CPU bound or not, by how loaded the machine is; h-cpu is that attack)
    hostile(
        "h-fork-bomb.ipynb",
        "import subprocess\nwhile True:\n    subprocess.Popen(['sleep', '600'])",
    )
    filled_lab(
        student,
        {
            **right,
            0: (  # raises with the environment and the hidden tests
                "import glob, os\ndef group_advantages(rewards, num_generations, scale_rewards='group', "
                "eps=1e-4):\n    text = ' '.join(open(p).read() for p in glob.glob('tests/*.py'))\n"
                "    raise ValueError(str(dict(os.environ)) + text)"
            ),
        },
        folder / "h-leaks.ipynb",
    )
    wrong = dict(right)  # the population std: a wrong solution, graded after the zip rewrite
    wrong[0] = (
        "from grpo_minimal.advantages import population_std_advantages\n"
        "def group_advantages(rewards, num_generations, scale_rewards='group', eps=1e-4):\n"
        "    return population_std_advantages(rewards, num_generations)"
    )
    filled_lab(student, wrong, folder / "w-wrong.ipynb")
    filled_lab(student, {**wrong, 0: wrong[0] + "\n" + TAMPERING}, folder / "h-tampers.ipynb")
    filled_lab(student, {**right, 0: right[0] + FLOODS}, folder / "h-floods.ipynb")
    points = lab_exercises(grader / f"{LAB}-autograder.zip")
    filled_lab(student, {0: _forger(points)}, folder / "f-forges.ipynb")
    # an endless loop that sleeps: the time limit stops it all the same, and it leaves the CPU
    # to the other job (a busy one burnt TIMEOUT_S of CI's 2 cores for nothing)
    filled_lab(
        student, {0: "import time\nwhile True:\n    time.sleep(0.1)"}, folder / "b-loops.ipynb"
    )
    filled_lab(
        student,
        {0: "def group_advantages(rewards, num_generations)\n    return rewards"},
        folder / "c-syntax.ipynb",
    )
    shutil.copy(ROOT / "notebooks/01_group_relative_advantage.ipynb", folder / "d-not-a-lab.ipynb")
    base = json.loads(student.read_text())
    malformed = {
        "m-otter-not-a-dict": {**base, "metadata": {"otter": "x"}},
        "m-cells-null": {**base, "cells": None},
        "m-cells-strings": {**base, "cells": ["x=1"]},
        "m-source-number": {**base, "cells": [{"cell_type": "code", "source": 5, "metadata": {}}]},
        "m-escapes": {
            **base,
            "metadata": {
                **base["metadata"],
                "otter": {**base["metadata"]["otter"], "assignment_name": "../../x/y"},
            },
        },
    }
    for name, notebook in malformed.items():
        (folder / f"{name}.ipynb").write_text(json.dumps(notebook))
    (folder / "m-deep.ipynb").write_text("[" * 100_000)
    shutil.copy(grader / "solutions" / f"{LAB}.ipynb", folder / "z-solution.ipynb")
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _nobodys_processes() -> set[int]:
    return {p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == NOBODY}


def _left_behind(uids: set[int] = frozenset(), before: set[int] = frozenset()) -> list[str]:
    """The command lines of processes a submission left: MARK in the command line, a process of
    one of ``uids`` (the job user ids the grading used, as root) whose job number no other
    grading holds now (another test's grading, beside this one, may have taken it since), or
    one of nobody's not in ``before`` (on a machine whose own services run as nobody, one that
    starts during grading is counted too). A sandbox's processes die with its init, so some may
    still be ending: waits up to 10 s for them."""
    deadline = time.monotonic() + 10
    while True:
        with contextlib.ExitStack() as held:
            ours = set()
            for uid in uids:  # hold each free job number while looking: no one starts on it
                lock = held.enter_context(
                    open(sandbox.SLOT_LOCKS / f"slot-{uid - sandbox.SANDBOX_UID_BASE}.lock", "a")
                )
                with contextlib.suppress(OSError):
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    ours.add(uid)
            found = []
            for process in psutil.process_iter(["cmdline", "uids"]):
                command, uid = " ".join(process.info["cmdline"] or []), process.info["uids"].real
                nobodys = uid == NOBODY and process.pid not in before
                if MARK in command or uid in ours or nobodys:
                    found.append(f"{process.pid} (uid {uid}): {command[:200]}")
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


GRADE = """
import json, os, sys
import grpo_minimal.cli, grpo_minimal.instructor.classroom
from grpo_minimal.instructor import sandbox, watchdog

def high_water_kib():
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    return int(status.split()[0])

with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")  # the peak so far (the imports' passing allocations) set to what is held
imported = high_water_kib()
try:
    code = grpo_minimal.cli.main(sys.argv[1:])
finally:  # the grading process's own peak, and the user ids its jobs graded as
    print(json.dumps({"imported_kib": imported, "peak_kib": high_water_kib(),
                      "pid": os.getpid(), "uids": sorted(sandbox.CLAIMED_UIDS),
                      "watched": watchdog.WATCHED, "cpu_s": sum(os.times()[:2])}), file=sys.stderr)
sys.exit(code)
"""
JOB_MEMORY = "2G"
"""The class's bound on each job's memory (a kernel holds some 300 MB): the memory attacks pass it
in a second or two. Graded with ``--no-cgroup``: as root too, the watchdog bounds each job."""
GRADER_MEMORY_MIB = 256
"""What grading the class may add to `lab grade`'s peak memory after its imports. Per job at most
a 16 MiB submission, held about four times while its checks move to the end (bytes, parsed,
dumped, encoded: 64 MiB), a result read up to 1 MiB and parsed (a JSON line of 1 MiB of empty
objects takes some 20 MiB) and 1 MiB of log: about 170 MiB for two jobs at once. A flood read
whole would pass it: the channel flood writes 1 GiB (to bwrap's init's stdout, which goes nowhere:
the result has a channel of its own)."""


def _grade(
    folder: Path, grader: Path, grades: Path, scratch: Path, nobody: bool
) -> tuple[list[str], dict]:
    """``lab grade`` run as a process of its own, by this user or by a real ordinary user
    (nobody); what it said on stderr, and its report (peak memory, pid, job user ids)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch.parent),
        "TMPDIR": str(scratch),
        "GRPO_CANARY": CANARY,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    argv = [sys.executable, "-c", GRADE, "lab", "grade", str(folder), "--out", str(grades)]
    argv += ["--grader", str(grader), "--timeout", str(TIMEOUT_S), "--jobs", "2"]
    argv += ["--job-memory", JOB_MEMORY, "--no-cgroup"]  # the watchdog as root too
    if nobody:
        done = as_nobody(argv, env, [])
    else:
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    *said, report = done.stderr.strip().splitlines()
    return said, json.loads(report)


@needs_bwrap
@pytest.mark.parametrize("mode", ["tester", "nobody"])
def test_a_hostile_class_is_graded_fairly_and_leaves_nothing(mode, grader, tmp_path):
    """The class graded as the test runs (root in CI: each job its own user id and cgroup), and
    by a real ordinary user (nobody, from root) who owns the class folder, the graders and the
    output folder, as an instructor owns theirs: each job a user namespace of that user, where
    bwrap's init runs as the learner's kernel does (the forger's route)."""
    if mode == "nobody" and (why := can_run_as_nobody()):
        pytest.skip(why)
    home = tmp_path
    if mode == "nobody":  # a folder in /tmp: pytest's lie in one that is root's alone
        home = Path(tempfile.mkdtemp(prefix="trust-nobody-", dir="/tmp"))
        home.chmod(0o755)
        grader = shutil.copytree(grader, home / "grader")
    try:
        folder, scratch, out = home / "class", home / "tmp", home / "out"
        for made in (folder, scratch, out):
            made.mkdir()
        submitted = _class_folder(folder, grader, scratch)  # its attacks name these folders
        zips = {p.name: p.read_bytes() for p in grader.glob("*.zip")}
        grades = out / "grades.csv"
        if mode == "nobody":
            for path in (home, *home.rglob("*")):
                os.chown(path, NOBODY, NOBODY)
        before = _nobodys_processes()
        began = time.monotonic()
        said, report = _grade(folder, grader, grades, scratch, mode == "nobody")
        seconds = time.monotonic() - began
        watched = report.pop("watched")
        spent = sum(w["cpu_s"] for w in watched)
        print(
            f"the watchdog: {spent:.1f} s of CPU in {seconds:.0f} s of grading, "
            f"{100 * spent / seconds:.2f}% of a core; lab grade's own CPU {report['cpu_s']:.1f}"
            f" s; per job: {watched}"
        )
        # nothing else said but the bound that holds: the watchdog, in both modes
        assert len(said) == 1 and said[0].startswith("lab grade: no cgroup per job"), said
        assert "the watchdog bounds each job to 2 GiB of memory" in said[0], said
        _assert_graded_fairly(grades, folder, grader, scratch, submitted, zips, mode)
        # the grading process's memory stays bounded, whatever the class sent it
        grown = (report["peak_kib"] - report["imported_kib"]) / 1024
        print(f"the grading process grew by {grown:.0f} MiB: {report}")  # -rP shows it
        assert spent < 0.1 * seconds, watched  # at most a tenth of a core per job
        assert grown < GRADER_MEMORY_MIB, report
        # nothing outlives grading: no process, no cgroup
        assert not _left_behind(set(report["uids"]), before)
        assert not cgroups.left_behind(report["pid"])  # this grading's (another may run now)
    finally:
        if mode == "nobody":
            shutil.rmtree(home)


HONEST = {  # what each notebook of the class earns by its answers alone (of 8)
    "a-right": 8,
    "z-solution": 8,
    "h-files": 8,
    "h-sleepers": 8,
    "h-fork-bomb": 8,
    "h-floods": 8,
    "h-leaks": 2,
    "f-forges": 0,
    "b-loops": 0,
    "c-syntax": 0,
    "d-not-a-lab": 0,
    "m-otter-not-a-dict": 0,
    "m-cells-null": 0,
    "m-cells-strings": 0,
    "m-source-number": 0,
    "m-escapes": 0,
    "m-deep": 0,
    "h-processes-memory": 8,
    "h-files-memory": 8,
    "h-cpu": 8,
    "w-wrong": None,
    "h-tampers": None,  # what the wrong answer earns on the drawn hidden cases
}


def _assert_graded_fairly(
    grades: Path,
    folder: Path,
    grader: Path,
    scratch: Path,
    submitted: dict[str, bytes],
    zips: dict[str, bytes],
    mode: str,
) -> None:
    out = grades.parent
    rows = {row["notebook"]: row for row in csv.DictReader(grades.open())}
    assert sorted(rows) == sorted(submitted) == sorted(f"{n}.ipynb" for n in HONEST)  # one each
    assert all(float(row["possible"]) == 8 for row in rows.values() if row["lab"] == LAB)
    for name, row in rows.items():  # no row above its honest score
        honest = HONEST[name.removesuffix(".ipynb")]
        assert honest is None or float(row["total"] or 0) <= honest, row
    for name in ("a-right.ipynb", "z-solution.ipynb"):
        assert float(rows[name]["total"]) == 8 and not rows[name]["problem"], rows[name]
    for name in ("h-files.ipynb", "h-sleepers.ipynb"):
        assert float(rows[name]["total"]) == 8, rows[name]  # harmless: right answers score
    # ended whole at the job's bound, in either mode, with the bound said
    for name, bound in (
        ("h-processes-memory", "memory limit: the job's processes and files"),
        ("h-files-memory", "memory limit: the job's processes and files"),
        ("h-cpu", "CPU limit: the job kept more than"),
    ):
        row = rows[f"{name}.ipynb"]
        assert row["problem"].startswith(bound) and float(row["total"] or 0) == 0, row
    assert float(rows["w-wrong.ipynb"]["total"]) < 8  # the zips were not rewritten
    # its output stays in the sandbox, and its 1 GiB written to bwrap's init's stdout (which it
    # can open as an ordinary user) goes nowhere: the result channel is the grading process's
    # own pipe, which init closed. The same row in both modes
    floods = rows["h-floods.ipynb"]
    assert float(floods["total"]) == 8, floods
    # replacing the checks in its kernel changes no score (they run outside it)
    assert rows["h-tampers.ipynb"]["total"] == rows["w-wrong.ipynb"]["total"]
    # a full-marks line written where the grading process writes its result: what a stub
    # scores (zeros are wrong everywhere), with its own failures
    forged = rows["f-forges.ipynb"]
    assert float(forged["total"]) == 0 and forged["group_advantages first failure"], forged
    assert f"time limit of {TIMEOUT_S} s" in rows["b-loops.ipynb"]["problem"]
    # held at the process limit, then graded; or, where it started its 510 programs while the
    # 400 busy processes of h-cpu ran beside it, ended at the CPU bound: each new program waits
    # its turn behind them, and waiting is wanting a core (seen once in 5 runs, as root)
    bomb = rows["h-fork-bomb.ipynb"]
    held = float(bomb["total"]) == 8 and not bomb["problem"]
    assert held or bomb["problem"].startswith("CPU limit"), bomb["problem"]
    assert "cell" in rows["c-syntax.ipynb"]["problem"]
    assert "SyntaxError" in rows["c-syntax.ipynb"]["problem"]
    assert "not a lab notebook" in rows["d-not-a-lab.ipynb"]["problem"]
    feedback = out / "grades-feedback"
    assert "time limit" in (feedback / "b-loops.txt").read_text()
    assert "not a lab notebook" in (feedback / "d-not-a-lab.txt").read_text()
    assert float(rows["h-leaks.ipynb"]["total"]) < 8
    for name in ("m-otter-not-a-dict", "m-deep", "m-escapes"):
        assert "not a lab" in rows[f"{name}.ipynb"]["problem"], rows[f"{name}.ipynb"]
    for name in ("m-cells-null", "m-cells-strings", "m-source-number"):
        row = rows.get(f"{name}.ipynb")
        assert row["problem"], row  # graded or not, the reason is said
    # nothing submitted was lost or changed, nothing planted, no zip rewritten, no copy left
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == submitted
    assert {p.name: p.read_bytes() for p in grader.glob("*.zip")} == zips
    assert list(scratch.iterdir()) == []
    # the learners' feedback holds no hidden value, no secret, no instructor's environment
    seed = str(lab_seed(SECRET, LAB))
    everything = [
        grades.read_text(),
        *(p.read_text() for p in out.rglob("*.txt") if "grades-feedback" in str(p)),
    ]
    for text in everything:
        assert CANARY not in text and seed not in text and str(SECRET) not in text
    leaks = (feedback / "h-leaks.txt").read_text()
    assert "raised ValueError" in leaks and len(max(leaks.splitlines(), key=len)) <= 300
    wrong = (feedback / "w-wrong.txt").read_text()
    instructor = (out / "grades-instructor" / "w-wrong.txt").read_text()
    inputs = [line.strip() for line in instructor.splitlines() if line.strip().startswith("input:")]
    shown = [line for line in inputs if line in wrong]
    assert "hidden case" in wrong and len(shown) < len(inputs)  # the instructor sees them all


def _forger(points: dict[str, float]) -> str:
    """A lab 01 cell with a stub function that writes a full-marks result line, signed with a
    made-up key, to bwrap's init's stdout (pid 1; the grading process's result pipe once), then
    an unfinished line that would break the grading process's own. Graded as an ordinary user
    the sandbox is a user namespace whose init runs as the kernel does, so the kernel can open
    it; as root, the job's user id cannot. The result has a channel of its own now, which init
    closed: the line goes nowhere, and a forged one would fail its signature anyway."""
    forged = json.dumps(
        {
            "exercises": [
                {"name": n, "score": p, "possible": p, "failures": [], "hidden": []}
                for n, p in points.items()
            ],
            "reports": [],
            "cell_errors": [],
            "syntax_errors": [],
        }
    )  # every field the grader checks
    record = json.dumps({"outcome": forged, "hmac": "0" * 64})  # only the key is missing
    return (
        "def group_advantages(rewards, num_generations, scale_rewards='group', eps=1e-4):\n"
        "    return rewards * 0\n"
        "try:\n"
        "    with open('/proc/1/fd/1', 'w') as channel:\n"
        f"        channel.write({record!r} + '\\n' + '{{\"broken\": ')\n"
        "except OSError:\n"
        "    pass"
    )


def test_hidden_cases_show_name_hint_and_exception_line_only():
    message = (
        "\n  case:     binary rewards\n  input:    tensor([1.0, 0.0]), 2\n"
        "  expected: tensor([0.7, -0.7])\n  got:      raised ZeroDivisionError: division by zero "
        + "x" * 300
        + "\n            (line 3 of your code: return a / 0)\n  hint:     equation (2)"
    )
    shown = learner_message(message, hidden=True)
    assert "binary rewards" in shown and "equation (#)" in shown and "line 3 of your code" in shown
    assert "tensor(" not in shown and "expected:" not in shown and "input:" not in shown
    assert "raised ZeroDivisionError: division by zero" in shown
    assert all(len(line) <= 300 for line in shown.splitlines())
    public = learner_message(message, hidden=False)  # its values shown, the exception cut
    assert "input:    tensor([1.0, 0.0]), 2" in public and "tensor([0.7, -0.7])" in public
    assert "x" * 200 not in public and "line 3 of your code" in public
    otter_style = (
        "Traceback (most recent call last):\n  File \"x\"\n    f()\nKeyError: 'seed=1234'\nmore"
    )
    shown = learner_message(otter_style, hidden=True)  # its numbers hidden: they may be inputs
    assert shown.strip().startswith("raised KeyError: 'seed=#'") and "more" not in shown
    assert (
        learner_message(otter_style, hidden=False)
        .strip()
        .startswith("raised KeyError: 'seed=1234'")
    )


def _hidden_case_builders():
    """Every lab's ``*_twins(seed)``: the functions that draw a lab's hidden cases."""
    import inspect

    from grpo_minimal.labs import advantages, bugs, llm_step, objective, returns, reward

    for module in (advantages, bugs, llm_step, objective, returns, reward):
        for name, builder in inspect.getmembers(module, inspect.isfunction):
            if builder.__module__ == module.__name__ and name.endswith("_twins"):
                yield f"{module.__name__.rsplit('.', 1)[1]}.{name}", builder


def test_a_hidden_cases_name_and_hint_as_a_learner_sees_them_hold_no_drawn_value():
    """Instructors' secrets draw different hidden cases; what a learner is shown of their names
    and hints (every number as #) is the same for all of them, so it tells nothing of the draw.
    As drawn from the seeds 11 and 987,654,321, 66 names and 4 hints of the 178 cases differ
    (``groups of 6`` / ``groups of 8``)."""
    from grpo_minimal.instructor.feedback import numbers_hashed

    raw_differences = 0
    for where, builder in _hidden_case_builders():
        draws = [builder(seed) for seed in (11, 987_654_321, 2**40 + 3)]
        assert len({len(cases) for cases in draws}) == 1, where
        for first, *others in zip(*draws, strict=True):
            for field in ("name", "hint"):
                shown = numbers_hashed(getattr(first, field))
                for other in others:
                    raw_differences += getattr(first, field) != getattr(other, field)
                    assert numbers_hashed(getattr(other, field)) == shown, (where, field, shown)
    assert raw_differences > 100  # what the learner would see without the numbers hidden


def test_a_learners_exception_cannot_carry_a_hidden_input_into_its_feedback():
    """A learner's code may raise with the hidden input in its text, on the first line or on a
    line dressed as the hint: of a hidden case the feedback keeps the checker's hint and the
    exception's type and words, not the numbers."""
    from grpo_minimal.labs.checking import failure

    drawn = "tensor([3.25, 7.5, 0.125])"
    for text in (
        f"raised ValueError: {drawn}",
        f"raised ValueError: x\n  hint: {drawn}",
        f"raised ValueError: x\n            (line 3 of your code: {drawn})",
    ):
        message = str(failure("a hidden case", drawn, 1.0, text, "the checker's own hint"))
        shown = learner_message(message, hidden=True)
        assert "3.25" not in shown and "7.5" not in shown and "0.125" not in shown, shown
        assert "the checker's own hint" in shown and "raised ValueError" in shown
        assert learner_message(message, hidden=False).count("hint:") == 1


def test_checks_run_after_the_whole_notebook():
    """otter keeps a check's first result: a `grader.check` cell above the cell that makes what
    it grades (the capstone's, above its training) would grade nothing. Grading tags those cells
    `otter_ignore`, so every check runs at the end; other cells are left as they are."""
    cells = [
        {"cell_type": "code", "metadata": {}, "source": 'grader.check("capstone")'},
        {"cell_type": "code", "metadata": {"tags": ["x"]}, "source": ["grader.check('q1')\n"]},
        {"cell_type": "code", "metadata": {}, "source": "model = train()\ngrader.check('q')"},
        {"cell_type": "markdown", "metadata": {}, "source": 'grader.check("capstone")'},
    ]
    out = json.loads(checks_at_the_end(json.dumps({"cells": cells}).encode()))
    tags = [cell["metadata"].get("tags", []) for cell in out["cells"]]
    assert tags == [["otter_ignore"], ["x", "otter_ignore"], [], []]
    assert checks_at_the_end(b"[" * 10) == b"[" * 10  # unreadable: as it is


def test_each_lab_has_its_own_seed_from_one_secret():
    seeds = {lab_seed(SECRET, lab) for lab in ("01_advantages", "02_returns", "07_capstone")}
    assert len(seeds) == 3 and all(0 <= s < 2**63 for s in seeds)
    # drawn as wide as they may be: three 63-bit seeds all below 2**48 would happen 1 in 2**45
    assert max(seeds) >= 2**48
    assert lab_seed(SECRET, LAB) == lab_seed(SECRET, LAB) != lab_seed(SECRET + 1, LAB)


def test_the_zips_carry_each_labs_own_seed(grader):
    with zipfile.ZipFile(grader / f"{LAB}-autograder.zip") as autograder:
        tests = "".join(
            autograder.read(n).decode() for n in autograder.namelist() if n.startswith("tests/")
        )
    assert f"seed={lab_seed(SECRET, LAB)}" in tests and str(SECRET) not in tests


def test_a_zip_graded_without_the_package_says_how_to_grade(grader, monkeypatch):
    """Uploaded to a grader that lacks grpo_minimal (Gradescope, `otter grade`), every check of
    the zip fails with one line naming `grpo-minimal lab grade`, never a silent 0."""
    from otter.test_files import ExceptionTestFile

    with zipfile.ZipFile(grader / f"{LAB}-autograder.zip") as autograder:
        source = autograder.read("tests/group_advantages.py").decode()
    monkeypatch.setitem(sys.modules, "grpo_minimal", None)  # `import grpo_minimal` fails
    test_file = ExceptionTestFile.from_string(source, "group_advantages.py")
    test_file.run({"group_advantages": None})
    messages = [result.message for result in test_file.test_case_results]
    assert len(messages) == 2 and all(GRADE_WITH in m for m in messages), messages
    assert test_file.score == 0


@needs_bwrap
def test_ctrl_c_stops_every_job_and_keeps_the_rows_written(grader, tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    student = ROOT / STUDENT_DIR / f"{LAB}.ipynb"
    filled_lab(student, PACKAGE_ANSWERS_01, folder / "a-right.ipynb")
    for name in ("b-loops", "c-loops"):
        answers = dict(PACKAGE_ANSWERS_01)
        answers[0] = (
            f"import subprocess\nsubprocess.Popen({_sleeper_argv()})\nwhile True:\n    pass"
        )
        filled_lab(student, answers, folder / f"{name}.ipynb")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    grades = tmp_path / "grades.csv"
    before = _nobodys_processes()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            # Ctrl-C reaches a terminal's foreground process with SIGINT's default handling; a
            # shell runs a background job (CI started with '&') with SIGINT ignored, and Python
            # then installs no handler: lab grade never heard the signal and the test hung
            "import signal, sys\n"
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from grpo_minimal.cli import main\n"
            "sys.exit(main())",
            "lab",
            "grade",
            str(folder),
            "--out",
            str(grades),
            "--grader",
            str(grader),
            "--timeout",
            "600",
            "--jobs",
            "2",
        ],
        env={**os.environ, "TMPDIR": str(scratch), "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if grades.exists() and len(grades.read_text().splitlines()) >= 2:
            break
        time.sleep(0.5)
    time.sleep(5)  # both loops running
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    try:  # it exits within a second or two; say where it hung if not
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        tree = subprocess.run(
            ["ps", "-eo", "pid,pgid,user,stat,etime,args", "--forest"],
            capture_output=True,
            text=True,
        ).stdout
        os.kill(process.pid, signal.SIGABRT)  # PYTHONFAULTHANDLER: every thread's stack
        out, err = process.communicate(timeout=60)
        pytest.fail(f"lab grade did not exit after Ctrl-C:\n{tree[-8000:]}\n{err[-12000:]}")
    assert process.returncode == 130, (out, err)
    said = [line for line in err.strip().splitlines() if not line.startswith("lab grade: ")]
    assert len(said) == 1 and "interrupted" in said[0], err  # beside the limits' one line
    rows = list(csv.DictReader(grades.open()))
    assert [r["notebook"] for r in rows] == ["a-right.ipynb"] and float(rows[0]["total"]) == 8
    time.sleep(1)
    assert not _left_behind(before=before)
    assert list(scratch.iterdir()) == []


@needs_bwrap
def test_what_is_bound_back_is_readable_inside_private_folders(tmp_path):
    """The instructor's folders may be 0700 (a checkout made by `mktemp -d` as the working
    folder, /root/.pyenv): the folders the sandbox makes on the way to what it binds back must
    be readable by the graded user. (A checkout under /tmp once failed exactly so.)"""
    private = tmp_path / "private"
    package = private / "checkout" / "package"
    package.mkdir(parents=True)
    (package / "hello.txt").write_text("hello")
    private.chmod(0o700)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    slot, lock = sandbox.claim_slot()
    if (uid := sandbox.job_uid(slot)) is not None:
        os.chown(scratch, uid, uid)
    argv = sandbox.command(
        ["cat", str(package / "hello.txt")],
        scratch,
        [private / "checkout"],
        [package],
        {"PATH": "/usr/bin:/bin"},
        slot,
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if lock is not None:
        lock.close()
    assert done.returncode == 0 and done.stdout == "hello", done.stderr


PROBE = """
import json, os, socket, sys
seen = {"root": sorted(os.listdir("/")), "groups": os.getgroups()}
for path in sys.argv[2:]:
    try:
        seen[path] = open(path).read()
    except OSError as error:
        seen[path] = type(error).__name__
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    seen["network"] = "connected"
except OSError as error:
    seen["network"] = type(error).__name__
seen["interfaces"] = sorted(line.split(":")[0].strip()  # this process's network namespace
                           for line in open("/proc/net/dev").read().splitlines()[2:])
for place in (".", "/tmp", "/dev/shm"):  # each a memory file system of the job's own size
    written = 0
    try:
        with open(os.path.join(place, "fill"), "wb") as fill:
            for _ in range(64):
                written += fill.write(bytes(1 << 20))
                fill.flush()
        seen[place] = f"wrote {written}"
    except OSError as error:
        seen[place] = error.strerror
for place in ("/", "/dev"):  # the sandbox's own root and /dev: read-only
    try:
        open(os.path.join(place, "planted"), "w").write("x")
        seen[place] = "written"
    except OSError as error:
        seen[place] = error.strerror
try:
    open("given.txt", "a").write("changed")
    seen["given"] = "changed"
except OSError as error:
    seen["given"] = error.strerror
import subprocess
seen["nested user namespace"] = subprocess.run(["unshare", "--user", "true"]).returncode == 0
print(json.dumps(seen))
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["root", "ordinary user"])
def test_the_sandbox_holds_only_its_allow_list_and_no_network(mode, tmp_path, monkeypatch):
    """Graded as root or as an ordinary user (a user namespace: built so here as root), the
    graded process sees the system's programs and libraries, Python and the package, and
    nothing else: not the instructor's other files (a private copy of the graders), not /run
    (the user's session sockets), not /home or /var; and no network (a server listening on
    the machine's loopback cannot be reached)."""
    if mode == "ordinary user":
        monkeypatch.setattr(sandbox, "job_uid", lambda slot: None)
    elsewhere = tmp_path / "elsewhere"  # an instructor's folder that is no part of grading
    elsewhere.mkdir()
    (elsewhere / "graders-copy.txt").write_text("seed 12345")
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "given.txt").write_text("the notebook")  # what grading puts in the scratch
    slot, lock = sandbox.claim_slot()
    files = [str(elsewhere / "graders-copy.txt"), "/etc/hostname"]
    limits = sandbox.Limits(disk_gib=16 / 1024)  # 16 MiB each
    argv = sandbox.command(
        [sys.executable, "-c", PROBE, str(listening.getsockname()[1]), *files],
        scratch,
        [ROOT],
        sandbox.readable_folders(),
        {"PATH": "/usr/bin:/bin"},
        slot,
        limits,
    )
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        listening.close()
        if lock is not None:
            lock.close()
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    assert seen[files[0]] == "FileNotFoundError"  # not there at all
    assert seen["/etc/hostname"] == Path("/etc/hostname").read_text()  # the system's part is
    assert not {"run", "home", "var", "srv", "mnt", "opt"} & set(seen["root"]), seen["root"]
    assert seen["network"] != "connected" and seen["interfaces"] == ["lo"], seen
    if mode == "root":
        assert seen["groups"] in ([], [sandbox.job_uid(slot)])  # no supplementary group
    # the scratch, /tmp and /dev/shm fill at the job's size; the real scratch is not written
    assert seen["."] == seen["/tmp"] == seen["/dev/shm"] == "No space left on device", seen
    assert seen["given"] in ("Read-only file system", "Permission denied"), seen
    assert sorted(p.name for p in scratch.iterdir()) == ["given.txt"]
    assert (scratch / "given.txt").read_text() == "the notebook"
    assert seen["/"] == seen["/dev"] == "Read-only file system", seen
    assert seen["nested user namespace"] is False, seen  # in either mode


NESTED = (
    "ls {hidden}; echo listed; unshare -Urm sh -c 'umount {hidden}; ls {hidden}; "
    "mount -t tmpfs none /tmp && echo mounted'; echo unshare=$?"
)
"""The issue's probe, and a memory file system of the job's own making (none of its bounded ones:
this kernel's locked mounts already keep the cover in place, so the tmpfs is the harm shown)."""


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a job user id, or becoming nobody)")
@pytest.mark.parametrize("mode", ["root", "nobody"])
def test_no_submission_can_make_a_user_namespace(mode, monkeypatch):
    """The probe a hostile learner ran as root: ``unshare -Urm`` (root in a user namespace of
    its own), then unmount the memory file system that covers an instructor's folder inside a
    folder bound in, list what lay under it, and mount a memory file system of its own (no size
    the job set, none its memory bound sees). Refused as root (the job's user id) and by a real
    ordinary user (nobody): no user namespace is made."""
    if mode == "nobody":
        if why := can_run_as_nobody():
            pytest.skip(why)
        monkeypatch.setattr(sandbox, "job_uid", lambda slot: None)  # nobody's own sandbox
    folder = Path(tempfile.mkdtemp(prefix="trust-userns-", dir="/tmp"))
    slot, lock = sandbox.claim_slot()
    try:
        folder.chmod(0o755)
        hidden = folder / "checkout" / "class"  # a class folder in a checkout bound in
        hidden.mkdir(parents=True)
        (hidden / "learner-7.ipynb").write_text("{}")
        scratch = folder / "scratch"
        scratch.mkdir()
        owner = NOBODY if mode == "nobody" else sandbox.job_uid(slot)
        os.chown(scratch, owner, owner)
        argv = sandbox.command(
            ["sh", "-c", NESTED.format(hidden=hidden)],
            scratch,
            [hidden],
            [folder / "checkout"],
            {"PATH": "/usr/bin:/bin"},
            slot,
        )
        if mode == "nobody":
            done = as_nobody(argv, {"PATH": "/usr/bin:/bin"}, [], timeout=60)
        else:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        if lock is not None:
            lock.close()
        shutil.rmtree(folder)
    assert done.stdout.startswith("listed\n"), (done.stdout, done.stderr)  # covered: empty
    assert "learner-7" not in done.stdout and "mounted" not in done.stdout, done
    assert "unshare=0" not in done.stdout, done


@pytest.mark.parametrize("broken", ["missing", "does not start"])
def test_without_a_working_sandbox_grading_refuses_in_one_line(
    broken, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "class"
    folder.mkdir()
    filled_lab(ROOT / STUDENT_DIR / f"{LAB}.ipynb", PACKAGE_ANSWERS_01, folder / "a.ipynb")
    if broken == "missing":
        monkeypatch.setattr(sandbox, "missing_tools", lambda: ["bwrap"])
    else:
        monkeypatch.setattr(sandbox, "missing_tools", lambda: [])
        monkeypatch.setattr(sandbox, "probe", lambda: "setting up uid map: Permission denied")
    with pytest.raises(SystemExit) as exited:
        cli.main(
            [
                "lab",
                "grade",
                str(folder),
                "--out",
                str(tmp_path / "g.csv"),
                "--grader",
                str(tmp_path),
            ]
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "--no-sandbox" in err and ("bwrap" in err or "uid map" in err)
    assert not (tmp_path / "g.csv").exists()


def test_no_sandbox_grades_with_the_instructors_rights(grader, tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    filled_lab(ROOT / STUDENT_DIR / f"{LAB}.ipynb", PACKAGE_ANSWERS_01, folder / "a.ipynb")
    grades = tmp_path / "g.csv"
    code = cli.main(
        ["lab", "grade", str(folder), "--out", str(grades), "--grader", str(grader), "--no-sandbox"]
    )
    assert code == 0
    (row,) = csv.DictReader(grades.open())
    assert float(row["total"]) == float(row["possible"]) == 8


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_an_ordinary_users_group_rights_and_namespaces_stay_outside(monkeypatch):
    """Graded by a real ordinary user (nobody, here): a file of the allow-list that only one of
    the user's supplementary groups may read (``/etc/shadow`` for the shadow group) cannot be
    read inside, though the kernel keeps the group's rights in the user namespace; without the
    cover it can (the control). No user namespace can be made inside, and /tmp has the job's
    size (shell tools: no Python needed)."""
    monkeypatch.setattr(sandbox, "job_uid", lambda slot: None)  # the command an ordinary user runs
    folder = Path(tempfile.mkdtemp(prefix="trust-ordinary-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        secret = folder / "group-only.txt"
        secret.write_text("the group's secret")
        os.chown(secret, 0, ORDINARY_GID)
        secret.chmod(0o640)
        private = folder / "private"  # as /etc/ssl/private: the group may enter, not list
        private.mkdir()
        (private / "key.pem").write_text("the group's key")
        os.chown(private, 0, ORDINARY_GID)
        private.chmod(0o710)
        scratch = folder / "scratch"
        scratch.mkdir()
        probe = (
            f"cat {secret} {private}/key.pem; echo; "
            "unshare --user true && echo nested || echo no-nested; "
            "head -c 20000000 /dev/zero > /tmp/fill || echo tmp-full"
        )
        limits = sandbox.Limits(disk_gib=16 / 1024)
        seen = {}
        for cover in (True, False):
            argv = sandbox.command(
                ["sh", "-c", probe],
                scratch,
                [],
                [folder],
                {"PATH": "/usr/bin:/bin"},
                0,
                limits,
                groups={ORDINARY_GID} if cover else set(),
            )
            done = as_nobody(argv, {"PATH": "/usr/bin:/bin"}, [], (ORDINARY_GID,), 60)
            if "setting up uid map" in done.stderr or "No permissions to create" in done.stderr:
                pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip()}")
            seen[cover] = done.stdout
        for text in ("the group's secret", "the group's key"):
            assert text in seen[False], seen  # the control: the group's rights hold inside
            assert text not in seen[True], seen
        assert "no-nested" in seen[True] and "tmp-full" in seen[True], seen
    finally:
        shutil.rmtree(folder)


ALLOCATOR = """
import os, sys
chunk, each = 8 << 20, (int(sys.argv[1]) << 20) // 2  # four: twice the bound
for index in range(3):  # four processes, each under the 8 GiB one may hold
    if os.fork() == 0:
        break
else:
    index = 3
kept = []
while len(kept) * chunk < each:
    kept.append(b"x" * chunk)  # touched as it is made: as fast as this machine allocates
    os.write(1, f"{index} {len(kept) * 8}\\n".encode())
os.write(1, b"done\\n")
"""
WATCHED = """
import json, os, subprocess, sys, tempfile
from pathlib import Path
from grpo_minimal.instructor import sandbox, watchdog
bound, code = int(sys.argv[1]), sys.argv[2]
tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 512
cores = float(sys.argv[4]) if len(sys.argv) > 4 else 64.0
scratch = Path(tempfile.mkdtemp(prefix="watched-", dir="/tmp"))
slot, lock = sandbox.claim_slot()
if (uid := sandbox.job_uid(slot)) is not None:
    os.chown(scratch, uid, uid)
argv = sandbox.command([sys.executable, "-c", code, str(bound)], scratch, [],
                       sandbox.readable_folders(), {"PATH": "/usr/bin:/bin"}, slot)
process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
watch = watchdog.Watchdog(process.pid, bound << 20, tasks, cores, [str(scratch), "/tmp", "/dev/shm"])
watch.start()
out = process.communicate()[0]
print(json.dumps({"bound": watch.stop(), "out": out.splitlines()[-20:], "peak": watch.peak,
                  "allocated": sum(max([int(line.split()[1]) for line in out.splitlines()
                                        if line.startswith(f"{i} ")] or [0]) for i in range(4))}))
os.rmdir(scratch)
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["root", "nobody"])
def test_the_watchdog_ends_a_fast_allocator_near_the_jobs_bound(mode):
    """Four processes each allocating as fast as they can, each under what one may hold and
    together twice the job's 512 MiB, with no cgroup: the watchdog ends the job before they have
    it all. As root and as a real ordinary user (nobody, the watchdog in nobody's own grading
    process). How far past the bound they got (each prints its total after each 8 MiB) is
    printed (-rP): the guide's overshoot."""
    seen = _watched(mode, "512", ALLOCATOR)
    print(
        f"allocated {seen['allocated']} MiB of a 512 MiB bound; the watchdog saw "
        f"{seen['peak']['memory'] / 2**20:.0f} MiB: {seen['peak']}"
    )
    assert seen["bound"] == "memory" and seen["out"].count("done") < 4, seen
    assert 512 <= seen["peak"]["memory"] / 2**20 and seen["allocated"] < 1024, seen


SLEEPERS = """
import os, time
for _ in range(40):  # 41 processes, under the sandbox's 512 and past the watchdog's 16
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
time.sleep(30)
os.write(1, b"done\\n")
"""


@needs_bwrap
@pytest.mark.parametrize("mode", ["root", "nobody"])
def test_the_watchdog_ends_a_job_past_its_process_bound(mode):
    """41 sleeping processes, a job bound of 16 (the kernel's limit, 512, holds a job only at its
    own count; this is the watchdog's line, met first where it is the lower): ended whole at
    'processes' long before they wake, as root and as nobody."""
    seen = _watched(mode, "512", SLEEPERS, "16")
    assert seen["bound"] == "processes" and "done" not in seen["out"], seen
    assert 16 < seen["peak"]["tasks"] <= 41 + watchdog.SANDBOX_OWN, seen


CHURN = """
import os, time
end = time.time() + 30
while time.time() < end:  # 10 busy processes at a time, each ending after 0.3 s, replaced
    kids = []
    for _ in range(10):
        if (pid := os.fork()) == 0:
            stop = time.time() + 0.3
            while time.time() < stop:
                pass
            os._exit(0)
        kids.append(pid)
    for kid in kids:
        os.waitpid(kid, 0)
os.write(1, b"done\\n")
"""
LEADER_GONE = """
import ctypes, threading, time
def hold():
    time.sleep(1)  # allocates once the first thread has gone
    held = b"x" * (300 << 20)
    time.sleep(30)
threading.Thread(target=hold).start()
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: this thread alone; the holder lives on
"""


def _watched(mode: str, *args: str, script: str = WATCHED) -> dict:
    """``WATCHED`` (or ``script``) on ``args`` as root or as a real nobody: what it printed."""
    argv = [sys.executable, "-c", script, *args]
    if mode == "nobody":
        if why := can_run_as_nobody():
            pytest.skip(why)
        done = as_nobody(argv, {"PATH": "/usr/bin:/bin"}, [], timeout=120)
    else:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@needs_bwrap
@pytest.mark.parametrize("mode", ["root", "nobody"])
def test_processes_that_come_and_go_cannot_hide_their_cpu(mode):
    """Ten busy processes at a time, each ending after 0.3 s and replaced, against a share of one
    core (4 threads wanting one, on average over 5 s): ended at 'cpu'. Counted as the processes
    alive at each reading, their time left with them and the job was never ended."""
    seen = _watched(mode, "512", CHURN, "512", "1")
    assert seen["bound"] == "cpu" and "done" not in seen["out"], seen


@needs_bwrap
@pytest.mark.parametrize("mode", ["root", "nobody"])
def test_memory_held_after_the_first_thread_exits_is_counted(mode):
    """A thread holds 300 MiB after the process's first thread has exited (its own status then
    shows no memory): ended at 'memory' under a 200 MiB bound, read through the live thread."""
    seen = _watched(mode, "200", LEADER_GONE)
    assert seen["bound"] == "memory", seen


@needs_bwrap
def test_a_watchdog_that_fails_ends_its_job():
    """A watchdog whose reading raises (a bug of ours) ends the job, never leaves it unbounded."""
    broken = "from grpo_minimal.instructor import watchdog as w\nw.Watchdog._measure = lambda *a: 1 / 0\n"
    seen = _watched("root", "512", SLEEPERS, script=broken + WATCHED)
    assert seen["bound"] == "error" and "done" not in seen["out"], seen


SHARES_MEMORY = """
import mmap, sys
shared = mmap.mmap(-1, int(sys.argv[1]), flags=mmap.MAP_SHARED)  # not the process's data
for offset in range(0, len(shared), 4096):
    shared[offset] = 1
print("held it")
"""


@needs_bwrap
@pytest.mark.skipif(bool(cgroups.available()), reason=f"no cgroup per job: {cgroups.available()}")
def test_a_jobs_memory_is_bounded_together_and_its_group_ends_with_it(tmp_path):
    """A shared anonymous mapping is not a process's data: prlimit lets a 64 MiB process hold
    256 MiB of it (the control). In a job's cgroup of 128 MiB the kernel kills it, the group
    says so, and nothing of the group is left afterwards."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    slot, lock = sandbox.claim_slot()
    limits = sandbox.Limits(memory_gib=1 / 16)
    argv = sandbox.command(
        [sys.executable, "-c", SHARES_MEMORY, str(256 << 20)],
        scratch,
        [],
        sandbox.readable_folders(),
        {"PATH": "/usr/bin:/bin"},
        slot,
        limits,
    )
    try:
        alone = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert alone.stdout.strip() == "held it", alone.stderr[-2000:]  # prlimit alone: held
        group = cgroups.JobGroup(f"grpo-test-{os.getpid()}", 128 << 20, limits.processes)
        group.create()
        try:
            bounded = subprocess.run(group.wrap(argv), capture_output=True, text=True, timeout=120)
            assert bounded.stdout.strip() != "held it" and bounded.returncode != 0, bounded
            assert group.out_of_memory()
            assert (group.paths["pids"] / "pids.max").read_text().strip() == str(limits.processes)
        finally:
            group.remove()
        assert not any(path.exists() for path in group.paths.values())
    finally:
        if lock is not None:
            lock.close()


@pytest.mark.skipif(bool(cgroups.available()), reason=f"no cgroup per job: {cgroups.available()}")
def test_a_job_in_a_cgroup_is_ended_whole_at_its_memory_limit():
    """At a cgroup's memory limit the kernel kills one process, and the rest of the job goes on
    (a notebook whose child it was would keep its points): grading ends the whole job, as the
    watchdog does where there is no cgroup, so the row is the same in both."""
    from grpo_minimal.instructor import watchdog

    group = cgroups.JobGroup(f"grpo-test-whole-{os.getpid()}", 128 << 20, 512)
    group.create()
    try:
        script = (
            f"{shlex.quote(sys.executable)} -c {shlex.quote(SHARES_MEMORY)} {256 << 20}; "
            "echo went-on; sleep 60"
        )
        process = subprocess.Popen(
            group.wrap(["sh", "-c", script]),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        watch = watchdog.GroupWatch(
            group.out_of_memory, lambda: os.killpg(process.pid, signal.SIGKILL)
        ).start()
        began = time.monotonic()
        out = process.communicate(timeout=120)[0]
        assert watch.stop() == "memory" and time.monotonic() - began < 30, out
        assert "held it" not in out
    finally:
        group.remove()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another group)")
def test_the_group_cover_takes_what_a_group_alone_opens_never_what_is_bound_in(tmp_path):
    root = tmp_path / "bound"  # a folder bound in that is itself the group's: it must stay
    (root / "open").mkdir(parents=True)
    (root / "open" / "public.txt").write_text("all")
    (root / "mine.txt").write_text("group")
    (root / "entered").mkdir()
    for path, mode in ((root, 0o750), (root / "mine.txt", 0o640), (root / "entered", 0o710)):
        os.chown(path, 0, ORDINARY_GID)
        path.chmod(mode)
    found = sandbox.group_only_files([root], {ORDINARY_GID})
    assert found == [root / "entered", root / "mine.txt"], found
    assert sandbox.group_only_files([root], {ORDINARY_GID + 1}) == []  # another group's: none
