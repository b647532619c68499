"""Check one learner's notebook, or grade a folder of submissions, with otter-grader.

``check_notebook`` runs the public checks stored in the student notebook's own metadata (what
``grader.check`` runs inside the notebook). ``grade_folder`` runs every check, hidden ones
included, from the autograder zips ``make labs`` writes, through otter's non-containerised
runner (``otter.api.grade_submission``; ``otter grade`` itself needs Docker). It writes one CSV
row per notebook and, beside the CSV, one feedback file per notebook with every failing check's
message, so that no lost point goes unexplained.

Each submission is graded in its own process, in a temporary folder holding a copy of it, under
a time limit: a notebook that loops forever, fails to parse, is not a lab or deletes the files
around it costs its own row (with the reason) and nothing else. That process is forked from a
grading server that imported otter (and torch) once, so a class of notebooks pays those imports
once per job rather than once per notebook.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import SimpleQueue

from grpo_minimal.instructor.build import GRADER_DIR
from grpo_minimal.labs.checking import REPORT_ENV


@dataclass
class ExerciseResult:
    name: str
    score: float
    possible: float
    failures: list[str]  # the message of every failing check of this exercise, in order

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
    return [
        ExerciseResult(
            name,
            float(test_file.score),
            float(test_file.possible),
            [_message(r.message) for r in test_file.test_case_results if not r.passed],
        )
        for name, test_file in results.results.items()
    ]



def lab_name(notebook: Path) -> str:
    try:
        metadata = json.loads(Path(notebook).read_text()).get("metadata", {})
    except (ValueError, UnicodeDecodeError, AttributeError):
        metadata = {}
    name = metadata.get("otter", {}).get("assignment_name") if isinstance(metadata, dict) else None
    if not name:
        raise ValueError(
            f"{notebook} is not a lab notebook (no otter.assignment_name in its metadata); "
            "submit a notebook from notebooks/labs/"
        )
    return name


def syntax_errors(notebook: Path) -> list[str]:
    """One line per code cell that Python cannot parse (IPython's magics are allowed)."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    errors = []
    for index, cell in enumerate(json.loads(Path(notebook).read_text()).get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        source = "".join(cell.get("source", ""))
        try:
            compile(transform(source), f"cell {index}", "exec")
        except SyntaxError as error:
            line = (error.text or "").strip()
            errors.append(
                f"cell {index + 1}, line {error.lineno}: SyntaxError: {error.msg}"
                + (f": {line}" if line else "")
            )
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
) -> tuple[list[ExerciseResult], list[str]]:
    """Every check, hidden ones included, for one submitted notebook, in this process.

    Returns the results and what the checks reported measuring. ``grade_folder`` calls this in a
    child process per notebook; call it directly only on notebooks you trust to finish.
    """
    from otter.api import grade_submission

    name = lab_name(notebook)
    autograder = Path(grader_dir) / f"{name}-autograder.zip"
    if not autograder.is_file():
        raise FileNotFoundError(
            f"no grader for lab {name!r} at {autograder}: run `make labs` first"
        )
    with tempfile.TemporaryDirectory(prefix="lab-report-") as folder:
        report_file = Path(folder) / "report.txt"
        with _environment({REPORT_ENV: str(report_file)}), _quiet():
            results = grade_submission(str(notebook), str(autograder), quiet=True)
        reports = report_file.read_text().splitlines() if report_file.exists() else []
    return _exercises(results), reports


@dataclass
class Graded:
    """One submission's outcome: its exercises, or the reason it could not be graded."""

    notebook: str
    lab: str
    exercises: list[ExerciseResult]
    reports: list[str]
    problem: str | None = None  # not graded, or graded with a problem (a syntax error, ...)


def grade_isolated(
    notebook: Path,
    grader_dir: Path,
    timeout_s: float,
    server: GradingServer,
    threads: int | None = None,
) -> Graded:
    """Grade a copy of ``notebook`` in a child process forked from ``server``, in a scratch
    folder, within ``timeout_s``; ``threads`` caps the torch threads of its kernel (jobs in
    parallel share the cores)."""
    notebook = Path(notebook)
    try:
        lab = lab_name(notebook)
    except ValueError as error:
        return Graded(notebook.name, "", [], [], str(error))
    problems = syntax_errors(notebook)
    with tempfile.TemporaryDirectory(prefix="lab-grade-") as scratch:
        copy = Path(scratch) / "submission" / notebook.name
        copy.parent.mkdir()
        shutil.copyfile(notebook, copy)
        result_file, log_file = Path(scratch) / "result.json", Path(scratch) / "stderr.txt"
        request = {"notebook": str(copy), "grader_dir": str(Path(grader_dir).resolve()),
                   "result_file": str(result_file), "log_file": str(log_file),
                   "env": _thread_env(threads), "timeout_s": timeout_s}  # fmt: skip
        reply = server.grade(request)
        if reply.get("timed_out"):
            problems.append(f"stopped after the time limit of {timeout_s:g} s (an endless loop?)")
            return Graded(notebook.name, lab, [], [], "; ".join(problems))
        if reply.get("exitcode") != 0 or not result_file.exists():
            log = log_file.read_text(errors="replace") if log_file.exists() else ""
            lines = log.strip().splitlines() or [reply.get("error", "no output")]
            problems.append(f"grading failed: {lines[-1]}")
            return Graded(notebook.name, lab, [], [], "; ".join(problems))
        result = json.loads(result_file.read_text())
    exercises = [ExerciseResult(**e) for e in result["exercises"]]
    return Graded(notebook.name, lab, exercises, result["reports"], "; ".join(problems) or None)


class GradingServer:
    """A process that imports otter once, then grades each submission sent to it in a child of
    its own (``os.fork``): the child's session, folder, environment and time limit are the
    submission's, and a child that runs past its limit is killed with its kernel. One request at
    a time; ``grade_folder`` starts one server per job."""

    def __init__(self) -> None:
        self._start()

    def _start(self) -> None:
        # -P: the caller's folder stays off sys.path (what the server imports is the package's)
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "grpo_minimal.instructor.grading"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True, text=True,
        )  # fmt: skip

    def grade(self, request: dict) -> dict:
        """The child's outcome: ``{"timed_out": bool, "exitcode": int | None}``, or an
        ``error`` when the server itself has ended (it is then restarted for the next one)."""
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            return json.loads(line)
        self.close()
        self._start()
        return {"timed_out": False, "exitcode": None, "error": "the grading server ended"}

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill_tree(self.process.pid)
        self.process.stdout.close()

    def __enter__(self) -> GradingServer:
        return self

    def __exit__(self, *_) -> None:
        self.close()


def _serve(requests: Iterator[str]) -> None:
    """Server loop: one JSON request per line in, one JSON outcome per line out (on the stdout
    it started with; anything else printed to stdout goes nowhere)."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    import otter.api  # noqa: F401  (imported here once; every child inherits it)

    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            out.close()  # the replies are the server's alone
            _graded_child(request)  # never returns
        deadline = time.monotonic() + request["timeout_s"]
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reply = {"timed_out": False, "exitcode": os.waitstatus_to_exitcode(status)}
                break
            if time.monotonic() >= deadline:
                _kill_tree(pid)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                reply = {"timed_out": True, "exitcode": None}
                break
            time.sleep(0.05)
        out.write(json.dumps(reply) + "\n")
        out.flush()


def _graded_child(request: dict) -> None:
    """In the forked child: a session, folder and environment of its own, stdout discarded and
    stderr to the log file; grade, write the result file, and exit (never return)."""
    code = 1
    try:
        os.setsid()
        os.chdir(Path(request["notebook"]).parent)
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDWR)
        log = os.open(request["log_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.dup2(log, 2)
        sys.stdin, sys.stdout = open(os.devnull), open(os.devnull, "w")  # noqa: SIM115
        sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
        _grade_one(request["notebook"], request["grader_dir"], request["result_file"])
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _thread_env(threads: int | None) -> dict[str, str]:
    """The environment with ``threads`` OpenMP threads (the kernel inherits it), or unchanged."""
    if threads is None:
        return dict(os.environ)
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def _kill_tree(pid: int) -> None:
    """Kill a process and every descendant (the notebook's kernel runs in its own session)."""
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


def grade_folder(
    folder: Path,
    out: Path,
    grader_dir: Path,
    timeout_s: float,
    jobs: int,
) -> list[dict]:
    """Grade every ``*.ipynb`` in ``folder``, ``jobs`` at a time; write ``out`` (CSV) and the
    feedback files.

    CSV columns: notebook, lab, per exercise its points and its first failure, total, possible,
    problem. Feedback: ``<out stem>-feedback/<notebook stem>.txt``, every failing check's message.
    """
    notebooks = sorted(Path(folder).glob("*.ipynb"))
    if not notebooks:
        raise FileNotFoundError(f"no .ipynb files in {folder}")
    # Copies first: a submission that deletes files cannot reach the ones graded after it.
    with contextlib.ExitStack() as stack:
        held = stack.enter_context(tempfile.TemporaryDirectory(prefix="lab-submissions-"))
        copies = [Path(shutil.copy(n, Path(held) / n.name)) for n in notebooks]
        # Jobs in parallel split the cores: two kernels with all threads each slow both down.
        threads = None if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)
        servers: SimpleQueue[GradingServer] = SimpleQueue()
        for _ in range(min(jobs, len(copies))):
            servers.put(stack.enter_context(GradingServer()))

        def grade(notebook: Path) -> Graded:  # each job grades with a server of its own
            server = servers.get()
            try:
                return grade_isolated(notebook, Path(grader_dir), timeout_s, server, threads)
            finally:
                servers.put(server)

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            graded = list(pool.map(grade, copies))
    out = Path(out)
    feedback_dir = out.parent / f"{out.stem}-feedback"
    feedback_dir.mkdir(parents=True, exist_ok=True)
    rows, columns = [], []
    for result in graded:
        row = {"notebook": result.notebook, "lab": result.lab}
        for exercise in result.exercises:
            row[exercise.name] = exercise.score
            row[f"{exercise.name} first failure"] = _case_name(exercise.first_failure)
            for column in (exercise.name, f"{exercise.name} first failure"):
                if column not in columns:
                    columns.append(column)
        row["total"] = sum(e.score for e in result.exercises)
        row["possible"] = sum(e.possible for e in result.exercises)
        row["problem"] = result.problem or ""
        rows.append(row)
        (feedback_dir / f"{Path(result.notebook).stem}.txt").write_text(_feedback(result))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as handle:
        header = ["notebook", "lab", *columns, "total", "possible", "problem"]
        writer = csv.DictWriter(handle, header, restval="")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def _case_name(message: str | None) -> str:
    """The first line that names the failing case, for one CSV cell."""
    if message is None:
        return ""
    for line in message.splitlines():
        if line.strip().startswith("case:"):
            return line.split("case:", 1)[1].strip()
    return message.strip().splitlines()[-1] if message.strip() else "failed"


def _feedback(result: Graded) -> str:
    total = sum(e.score for e in result.exercises)
    possible = sum(e.possible for e in result.exercises)
    lines = [f"{result.notebook} (lab {result.lab or '?'}): {total:g} / {possible:g} points"]
    if result.problem:
        lines.append(f"problem: {result.problem}")
    for exercise in result.exercises:
        lines.append("")
        status = "PASS" if exercise.passed else "FAIL"
        lines.append(f"{status}  {exercise.name}: {exercise.score:g} / {exercise.possible:g}")
        for message in exercise.failures:
            lines.append("      " + message.strip("\n").replace("\n", "\n      "))
    if result.reports:
        lines += ["", "measured:", *(f"  {r}" for r in result.reports)]
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


def _grade_one(notebook: str, grader_dir: str, result_file: str) -> None:
    """In the graded child: grade one notebook, write the results as JSON."""
    exercises, reports = grade_notebook_file(Path(notebook), Path(grader_dir))
    Path(result_file).write_text(
        json.dumps({"exercises": [asdict(e) for e in exercises], "reports": reports})
    )


if __name__ == "__main__":  # the grading server GradingServer starts
    _serve(sys.stdin)
