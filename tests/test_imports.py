"""The package's shape: no import cycle between its modules, and modules a reader can hold.

Every relative import counts, wherever it stands: at the top, inside a function, or under
``TYPE_CHECKING`` (a reader follows those too, and a cycle there turns into an ImportError the
day someone moves the import up). Which folder may import which is ``test_layout.py``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "grpo_minimal"
# modules allowed past MAX_LINES: the widgets, and the labs' tables of graded cases
LONG_MODULES = {"course.widgets", "labs.bugs", "labs.llm_step", "labs.objective", "labs.reward"}
MAX_LINES = 500


def module_names(package: Path) -> dict[str, Path]:
    """'lm_grpo' -> grpo_minimal/lm_grpo.py, 'labs' -> grpo_minimal/labs/__init__.py, ..."""
    names = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (relative or ``grpo_minimal.`` absolute)."""
    modules = module_names(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        here = [p for p in here if p]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                    target = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.split(".")[0] == package.name:
                    target = node.module.partition(".")[2]
                else:
                    continue
                # `from . import x` imports the module x; `from .x import f` imports x
                subs = [f"{target}.{a.name}".lstrip(".") for a in node.names]
                found = [s for s in subs if s in modules]
                targets.update(found or ([target] if target in modules else []))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == package.name:
                        target = alias.name.partition(".")[2]
                        if target in modules:
                            targets.add(target)
        graph[name] = targets - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_on_hand_graphs():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"y2"}, "y2": {"y"}}) == ["y", "y2", "y"]


def test_import_graph_reads_every_kind_of_import(tmp_path):
    pkg = tmp_path / "grpo_minimal"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.c import C\n"
    )
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import f\nimport grpo_minimal.b\n")
    graph = import_graph(pkg)
    assert graph == {"": {"a"}, "a": {"b"}, "b": {"sub.c"}, "sub": set(), "sub.c": {"a", "b"}}
    assert find_cycle(graph) == ["a", "b", "sub.c", "a"]


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(module_names(PACKAGE)))
def test_modules_stay_readable(name):
    lines = len(module_names(PACKAGE)[name].read_text(encoding="utf-8").splitlines())
    limit = 300 if name == "lm_grpo" else MAX_LINES  # the readable step (docs/architecture.md's reading guide)
    if name not in LONG_MODULES:
        assert lines <= limit, f"grpo_minimal/{name}: {lines} lines, over {limit}"
