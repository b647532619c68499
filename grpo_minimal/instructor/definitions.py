"""The learner's functions defined again, apart from the rest of their notebook.

A check that measures something about a learner's function (its gradient, what it did to a
policy) runs a helper of the package beside it, in the same process. In the kernel that ran the
notebook, any cell could have replaced that helper first. So for the labs that measure
(``grading.MEASURED_APART``: 03, 05, 06) the judge runs the checks against a second process
(``measurer.Measurer``) where nothing of the notebook ran but the definitions the graded
functions need: read from the notebook's source (``definitions``), each statement held to a
policy (``refusal``) so that the definitions themselves cannot reach what measures them.

A policy read from source is a list of what it turns away, not a proof: a function written to
slip past it (a module handed through a call of its own, ``g = same(torch.autograd)``; an
in-place tensor method on a module's tensor) can still change what measures it in that process.
What it turns away is the plain ways to patch the package, torch or the interpreter by name.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence
from dataclasses import dataclass

from grpo_minimal.labs.checking import NOT_RUN
from grpo_minimal.labs.source import bound_names, flat, parsed_cells, reachable

ALLOWED_MODULES = frozenset(
    {
        "__future__",
        "cmath",
        "collections",
        "copy",
        "dataclasses",
        "decimal",
        "enum",
        "fractions",
        "functools",
        "grpo_minimal",
        "itertools",
        "math",
        "numbers",
        "numpy",
        "random",
        "re",
        "statistics",
        "string",
        "torch",
        "transformers",
        "typing",
    }
)
"""The modules a definition may import (and their submodules): no ``os``, ``sys``, ``gc``,
``inspect``, ``importlib``, ``ctypes``, ``builtins``, ``pickle``..."""

FORBIDDEN_NAMES = frozenset(
    {
        "breakpoint",
        "compile",
        "delattr",
        "eval",
        "exec",
        "exit",
        "getattr",
        "globals",
        "help",
        "input",
        "locals",
        "open",
        "quit",
        "setattr",
        "vars",
    }
)
"""Built-ins a definition may not name: they run text as code, reach a namespace, or change an
attribute by a name given at run time. ``getattr`` is allowed only called as
``getattr(x, "plain name")``. (As attributes they are fine: ``model.eval()``, ``re.compile``;
``builtins``, where they would be reached, is refused.)"""

FORBIDDEN_MODULES = frozenset(
    {
        "atexit",
        "builtins",
        "code",
        "codeop",
        "copyreg",
        "ctypes",
        "dis",
        "gc",
        "glob",
        "importlib",
        "inspect",
        "io",
        "linecache",
        "marshal",
        "multiprocessing",
        "operator",
        "os",
        "pathlib",
        "pickle",
        "runpy",
        "shutil",
        "signal",
        "site",
        "socket",
        "subprocess",
        "sys",
        "sysconfig",
        "tempfile",
        "threading",
        "traceback",
        "types",
        "weakref",
    }
)
"""Modules a definition may not import by name from anywhere (the package's modules import
some: ``from grpo_minimal.labs.reward import builtins``); a variable of its own may carry such a
name. All but the few that are common attribute names elsewhere (``err.code``, ``x.types``:
``COMMON_NAMES``) are refused as attributes of anything too (``grpo_minimal.labs.reward.sys``)."""

COMMON_NAMES = frozenset({"code", "codeop", "dis", "glob", "signal", "site", "traceback", "types"})

FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "cpp_extension",
        "hub",
        "library",
        "load",
        "load_inline",
        "load_library",
        "loads",
        "update_wrapper",
        "wraps",
        "f_back",
        "f_builtins",
        "f_globals",
        "f_locals",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "cr_frame",
        "ag_frame",
    }
) | (FORBIDDEN_MODULES - COMMON_NAMES)
"""Attribute names (on any object), names imported and parts of a dotted import a definition
may not use: loading code or pickles (``torch.load``, ``np.load``,
``torch.utils.cpp_extension``), replacing an operator's kernel (``torch.library``), copying one
object's attributes onto another (``functools.update_wrapper``, ``functools.wraps``), a frame's
namespaces, the refused modules. Every attribute starting with ``_`` is refused too
(``__dict__``, ``torch._C``)."""

MUTATORS = frozenset(
    {
        "append",
        "clear",
        "discard",
        "extend",
        "insert",
        "pop",
        "popitem",
        "remove",
        "setdefault",
        "update",
    }
)
"""Methods that change a container in place: not used, called or read, on anything that is not
the function's own; called at the top level, they make the name they change unreadable."""


def told(name: str, reason: str) -> str:
    """What a learner reads for a refused function, in grading and in ``lab check`` alike (the
    rules themselves are in the learners' README, "How it is graded")."""
    return (
        f'{NOT_RUN}`{name}` or what it uses {reason}; see "How it is graded" in '
        "notebooks/labs/README.md"
    )


@dataclass
class Definitions:
    """What the measurer runs: per cell, its Python text (for the learner's line in an error)
    and its kept statements; and each graded name that is refused, with the reason."""

    cells: list[tuple[str, ast.Module]]
    refused: dict[str, str]


def _keepable(statement: ast.stmt) -> bool:
    """A definition: an import, a def, a class, or an assignment to names alone."""
    if isinstance(
        statement,
        ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef,
    ):
        return True
    if isinstance(statement, ast.AnnAssign):
        return statement.value is not None and isinstance(statement.target, ast.Name)
    if isinstance(statement, ast.Assign):
        return all(
            isinstance(node, ast.Name | ast.Tuple | ast.List | ast.Starred)
            for target in statement.targets
            for node in ast.walk(target)
            if not isinstance(node, ast.Store | ast.Load)
        )
    return False


def definitions(cells: Sequence[str], names: Sequence[str]) -> Definitions:
    """The statements of the notebook's code ``cells`` that define ``names`` and what they read
    (following every module-level name to the statements that bind it), in the notebook's order.
    A name is refused, with the reason, when a statement it needs is refused (``refusal``), or
    is not one the measurer runs again as the kernel ran it: anything but an import, a def, a
    class or an assignment to names at the top level of a cell (``x += 1``, ``cfg.lr = 0.1``, a
    ``for`` loop's variable, an assignment inside an ``if``)."""
    located: list[tuple[int, ast.stmt]] = []
    top: set[int] = set()
    for index, (_, tree) in enumerate(parsed := parsed_cells(cells)):
        located += [(index, s) for s in flat(tree.body)]
        top |= {id(s) for s in tree.body}
    statements = [statement for _, statement in located]
    classes = {s.name for s in statements if isinstance(s, ast.ClassDef)}
    changed = _changed_in_place(statements)
    kept: set[int] = set()
    refused: dict[str, str] = {}
    for name in names:
        needed, unbound = reachable(statements, [name])
        reasons = []
        if name in unbound:  # made by exec, globals()[...] = ...: nothing to run again
            reasons.append(
                "is bound by no statement grading can read: define it with a def "
                "at the top level of a cell"
            )
        for statement in needed:
            if not (_keepable(statement) and id(statement) in top):
                reasons.append(
                    "reads a name bound by a statement that grading does not run "
                    f"again (line {statement.lineno}): bind it once with an import, "
                    "a def or `name = value` at the top level of a cell"
                )
            elif (why := refusal(statement, classes)) is not None:
                reasons.append(why)
            for bound in sorted(bound_names(statement) & set(changed)):
                reasons.append(
                    f"reads `{bound}`, which a top-level statement changes in place "
                    f"(line {changed[bound]}) where grading does not run it again: "
                    "make the value whole in its `name = value` line"
                )
        if reasons:
            refused[name] = reasons[0]
        else:
            kept |= {id(s) for s in needed}
    out: list[tuple[str, ast.Module]] = []
    for index, (text, _) in enumerate(parsed):
        body = [s for i, s in located if i == index and id(s) in kept]
        if body:
            out.append((text, ast.Module(body=body, type_ignores=[])))
    return Definitions(out, refused)


def _changed_in_place(statements: list[ast.stmt]) -> dict[str, int]:
    """Module-level names that a statement run at the top level changes with a method
    (``ROWS.append(...)``, ``TABLE.update(...)``), with the first such line: the measurer does not
    run those statements, so such a name would hold another value there."""
    changed: dict[str, int] = {}
    for statement in statements:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue  # their bodies run when called, not here
        for node in ast.walk(statement):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
                and isinstance(root := _root(node.func.value), ast.Name)
            ):
                changed.setdefault(root.id, node.lineno)
    return changed


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node


def _function_locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """A function's parameters and the names it binds, not counting nested functions'."""
    arguments = function.args
    found = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    found |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    pending = list(function.body) if isinstance(function.body, list) else [function.body]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return found


def _aliases(function: ast.AST, local: set[str], scopes: list[set[str]]) -> set[str]:
    """The locals of ``function`` given something of the module's as it is, not through a call:
    ``g = torch.autograd``, ``for g in [torch.autograd]``, ``g = getattr(torch, "autograd")``,
    ``import torch.autograd as g``, a parameter ``g=torch.autograd``."""

    def of_module(node: ast.expr | None) -> bool:
        if node is None:
            return False
        if isinstance(node, ast.Name):
            return node.id not in local and not any(node.id in s for s in scopes)
        if isinstance(node, ast.Attribute | ast.Subscript | ast.Starred | ast.NamedExpr):
            return of_module(node.value)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(of_module(e) for e in node.elts)
        if isinstance(node, ast.Dict):
            return any(of_module(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return of_module(node.body) or of_module(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(of_module(v) for v in node.values)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return (
                node.func.id in ("getattr", "iter", "next")
                and bool(node.args)
                and of_module(node.args[0])
            )
        return False

    aliases: set[str] = set()
    arguments = function.args  # a parameter whose default is the module's: ``g=torch.autograd``
    positional = [*arguments.posonlyargs, *arguments.args]
    defaulted = list(
        zip(
            positional[len(positional) - len(arguments.defaults) :], arguments.defaults, strict=True
        )
    )
    defaulted += [
        (a, d)
        for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if d is not None
    ]
    aliases |= {argument.arg for argument, default in defaulted if of_module(default)}
    for node in ast.walk(function):
        if isinstance(node, ast.Import | ast.ImportFrom):  # a module, or something of one
            aliases |= {(a.asname or a.name).split(".")[0] for a in node.names}
        pairs: list[tuple[ast.expr, ast.expr | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            pairs = [(node.target, node.iter)]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs = [(node.optional_vars, node.context_expr)]
        for target, value in pairs:
            if of_module(value):
                aliases |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return aliases


def refusal(statement: ast.stmt, classes: set[str] = frozenset()) -> str | None:
    """Why ``statement`` may not run beside what measures the learner's function, with its
    line; None when it may. ``classes``: the names the notebook defines classes as."""

    def where(node: ast.AST) -> str:
        return f" (line {getattr(node, 'lineno', statement.lineno)})"

    def walk(node: ast.AST, scopes: list[set[str]], aliases: set[str]) -> str | None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = node.args
            annotations = [
                a.annotation
                for a in [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    arguments.vararg,
                    arguments.kwarg,
                ]
                if a is not None and a.annotation is not None
            ]
            evaluated = [
                *getattr(node, "decorator_list", []),
                *arguments.defaults,
                *[d for d in arguments.kw_defaults if d is not None],
                *annotations,
                *([node.returns] if getattr(node, "returns", None) else []),
            ]
            for outer in evaluated:  # evaluated where the function is defined
                if (why := walk(outer, scopes, aliases)) is not None:
                    return why
            local = _function_locals(node)
            inner_aliases = _aliases(node, local, scopes)
            inner = [*scopes, local]
            body = node.body if isinstance(node.body, list) else [node.body]
            for child in body:
                if (why := walk(child, inner, inner_aliases)) is not None:
                    return why
            return None
        if (why := _refused_node(node, scopes, aliases, classes)) is not None:
            return why + where(node)
        children = list(ast.iter_child_nodes(node))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and (node.func.id == "getattr")
        ):  # checked above: getattr(x, "plain name")
            children.remove(node.func)
        for child in children:
            if (why := walk(child, scopes, aliases)) is not None:
                return why
        return None

    return walk(statement, [], set())


def _refused_node(
    node: ast.AST, scopes: list[set[str]], aliases: set[str], classes: set[str]
) -> str | None:
    """Why this one node (not its children) is refused, or None."""

    def own(name: ast.expr) -> bool:  # a variable of the function it is in, not an alias
        return (
            isinstance(name, ast.Name)
            and any(name.id in s for s in scopes)
            and (name.id not in aliases)
        )

    if isinstance(node, ast.Global | ast.Nonlocal):
        return f"uses `{type(node).__name__.lower()}`"
    if isinstance(node, ast.Import | ast.ImportFrom):
        if isinstance(node, ast.ImportFrom) and (node.level or node.module is None):
            return "a relative import"
        modules = (
            [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        )
        for module in modules:
            parts = str(module).split(".")
            if parts[0] not in ALLOWED_MODULES:
                return f"imports `{module}`"
            if module != "__future__" and any(
                p.startswith("_") or p in FORBIDDEN_ATTRIBUTES for p in parts[1:]
            ):
                return f"imports `{module}`"
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (
                    alias.name == "*"
                    or alias.name.startswith("_")
                    or (alias.name in FORBIDDEN_ATTRIBUTES | FORBIDDEN_MODULES)
                ):
                    return f"imports `{alias.name}` from `{node.module}`"
        return None
    if isinstance(node, ast.Name):
        if node.id in FORBIDDEN_NAMES or node.id.startswith("__"):
            return f"names `{node.id}`"
        return None
    if isinstance(node, ast.Attribute):
        if node.attr.startswith("_") or node.attr in FORBIDDEN_ATTRIBUTES:
            return f"uses the attribute `{node.attr}`"
        if (node.attr in MUTATORS or node.attr.startswith("register_")) and not own(_root(node)):
            return f"uses `{node.attr}` of something not its own"
        if isinstance(node.ctx, ast.Store | ast.Del) and not own(_root(node)):
            return f"changes the attribute `{node.attr}` of something not its own"
        return None
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
        if not own(_root(node)):
            return "changes an item of something not its own"
        return None
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            if not (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and not name.value.startswith("_")
                and name.value not in FORBIDDEN_ATTRIBUTES
            ):
                return 'uses `getattr` other than as getattr(x, "a plain name")'
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) == 3:
            return "makes a class with `type`"
        return None
    if isinstance(node, ast.ClassDef):
        exceptions = {
            n
            for n in dir(builtins)
            if isinstance(getattr(builtins, n), type)
            and issubclass(getattr(builtins, n), BaseException)
        }
        bases_ok = all(
            isinstance(b, ast.Name) and (b.id in exceptions or b.id in classes) for b in node.bases
        )
        if not node.bases or not bases_ok or node.keywords or node.decorator_list:
            return f"defines the class `{node.name}`, which is not an exception"
        return None
    return None
