"""The package's folders are its layers, and imports go down them (docs/architecture.md).

    grpo_minimal/             the core: GRPO's math, the gym loops, rewards, data, the LLM step
                              and loop, the TRL bridge, the resolver for shipped files
    grpo_minimal/course/      course tooling: widgets, figures, experiment drivers, statistics
    grpo_minimal/labs/        the learner's side of the labs: the checks a lab kernel imports
    grpo_minimal/instructor/  lab build and grading
    grpo_minimal/cli.py       the entry point above them all (``__main__`` too)

Each import statement of every module is read from its source (``ast``), so an import inside a
function counts as much as one at the top. That nothing imports in a circle is ``test_imports.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "grpo_minimal"
ENTRY = {"grpo_minimal.cli", "grpo_minimal.__main__"}
# who may import whom: a layer imports itself and the layers listed
ALLOWED = {
    "core": {"core"},
    "course": {"core", "course"},
    "labs": {"core", "labs"},
    "instructor": {"core", "course", "labs", "instructor"},
}
# the CLI registers the `lab` commands when it starts; all else below the core it imports inside
# the command that needs it, so `grpo-minimal cartpole` loads no course or instructor tooling
ENTRY_TOP_LEVEL = {"grpo_minimal.instructor.commands"}
# `__file__` finds files beside a module: only the resolver may (it alone knows a checkout from a
# wheel); labs/checking reads the package's own folder to hide its frames from a learner
FILE_READERS = {"grpo_minimal.shipped", "grpo_minimal.labs.checking"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "_shipped" not in p.parts}


def layer(module: str) -> str:
    parts = module.split(".")
    # a module in a folder, or the folder's own __init__ (grpo_minimal.course)
    return parts[1] if len(parts) >= 2 and parts[1] in ("course", "labs", "instructor") else "core"


def _resolve(name: str) -> str | None:
    """The package module an imported name lives in (a module, or its package for a name)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, source: str | None = None) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at top level)`` for every package import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text() if source is None else source)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import name` imports the submodule pkg.name when there is one
                names = [f"{base}.{a.name}" for a in child.names] if base else []
            for name in names:
                target = _resolve(name) if name.startswith("grpo_minimal") else None
                if target and target != module:
                    found.append((target, child.lineno, top))
            visit(child, top and not nested)

    visit(tree, True)
    return found


def layering_problems(module: str, source: str | None = None) -> list[str]:
    problems = []
    for target, line, top in imports_of(module, source):
        where = f"{MODULES[module].relative_to(PACKAGE.parent)}:{line} imports {target}"
        if module in ENTRY:
            if top and layer(target) != "core" and target not in ENTRY_TOP_LEVEL:
                problems.append(f"{where} when the CLI starts (import it inside its command)")
        elif target in ENTRY:
            problems.append(f"{where}: nothing imports the entry point")
        elif layer(target) not in ALLOWED[layer(module)]:
            problems.append(f"{where}: {layer(module)} may import only {ALLOWED[layer(module)]}")
    return problems


def test_the_folders_are_the_layers():
    assert {layer(m) for m in MODULES} == set(ALLOWED)
    assert layer("grpo_minimal.lm_grpo") == "core"
    assert layer("grpo_minimal.course.widgets") == "course"
    assert layer("grpo_minimal.instructor") == "instructor"


def test_imports_go_down_the_layers():
    problems = [p for module in MODULES for p in layering_problems(module)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("grpo_minimal.advantages", "from .course import stats"),
        ("grpo_minimal.lm_train", "    from .course.reasoning import steps_right"),
        ("grpo_minimal.losses", "import grpo_minimal.labs.checking"),
        ("grpo_minimal.labs.capstone", "from grpo_minimal.instructor.grading import lab_name"),
        ("grpo_minimal.labs.bugs", "from ..instructor import grading"),
        ("grpo_minimal.course.stats", "from ..labs import checking"),
        ("grpo_minimal.cli", "from .course.reasoning import log_reasoning"),
        ("grpo_minimal.rewards", "from .cli import main"),
    ],
)
def test_an_upward_import_is_caught(module, line):
    """The check above fails when a module imports against the layers, at the top or inside a
    function (one line added to the real source)."""
    source = MODULES[module].read_text()
    if line.startswith(" "):  # inside a function
        source += f"\n\ndef _added():\n{line}\n"
    else:
        source = f"{line}\n{source}"
    assert layering_problems(module, source)


def test_the_cli_starts_without_course_labs_or_grading():
    code = (
        "import sys, grpo_minimal.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith(('grpo_minimal.course',"
        " 'grpo_minimal.labs', 'grpo_minimal.instructor.grading', 'grpo_minimal.instructor.build'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_lab_kernel_never_loads_the_instructor_tools():
    code = (
        "import sys, importlib, pkgutil, grpo_minimal.labs as labs\n"
        "for info in pkgutil.iter_modules(labs.__path__):\n"
        "    importlib.import_module('grpo_minimal.labs.' + info.name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('grpo_minimal.instructor')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _strings(tree: ast.AST) -> list[tuple[str, int]]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.value, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_only_the_resolver_finds_shipped_files():
    """The repository's data/ and bench/ are found by ``shipped.py`` alone: no other module
    builds a path from its own location or names those folders."""
    problems = []
    for module, path in MODULES.items():
        if module == "grpo_minimal.shipped":
            continue
        tree = ast.parse(path.read_text())
        uses_file = any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(tree))
        if uses_file and module not in FILE_READERS:
            problems.append(f"{module} uses __file__")
        for value, line in _strings(tree):
            if value in ("bench", "data") or value.startswith(("bench/", "data/")):
                problems.append(f"{module}:{line} names the folder {value!r}")
    assert not problems, problems


def test_the_architecture_page_maps_every_module_in_its_folder():
    architecture = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    for path in MODULES.values():
        if path.name.startswith("__"):
            continue
        relative = path.relative_to(PACKAGE).as_posix()
        assert f"| `{relative}` |" in architecture, f"docs/architecture.md lacks {relative}"
