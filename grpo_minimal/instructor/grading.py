"""Check one learner's notebook, or grade a folder of submissions, with otter-grader.

``check_notebook`` runs the public checks stored in the student notebook's own metadata (what
``grader.check`` runs inside the notebook). ``grade_folder`` runs every check, hidden ones
included, from the autograder zips ``make labs`` writes, through otter's non-containerised
runner (``otter.api.grade_submission``; ``otter grade`` itself needs Docker).

Each submission is graded by a process of its own, in a bubblewrap sandbox (``sandbox.py``), in a
scratch folder holding a copy of it and its lab's zip alone, under a time limit. Whatever one
submission does (loop forever, fail to parse, not be a lab, delete files, fork, read the
process table, crash the grader) costs its own row, with the reason, and nothing else; all its
processes end with its sandbox. Rows are written to the CSV as results arrive, so a crash or a
Ctrl-C after k submissions leaves k rows (Ctrl-C also kills every job in flight).

Beside the CSV, ``<stem>-feedback/NAME.txt`` is the learner's: every failing check, with a hidden
case reduced to its name, its hint and the exception's type and first line (never the drawn input
or expected value). ``<stem>-instructor/NAME.txt`` holds everything: the full messages and the
grading process's stderr.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import ctypes
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zipfile
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpo_minimal.instructor import sandbox
from grpo_minimal.instructor.build import GRADER_DIR
from grpo_minimal.labs.checking import GRADING_ENV, REPORT_ENV


@dataclass
class ExerciseResult:
    name: str
    score: float
    possible: float
    failures: list[str]  # the message of every failing check of this exercise, in order
    hidden: list[bool] = field(default_factory=list)  # per failure: a hidden case's?

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def first_failure(self) -> str | None:
        return self.failures[0] if self.failures else None


def _message(otter_message: str) -> str:
    """Our checker's message without otter's frame around it ("Error at line ... CheckFailed:")."""
    marker = "CheckFailed: "
    if marker in otter_message:
        return otter_message.split(marker, 1)[1].strip("\n")
    return otter_message.removeprefix("❌ Test case failed\n")


def _exercises(results) -> list[ExerciseResult]:
    exercises = []
    for name, test_file in results.results.items():
        failed = [r for r in test_file.test_case_results if not r.passed]
        exercises.append(
            ExerciseResult(
                name,
                float(test_file.score),
                float(test_file.possible),
                [_message(r.message) for r in failed],
                [bool(r.test_case.hidden) for r in failed],
            )
        )
    return exercises


LAB_NAME = re.compile(r"[0-9]{2}_[a-z0-9_]+")
"""What a lab's name looks like (``NN_name``): a submitted name that does not is refused."""


def lab_name(notebook: Path) -> str:
    """The lab a submitted notebook says it is (``metadata.otter.assignment_name``); a
    ``ValueError`` for anything else, however the file is broken."""
    try:
        metadata = json.loads(Path(notebook).read_text()).get("metadata", {})
        name = metadata.get("otter", {}).get("assignment_name")
    except Exception:  # not JSON, not text, not a dict, too deep, gone: all "not a lab"
        name = None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{Path(notebook).name} is not a lab notebook (no otter.assignment_name in its "
            "metadata); submit a notebook from notebooks/labs/"
        )
    if not LAB_NAME.fullmatch(name):
        raise ValueError(
            f"{Path(notebook).name}: its otter.assignment_name {name[:60]!r} is not a lab's name "
            "(NN_name); submit a notebook from notebooks/labs/"
        )
    return name


def syntax_errors(notebook: Path) -> list[str]:
    """One line per code cell that Python cannot parse (IPython's magics are allowed); one line
    for a notebook whose cells cannot be read at all."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    try:
        cells = json.loads(Path(notebook).read_text()).get("cells", [])
        if not isinstance(cells, list):
            raise TypeError(f"cells is {type(cells).__name__}, not a list")
    except Exception as error:
        return [f"the notebook's cells cannot be read ({type(error).__name__}: {error})"[:300]]
    errors = []
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if not isinstance(source, str):
            errors.append(f"cell {index + 1}: its source is not text")
            continue
        try:
            compile(transform(source), f"cell {index}", "exec")
        except SyntaxError as error:
            line = (error.text or "").strip()
            errors.append(
                f"cell {index + 1}, line {error.lineno}: SyntaxError: {error.msg}"
                + (f": {line}" if line else "")
            )
        except Exception as error:  # too deeply nested, null bytes, ...
            errors.append(f"cell {index + 1}: {type(error).__name__}: {error}"[:300])
    return errors


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


def grade_notebook_file(
    notebook: Path, grader_dir: Path = GRADER_DIR
) -> tuple[list[ExerciseResult], list[str], list[dict]]:
    """Every check, hidden ones included, for one submitted notebook, in this process.

    Returns the results, what the checks reported measuring and the cells that raised while the
    notebook ran (``cell_errors``). ``grade_folder`` calls this in a sandboxed process per
    notebook; call it directly only on notebooks you trust.
    """
    from otter.api import grade_submission

    name = lab_name(notebook)
    autograder = Path(grader_dir) / f"{name}-autograder.zip"
    if not autograder.is_file():
        raise FileNotFoundError(
            f"no grader for lab {name!r} at {autograder}: run `make labs` first"
        )
    _patience_for_kernels()
    with tempfile.TemporaryDirectory(prefix="lab-report-") as folder:
        report_file = Path(folder) / "report.txt"
        with _environment({REPORT_ENV: str(report_file)}), _quiet():
            results = grade_submission(str(notebook), str(autograder), quiet=True)
        reports = report_file.read_text().splitlines() if report_file.exists() else []
    return _exercises(results), reports, cell_errors(results.notebook)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def cell_errors(executed) -> list[dict]:
    """Each code cell that raised while the notebook ran: its first line of code, the exception's
    type and first line (what a learner is shown) and the whole traceback (the instructor's)."""
    errors = []
    for cell in getattr(executed, "cells", None) or []:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if output.get("output_type") != "error":
                continue
            source = str(cell.get("source", "")).strip().splitlines()
            value = (str(output.get("evalue", "")).strip().splitlines() or [""])[0]
            errors.append({
                "cell": (source[0] if source else "")[:80],
                "error": f"{output.get('ename', 'Error')}: {value}"[:200].rstrip(": "),
                "traceback": _ANSI.sub("", "\n".join(output.get("traceback", [])))[-4000:],
            })  # fmt: skip
    return errors


KERNEL_STARTUP_S = 300
"""Seconds a kernel may take to start (nbclient's default, 60, was too short on a loaded 2-core
machine: two jobs' kernels importing torch while other work ran)."""


def _patience_for_kernels() -> None:
    """otter builds its ``ExecutePreprocessor`` with a config of its own; give it a class whose
    default start-up limit is ``KERNEL_STARTUP_S``."""
    import nbconvert.preprocessors
    from traitlets import Integer

    if getattr(nbconvert.preprocessors.ExecutePreprocessor, "_grpo_patient", False):
        return

    class PatientExecutePreprocessor(nbconvert.preprocessors.ExecutePreprocessor):
        _grpo_patient = True
        startup_timeout = Integer(KERNEL_STARTUP_S).tag(config=True)

    nbconvert.preprocessors.ExecutePreprocessor = PatientExecutePreprocessor


def lab_exercises(autograder: Path) -> dict[str, float]:
    """Each exercise of a lab and its points, read (never run) from its zip's test files."""
    exercises = {}
    with zipfile.ZipFile(autograder) as archive:
        for member in sorted(archive.namelist()):
            if not (member.startswith("tests/") and member.endswith(".py")):
                continue
            points = 0.0
            for node in ast.parse(archive.read(member)).body:
                if (
                    isinstance(node, ast.Assign)
                    and [getattr(t, "id", None) for t in node.targets] == ["points"]
                    and isinstance(node.value, ast.Constant)
                ):
                    points = float(node.value.value)
            exercises[Path(member).stem] = points
    return exercises


@dataclass
class Graded:
    """One submission's outcome: its exercises, or the reason it could not be graded."""

    notebook: str
    lab: str
    exercises: list[ExerciseResult]
    reports: list[str]
    problem: str | None = None  # not graded, or graded with a problem (a syntax error, ...)
    log: str = ""  # the grading process's stderr: the instructor's file only
    cell_errors: list[dict] = field(default_factory=list)  # cells that raised (cell_errors)
    seconds: float = 0.0  # wall-clock time this submission took to grade


class Grader:
    """Grades one submission at a time in a sandboxed process (``sandbox.py``); ``slot`` is the
    job's number (its user id under root). ``kill`` ends what is in flight (Ctrl-C)."""

    def __init__(self, grader_dir: Path, timeout_s: float, slot: int, threads: int | None,
                 use_sandbox: bool, hidden: list[Path]) -> None:  # fmt: skip
        self.grader_dir, self.timeout_s, self.slot = Path(grader_dir), timeout_s, slot
        self.threads, self.use_sandbox, self.hidden = threads, use_sandbox, hidden
        self._process: subprocess.Popen | None = None
        self._killed = False

    def grade(self, notebook: Path) -> Graded:
        """Grade ``notebook``; any failure becomes its row's problem. A kernel that did not start
        (a loaded machine) is given one more try."""
        notebook = Path(notebook)
        try:
            lab = lab_name(notebook)
        except ValueError as error:
            return Graded(notebook.name, "", [], [], str(error))
        autograder = self.grader_dir / f"{lab}-autograder.zip"
        if not autograder.is_file():
            return Graded(notebook.name, lab, [], [], f"no lab {lab!r} in {self.grader_dir}")
        problems = syntax_errors(notebook)
        for _ in range(2):
            graded = self._run(notebook, lab, autograder)
            if "Kernel didn't respond" not in (graded.problem or "") or self._killed:
                break
        if problems:
            graded.problem = "; ".join([*problems, *([graded.problem] if graded.problem else [])])
        return graded

    def _run(self, notebook: Path, lab: str, autograder: Path) -> Graded:
        scratch = Path(tempfile.mkdtemp(prefix="lab-grade-"))
        try:
            (scratch / "home").mkdir()
            # named as the lab's notebook, as otter's first cell opens it (never the learner's
            # file name, which stays outside)
            copy = scratch / f"{lab}.ipynb"
            copy.write_bytes(checks_at_the_end(notebook.read_bytes()))
            shutil.copyfile(autograder, scratch / autograder.name)
            request = {"notebook": str(copy), "grader_dir": str(scratch)}
            (scratch / "request.json").write_text(json.dumps(request))
            uid = sandbox.job_uid(self.slot) if self.use_sandbox else None
            if uid is not None:
                for path in [scratch, *scratch.rglob("*")]:
                    os.chown(path, uid, uid)
            outcome, log = self._execute(scratch)
        except OSError as error:
            return Graded(notebook.name, lab, [], [], f"grading failed: {error}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if outcome.get("timed_out"):
            return Graded(notebook.name, lab, [], [],
                          f"stopped after the time limit of {self.timeout_s:g} s (an endless "
                          "loop?)", log)  # fmt: skip
        if "exercises" not in outcome:
            error = outcome.get("error") or "the grading process ended without a result"
            return Graded(notebook.name, lab, [], [], f"grading failed: {error}", log)
        exercises = [ExerciseResult(**e) for e in outcome["exercises"]]
        errors = outcome.get("cell_errors", [])
        return Graded(notebook.name, lab, exercises, outcome["reports"], None, log, errors)

    def _execute(self, scratch: Path) -> tuple[dict, str]:
        """Run the graded process on ``scratch``; its outcome (the JSON line it wrote on its
        stdout) and its stderr."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch / "home"), "TMPDIR": "/tmp", "LANG": "C.UTF-8",
            "USER": "learner", "LOGNAME": "learner", "MPLBACKEND": "Agg",
            "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", GRADING_ENV: "1",
        }  # fmt: skip
        env.update({k: v for k, v in os.environ.items() if k == "GRPO_QUICK"})
        if self.threads is not None:
            env |= {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        # -P: the scratch folder stays off sys.path (what it imports is the package's)
        argv = [sys.executable, "-P", "-m", "grpo_minimal.instructor.grading",
                str(scratch / "request.json")]  # fmt: skip
        if self.use_sandbox:
            argv = sandbox.command(argv, scratch, self.hidden, sandbox.readable_folders(), env,
                                   self.slot)  # fmt: skip
        else:
            env = {**os.environ, **env}
        with tempfile.TemporaryFile() as log:
            if self._killed:
                return {"error": "grading was interrupted"}, ""
            self._process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                env=env, cwd=scratch, start_new_session=True,
            )  # fmt: skip
            try:
                out, _ = self._process.communicate(timeout=self.timeout_s)
                outcome = _last_json(out)
            except subprocess.TimeoutExpired:
                self._end()
                outcome = {"timed_out": True}
            finally:
                self._end()
            log.seek(0)
            text = log.read(1 << 20).decode(errors="replace")
        if self._killed:
            outcome = {"error": "grading was interrupted"}
        return outcome, text

    def _end(self) -> None:
        """Kill the graded process's group (the sandbox: everything in it dies with it) or, with
        no sandbox, every descendant still found."""
        process = self._process
        if process is None:
            return
        if not self.use_sandbox:
            _kill_tree(process.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)

    def kill(self) -> None:
        self._killed = True
        self._end()


_CHECK_CELL = re.compile(r"\s*grader\.check\(\s*['\"][\w.-]+['\"]\s*\)\s*")


def checks_at_the_end(notebook: bytes) -> bytes:
    """The notebook with its ``grader.check("...")`` cells tagged ``otter_ignore``, so that every
    check runs once the whole notebook has run. otter keeps the first result of each check, and a
    check cell placed before the cell that makes what it grades (the capstone's, above its
    training cell) would grade nothing: the capstone's own solution got 1 of 5 points that way.
    A notebook that cannot be read is returned as it is (grading then says why)."""
    try:
        content = json.loads(notebook)
        for cell in content["cells"]:
            source = cell.get("source", "")
            source = "".join(source) if isinstance(source, list) else source
            if cell.get("cell_type") == "code" and _CHECK_CELL.fullmatch(str(source)):
                tags = cell.setdefault("metadata", {}).setdefault("tags", [])
                if "otter_ignore" not in tags:
                    tags.append("otter_ignore")
        return json.dumps(content).encode()
    except Exception:
        return notebook


def _last_json(out: bytes) -> dict:
    for line in reversed(out.decode(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                return value
    return {}


def _kill_tree(pid: int) -> None:
    """Kill a process and every descendant found (without a sandbox, a double fork escapes)."""
    import psutil

    try:
        parent = psutil.Process(pid)
        processes = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    psutil.wait_procs(processes, timeout=10)


def _graded_process(request_file: str) -> None:
    """The sandboxed process: grade one notebook, print the outcome as one JSON line on the
    stdout it started with (the kernel gets /dev/null and cannot reach this one)."""
    with contextlib.suppress(Exception):  # no other process of this user may open /proc/<us>/fd
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    out = os.fdopen(os.dup(1), "w")  # os.dup: not inherited by the kernel
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    try:
        request = json.loads(Path(request_file).read_text())
        exercises, reports, errors = grade_notebook_file(
            Path(request["notebook"]), Path(request["grader_dir"])
        )
        outcome = {"exercises": [asdict(e) for e in exercises], "reports": reports[:50],
                   "cell_errors": errors}  # fmt: skip
    except BaseException as error:
        traceback.print_exc()
        first = (str(error).strip().splitlines() or [""])[0][:200]
        outcome = {"error": f"{type(error).__name__}: {first}".rstrip(": ")}
    out.write(json.dumps(outcome) + "\n")
    out.flush()


def _kept_from_submissions(folder: Path, out: Path, grader_dir: Path) -> list[Path]:
    """What a sandbox must not see: the class folder, the graders, the output, the instructor's
    home and working folder."""
    return [Path(folder), Path(grader_dir), Path(out).parent, Path.home(), Path.cwd()]


class SandboxMissing(RuntimeError):
    """bubblewrap (or util-linux's prlimit/setpriv) is not installed."""


def grade_folder(
    folder: Path,
    out: Path,
    grader_dir: Path,
    timeout_s: float,
    jobs: int,
    use_sandbox: bool = True,
    on_row=None,
) -> list[dict]:
    """Grade every ``*.ipynb`` in ``folder``, ``jobs`` at a time; write ``out`` (CSV), the
    learners' feedback files and the instructor's, row by row as results arrive.

    CSV columns: notebook, lab, per exercise its points and its first failing case (named
    ``lab/exercise`` when the folder mixes labs), total, possible (always: read from the lab's
    zip), problem, seconds (to grade it). ``on_row(row)`` is called after each row is written.
    """
    if use_sandbox and (missing := sandbox.missing_tools()):
        raise SandboxMissing(
            f"{' and '.join(missing)} not found: each submission is graded in a bubblewrap "
            "sandbox (apt install bubblewrap util-linux); --no-sandbox grades without one, "
            "trusting every submission (see the instructor guide)"
        )
    notebooks = sorted(Path(folder).glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no .ipynb files in {folder}")
    out = Path(out)
    labs = {}
    for notebook in notebooks:
        with contextlib.suppress(ValueError):
            labs[notebook] = lab_name(notebook)
    exercises = {}  # lab -> {exercise: points}
    for lab in sorted(set(labs.values())):
        with contextlib.suppress(Exception):  # no such lab: its rows say so
            exercises[lab] = lab_exercises(Path(grader_dir) / f"{lab}-autograder.zip")
    mixed = len(exercises) > 1

    def column(lab: str, name: str) -> str:
        return f"{lab}/{name}" if mixed else name

    columns = [c for lab, names in exercises.items() for n in names
               for c in (column(lab, n), f"{column(lab, n)} first failure")]  # fmt: skip
    header = ["notebook", "lab", *columns, "total", "possible", "problem", "seconds"]
    feedback_dir = out.parent / f"{out.stem}-feedback"
    instructor_dir = out.parent / f"{out.stem}-instructor"
    for directory in (feedback_dir, instructor_dir):
        directory.mkdir(parents=True, exist_ok=True)
    hidden = _kept_from_submissions(folder, out, grader_dir)
    threads = None if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)
    graders = [Grader(grader_dir, timeout_s, slot, threads, use_sandbox, hidden)
               for slot in range(min(jobs, len(notebooks)))]  # fmt: skip
    free = list(graders)
    lock = threading.Lock()

    def grade(notebook: Path) -> Graded:
        with lock:
            grader = free.pop()
        start = time.monotonic()
        try:
            graded = grader.grade(notebook)
        except Exception as error:  # a bug of ours stays this submission's row
            graded = Graded(notebook.name, labs.get(notebook, ""), [], [],
                            f"grading failed: {type(error).__name__}: {error}",
                            traceback.format_exc())  # fmt: skip
        finally:
            with lock:
                free.append(grader)
        graded.seconds = time.monotonic() - start
        return graded

    rows = []
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, header, restval="", extrasaction="ignore")
        writer.writeheader()
        handle.flush()
        pool = ThreadPoolExecutor(max_workers=len(graders))
        try:
            pending = {pool.submit(grade, n) for n in notebooks}
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    result = future.result()
                    points = exercises.get(result.lab, {})
                    row = _row(result, points, column)
                    writer.writerow(row)
                    handle.flush()
                    name = Path(result.notebook).stem
                    (feedback_dir / f"{name}.txt").write_text(
                        _feedback(result, True, row["possible"])
                    )
                    (instructor_dir / f"{name}.txt").write_text(
                        _feedback(result, False, row["possible"])
                    )
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
        except BaseException:  # Ctrl-C, or a crash here: nothing graded goes on
            for grader in graders:
                grader.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    return rows


def _row(result: Graded, points: dict[str, float], column) -> dict:
    row = {"notebook": result.notebook, "lab": result.lab}
    for exercise in result.exercises:
        row[column(result.lab, exercise.name)] = exercise.score
        row[f"{column(result.lab, exercise.name)} first failure"] = _case_name(
            exercise.first_failure
        )
    row["total"] = sum(e.score for e in result.exercises)
    # what the lab is worth, whether or not it was graded (a time-out still says out of what)
    row["possible"] = sum(points.values()) or sum(e.possible for e in result.exercises)
    row["problem"] = result.problem or ""
    row["seconds"] = round(result.seconds, 1)
    return row


def _case_name(message: str | None) -> str:
    """The first line that names the failing case, for one CSV cell."""
    if message is None:
        return ""
    for line in message.splitlines():
        if line.strip().startswith("case:"):
            return line.split("case:", 1)[1].strip()[:100]
    return "raised " + _exception_line(message) if _exception_line(message) else "failed"


_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failed)): ?(.*)")


def _exception_line(message: str) -> str:
    """``Type: first line`` (at most 200 characters) of the exception a message reports."""
    for line in message.splitlines():
        if match := _EXCEPTION_LINE.match(line.strip()):
            return f"{match.group(1)}: {match.group(2)}"[:200].rstrip(": ")
    return ""


_FIELDS = ("case", "input", "expected", "got", "largest difference", "hint", "also failing")
"""The fields of a ``CheckFailed`` message (``labs.checking.failure``), one line each."""


def learner_message(message: str, hidden: bool) -> str:
    """What a learner is shown of a failing check. Of a public case: its fields. Of a hidden
    case: its name, its hint and what the code raised, never the drawn input, the expected
    value or what came back. Of an exception, either way: its type and first line (at most 200
    characters) and the learner's line that raised it; the rest of its text (which the code
    chose: the hidden tests' text, say) is not shown."""
    kept: list[str] = []
    for line in message.strip("\n").splitlines():
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if name in _FIELDS:
            value = stripped.split(":", 1)[1].strip()
            if name == "got" and value.startswith("raised "):
                kept.append(f"  got:      {value}"[:200])
            elif not (hidden and name in ("input", "expected", "got", "largest difference")):
                kept.append("  " + stripped[:300])
        elif stripped.startswith("(line ") and kept and "raised " in kept[-1]:
            kept.append("  " + stripped[:200])  # the learner's own line that raised
        # any other line continues a value of many lines (an exception's text): not shown
    if not kept:  # not our checker's message: an exception from the test itself
        exception = _exception_line(message)
        kept.append(f"  raised {exception}" if exception else "  failed")
    if hidden:
        kept.append("  (a hidden case: its input and expected value are not shown)")
    return "\n".join(kept)


def _feedback(result: Graded, learner: bool, possible: float | None = None) -> str:
    """A submission's feedback: the learner's (hidden cases reduced, ``learner_message``) or the
    instructor's (every message whole, and the grading process's stderr)."""
    total = sum(e.score for e in result.exercises)
    if possible is None:
        possible = sum(e.possible for e in result.exercises)
    lines = [f"{result.notebook} (lab {result.lab or '?'}): {total:g} / {possible:g} points"]
    if result.problem:
        lines.append(f"problem: {result.problem}")
    for exercise in result.exercises:
        lines.append("")
        status = "PASS" if exercise.passed else "FAIL"
        lines.append(f"{status}  {exercise.name}: {exercise.score:g} / {exercise.possible:g}")
        hidden = exercise.hidden or [False] * len(exercise.failures)
        for message, is_hidden in zip(exercise.failures, hidden, strict=False):
            shown = learner_message(message, is_hidden) if learner else message
            lines.append("      " + shown.strip("\n").replace("\n", "\n      "))
    if result.cell_errors:  # what stopped a cell (the training cell, say) is never silent
        lines += ["", "cells that raised an error while the notebook ran:"]
        for error in result.cell_errors:
            lines.append(f"  the cell starting `{error['cell']}`: {error['error']}")
            if not learner:
                lines.append("    " + error["traceback"].replace("\n", "\n    "))
    if result.reports:
        lines += ["", "measured:", *(f"  {r}" for r in result.reports)]
    if not learner and result.log.strip():
        lines += ["", "the grading process's stderr:", result.log.rstrip()]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _quiet():
    """otter prints its logo, and the kernel it starts writes warnings straight to file
    descriptor 2 (TCP without encryption, frozen modules); the CLI prints its own summary."""
    sink = io.StringIO()
    with tempfile.TemporaryFile() as kernel_log:
        saved = os.dup(2)
        os.dup2(kernel_log.fileno(), 2)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """Environment variables set for the kernels otter starts, then restored."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


if __name__ == "__main__":  # the graded process Grader starts, one per submission
    _graded_process(sys.argv[1])
