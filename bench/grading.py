"""Grade a synthetic class with `lab grade`, as an instructor would, and time it.

    .venv/bin/python bench/grading.py                      # 30 learners x 7 labs, 2 jobs
    .venv/bin/python bench/grading.py --learners 2         # a smaller class: per-lab seconds

Every lab is built fresh (a random secret). Each learner hands in every lab, and each
submission is one of five kinds, in turn across learners and labs: **right** (the lab's solution
notebook), **wrong** (the student notebook as handed out: every exercise unanswered), **malformed**
(a truncated file), **hostile** (the solution, after a first cell that starts a process in a
new session, forks once more, and tries to delete the class folder and rewrite the graders) and
**tampering** (the unanswered notebook, after a first cell that replaces every check of the
labs, the checks' ``run_cases`` and otter's scoring in its kernel, and makes labs 05 and 06's
measuring helpers measure the package's functions instead of the learner's).

The script checks every row (right: full points; wrong: 0 of the lab's points; malformed: a row
with its problem; hostile: full points and nothing harmed; tampering: 0 points, every lab's
checks running outside the kernel, ``JUDGED_APART``; what it scores is also reported per lab),
that no submitted file or zip
changed, and that nothing is left behind (no process of a sandbox user, no scratch folder), then
writes the figures to ``bench/results/grading.json``: seconds in all, submissions per minute, and
each lab's mean seconds over its right and hostile submissions (the fully graded ones). With
fewer than 30 learners it also gives the hours 30 learners who all solve every lab would take at
those means, the jobs sharing the work (a projection, named as one; --learners 4 grades every
lab's right and hostile kinds at least once).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from provenance import provenance  # bench/ is on the path when a script here runs

from grpo_minimal.instructor import sandbox, watchdog
from grpo_minimal.instructor.build import build_labs
from grpo_minimal.instructor.classroom import grade_folder
from grpo_minimal.instructor.grading import JUDGED_APART

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench/results/grading.json"
KINDS = ("right", "wrong", "malformed", "hostile", "tampering")
CLASS_SIZE = 30


def _hostile_cell(folder: Path, grader: Path) -> dict:
    source = (
        "import os, subprocess, glob\n"
        "subprocess.Popen(['python3', '-c', 'import time; time.sleep(3600)'], "
        "start_new_session=True)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    subprocess.Popen(['python3', '-c', 'import time; time.sleep(3600)'])\n"
        "    os._exit(0)\n"
        "for path in glob.glob("
        + repr(str(folder))
        + " + '/*') + glob.glob("
        + repr(str(grader))
        + " + '/*.zip'):\n"
        "    try:\n"
        "        os.remove(path)\n"
        "    except OSError:\n"
        "        pass\n"
    )
    return _cell("hostile", source)


TAMPERING = (
    "import grpo_minimal.labs.bugs as _bugs, grpo_minimal.labs.llm_step as _steps\n"
    "from grpo_minimal.lm_grpo import LMGRPOTrainer as _Trainer\n"
    "from grpo_minimal.lm_trainer import completion_logps as _logps\n"
    "_bound, _applied = _bugs._bound_call, _bugs._bound_apply\n"  # measure the package's own
    "_bugs._bound_call = lambda fn, name, *a, **k: _bound(\n"
    "    _bugs.REFERENCE_TRAINER[name], name, *a, **k)\n"
    "_bugs._bound_apply = lambda fn, name, helper, *a, **k: _applied(\n"
    "    _bugs.REFERENCE_TRAINER[name], name, helper, *a, **k)\n"
    "_step, _noting = _steps._step_and_measure, _steps._called_noting_gradient\n"
    "_steps._step_and_measure = lambda step, *a: _step(_Trainer.step, *a)\n"
    "_steps._called_noting_gradient = lambda fn, *a: _noting(_logps, *a)\n"
    "import importlib, pkgutil\n"
    "import grpo_minimal.labs as labs, grpo_minimal.labs.checking as checking\n"
    "for info in pkgutil.iter_modules(labs.__path__):\n"
    "    module = importlib.import_module('grpo_minimal.labs.' + info.name)\n"
    "    for name in [n for n in dir(module) if n.startswith('check_')]:\n"
    "        setattr(module, name, lambda *a, **k: None)\n"
    "checking.run_cases = checking.raise_first = lambda *a, **k: None\n"
    "import otter.test_files.abstract_test as abstract\n"
    "abstract.TestFile.score = property(lambda self: self.possible)\n"
    "abstract.TestFile.passed_all = property(lambda self: True)\n"
)


def _cell(name: str, source: str) -> dict:
    return {
        "cell_type": "code",
        "execution_count": None,
        "id": name,
        "metadata": {},
        "outputs": [],
        "source": source,
    }


def make_class(folder: Path, built: Path, names: list[str], learners: int) -> dict[str, str]:
    """The class folder: ``learner-NN_<lab>.ipynb`` per learner and lab; returns each file's
    kind."""
    kinds = {}
    for learner in range(learners):
        for index, lab in enumerate(names):
            kind = KINDS[(learner + index) % len(KINDS)]
            path = folder / f"learner{learner:02d}_{lab}.ipynb"
            solution = built / "grader" / "solutions" / f"{lab}.ipynb"
            if kind == "right":
                shutil.copy(solution, path)
            elif kind == "wrong":
                shutil.copy(built / "student" / f"{lab}.ipynb", path)
            elif kind == "malformed":
                path.write_text(solution.read_text()[:500])
            elif kind == "hostile":
                notebook = json.loads(solution.read_text())
                notebook["cells"].insert(1, _hostile_cell(folder, built / "grader"))
                path.write_text(json.dumps(notebook))
            else:
                notebook = json.loads((built / "student" / f"{lab}.ipynb").read_text())
                notebook["cells"].insert(1, _cell("tampering", TAMPERING))
                path.write_text(json.dumps(notebook))
            kinds[path.name] = kind
    return kinds


def verdict(row: dict, kind: str) -> bool:
    total, possible = float(row["total"]), float(row["possible"])
    if kind == "tampering" and row["lab"] not in JUDGED_APART:
        return True  # a known hole (the instructor guide); its points are reported apart
    if kind in ("right", "hostile"):
        return possible > 0 and total == possible and not row["problem"]
    if kind in ("wrong", "tampering"):
        return possible > 0 and total == 0
    return bool(row["problem"])  # malformed


def leftovers(scratch: Path) -> list[str]:
    uids = set(sandbox.CLAIMED_UIDS)  # the user ids this run's jobs graded as
    found = [
        f"process {p.pid} {' '.join(p.info['cmdline'] or [])[:60]}"
        for p in psutil.process_iter(["cmdline", "uids"])
        if os.geteuid() == 0 and p.info["uids"] and p.info["uids"].real in uids
    ]
    return found + [f"file {p}" for p in scratch.iterdir()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=CLASS_SIZE)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-grading-") as work:
        work = Path(work)
        names, _ = build_labs(ROOT / "instructor/labs", work / "student", work / "grader")
        folder = work / "class"
        folder.mkdir()
        kinds = make_class(folder, work, names, args.learners)
        submitted = {p.name: p.read_bytes() for p in folder.iterdir()}
        zips = {p.name: p.read_bytes() for p in (work / "grader").glob("*.zip")}
        scratch = work / "tmp"
        scratch.mkdir()
        tempfile.tempdir = str(scratch)  # where grading keeps its copies: checked empty after
        start = time.monotonic()
        grade_folder(folder, work / "out" / "grades.csv", work / "grader", args.timeout, args.jobs)
        seconds = time.monotonic() - start
        tempfile.tempdir = None
        rows = list(csv.DictReader((work / "out" / "grades.csv").open()))
        wrong_rows = [r["notebook"] for r in rows if not verdict(r, kinds[r["notebook"]])]
        unchanged = {p.name: p.read_bytes() for p in folder.iterdir()} == submitted and {
            p.name: p.read_bytes() for p in (work / "grader").glob("*.zip")
        } == zips
        left = leftovers(scratch)
    per_lab = {}  # a lab's mean seconds over its right and hostile submissions (fully graded)
    for lab in names:
        times = [
            float(r["seconds"])
            for r in rows
            if r["lab"] == lab and kinds[r["notebook"]] in ("right", "hostile")
        ]
        per_lab[lab] = round(statistics.mean(times), 1) if times else None
    result = {
        "learners": args.learners,
        "labs": len(names),
        "submissions": len(rows),
        "kinds": {kind: sum(k == kind for k in kinds.values()) for kind in KINDS},
        "jobs": args.jobs,
        "graded_as": "root" if os.geteuid() == 0 else f"an ordinary user (uid {os.geteuid()})",
        "seconds": round(seconds, 1),
        "submissions_per_minute": round(60 * len(rows) / seconds, 2),
        "mean_seconds_per_solved_submission_by_lab": per_lab,
        "rows_right": len(rows) - len(wrong_rows),
        "tampering_points_by_lab": {  # 0 where judged apart (every lab)
            lab: [
                float(r["total"])
                for r in rows
                if r["lab"] == lab and kinds[r["notebook"]] == "tampering"
            ]
            for lab in names
        },
        "rows_wrong": wrong_rows,
        "submitted_files_and_zips_unchanged": unchanged,
        "left_behind": left,
    }
    if args.learners != CLASS_SIZE:  # 30 learners who all solve every lab, at these means
        busy = sum(CLASS_SIZE * s for s in per_lab.values() if s is not None)
        result["projected_hours_30_learners_all_solving"] = round(busy / args.jobs / 3600, 2)
    if watchdog.WATCHED:  # no cgroup per job (an ordinary user): what the watchdog saw and cost
        watched = watchdog.WATCHED
        result["watchdog"] = {
            "jobs_watched": len(watched),
            "cpu_s": round(sum(w["cpu_s"] for w in watched), 2),
            "bounds_met": sorted(w["bound"] for w in watched if w["bound"]),
            "peak_memory_mib": round(max(w["memory"] for w in watched) / 2**20),
            "peak_busy_threads": round(max(w["cores"] for w in watched), 2),
        }
    result["provenance"] = provenance(threads=None)  # the graders run in their own processes
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(args.out)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
