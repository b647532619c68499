"""A notebook judged apart: run in its kernel, then its checks run here (the judge), the
learner's functions called in the kernel (``judge.Kernel``) or, for a lab whose checks measure
them (``MEASURED_APART`` in ``grading.py``: a gradient, an update, a training run), in the
measurer (``measurer.py``), a second process where only the definitions they need ran.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from pathlib import Path
from typing import Any

from grpo_minimal.instructor import measurer
from grpo_minimal.instructor.definitions import definitions
from grpo_minimal.instructor.judge import Kernel, environment

_GRADER_CALL = re.compile(r"\s*grader\.(check|check_all|export)\(.*\)\s*", re.DOTALL)
_OTTER_SETUP = re.compile(
    r"\s*(#[^\n]*\n\s*)*import otter\s*\n\s*grader\s*=\s*otter\.Notebook\([^()]*\)\s*"
)
# what runs in place of otter's set-up cell: a `grader` whose calls do nothing (the checks run
# here, in the judge); importing otter took about 1 s of every graded kernel
_NO_CHECKS = (
    "class __GrpoNoChecks__:\n"
    "    def __getattr__(self, name):\n"
    "        return lambda *args, **kwargs: None\n\n"
    "grader = __GrpoNoChecks__()"
)


def _graded_cells(notebook) -> list[tuple[int, Any]]:
    """The code cells grading runs, with their index: not the ones otter skips when grading
    (tagged ``otter_ignore``), nor the learner-facing ``grader.check(...)`` / ``check_all()`` /
    ``export()`` cells (the judge runs the checks itself, once the whole notebook has run).
    otter's set-up cell (``grader = otter.Notebook(...)``) runs as ``_NO_CHECKS``."""
    cells = []
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code":
            continue
        if "otter_ignore" in (cell.get("metadata", {}).get("tags") or []):
            continue
        source = str(cell.get("source", ""))
        if _GRADER_CALL.fullmatch(source):
            continue
        if _OTTER_SETUP.fullmatch(source):
            cell["source"] = _NO_CHECKS
        cells.append((index, cell))
    return cells


def judge_notebook(
    notebook: Path,
    tests: dict[str, str],
    startup_timeout: int,
    measured: bool = False,
    own_processes: bool = False,
) -> tuple:
    """Run ``notebook`` in a kernel, then every check of ``tests`` (test file name -> otter
    exception-format source) here, the learner's functions called in that kernel or, with
    ``measured``, in a measurer.

    ``own_processes``: this process has a process-id namespace to itself (the sandbox's), so
    that every process but itself and the measurer is ended once the notebook has run (what
    the notebook left running cannot reach the measurer's exchange folder).

    Returns ``(results, reports, executed notebook)``: ``results`` maps each test file's name to
    its otter ``ExceptionTestFile`` (run), as otter's own results do.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError
    from otter.test_files import ExceptionTestFile

    notebook = Path(notebook)
    executed = nbformat.read(notebook, as_version=4)
    client = NotebookClient(
        executed,
        timeout=None,
        allow_errors=True,
        kernel_name="python3",
        startup_timeout=startup_timeout,
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    files = [
        ExceptionTestFile.from_string(source, path=f"tests/{name}.py")
        for name, source in sorted(tests.items())
    ]
    reports: list[str] = []
    graded = _graded_cells(executed)
    source = [str(cell.get("source", "")) for _, cell in graded]
    every_name = sorted({name for test_file in files for name in names_taken(test_file)})
    process = None
    if measured:  # before the kernel: no learner code exists yet
        modules = sorted({m for text in tests.values() for m in _LAB_MODULE.findall(text)})
        process = measurer.start([f"grpo_minimal.labs.{m}" for m in modules])
    try:
        with client.setup_kernel(), tempfile.TemporaryDirectory(prefix="lab-judge-") as exchange:
            for index, cell in graded:
                try:
                    client.execute_cell(cell, index)
                except DeadKernelError:  # the notebook ended its kernel: the checks say so
                    cell.setdefault("outputs", []).append(
                        nbformat.v4.new_output(
                            "error",
                            ename="DeadKernelError",
                            evalue="the kernel died while this cell ran",
                            traceback=[],
                        )
                    )
                    break
            kernel = Kernel(client, Path(exchange), source)
            described = kernel.describe(every_name)
            if process is None:
                _run_checks(files, environment(described, kernel), reports)
        if process is not None:
            if own_processes:
                end_other_processes(keep={process.pid})
            functions = [n for n, kind in described.items() if kind == ("function",)]
            with tempfile.TemporaryDirectory(prefix="lab-measure-") as folder:
                measuring = measurer.Measurer(
                    process, Path(folder), source, definitions(source, functions)
                )
                _run_checks(files, environment(described, measuring), reports)
    finally:
        if process is not None:
            with contextlib.suppress(Exception):
                process.kill()
                process.wait()
    return {f.name: f for f in files}, reports, executed


def names_taken(test_file) -> set[str]:
    """The notebook's names an otter test file's checks take (its functions and answers)."""
    return {name for case in test_file.test_cases for name in case.body._get_func_params()}


def _run_checks(files: list, env: dict[str, Any], reports: list[str]) -> None:
    """Run every test file on the names it takes from ``env``, the checks' reports kept."""
    from grpo_minimal.labs import checking

    saved, checking.REPORTS = checking.REPORTS, reports
    try:
        for test_file in files:
            test_file.run({name: env[name] for name in names_taken(test_file) if name in env})
    finally:
        checking.REPORTS = saved


_LAB_MODULE = re.compile(r"from grpo_minimal\.labs import ([a-z_]+)")
"""The lab's check modules, as its test files import them: the measurer imports them early."""


def end_other_processes(keep: set[int]) -> None:
    """Kill every process this one can see but itself, its ancestors (pid 1 and, graded as
    root, the second bwrap: ``sandbox.NO_USER_NAMESPACES``, whose end ends the job) and
    ``keep``: in the sandbox's process-id namespace, whatever the notebook left running (double
    forks and new sessions included). A few rounds, for processes forked while the last round
    ran."""
    import os
    import signal
    import time

    spared = {1, os.getpid(), *keep}
    pid = os.getppid()
    while pid > 1 and pid not in spared:  # this process's own line, up to the sandbox's init
        spared.add(pid)
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                pid = int(handle.read().rsplit(b")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    for _ in range(50):
        killed = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in spared:
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    if handle.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                        continue  # ended already, not yet reaped
                os.kill(int(entry), signal.SIGKILL)
                killed = True
            except (OSError, IndexError):
                continue
        if not killed:
            return
        time.sleep(0.01)
