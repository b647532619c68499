"""Build the labs: instructor sources -> student notebooks + the grader's material (otter-grader).

Each lab has one source, ``instructor/labs/NN_name.py``: a notebook in jupytext's percent format
written in otter-grader's assignment format (``# BEGIN QUESTION`` / ``# BEGIN SOLUTION`` /
``# BEGIN TESTS`` raw cells). ``otter assign`` splits it into

- the **student notebook** (solutions replaced by ``...``, public checks only, stored in the
  notebook's metadata; its title first, then a cell that installs the package and its ``labs``
  extra where they are missing, ``grpo_minimal.course.notebook_setup``), copied to ``notebooks/labs/NN_name.ipynb`` and committed, so a learner
  needs no build step;
- the **grader's material**: ``build/labs/NN_name-autograder.zip`` (public and hidden checks) and
  ``build/labs/solutions/NN_name.ipynb`` (the notebook with solutions), never committed.

Hidden checks call ``check_...(fn, seed=GRADER_SEED)``. The build writes each lab's own seed in
place of ``GRADER_SEED``: ``lab_seed(secret, lab)``, derived from one instructor's secret (given,
or drawn at random) by HMAC-SHA256, so a seed read out of one lab's grader opens no other lab.
The seeds exist only in the grader's material (the zips and the solution notebooks): the hidden
cases are drawn from them when a submission is graded, and no learner can draw the same ones.

The student notebooks are written byte for byte the same on every run (fixed cell ids, no
timestamps), so ``check_student_notebooks`` can tell whether the committed ones are current. Each
records the hash of its own built content, so a rebuild can tell a learner's filled notebook
from a fresh one and refuses to overwrite it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import re
import secrets
import shutil
import tempfile
import zipfile
from pathlib import Path

from grpo_minimal.course.notebook_setup import after_title, is_title, lab_setup_source

SOURCE_DIR = Path("instructor/labs")
STUDENT_DIR = Path("notebooks/labs")
GRADER_DIR = Path("build/labs")
SEED_PLACEHOLDER = "GRADER_SEED"


SECRET_BITS = 128
"""The instructor's secret: drawn with this many bits (guessing it is out of reach)."""
SEED_BITS = 63
"""A lab's seed: as wide as torch's generators take (64 bits, unsigned), less one bit so that
the checks' small offsets (``seed + 100``) stay in range."""


def lab_seed(secret: int, lab: str) -> int:
    """Lab ``lab``'s grader seed: ``SEED_BITS`` bits of HMAC-SHA256(secret, lab). Knowing one
    lab's seed tells nothing of another's, nor of the secret."""
    digest = hmac.new(str(secret).encode(), lab.encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)


def lab_sources(source_dir: Path = SOURCE_DIR, only: str | None = None) -> list[Path]:
    """The lab sources ``NN_name.py`` in order; ``only`` keeps the one named NN_name."""
    sources = sorted(Path(source_dir).glob("[0-9][0-9]_*.py"))
    if only is not None:
        sources = [s for s in sources if s.stem == only]
    if not sources:
        raise FileNotFoundError(f"no lab source {only or 'NN_name'}.py in {source_dir}")
    return sources


def _source_notebook(source: Path, out: Path, seed: int) -> Path:
    import jupytext

    text = re.sub(rf"\b{SEED_PLACEHOLDER}\b", str(seed), source.read_text())
    notebook = jupytext.reads(text, fmt="py:percent")
    notebook.metadata.pop("jupytext", None)
    notebook.metadata["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "name": "python3",
    }
    path = out / f"{source.stem}.ipynb"
    jupytext.write(notebook, path, fmt="ipynb")
    return path


def _normalise_student(path: Path, source: Path) -> str:
    """Stable JSON for a student notebook: fixed ids, no editor metadata, provenance noted."""
    notebook = json.loads(path.read_text())
    # the title first (otter puts its own cell above it), so the page opens with it; then, before
    # otter's cell imports otter, the set-up cell: install the package and its labs extra
    cells = notebook["cells"]
    title = next((i for i, cell in enumerate(cells) if is_title(cell)), None)
    if title is not None:
        cells.insert(0, cells.pop(title))
    setup = lab_setup_source(source.stem).splitlines(keepends=True)
    cells.insert(after_title(cells), {"cell_type": "code", "metadata": {}, "source": setup})
    for index, cell in enumerate(notebook["cells"]):
        cell["id"] = f"{source.stem}-{index:02d}"
        cell["metadata"].pop("lines_to_next_cell", None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
    notebook["metadata"].pop("jupytext", None)
    notebook["metadata"]["grpo_minimal"] = {
        "generated_from": f"{SOURCE_DIR.as_posix()}/{source.name}",
        "regenerate_with": "make labs",
    }
    notebook["nbformat"], notebook["nbformat_minor"] = 4, 5
    notebook["metadata"]["grpo_minimal"]["built_sha256"] = _content_hash(notebook)
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def _content_hash(notebook: dict) -> str:
    """SHA-256 of the notebook as built, without the field that records it."""
    content = json.loads(json.dumps(notebook))
    content["metadata"].get("grpo_minimal", {}).pop("built_sha256", None)
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def unchanged_since_build(path: Path) -> bool:
    """True when ``path`` is exactly as a build wrote it (no learner's edits, outputs or saves)."""
    try:
        notebook = json.loads(Path(path).read_text())
        recorded = notebook["metadata"]["grpo_minimal"]["built_sha256"]
    except (ValueError, KeyError, TypeError):
        return False
    return recorded == _content_hash(notebook)


def refuse_to_overwrite(student_dir: Path, sources: list[Path]) -> None:
    """``FileExistsError`` naming the first student notebook that changed since it was built."""
    for source in sources:
        target = Path(student_dir) / f"{source.stem}.ipynb"
        if target.exists() and not unchanged_since_build(target):
            raise FileExistsError(
                f"{target} has changed since it was built (a learner's work?): move it away, or "
                "rebuild with --force to overwrite it"
            )


def assign(source: Path, seed: int, run_tests: bool = False) -> tuple[str, Path, Path, Path]:
    """Run ``otter assign`` on one source in a temporary folder, hidden checks drawn from ``seed``.

    Returns ``(student_json, autograder_zip, solution_notebook, workdir)``; the caller removes
    ``workdir``. ``run_tests=True`` makes otter run every check against the solutions (slow for
    the LLM labs; the test suite grades the solutions separately).
    """
    from otter.assign import main as otter_assign

    workdir = Path(tempfile.mkdtemp(prefix=f"lab-{source.stem}-"))
    master = _source_notebook(source, workdir, seed)
    result = workdir / "dist"
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        otter_assign(str(master), str(result), no_pdfs=True, no_run_tests=not run_tests)
    student = result / "student" / f"{source.stem}.ipynb"
    (autograder_zip,) = (result / "autograder").glob("*.zip")
    solution = result / "autograder" / f"{source.stem}.ipynb"
    return _normalise_student(student, source), autograder_zip, solution, workdir


GRADE_WITH = (
    "these checks need the grpo_minimal course package: grade this lab with `grpo-minimal lab "
    "grade` (instructor/README.md, Grading), not with a grader that lacks it"
)
"""What every check of an autograder zip says when ``grpo_minimal`` cannot be imported (the zip
uploaded to Gradescope, or run by ``otter grade``): one line, never a silent 0."""

_GUARD = f"""

def _needs_grpo_minimal():
    try:
        import grpo_minimal  # noqa: F401
    except ImportError:
        raise ImportError({GRADE_WITH!r}) from None
"""


def _guarded_test(source: str) -> str:
    """A test file of the zip with ``_needs_grpo_minimal()`` before each import of the checks."""
    lines = re.sub(
        r"^(\s+)(from grpo_minimal\.labs import .+)$",
        r"\1_needs_grpo_minimal()\n\1\2",
        source,
        flags=re.MULTILINE,
    )
    head, sep, rest = lines.partition("from otter.test_files import test_case\n")
    return head + sep + _GUARD + rest if sep else _GUARD.lstrip() + lines


def copy_autograder(source: Path, target: Path) -> None:
    """The zip otter assign wrote, its test files guarded (``_guarded_test``), at ``target``."""
    with (
        zipfile.ZipFile(source) as original,
        zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as guarded,
    ):
        for item in original.infolist():
            data = original.read(item)
            if item.filename.startswith("tests/") and item.filename.endswith(".py"):
                data = _guarded_test(data.decode()).encode()
            guarded.writestr(item, data)


def build_labs(
    source_dir: Path = SOURCE_DIR,
    student_dir: Path = STUDENT_DIR,
    grader_dir: Path = GRADER_DIR,
    run_tests: bool = False,
    only: str | None = None,
    seed: int | None = None,
    force: bool = False,
) -> tuple[list[str], int]:
    """Write every student notebook and the grader's material; return the lab names and the seed.

    ``seed`` is the instructor's secret (drawn at random when None); each lab's hidden cases are
    drawn from ``lab_seed(seed, lab)``. A student notebook that changed since it was built (a
    learner's work) is never overwritten unless ``force``.
    """
    student_dir, grader_dir = Path(student_dir), Path(grader_dir)
    sources = lab_sources(source_dir, only)
    if not force:
        refuse_to_overwrite(student_dir, sources)
    seed = secrets.randbits(SECRET_BITS) if seed is None else seed
    student_dir.mkdir(parents=True, exist_ok=True)
    (grader_dir / "solutions").mkdir(parents=True, exist_ok=True)
    names = []
    for source in sources:
        student_json, autograder_zip, solution, workdir = assign(
            source, lab_seed(seed, source.stem), run_tests
        )
        try:
            (student_dir / f"{source.stem}.ipynb").write_text(student_json)
            copy_autograder(autograder_zip, grader_dir / f"{source.stem}-autograder.zip")
            shutil.copyfile(solution, grader_dir / "solutions" / f"{source.stem}.ipynb")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        names.append(source.stem)
    return names, seed


def check_student_notebooks(
    source_dir: Path = SOURCE_DIR, student_dir: Path = STUDENT_DIR
) -> list[str]:
    """Names of the labs whose committed student notebook differs from a fresh build."""
    stale = []
    for source in lab_sources(source_dir):
        student_json, _, _, workdir = assign(source, seed=0)  # the seed reaches no student file
        shutil.rmtree(workdir, ignore_errors=True)
        committed = Path(student_dir) / f"{source.stem}.ipynb"
        if not committed.exists() or committed.read_text() != student_json:
            stale.append(source.stem)
    return stale
