"""``grpo-minimal lab check | grade | build``: the classroom labs' commands (``cli.py`` adds them).

The grading server and the build are imported when a command runs, never when the CLI starts.

Each command is a ``prepare`` (checks its arguments: a bad one is one line and exit status 2)
and a ``run`` (does the work and returns the JSON summary ``cli.main`` prints).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from ..extras import require

DEFAULT_TIMEOUT_S = 900.0
"""Seconds one notebook may take to grade (``lab grade --timeout``)."""


def prepare_lab_check(args: argparse.Namespace) -> Path:
    require("labs", "grpo-minimal lab check")
    notebook = Path(args.notebook)
    if notebook.suffix != ".ipynb" or not notebook.is_file():
        raise ValueError(f"notebook: no .ipynb file at {notebook}")
    from .grading import lab_name

    lab_name(notebook)  # a lab notebook, or a clear error
    return notebook


def run_lab_check(args: argparse.Namespace, notebook: Path) -> dict:
    from .grading import check_notebook, syntax_errors

    for problem in syntax_errors(notebook):  # said first: the checks below cannot see it
        print(f"ERROR {problem}")
    results = check_notebook(notebook)
    for result in results:
        print(f"{'PASS' if result.passed else 'FAIL'}  {result.name}")
        if not result.passed:
            print("      " + result.first_failure.replace("\n", "\n      "))
    failed = [r.name for r in results if not r.passed]
    return {"notebook": str(notebook), "passed": len(results) - len(failed), "failed": failed}


def prepare_lab_grade(args: argparse.Namespace) -> Path:
    require("labs", "grpo-minimal lab grade")
    folder = Path(args.folder)
    if not folder.is_dir() or not any(folder.glob("*.ipynb")):
        raise ValueError(f"folder: {folder} holds no submitted .ipynb notebooks")
    if not Path(args.grader).is_dir():
        raise ValueError(f"--grader: no folder {args.grader}; run `make labs` to build the graders")
    if not args.timeout > 0:
        raise ValueError(f"--timeout: {args.timeout} s; give a positive number of seconds")
    if args.jobs < 1:
        raise ValueError(f"--jobs: {args.jobs}; give a whole number >= 1")
    args.limits = job_limits(args.job_memory, args.job_processes)
    from .classroom import job_bound
    from .sandbox import missing_tools, probe

    if not args.no_sandbox and (missing := missing_tools()):
        raise ValueError(
            f"--no-sandbox: {' and '.join(missing)} not found; each submission is graded in a "
            "bubblewrap sandbox (Debian/Ubuntu: apt install bubblewrap util-linux). Without one, "
            "--no-sandbox grades trusting every submission (instructor guide, 'Grading')"
        )
    if not args.no_sandbox and (why := probe()):
        raise ValueError(
            f"--no-sandbox: the bubblewrap sandbox does not start here ({why}); without one, "
            "--no-sandbox grades trusting every submission (instructor guide, 'Grading')"
        )
    if not args.no_sandbox:  # which bound holds, said before grading starts
        print(job_bound(args.limits, args.jobs, not args.no_cgroup), file=sys.stderr)
    return folder


SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([MGT])(?:i?B)?", re.IGNORECASE)
MIN_JOB_MEMORY_MIB = 1024
"""A job's smallest memory bound: the grading process and a kernel that imports torch hold some
400 MB together (the hostile class's right notebooks, measured)."""
MIN_JOB_PROCESSES = 64
"""A job's fewest processes and threads: its grading process, kernel and their threads (some 21
for a right notebook, measured), with room for what a lab's code starts."""


def job_limits(memory: str, processes: int):
    """The sandbox's limits with ``lab grade --job-memory`` and ``--job-processes``; a
    ``ValueError`` in one line for a value that cannot be one."""
    from .sandbox import Limits

    match = SIZE.fullmatch(memory.strip())
    if match is None:
        raise ValueError(f"--job-memory: {memory!r}; give a size such as 4G or 512M")
    gib = float(match.group(1)) / {"m": 1024, "g": 1, "t": 1 / 1024}[match.group(2).lower()]
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    if gib * 1024 < MIN_JOB_MEMORY_MIB or gib > machine:
        raise ValueError(
            f"--job-memory: {memory}; give at least {MIN_JOB_MEMORY_MIB}M and at "
            f"most this machine's {machine:.1f}G"
        )
    if processes < MIN_JOB_PROCESSES:
        raise ValueError(
            f"--job-processes: {processes}; give a whole number >= "
            f"{MIN_JOB_PROCESSES} (a kernel runs a few dozen threads)"
        )
    return Limits(processes=processes, job_memory_gib=gib)


def run_lab_grade(args: argparse.Namespace, folder: Path) -> dict:
    from .classroom import grade_folder

    def show(row: dict) -> None:  # each row as it is written (its text cells made printable)
        problem = f"  ({row['problem'][:200]})" if row["problem"] else ""
        print(f"{row['total']:g} / {row['possible']:g}  {row['notebook']}{problem}", flush=True)

    out = Path(args.out)
    try:
        rows = grade_folder(
            folder,
            out,
            Path(args.grader),
            args.timeout,
            args.jobs,
            use_sandbox=not args.no_sandbox,
            on_row=show,
            limits=args.limits,
            cgroup=not args.no_cgroup,
        )
    except KeyboardInterrupt:
        print(
            f"interrupted: every grading process was stopped; the rows written so far are in {out}",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    return {
        "graded": len(rows),
        "out": str(out),
        "feedback": str(out.parent / f"{out.stem}-feedback"),
        "instructor": str(out.parent / f"{out.stem}-instructor"),
        "sandbox": not args.no_sandbox,
    }


def prepare_lab_build(args: argparse.Namespace) -> None:
    require("labs", "grpo-minimal lab build")
    from .build import STUDENT_DIR, lab_sources, refuse_to_overwrite

    if args.seed is not None and args.seed < 0:
        raise ValueError(f"--seed: {args.seed} is negative; give a whole number >= 0")
    if not args.check and not args.force:
        refuse_to_overwrite(STUDENT_DIR, lab_sources(only=args.only))


def run_lab_build(args: argparse.Namespace, _: None) -> dict:
    from .build import GRADER_DIR, build_labs, check_student_notebooks

    if args.check:
        stale = check_student_notebooks()
        for name in stale:
            print(
                f"notebooks/labs/{name}.ipynb differs from instructor/labs/{name}.py: run make labs"
            )
        return {"stale": stale, "failed": stale}
    built, seed = build_labs(
        run_tests=args.run_tests, only=args.only, seed=args.seed, force=args.force
    )
    print(
        f"hidden checks drawn from a seed per lab, derived from {'your' if args.seed is not None else 'a random'} "
        f"secret: the seeds are written only into {GRADER_DIR} (zips and solutions)"
    )
    summary = {"built": built, "grader": str(GRADER_DIR)}
    if args.show_secret:
        summary["grader_secret"] = seed
    return summary


def add_lab_commands(commands) -> None:
    """The ``lab`` command and its three subcommands, on ``grpo-minimal``'s subparsers."""
    lab = commands.add_parser("lab", help="classroom labs: check, grade, build (otter-grader)")
    lab_commands = lab.add_subparsers(dest="lab_command", required=True)
    check = lab_commands.add_parser(
        "check",
        help="run a lab notebook top to bottom and its public checks: PASS or the first "
        "failing case per exercise; exit status 1 when any fails",
    )
    check.add_argument("notebook", help="a lab notebook, e.g. notebooks/labs/01_advantages.ipynb")
    check.set_defaults(prepare=prepare_lab_check, func=run_lab_check)
    grade = lab_commands.add_parser(
        "grade", help="grade a folder of submitted lab notebooks with the hidden checks (CSV)"
    )
    grade.add_argument("folder", help="folder of submitted .ipynb notebooks")
    grade.add_argument(
        "--out",
        default="grades.csv",
        help="CSV: one row per notebook; feedback files go to <out stem>-feedback/ beside it",
    )
    grade.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help="seconds one notebook may take to grade before it is stopped (default %(default)g)",
    )
    grade.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="notebooks graded at once, each in its own process with its own kernel (default 1)",
    )
    grade.add_argument(
        "--grader", default="build/labs", help="folder of NN_name-autograder.zip (make labs)"
    )
    grade.add_argument(
        "--job-memory",
        default="8G",
        help="memory one job may hold, all its processes and files in memory together, e.g. 4G "
        "or 512M (default %(default)s): two jobs of 8G do not fit a 16 GB laptop",
    )
    grade.add_argument(
        "--job-processes",
        type=int,
        default=512,
        help="processes and threads one job may run together (default %(default)s)",
    )
    grade.add_argument(
        "--no-cgroup",
        action="store_true",
        help="bound each job with the watchdog even where it could have a cgroup (as root on "
        "cgroup v1): what an ordinary user's grading does",
    )
    grade.add_argument(
        "--no-sandbox",
        action="store_true",
        help="grade without bubblewrap: every submission runs with your rights and can read, "
        "change or delete your files and its classmates' (only for work you trust)",
    )
    grade.set_defaults(prepare=prepare_lab_grade, func=run_lab_grade)
    build = lab_commands.add_parser(
        "build",
        help="instructor/labs/*.py -> notebooks/labs/*.ipynb (student) + build/labs (grader)",
    )
    build.add_argument(
        "--check", action="store_true", help="only report student notebooks that are stale"
    )
    build.add_argument(
        "--run-tests", action="store_true", help="let otter run every check on the solutions"
    )
    build.add_argument("--only", help="build one lab, e.g. 01_advantages")
    build.add_argument(
        "--seed",
        type=int,
        help="the instructor's secret: each lab's hidden cases are drawn from a seed derived "
        "from it (default: a random one, never printed)",
    )
    build.add_argument(
        "--show-secret", action="store_true", help="print the secret in the JSON summary"
    )
    build.add_argument(
        "--force", action="store_true", help="overwrite student notebooks a learner has changed"
    )
    build.set_defaults(prepare=prepare_lab_build, func=run_lab_build)
