"""A notebook's code read, never run: its statements, the names each binds and the names each
reads. Lab 04's ban on evaluators reads a notebook this way (``reward.forbidden_in_source``), and
so does grading when it defines a learner's functions again apart from the rest of their
notebook (``instructor.definitions``).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence


def parsed_cells(cells: Sequence[str]) -> list[tuple[str, ast.Module]]:
    """Each code cell as Python (IPython's syntax turned into Python's first) and its syntax
    tree; a cell magic's Python body (``%%capture``) as a cell of its own after it. A cell that
    does not parse is left out (its syntax error is reported apart)."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell
    parsed: list[tuple[str, ast.Module]] = []
    pending = [str(source) for source in cells]
    while pending:
        try:
            text = transform(pending.pop(0))
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        parsed.append((text, tree))
        for node in ast.walk(tree):  # %%capture, %%time, ...: their body is Python too
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "run_cell_magic"
                and len(node.args) == 3
                and isinstance(node.args[2], ast.Constant)
            ):
                pending.append(str(node.args[2].value))
    return parsed


def flat(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of ``body`` and those inside its if / try / with / for / while blocks."""
    found = []
    for statement in body:
        found.append(statement)
        if isinstance(statement, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for block in ("body", "orelse", "finalbody"):
                found += flat(getattr(statement, block, []))
        for handler in getattr(statement, "handlers", []):
            found += flat(handler.body)
    return found


def statements(cells: Sequence[str]) -> list[ast.stmt]:
    """Every top-level statement of the cells (those inside a top-level if / try / with / for
    too, and a cell magic's Python body)."""
    return [statement for _, tree in parsed_cells(cells) for statement in flat(tree.body)]


def bound_names(statement: ast.stmt) -> set[str]:
    """The module-level names a top-level statement binds or changes: a def or class, an
    import, any name it stores to (an assignment, ``for``, ``with ... as``, ``:=``), and the
    object an attribute or item assignment changes (``f.__code__ = ...`` changes ``f``)."""
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {statement.name}
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return {(alias.asname or alias.name).split(".")[0] for alias in statement.names}
    names = set()
    for node in ast.walk(statement):
        if not isinstance(getattr(node, "ctx", None), ast.Store | ast.Del):
            continue  # read, not written
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute | ast.Subscript):
            base = node
            while isinstance(base, ast.Attribute | ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
    return names


def global_uses(statement: ast.stmt) -> set[str]:
    """The module-level names a top-level statement reads: of a function or class, the names
    its scopes take from the module (``symtable``), not its locals, and those its decorators,
    defaults and annotations read when it is defined."""
    if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return names_in(statement)
    import symtable

    try:
        tables = [symtable.symtable(ast.unparse(statement), "cell", "exec")]
    except (SyntaxError, ValueError, RecursionError):
        return names_in(statement)
    names: set[str] = set()
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        if table.get_type() == "module":  # what the def itself evaluates: defaults, annotations
            names |= {s.get_name() for s in table.get_symbols() if s.is_referenced()}
            continue
        names |= {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for decorator in statement.decorator_list:
        names |= names_in(decorator)
    return names


def reachable(every: Sequence[ast.stmt], names: Sequence[str]) -> tuple[list[ast.stmt], set[str]]:
    """The statements of ``every`` that bind ``names`` and, following every module-level name
    they read, the statements that bind those, in their order in ``every``; and the names read
    that no statement binds (built-ins, or names bound where the reading cannot see)."""
    binding: dict[str, list[ast.stmt]] = {}
    for statement in every:
        for name in bound_names(statement):
            binding.setdefault(name, []).append(statement)
    reached: set[int] = set()
    unbound: set[str] = set()
    pending, seen = list(names), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in binding:
            unbound.add(name)
        for statement in binding.get(name, []):
            if id(statement) not in reached:
                reached.add(id(statement))
                pending += global_uses(statement)
    return [statement for statement in every if id(statement) in reached], unbound


def names_in(node: ast.AST) -> set[str]:
    """Every name written anywhere in ``node``."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
