"""Every notebook runs opened alone: after its title, its first cells come from one template
(``grpo_minimal.course.notebook_setup``), with a Colab link, what it needs, a set-up cell that installs
the package where it is missing, and a kernelspec. ``tests/wheel_smoke.py`` runs each notebook
alone in an empty folder with the wheel installed; this file checks the cells themselves."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest
from IPython.core.inputtransformer2 import TransformerManager

from grpo_minimal.course import notebook_setup
from grpo_minimal.course.notebook_setup import COURSE, KERNELSPEC, colab_badge, lab_setup_source

ROOT = Path(__file__).resolve().parents[1]
URL = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]


def test_the_course_is_every_numbered_notebook():
    assert sorted(COURSE) == sorted(p.stem for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def test_committed_notebooks_start_with_the_template(tmp_path):
    assert notebook_setup.repository_url() == URL  # the one place: [project.urls]
    assert notebook_setup.sync(ROOT / "notebooks", check=True) == []
    for name in COURSE:
        notebook = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text())
        assert notebook["metadata"]["kernelspec"] == KERNELSPEC
        # the title first (the website's page opens with it), then the template's two cells,
        # before any other code cell: the title is Markdown, so the set-up cell still runs first
        title, intro, setup = notebook["cells"][:3]
        assert notebook_setup.is_title(title), name
        assert "".join(title["source"]).startswith(f"# {name[:2]} · "), name
        assert colab_badge(f"notebooks/{name}.ipynb") in "".join(intro["source"])
        assert f"git+{URL}" in "".join(setup["source"])
        assert not any(c["cell_type"] == "code" for c in notebook["cells"][:2])
        assert sum(1 for c in notebook["cells"] if c.get("id", "").startswith("course-")) == 2
    # a notebook executed without them gets them, numbered as if the set-up cell ran first
    path = ROOT / "notebooks" / "01_group_relative_advantage.ipynb"
    committed = json.loads(path.read_text())
    bare = json.loads(path.read_text())
    bare["cells"] = bare["cells"][:1] + bare["cells"][3:]
    for cell in bare["cells"]:
        if cell["cell_type"] == "code" and cell["execution_count"] is not None:
            cell["execution_count"] -= 1
            for output in cell["outputs"]:
                if output.get("execution_count") is not None:
                    output["execution_count"] -= 1
    rebuilt = notebook_setup.with_course_cells(bare, "01_group_relative_advantage")
    assert rebuilt == committed
    # idempotent; and a notebook whose template cells stand above its title (as they once did)
    # gets them moved below it, every cell and output as it was
    assert notebook_setup.with_course_cells(committed, "01_group_relative_advantage") == committed
    above = dict(
        committed, cells=committed["cells"][1:3] + committed["cells"][:1] + committed["cells"][3:]
    )
    assert notebook_setup.with_course_cells(above, "01_group_relative_advantage") == committed


def test_without_a_title_the_template_cells_come_first():
    cells = [
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "a",
            "metadata": {},
            "outputs": [],
            "source": [],
        }
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    rebuilt = notebook_setup.with_course_cells(notebook, "01_group_relative_advantage")
    assert [c["id"] for c in rebuilt["cells"]] == ["course-intro", "course-setup", "a"]


def test_the_readme_table_links_each_notebook_to_colab_with_its_run_time():
    for readme in ("README.md", "README.ko.md"):
        rows = [r for r in (ROOT / readme).read_text().splitlines() if r.startswith("| ")]
        for name, needs in COURSE.items():
            (row,) = [r for r in rows if f"(notebooks/{name}.ipynb)" in r]
            assert colab_badge(f"notebooks/{name}.ipynb") in row, (readme, name)
            if readme == "README.md":
                assert row.rstrip(" |").endswith(needs.runtime), name


def _run_setup(source: str, monkeypatch, installed: set[str], quick=None) -> list[str]:
    """Run a set-up cell where only ``installed`` modules exist; return the %pip lines it ran."""
    import importlib.util

    real = importlib.util.find_spec
    absent = {"grpo_minimal", "otter"} - installed
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name in absent else real(name, *a)
    )
    ran = []

    class Shell:
        def run_line_magic(self, magic, line):
            ran.append(f"%{magic} {line}")

    if quick is not None:
        source = source.replace("QUICK_MODE = None", f"QUICK_MODE = {quick}")
    exec(TransformerManager().transform_cell(source), {"get_ipython": Shell})  # noqa: S102
    return ran


@pytest.mark.parametrize("name", sorted(COURSE))
def test_the_setup_cell_installs_the_package_only_where_it_is_missing(name, monkeypatch):
    source = "".join(notebook_setup.course_cells(name)[1]["source"])
    assert _run_setup(source, monkeypatch, {"grpo_minimal"}) == []
    package = f"grpo-minimal[{COURSE[name].extra}]" if COURSE[name].extra else "grpo-minimal"
    assert _run_setup(source, monkeypatch, set()) == [
        f'%pip install --quiet "{package} @ git+{URL}"'
    ]


@pytest.mark.parametrize(
    ("quick", "before", "after"),
    [(None, "1", "1"), (None, None, None), (True, None, "1"), (False, "1", "0")],
)
def test_quick_mode_is_switched_both_ways_and_left_alone_by_default(
    quick, before, after, monkeypatch
):
    import os

    if before is None:
        monkeypatch.delenv("GRPO_QUICK", raising=False)
    else:
        monkeypatch.setenv("GRPO_QUICK", before)
    source = "".join(notebook_setup.course_cells("01_group_relative_advantage")[1]["source"])
    _run_setup(source, monkeypatch, {"grpo_minimal"}, quick=quick)
    assert os.environ.get("GRPO_QUICK") == after


def test_each_lab_notebook_starts_with_its_title_then_its_setup_cell(monkeypatch, capsys):
    for path in sorted((ROOT / "notebooks" / "labs").glob("*.ipynb")):
        title, setup = json.loads(path.read_text())["cells"][:2]
        assert notebook_setup.is_title(title), path.name
        assert "".join(title["source"]).startswith(f"# Lab {path.stem[:2]} · "), path.name
        assert "".join(setup["source"]) == lab_setup_source(path.stem)
    source = lab_setup_source("01_advantages")
    assert _run_setup(source, monkeypatch, {"grpo_minimal", "otter"}) == []
    assert capsys.readouterr().out == ""
    # the package without its labs extra: one line naming it, then the extra's requirements
    assert _run_setup(source, monkeypatch, {"grpo_minimal"}) == [
        '%pip install --quiet {pip_requirements("labs")}'
    ]
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "lab 01_advantages needs the [labs] extra" in printed[0]


def test_the_labs_requirements_come_from_the_installed_metadata():
    from grpo_minimal.extras import pip_requirements

    labs = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert pip_requirements("labs") == " ".join(shlex.quote(r) for r in labs["labs"])
    with pytest.raises(ValueError, match="'lab' is not one of"):
        pip_requirements("lab")


def test_a_wrong_folder_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        notebook_setup.main([str(tmp_path)])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks 01_group_relative_advantage.ipynb" in err[0]
