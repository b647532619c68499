"""Grade a folder of submissions, a class: each in a sandbox of its own, rows as they arrive.

Each submission is graded by a process of its own (``grading.py`` run as a script), in a
bubblewrap sandbox (``sandbox.py``), in a scratch folder holding a copy of it and its lab's zip
alone, under a time limit. Whatever one submission does (loop forever, fail to parse, not be a
lab, delete files, fork, read the process table, crash the grader) costs its own row, with the
reason, and nothing else; all its processes end with its sandbox. Rows are written to the CSV as
results arrive, so a crash or a Ctrl-C after k submissions leaves k rows (Ctrl-C also kills every
job in flight).

Beside the CSV, ``<stem>-feedback/NAME.txt`` is the learner's and ``<stem>-instructor/NAME.txt``
the instructor's (``feedback.py``).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from grpo_minimal.instructor import cgroups, sandbox, watchdog
from grpo_minimal.instructor.feedback import feedback_text
from grpo_minimal.instructor.feedback import row as make_row
from grpo_minimal.instructor.grading import (
    JUDGED_APART,
    LIMIT_ERRORS,
    MAX_CELL_ERRORS,
    MAX_SYNTAX_ERRORS,
    ExerciseResult,
    Graded,
    checks_at_the_end,
    lab_exercises,
    lab_name,
    lab_tests,
    signed_outcome,
)
from grpo_minimal.labs.checking import GRADING_ENV

MAX_SUBMISSION_BYTES = 16 * 2**20
"""A submitted notebook's largest size: a lab notebook is tens of kB, a few MB with plots."""


def submission_problem(path: Path) -> str | None:
    """Why a file of the class folder is not graded, found without opening it: a symbolic link
    (to the solution, to /dev/zero), anything but a regular file (a FIFO would block the
    reader), or a file over ``MAX_SUBMISSION_BYTES``; None for a file that may be read."""
    try:
        info = os.lstat(path)
    except OSError as error:
        return f"cannot be read: {error.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link, not a notebook: submit the notebook file itself"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a folder, a FIFO or a device): submit the notebook file"
    if info.st_size > MAX_SUBMISSION_BYTES:
        return (
            f"{info.st_size / 2**20:.0f} MiB, over the {MAX_SUBMISSION_BYTES // 2**20} MiB "
            "a submission may be: clear the outputs and submit again"
        )
    return None


class Grader:
    """Grades one submission at a time in a sandboxed process (``sandbox.py``); ``slot`` is the
    job's number (its user id under root). Each job is bounded by ``limits`` together: in a
    cgroup of its own (``per_job``) or, in a sandbox without one, by the watchdog, which also
    ends a job whose threads wanting a core average more than ``watchdog.CPU_SLACK`` times its
    share, ``cores``. ``kill`` ends what is in flight (Ctrl-C)."""

    def __init__(
        self,
        grader_dir: Path,
        timeout_s: float,
        slot: int,
        threads: int | None,
        use_sandbox: bool,
        hidden: list[Path],
        per_job: bool = False,
        limits: sandbox.Limits | None = None,
        cores: float | None = None,
    ) -> None:
        self.grader_dir, self.timeout_s, self.slot = Path(grader_dir), timeout_s, slot
        self.threads, self.use_sandbox, self.hidden = threads, use_sandbox, hidden
        self.per_job = per_job  # each job in a cgroup of its own (cgroups.py)
        self.limits = limits or LIMITS
        self.cores = cores or float(os.cpu_count() or 1)  # its share of the machine's
        self._process: subprocess.Popen | None = None
        self._killed = False
        self._starting = threading.Lock()
        self._ended: str | None = None  # the bound the last job met ("memory", "cpu", ...)

    def grade(self, notebook: Path) -> Graded:
        """Grade ``notebook``; any failure becomes its row's problem. A kernel that did not start
        (a loaded machine) is given one more try."""
        notebook = Path(notebook)
        if problem := submission_problem(notebook):
            return Graded(notebook.name, "", [], [], problem)
        try:
            lab = lab_name(notebook)
        except ValueError as error:
            return Graded(notebook.name, "", [], [], str(error))
        autograder = self.grader_dir / f"{lab}-autograder.zip"
        if not autograder.is_file():
            return Graded(notebook.name, lab, [], [], f"no lab {lab!r} in {self.grader_dir}")
        points = lab_exercises(autograder)
        for _ in range(2):
            graded = self._run(notebook, lab, autograder, points)
            if "Kernel didn't respond" not in (graded.problem or "") or self._killed:
                break
        return graded

    def _run(self, notebook: Path, lab: str, autograder: Path, points: dict[str, float]) -> Graded:
        scratch = Path(tempfile.mkdtemp(prefix="lab-grade-"))
        try:
            (scratch / "home").mkdir()
            # named as the lab's notebook, as otter's first cell opens it (never the learner's
            # file name, which stays outside)
            copy = scratch / f"{lab}.ipynb"
            copy.write_bytes(checks_at_the_end(notebook.read_bytes()))
            request = {
                "notebook": str(copy),
                "grader_dir": str(scratch),
                "own_processes": self.use_sandbox,
            }  # a pid namespace of its own
            if lab in JUDGED_APART:  # the tests travel on the judge's stdin, never on disk
                request["tests"] = lab_tests(autograder)
            else:  # otter checks in the kernel, from the zip
                shutil.copyfile(autograder, scratch / autograder.name)
            uid = sandbox.job_uid(self.slot) if self.use_sandbox else None
            if uid is not None:
                for path in [scratch, *scratch.rglob("*")]:
                    os.chown(path, uid, uid)
            outcome, log = self._execute(scratch, request)
        except OSError as error:
            return Graded(notebook.name, lab, [], [], f"grading failed: {error}")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

        def row(problems: list[str], exercises=(), reports=(), errors=()) -> Graded:
            return Graded(
                notebook.name,
                lab,
                list(exercises),
                list(reports),
                "; ".join(problems) or None,
                log,
                list(errors),
            )

        if self._ended is not None:  # ended whole at a bound of the job's: that is its row
            return row([bound_met(self._ended, self.limits, self.cores)])
        if outcome.get("timed_out"):
            return row([f"stopped after the time limit of {self.timeout_s:g} s (an endless loop?)"])
        if "exercises" not in outcome and "error" in outcome and "syntax_errors" not in outcome:
            return row([f"grading failed: {outcome['error']}"])
        if why := invalid_result(outcome, points):  # nothing from the sandbox is believed unread
            return row([f"invalid result: {why}"])
        problems = outcome["syntax_errors"]
        if "exercises" not in outcome:
            error = str(outcome.get("error") or "the grading process ended without a result")
            return row([*problems, f"grading failed: {error[:300]}"])
        exercises = [ExerciseResult(**e) for e in outcome["exercises"]]
        errors = outcome.get("cell_errors", [])
        return row([*problems, *limits_reached(errors)], exercises, outcome["reports"], errors)

    def _execute(self, scratch: Path, request: dict) -> tuple[dict, str]:
        """Run the graded process in ``scratch`` on ``request`` (given on its stdin); its outcome
        (the JSON line it wrote on its result channel) and its stderr.

        The result channel is a pipe of its own on a file descriptor above 2, never stdout:
        bwrap's init keeps the standard three open (a submission running as the same user, as
        an ordinary user grades, could write into ``/proc/1/fd/1``) and closes every other, and
        the graded process is not dumpable, so only it can write there."""
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch / "home"),
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "USER": "learner",
            "LOGNAME": "learner",
            "MPLBACKEND": "Agg",
            "HF_HUB_OFFLINE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            GRADING_ENV: "1",
        }
        env.update({k: v for k, v in os.environ.items() if k == "GRPO_QUICK"})
        if self.threads is not None:
            env |= {"OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        # -P: the scratch folder stays off sys.path (what it imports is the package's)
        argv = [sys.executable, "-P", "-m", "grpo_minimal.instructor.grading"]
        self._ended = None
        if self.use_sandbox:
            argv = sandbox.command(
                argv, scratch, self.hidden, sandbox.readable_folders(), env, self.slot, self.limits
            )
        else:
            env = {**os.environ, **env}
        group = None
        if self.per_job:  # every process of the job in one cgroup, made for it alone
            group = cgroups.JobGroup(
                f"{cgroups.GROUP_PREFIX}{os.getpid()}-{self.slot}",
                self.limits.job_memory_bytes,
                self.limits.processes,
            )
        channel, result_fd = os.pipe()
        try:
            with self._starting:  # kill() takes it too: a job starts before it, or never
                if self._killed:
                    raise _Interrupted
                if group is not None:
                    group.create()
                    argv = group.wrap(argv)
                self._process = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    # a pipe, never a file: bwrap's init holds it, and a cell may write to it
                    stderr=subprocess.PIPE,
                    env=env,
                    cwd=scratch,
                    start_new_session=True,
                    pass_fds=(result_fd,),
                )
        except (OSError, _Interrupted) as error:
            os.close(channel)
            if group is not None:
                group.remove()
            if isinstance(error, _Interrupted):
                return {"error": "grading was interrupted"}, ""
            raise
        finally:
            os.close(result_fd)  # the graded process holds the only writing end
        log = _Drain(self._process.stderr)
        watch = None
        try:
            if group is not None:  # the kernel kills one process at the limit: end the rest
                watch = watchdog.GroupWatch(group.out_of_memory, self._end).start()
            elif self.use_sandbox:  # no cgroup: the watchdog bounds the job from outside
                watch = watchdog.Watchdog(
                    self._process.pid,
                    self.limits.job_memory_bytes,
                    self.limits.processes,
                    self.cores,
                    [str(scratch), "/tmp", "/dev/shm"],
                ).start()
            key = secrets.token_bytes(32)  # signs the one result this job believes
            out = _bounded_exchange(
                self._process,
                channel,
                json.dumps({**request, "result_key": key.hex(), "result_fd": result_fd}).encode(),
                self.timeout_s,
            )
            if len(out) > MAX_RESULT_BYTES:
                outcome = {"error": f"its result passed {MAX_RESULT_BYTES // 2**20} MiB"}
            elif (outcome := signed_outcome(out, key)) is None:
                outcome = {
                    "error": "no result signed by its grading process (a forged or "
                    "broken result line?)"
                }
        except subprocess.TimeoutExpired:
            self._end()
            outcome = {"timed_out": True}
        finally:
            self._end()
            if watch is not None:
                self._ended = watch.stop()
            if group is not None:  # nothing of the job outlives it, its group neither
                self._ended = "memory" if group.out_of_memory() else self._ended
                group.remove()
            with self._starting:  # ended and reaped: no later kill() signals its number
                self._process = None
        text = log.text()
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
        with self._starting:  # a job being started now is started first, then ended here
            self._killed = True
        self._end()


LIMITS = sandbox.Limits()
"""The sandbox's limits every job is graded under (its rows name them)."""
_MEMORY = f"memory limit: a cell ran out of the {LIMITS.memory_gib:g} GiB a process may hold"
LIMIT_SIGNS = {
    "No space left on device": "disk limit: a cell filled one of the job's places to write "
    f"(scratch, /tmp, /dev/shm: {LIMITS.disk_gib:g} GiB each)",
    "File too large": f"file limit: a cell wrote past {LIMITS.file_gib:g} GiB in one file",
    "MemoryError": _MEMORY,
    "Cannot allocate memory": _MEMORY,
}
"""What a cell's error says when the job reached one of the sandbox's limits, and the row's
problem that names it."""


def limits_reached(cell_errors: list[dict]) -> list[str]:
    """The sandbox limits a notebook's cells ran into, one problem each (the row says "disk
    limit", not only the learner's OSError)."""
    found = [
        label
        for sign, label in LIMIT_SIGNS.items()
        if any(sign in error["error"] for error in cell_errors)
    ]
    return list(dict.fromkeys(found))


def bound_met(bound: str, limits: sandbox.Limits, cores: float) -> str:
    """The row's problem for a job ended whole at one of its bounds (``watchdog``'s reasons)."""
    memory = f"{limits.job_memory_gib:g} GiB"
    busy = (
        f"{cores * watchdog.CPU_SLACK:g} threads wanting a core, on average over "
        f"{watchdog.CPU_WINDOW_S:g} s"
    )
    return {
        "memory": f"memory limit: the job's processes and files in memory passed {memory} together",
        "processes": f"process limit: the job ran more than {limits.processes} processes and threads",
        "cpu": f"CPU limit: the job kept more than {busy} (its share: {cores:g})",
        "error": "watchdog error: the job could not be watched (a bug of the grader's); grade "
        "this notebook again",
    }[bound] + "; it was ended"


MAX_RESULT_BYTES = 1 << 20
"""The most a graded process may write as its result (one JSON line); more is read no further."""


class _Drain:
    """Reads a pipe to its end in a thread of its own, keeping the first ``MAX_LOG_BYTES``: a
    job's stderr, where a submission can write as much as it likes."""

    def __init__(self, stream) -> None:
        self.kept = bytearray()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        with contextlib.suppress(OSError, ValueError), stream:
            while chunk := stream.read1(1 << 16):
                if len(self.kept) < MAX_LOG_BYTES:
                    self.kept += chunk[: MAX_LOG_BYTES - len(self.kept)]

    def text(self) -> str:
        self._thread.join(timeout=5)  # the job has ended: its end of the pipe is closed
        return bytes(self.kept).decode(errors="replace")


MAX_LOG_BYTES = 1 << 20
"""What a job's stderr log keeps (the instructor's feedback shows its end)."""


class _Interrupted(Exception):
    """Grading was interrupted before this job started."""


def _bounded_exchange(
    process: subprocess.Popen, channel: int, request: bytes, timeout_s: float
) -> bytes:
    """Give ``request`` to the process's stdin and read the pipe ``channel`` (then closed) until
    it closes, keeping at most ``MAX_RESULT_BYTES + 1`` bytes (more stops the reading, and the
    caller ends the process); ``TimeoutExpired`` after ``timeout_s``."""

    def feed() -> None:
        with contextlib.suppress(OSError):  # a process that never reads it, or died
            process.stdin.write(request)
            process.stdin.close()

    read: list[bytes] = []
    threading.Thread(target=feed, daemon=True).start()

    def receive() -> None:
        with open(channel, "rb") as result:
            read.append(result.read(MAX_RESULT_BYTES + 1))

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if reader.is_alive():
        raise subprocess.TimeoutExpired(process.args, timeout_s)
    return read[0]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _strings(value, most: int) -> bool:
    return isinstance(value, list) and len(value) <= most and all(isinstance(v, str) for v in value)


EXERCISE_FIELDS = {field.name for field in dataclasses.fields(ExerciseResult)}
"""What the grading process writes of an exercise (``asdict`` of an ``ExerciseResult``)."""


def invalid_result(outcome: dict, points: dict[str, float]) -> str | None:
    """Why a graded process's result cannot be a grade of this lab, or None. It must name each
    exercise at most once and only the lab's own, with a finite score between 0 and what the
    lab's zip says the exercise is worth, and text where text belongs: a submission that writes
    its own result line (or breaks ours) gets this reason as its row, and no classmate's row
    changes."""
    problems = outcome.get("syntax_errors")
    if not _strings(problems, MAX_SYNTAX_ERRORS) or any(len(p) > 300 for p in problems):
        return "its syntax errors are not the grader's"
    if "exercises" not in outcome:  # the graded process failed, and said why
        return None if isinstance(outcome.get("error"), str) else "no exercises and no error"
    exercises = outcome.get("exercises")
    if not isinstance(exercises, list) or len(exercises) > len(points):
        return "no list of the lab's exercises"
    seen = set()
    for exercise in exercises:
        if not isinstance(exercise, dict) or set(exercise) != EXERCISE_FIELDS:
            return "an exercise's fields are not the grader's"
        name = exercise["name"]
        if not isinstance(name, str) or name not in points or name in seen:
            return f"an exercise the lab does not have, or named twice ({str(name)[:40]!r})"
        seen.add(name)
        score, possible = exercise["score"], exercise["possible"]
        if not (_number(score) and _number(possible) and possible == points[name]):
            return f"{name}: its points are not numbers, or not what the lab gives"
        if not 0 <= score <= possible:
            return f"{name}: a score of {score:g} is outside 0 to {possible:g}"
        failures, hidden = exercise["failures"], exercise["hidden"]
        if (
            not _strings(failures, 1000)
            or not isinstance(hidden, list)
            or not all(isinstance(h, bool) for h in hidden)
            or len(hidden) not in (0, len(failures))
        ):
            return f"{name}: its failures are not the grader's"
    if not _strings(outcome.get("reports"), 50):
        return "its reports are not a list of text"
    errors = outcome.get("cell_errors", [])
    if (
        not isinstance(errors, list)
        or len(errors) > MAX_CELL_ERRORS + 1 + len(LIMIT_ERRORS)
        or not all(
            isinstance(e, dict)
            and set(e) == {"cell", "error", "traceback"}
            and all(isinstance(v, str) for v in e.values())
            for e in errors
        )
    ):
        return "its cell errors are not the grader's"
    return None


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


def _kept_from_submissions(folder: Path, out: Path, grader_dir: Path) -> list[Path]:
    """What a sandbox must not see: the class folder, the graders, the output, the instructor's
    home and working folder."""
    return [Path(folder), Path(grader_dir), Path(out).parent, Path.home(), Path.cwd()]


def cpu_share(jobs: int) -> float:
    """The cores a job may hold (the watchdog's CPU bound, times ``watchdog.CPU_SLACK``)."""
    return (os.cpu_count() or 1) / jobs


def job_bound(limits: sandbox.Limits, jobs: int, cgroup: bool = True) -> str:
    """What bounds each job together, in the one line ``lab grade`` says before grading."""
    sizes = f"{limits.job_memory_gib:g} GiB of memory and {limits.processes} processes"
    if cgroup and (why := cgroups.available()) is None:
        return (
            f"lab grade: each job in a cgroup (v1) of its own: {sizes} together, an equal CPU share"
        )
    why = "switched off" if cgroup is False else why
    return (
        f"lab grade: no cgroup per job here ({why}): the watchdog bounds each job to {sizes}"
        f" together, polled every {watchdog.POLL_S:g} s, and ends one whose threads wanting a core "
        f"average more than {cpu_share(jobs) * watchdog.CPU_SLACK:g} over "
        f"{watchdog.CPU_WINDOW_S:g} s ({os.cpu_count()} cores here; instructor guide, 'What "
        "holds in each mode')"
    )


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
    limits: sandbox.Limits | None = None,
    cgroup: bool = True,
) -> list[dict]:
    """Grade every ``*.ipynb`` in ``folder``, ``jobs`` at a time; write ``out`` (CSV), the
    learners' feedback files and the instructor's, row by row as results arrive.

    CSV columns: notebook, lab, per exercise its points and its first failing case (named
    ``lab/exercise`` when the folder mixes labs), total, possible (always: read from the lab's
    zip), problem, seconds (to grade it). ``on_row(row)`` is called after each row is written.
    Each job is bounded by ``limits`` (``LIMITS`` by default) together: by a cgroup of its own
    where one can be made and ``cgroup`` allows it, else by the watchdog (``job_bound``).
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
        if submission_problem(notebook) is None:  # never open a FIFO, a link or a huge file
            with contextlib.suppress(ValueError):
                labs[notebook] = lab_name(notebook)
    exercises = {}  # lab -> {exercise: points}
    for lab in sorted(set(labs.values())):
        with contextlib.suppress(Exception):  # no such lab: its rows say so
            exercises[lab] = lab_exercises(Path(grader_dir) / f"{lab}-autograder.zip")
    mixed = len(exercises) > 1

    def column(lab: str, name: str) -> str:
        return f"{lab}/{name}" if mixed else name

    columns = [
        c
        for lab, names in exercises.items()
        for n in names
        for c in (column(lab, n), f"{column(lab, n)} first failure")
    ]
    header = ["notebook", "lab", *columns, "total", "possible", "problem", "seconds"]
    feedback_dir = out.parent / f"{out.stem}-feedback"
    instructor_dir = out.parent / f"{out.stem}-instructor"
    for directory in (feedback_dir, instructor_dir):
        directory.mkdir(parents=True, exist_ok=True)
    hidden = _kept_from_submissions(folder, out, grader_dir)
    threads = None if jobs == 1 else max(1, (os.cpu_count() or 1) // jobs)
    slots: list[tuple[int, object | None]] = []
    for _ in range(min(jobs, len(notebooks))):  # job numbers no other grading uses now
        slots.append(sandbox.claim_slot({slot for slot, _ in slots}))
    per_job = use_sandbox and cgroup and cgroups.available() is None
    cores = cpu_share(jobs)
    graders = [
        Grader(grader_dir, timeout_s, slot, threads, use_sandbox, hidden, per_job, limits, cores)
        for slot, _ in slots
    ]
    free = list(graders)
    lock = threading.Lock()

    def grade(notebook: Path) -> Graded:
        with lock:
            grader = free.pop()
        start = time.monotonic()
        try:
            graded = grader.grade(notebook)
        except Exception as error:  # a bug of ours stays this submission's row
            graded = Graded(
                notebook.name,
                labs.get(notebook, ""),
                [],
                [],
                f"grading failed: {type(error).__name__}: {error}",
                traceback.format_exc(),
            )
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
                    row = make_row(result, points, column)
                    writer.writerow(row)
                    handle.flush()
                    name = Path(result.notebook).stem
                    (feedback_dir / f"{name}.txt").write_text(
                        feedback_text(result, True, row["possible"])
                    )
                    (instructor_dir / f"{name}.txt").write_text(
                        feedback_text(result, False, row["possible"])
                    )
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
        except BaseException:  # Ctrl-C, or a crash here: nothing graded goes on
            for grader in graders:
                grader.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            for _, claimed in slots:  # the job numbers are free once their jobs have ended
                if claimed is not None:
                    claimed.close()
        pool.shutdown(wait=True)
    return rows
