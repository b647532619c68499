"""The roads a learner takes without a checkout, run for real (``make test``'s last stage).

Builds the sdist from this checkout and the wheel from the sdist, installs the wheel with torch
alone into a fresh venv, and from an empty folder, with the Hugging Face Hub offline:

1. runs every command once (``cartpole``, ``evaluate cartpole``, ``math``, ``evaluate math``,
   ``math --dataset reasoning --model tiny-reasoning``) and checks that ``math`` gives the same
   accuracies as the checkout does (same seed, one thread);
2. checks that a missing extra is one line naming it (``lab check`` without ``[labs]``,
   ``math --backend trl`` without ``[trl]``), exit status 2;
3. runs each course notebook copied alone into an empty folder, in quick mode, under nbval (the
   test tools pytest, nbval and pytest-xdist are the only other installs);
4. installs the ``labs`` extra, checks a solved lab with ``grpo-minimal lab check``, and in a
   folder holding only the lab sources, builds the lab (``lab build``) and grades the solved
   notebook with it (``lab grade``): full marks.

Usage: ``python tests/wheel_smoke.py [--keep DIR] [--skip-notebooks] [--workers N]``. Exit
status 0 when all pass; each failure is printed with the command and its output. ``make test``
runs it as one test of the suite (``tests/test_wheel.py``), beside the others on one worker.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lab_helpers import PACKAGE_ANSWERS_01, filled_lab  # tests/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
TORCH = "torch==2.13.0"
TEST_TOOLS = ("pytest", "nbval", "pytest-xdist")  # to run the notebooks, nothing they import


def run(cmd: list[str], cwd: Path, env: dict, expect: int = 0) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)
    if done.returncode != expect:
        sys.exit(
            f"wheel smoke: {' '.join(cmd)} exited {done.returncode}, expected {expect}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
    return done


def summary(done: subprocess.CompletedProcess) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_line_naming(done: subprocess.CompletedProcess, extra: str) -> None:
    lines = done.stderr.strip().splitlines()
    if len(lines) != 1 or f"[{extra}]" not in lines[0] or "Traceback" in done.stderr:
        sys.exit(
            f"wheel smoke: a missing [{extra}] should be one line naming it, got:\n{done.stderr}"
        )
    print("  ", lines[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temp folder)")
    parser.add_argument("--skip-notebooks", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (notebooks)")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="grpo-wheel-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        smoke(work, args.skip_notebooks, args.workers)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("wheel smoke: passed")


def smoke(work: Path, skip_notebooks: bool, workers: int) -> None:
    # nothing of the caller's venv or pytest run (make test runs this from an xdist worker)
    skip = ("VIRTUAL_ENV", "PYTHON", "PYTEST_")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    base_env.update(
        HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"
    )
    # --no-compile: no byte-compiling of every installed module (a minute of CPU); Python compiles
    # what it imports
    pip_quiet = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]

    # the sdist first, then the wheel from it: what MANIFEST.in leaves out, the wheel lacks
    dist = work / "dist"
    # --no-isolation: the build backend is this venv's setuptools (pyproject's floor holds; the
    # [dev] extra installs `build`), not one downloaded into a fresh build env for each build
    run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        ROOT,
        base_env,
    )
    (wheel,) = dist.glob("grpo_minimal-*.whl")
    venv = work / "venv"
    run([sys.executable, "-m", "venv", str(venv)], work, base_env)
    python = str(venv / "bin" / "python")
    env = dict(base_env, PATH=f"{venv / 'bin'}{os.pathsep}{base_env['PATH']}")
    index = ["--index-url", os.environ["TORCH_INDEX"]] if os.environ.get("TORCH_INDEX") else []
    run([python, *pip_quiet, TORCH, *index], work, env)  # make test TORCH_INDEX=... on a plain PyPI
    run([python, *pip_quiet, str(wheel), *TEST_TOOLS, "-c", str(CONSTRAINTS)], work, env)

    empty = work / "empty"
    empty.mkdir()
    cli = [str(venv / "bin" / "grpo-minimal")]
    # 1. every command once, from an empty folder
    run([*cli, "cartpole", "--total-env-steps", "3000", "--out", "cp", "--no-progress"], empty, env)
    summary(
        run(
            [*cli, "evaluate", "cartpole", "--policy", "cp/policy.pt", "--episodes", "5"],
            empty,
            env,
        )
    )
    math = ["math", "--max-steps", "3", "--eval-n", "100", "--no-progress"]
    wheel_run = summary(run([*cli, *math, "--out", "m"], empty, env))
    checkout_run = summary(
        run(
            [sys.executable, "-m", "grpo_minimal", *math, "--out", str(work / "checkout-m")],
            ROOT,
            base_env,
        )
    )
    for key in ("accuracy_before", "accuracy_after", "eval_n", "steps"):
        if wheel_run[key] != checkout_run[key]:
            sys.exit(
                f"wheel smoke: {key} {wheel_run[key]} (wheel) != {checkout_run[key]} (checkout)"
            )
    # the checkpoint the wheel wrote reloads and scores what the run reported
    n = str(wheel_run["eval_n"])
    evaluated = summary(run([*cli, "evaluate", "math", "--model", "m", "--n", n], empty, env))
    if evaluated["accuracy"] != wheel_run["accuracy_after"]:
        sys.exit(
            f"wheel smoke: evaluate math gave {evaluated} after a run that reported "
            f"{wheel_run['accuracy_after']}"
        )
    run(
        [
            *cli,
            "math",
            "--dataset",
            "reasoning",
            "--model",
            "tiny-reasoning",
            "--max-steps",
            "2",
            "--eval-n",
            "20",
            "--out",
            "r",
            "--no-progress",
        ],
        empty,
        env,
    )
    run([*cli, "evaluate", "math", "--model", "r", "--n", "20"], empty, env)

    # 2. a missing extra is one line naming it
    student = ROOT / "notebooks" / "labs" / "01_advantages.ipynb"
    lab01 = filled_lab(student, PACKAGE_ANSWERS_01, empty / "lab01.ipynb")
    one_line_naming(run([*cli, "lab", "check", str(lab01)], empty, env, expect=2), "labs")
    trl = [*cli, "math", "--backend", "trl", "--max-steps", "1", "--out", "t"]
    one_line_naming(run(trl, empty, env, expect=2), "trl")

    # 3. every course notebook opened alone, in quick mode
    if not skip_notebooks:
        alone = work / "notebooks"
        for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            folder = alone / notebook.stem
            folder.mkdir(parents=True)
            shutil.copy(notebook, folder)
        parallel = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
        ran = run(
            [
                python,
                "-m",
                "pytest",
                "--nbval-lax",
                "-p",
                "no:cacheprovider",
                "-q",
                "--durations=0",
                "--durations-min=5",
                *parallel,
                str(alone),
            ],
            alone,
            dict(env, GRPO_QUICK="1"),
        )
        print(ran.stdout[ran.stdout.find("slowest") :].strip() if "slowest" in ran.stdout else "")

    # 4. with the labs extra, a solved lab passes its checks, and an instructor's folder (the
    # lab sources copied beside nothing else) builds the lab and grades it full marks
    run([python, *pip_quiet, f"{wheel}[labs]", "-c", str(CONSTRAINTS)], work, env)
    checked = run([*cli, "lab", "check", str(lab01)], empty, env)
    if summary(checked)["failed"]:
        sys.exit(f"wheel smoke: the solved lab failed its checks:\n{checked.stdout}")
    course = work / "instructor-folder"
    shutil.copytree(ROOT / "instructor" / "labs", course / "instructor" / "labs")
    run([*cli, "lab", "build", "--only", "01_advantages", "--seed", "7"], course, env)
    submissions = course / "submitted"
    submissions.mkdir()
    shutil.copy(lab01, submissions)
    run([*cli, "lab", "grade", str(submissions), "--out", "grades.csv"], course, env)
    (row,) = csv.DictReader((course / "grades.csv").open())
    if float(row["total"]) != float(row["possible"]) or float(row["possible"]) == 0:
        sys.exit(f"wheel smoke: the solved lab graded {row['total']} / {row['possible']}")


if __name__ == "__main__":
    main()
