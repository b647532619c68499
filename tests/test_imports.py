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


# what a module line cap was meant to protect: the step a learner reads is the algorithm, its
# length (docstring included) capped (notebooks 06 and 12 print them); the engineering lives in
# lm_trainer.LMTrainer's helpers
STEP_LINES = {"LMGRPOTrainer": 40, "LMPPOTrainer": 50}


@pytest.mark.parametrize(("name", "limit"), sorted(STEP_LINES.items()))
def test_each_trainer_step_reads_in_one_screen(name, limit):
    import inspect

    from grpo_minimal.lm_grpo import LMGRPOTrainer
    from grpo_minimal.lm_ppo import LMPPOTrainer

    source = inspect.getsource(
        {"LMGRPOTrainer": LMGRPOTrainer, "LMPPOTrainer": LMPPOTrainer}[name].step
    )
    lines = len(source.splitlines())
    assert lines <= limit, f"{name}.step: {lines} lines, over {limit}"
    assert "fmt: skip" not in source and "perf_counter" not in source and "autocast" not in source
