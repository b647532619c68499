r"""Lab 04 checks: a safe verifiable reward (notebook 05, equation (17)).

Exercises mirror ``grpo_minimal.answers.parse_number`` and ``grpo_minimal.rewards.accuracy_reward``
with the same names and signatures, for the subset of formats the lab states: the final answer in
``\boxed{...}`` or after "answer is", written as an integer (thousands commas allowed), a decimal
or ``a/b``; exact comparison with ``fractions.Fraction``. Every case stays inside that subset or
tests one of its stated refusals, and its expected value is what the package returns, so a
learner who delegates to the package passes.

Public and hidden cases are twins (``labs.checking``): ``parse_twins(seed)``,
``accuracy_twins(seed)`` and ``accuracy_error_twins(seed)`` draw one case of every kind that is
graded (each row of the lab's refusal table, hedges, code, huge numbers, other scripts' digits,
non-string completions, a message whose content is None, bad golds) with fresh values. ``lab
check`` runs the hand-written public cases (the table's own examples) and the twins drawn from
``PUBLIC_SEED``; the grader runs the twins drawn from its own seed.

Every check first scans the learner's code (and the functions it calls) for ``eval``, ``exec``,
``compile``, ``ast.literal_eval``, ``sympify`` and ``parse_expr``: model output is data, never
code, so using one of them is a failed case whatever the outputs are.
"""

from __future__ import annotations

import ast
import builtins
import dis
import math
import re
import sys
import types
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import partial
from typing import Any

import torch

from grpo_minimal import advantages
from grpo_minimal import answers as package_answers
from grpo_minimal import rewards as package_rewards
from grpo_minimal.labs.checking import (
    Case,
    InKernel,
    Mistake,
    beside,
    cases_for,
    check_answer,
    expect_raises,
    failure,
    generator,
    run_all,
    run_cases,
)
from grpo_minimal.labs.source import bound_names, reachable, statements

# --- the security scan ---------------------------------------------------------------------------

FORBIDDEN_NAMES = frozenset(
    {"eval", "exec", "compile", "literal_eval", "sympify", "parse_expr", "__import__"}
)
"""Names a checked function may not use as a global (``eval(x)``)."""

FORBIDDEN_ATTRIBUTES = FORBIDDEN_NAMES - {"compile"}
"""... nor as an attribute (``builtins.eval``); ``re.compile`` is fine."""

_GLOBAL_OPS = {"LOAD_GLOBAL", "LOAD_NAME"}
_ATTRIBUTE_OPS = {"LOAD_ATTR", "LOAD_METHOD"}


def _forbidden_objects() -> dict[int, str]:
    """The evaluators themselves, by identity, so that ``run = eval`` is caught too."""
    found = {id(getattr(builtins, name)): name for name in ("eval", "exec", "compile")}
    found[id(builtins.__import__)] = "__import__"
    found[id(ast.literal_eval)] = "ast.literal_eval"
    sympy = sys.modules.get("sympy")  # only when the learner imported it: never import it here
    if sympy is not None:
        found[id(sympy.sympify)] = "sympy.sympify"
        parsing = sys.modules.get("sympy.parsing.sympy_parser")
        if parsing is not None:
            found[id(parsing.parse_expr)] = "sympy.parse_expr"
    return found


def _scan_code(code: types.CodeType, where: str) -> tuple[str, str] | None:
    """(forbidden name, function) in one code object and the code objects nested in it."""
    for instruction in dis.get_instructions(code):
        name = instruction.argval
        if not isinstance(name, str):
            continue
        if instruction.opname in _GLOBAL_OPS and name in FORBIDDEN_NAMES:
            return name, where
        if instruction.opname in _ATTRIBUTE_OPS and name in FORBIDDEN_ATTRIBUTES:
            return name, where
    for constant in code.co_consts:
        if isinstance(constant, str) and constant in FORBIDDEN_NAMES:
            return f"{constant!r} (a string, e.g. for getattr)", where
        if isinstance(constant, types.CodeType):
            found = _scan_code(constant, where)
            if found is not None:
                return found
    return None


def _global_names(code: types.CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _GLOBAL_OPS}
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names |= _global_names(constant)
    return names


def forbidden_call(fn: Callable) -> tuple[str, str] | None:
    """The first evaluator that ``fn`` or a function it calls uses: (what, in which function).

    Reads the bytecode (no source needed, so it works in any notebook runner): global names
    such as ``eval``, attributes such as ``builtins.eval`` or ``sympy.sympify``, strings such as
    ``getattr(builtins, "eval")``, and globals, defaults or closure cells bound to an evaluator
    (``run = eval``). Follows the functions it calls that are defined next to it (same
    globals: the notebook, or the package module of a delegate).
    """
    evaluators = _forbidden_objects()
    pending, seen = [fn], set()
    while pending:
        current = pending.pop()
        if id(current) in seen or current.__globals__ is not fn.__globals__:
            continue  # other modules' functions (re, typing, ...) are not the learner's code
        seen.add(id(current))
        where = getattr(current, "__qualname__", "?")
        found = _scan_code(current.__code__, where)
        if found is not None:
            return found
        bound = list(current.__defaults__ or ()) + list((current.__kwdefaults__ or {}).values())
        bound += [cell.cell_contents for cell in current.__closure__ or () if _filled(cell)]
        for name in _global_names(current.__code__):
            if name in current.__globals__:
                bound.append(current.__globals__[name])
        for value in bound:
            if id(value) in evaluators:
                return evaluators[id(value)], where
            if isinstance(value, types.FunctionType):
                pending.append(value)
    return None


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises ValueError)
    except ValueError:
        return False
    return True


def _forbidden_call_of_a_function(fn: Callable, fn_name: str) -> tuple[str, str] | None:
    """``forbidden_call`` for a function, None for anything else (run_cases reports it)."""
    return forbidden_call(fn) if isinstance(fn, types.FunctionType) else None


EVALUATOR_IMPORTS = {
    "builtins": {"eval", "exec", "compile", "__import__"},
    "ast": {"literal_eval"},
    "sympy": {"sympify", "parse_expr"},
    "sympy.parsing.sympy_parser": {"parse_expr", "sympify"},
}
"""Where an evaluator is imported from by name (``from ast import literal_eval``); ``from re
import compile`` is not one, though using the name ``compile`` is, as in the bytecode scan."""


def _forbidden_in(node: ast.AST) -> str | None:
    """The first evaluator a statement names: a name, an attribute, an import or a string."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in FORBIDDEN_NAMES:
            return inner.id
        if isinstance(inner, ast.Attribute) and inner.attr in FORBIDDEN_ATTRIBUTES:
            return inner.attr
        if isinstance(inner, ast.ImportFrom) and inner.module in EVALUATOR_IMPORTS:
            for alias in inner.names:
                if alias.name in EVALUATOR_IMPORTS[inner.module]:
                    return f"{inner.module}.{alias.name}"
        if isinstance(inner, ast.Constant) and inner.value in FORBIDDEN_NAMES:
            return f"{inner.value!r} (a string, e.g. for getattr)"
    return None


def forbidden_in_source(cells: Sequence[str], fn_name: str) -> tuple[str, str] | None:
    """The first evaluator that ``fn_name`` or what it uses names in a notebook's code: (what,
    where), read from the source's syntax tree (nothing run). From the statements that bind or
    change ``fn_name``, every module-level name they read is followed to the statements that
    bind it: ``read = functools.partial(eval)`` is found through ``read``, which the bytecode
    scan of the function alone does not follow. A global or imported name (``eval``, ``from
    ast import literal_eval``), an attribute (``builtins.eval``) or a string (``getattr(builtins,
    "eval")``) counts. Where a name read is bound by nothing the scan understands (and is no
    built-in: ``exec`` or ``globals().update`` made it), the whole notebook is scanned."""
    every = statements(cells)
    reached, unbound = reachable(every, [fn_name])
    if any(not hasattr(builtins, name) for name in unbound):
        reached = every  # bound where the scan cannot see: read everything
    for statement in reached:
        if (what := _forbidden_in(statement)) is not None:
            where = sorted(bound_names(statement)) or ["a statement"]
            return what, ", ".join(where)
    return None


def check_no_evaluator(fn: Callable, name: str) -> None:
    """Fail (as a case with a hint) if ``fn`` or a function it calls can evaluate its input.
    Judged apart, the notebook's source is read in the judge first (``forbidden_in_source``:
    the kernel cannot answer for it), then the function's bytecode in its kernel."""
    found = None
    if isinstance(fn, InKernel):
        found = forbidden_in_source(fn.notebook_source(), name)
    if found is None:
        found = beside(fn, _forbidden_call_of_a_function, fn_name=name)
    if found is None:
        return
    what, where = found
    raise failure(
        "no evaluator on model output",
        f"the code of `{name}` and of the functions it calls",
        "no eval, exec, compile, ast.literal_eval, sympify or parse_expr",
        f"uses {what} in `{where}`",
        "model output is data, never code: a completion such as "
        "\"__import__('os').system(...)\" would run on the training machine. Read the number "
        "with a regular expression and fractions.Fraction instead",
    )


# --- drawing values -------------------------------------------------------------------------------


def _int(g: torch.Generator, low: int, high: int) -> int:
    """A random integer in [low, high] (both included)."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


def _pick(g: torch.Generator, options: Sequence[Any]) -> Any:
    return options[_int(g, 0, len(options) - 1)]


def _digits(g: torch.Generator, count: int) -> str:
    """``count`` random ASCII digits, the first one not 0."""
    rest = torch.randint(0, 10, (count - 1,), generator=g).tolist()
    return str(_int(g, 1, 9)) + "".join(map(str, rest))


def _other(g: torch.Generator, value: int) -> int:
    """A positive integer that differs from ``value`` by 1 to 9."""
    step = _int(g, 1, 9)
    return value + step if value - step < 1 or _int(g, 0, 1) else value - step


FULL_WIDTH_ZERO, ARABIC_INDIC_ZERO = 0xFF10, 0x0660


def _script(number: int | str, zero: int) -> str:
    """The digits of ``number`` written in another script (``zero`` is that script's 0)."""
    return "".join(chr(zero + int(digit)) for digit in str(number))


def _decimal_text(value: Fraction) -> str:
    """A terminating decimal's text, exactly: 3/4 -> '0.75', -5/2 -> '-2.5'."""
    sign, value = ("-" if value < 0 else ""), abs(value)
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
    digits = str(int(value * 10**places)).rjust(places + 1, "0")
    return sign + (f"{digits[:-places]}.{digits[-places:]}" if places else digits)


def _long(text: str) -> str:
    """How a long run of digits is shown: its first and last digits and its length."""
    return f"'{text[:3]}...{text[-3:]}' ({len(text):,} digits)"


# --- exercise 1: parse_number -------------------------------------------------------------------


def _same_number(got: Any, expected: Any) -> bool:
    """None for None; otherwise a Fraction equal to the expected one (a float is not exact)."""
    if expected is None:
        return got is None
    return isinstance(got, Fraction) and got == expected


# One hint per kind, shared by the table's example (public) and its drawn twins (public and graded).
_HINTS = {
    "integer": "a text that is one integer: return its exact value, a fractions.Fraction",
    "negative": "a leading '-' is allowed",
    "decimal": "3.5 is exactly 7/2: return Fraction('3.5') (built from the text), never a float "
    "and never int() of it",
    "float": "Fraction(float('0.1')) is 3602879701896397/36028797018963968, not 1/10: a float "
    "is not exact. Build the Fraction from the text (Fraction('0.1')), never through float()",
    "big": "float has 53 bits: build the Fraction from the text, never through float()",
    "fraction": "a/b is Fraction(a, b)",
    "negative fraction": "-a/b is -(a/b)",
    "scientific": "scientific notation is not in the table. Fraction, int and float accept "
    "Python's own number syntax (1e5, 1_000, other scripts' digits), and Fraction('1e999999999') "
    "computes a billion-digit number: check the whole text against your pattern (re.fullmatch) "
    "BEFORE calling Fraction",
    "underscores": "Fraction('1_000') and int('1_000') accept Python's underscores, the table "
    "does not: check the whole text against your pattern (re.fullmatch) BEFORE calling Fraction",
    "scripts": "use [0-9], not \\d: \\d (and Fraction, int, float) also accept other scripts' "
    "digits; the table's digits are ASCII 0-9",
    "leading zeros": "leading zeros are allowed: '007' is 7 (the integer pattern [0-9]+)",
    "trailing zero": "3.50 is 7/2: keep every decimal digit, Fraction reduces",
    "thousands": "commas between groups of three digits are thousands separators: drop them "
    "after the pattern has checked the groups",
    "millions": "several thousands groups, each of exactly three digits",
    "spaces": "strip the whitespace around the number first",
    "bad group": "a comma must be followed by exactly three digits: '1,08' is not a number "
    "(None); do not just delete the commas, check the groups with your pattern",
    "decimal comma": "a thousands group never starts the number with 0: '0,500' (a decimal "
    "comma?) is None",
    "comma list": "'1,2,3' is a list, not 123: do not just delete commas, check the groups",
    "nan": "'nan' is not a number here: return None",
    "inf": "'inf' is not a number here: return None",
    "words": "no number: return None",
    "two numbers": "the WHOLE text must be one number (re.fullmatch, not re.search or the first "
    "word): return None",
    "expression": "never compute: an expression is not a number, return None (and never call eval)",
    "empty": "no number: return None",
    "zero denominator": "a zero denominator is not a number: return None, never raise "
    "ZeroDivisionError",
    "two signs": "at most one leading '-'",
    "plus sign": "'-' is the only sign of the table: '+5' is not a number (None)",
    "bare point": "a '.' needs digits on both sides: '.5' and '5.' are not numbers of the table "
    "(None); Fraction reads them, so check the text with your pattern first",
    "41 digits": f"more than MAX_NUMBER_DIGITS = {package_answers.MAX_NUMBER_DIGITS} digits is "
    "not a number (it bounds the cost of exact arithmetic): count the digits and return None",
    "40 digits": f"exactly MAX_NUMBER_DIGITS = {package_answers.MAX_NUMBER_DIGITS} digits is still "
    "a number: only MORE digits are refused (digits > MAX_NUMBER_DIGITS, not >=)",
    "4300 digits": "count the digits BEFORE calling Fraction: Fraction of a text with more than "
    "4,300 digits raises ValueError (Python's limit on int); return None",
    "not a string": "anything but a str: return None",
    "number object": "anything but a str: return None (no str(text): the input is not a text)",
}


_OUTSIDE_THE_TABLE = re.compile(r"\s*\+|.*(?<![0-9])\.|.*\.(?![0-9])", re.DOTALL)
"""A '+' sign, or a '.' without a digit on each side: numbers the package reads (``+5``, ``.5``,
``5.``) and the lab's table refuses."""


def table_parse_number(text: Any) -> Fraction | None:
    """``parse_number`` held to the lab's table: the package's, except that it also reads a '+'
    sign and a '.' with no digit on one side, which the table refuses. The expected values of
    the parse cases (a learner is graded on the table, not on the package's extras)."""
    if isinstance(text, str) and _OUTSIDE_THE_TABLE.match(text):
        return None
    return package_answers.parse_number(text)


def _parse(name: str, text: Any, expected: Fraction | None, kind: str, **show: str) -> Case:
    return Case(name, (text,), expected=expected, hint=_HINTS[kind], **show)


# The table's own examples, in the order that puts each usual mistake's real cause first: exact
# values before Python's syntax, Python's syntax before commas (Fraction(text) reads "1e5").
PARSE_PUBLIC = [
    _parse("an integer", "42", Fraction(42), "integer"),
    _parse("a negative integer", "-7", Fraction(-7), "negative"),
    _parse("a decimal, exactly", "3.5", Fraction(7, 2), "decimal"),
    _parse("0.1 exactly", "0.1", Fraction(1, 10), "float"),
    _parse("a fraction a/b", "3/4", Fraction(3, 4), "fraction"),
    _parse("scientific notation is refused", "1e5", None, "scientific"),
    _parse("the demo cell's 0.5e0 is refused", "0.5e0", None, "scientific"),
    _parse("Python's underscores are not a number format", "1_000", None, "underscores"),
    _parse("full-width digits", "\uff14\uff12", None, "scripts", show="'４２' (full-width digits)"),
    _parse("leading zeros", "007", Fraction(7), "leading zeros"),
    _parse("a trailing zero", "3.50", Fraction(7, 2), "trailing zero"),
    _parse("a negative fraction", "-3/4", Fraction(-3, 4), "negative fraction"),
    _parse("thousands separators", "1,080", Fraction(1080), "thousands"),
    _parse("millions", "12,345,678", Fraction(12345678), "millions"),
    _parse("spaces around the number", " 12 ", Fraction(12), "spaces"),
    _parse("a bad thousands group", "1,08", None, "bad group"),
    _parse("a decimal comma is not a thousands group", "0,500", None, "decimal comma"),
    _parse("a comma list", "1,2,3", None, "comma list"),
    _parse("NaN text", "nan", None, "nan"),
    _parse("infinity text", "inf", None, "inf"),
    _parse("words are not a number", "twelve", None, "words"),
    _parse("two numbers are not one number", "3 or 4", None, "two numbers"),
    _parse("an expression is not a number", "2+2", None, "expression"),
    _parse("division by zero", "1/0", None, "zero denominator"),
    _parse("two signs", "--5", None, "two signs"),
    _parse("a plus sign", "+5", None, "plus sign"),
    _parse("a point with no digit before it", ".5", None, "bare point"),
    _parse("a point with no digit after it", "5.", None, "bare point"),
    _parse("the empty string", "", None, "empty"),
    _parse("not a string", None, None, "not a string"),
]


def parse_twins(seed: int) -> list[Case]:
    """One case of every kind ``parse_number`` is graded on, with values drawn from ``seed``.

    Every row of the lab's table (accepted and refused) is a kind, in the order of
    ``PARSE_PUBLIC``, plus the kinds the table implies: an integer or a decimal that a float
    cannot hold, Arabic-Indic digits, only spaces, 41 digits, more digits than Python's int
    reads, a number object.
    """
    g = generator(seed)
    integer, negative = _int(g, 1, 99_999), _int(g, 1, 9_999)
    whole, places = _int(g, 0, 99), _int(g, 1, 3)
    # a decimal that a float holds exactly (k/8), as 3.5 is; and one that no float holds
    decimal = f"{_int(g, 1, 99)}.{_pick(g, ['5', '25', '75', '125', '375', '625', '875'])}"
    inexact = f"{whole}.{_digits(g, places)[1:]}{_pick(g, '12346789')}"  # N/10^k, 5 !| N
    big = int(_digits(g, 20)) | 1  # odd and above 2**64: no float holds it
    p, q = _int(g, 1, 99), _int(g, 2, 99)
    thousands, millions = _int(g, 1_000, 999_999), _int(g, 1_000_000, 999_999_999)
    group = _int(g, 1, 999)
    wide = _int(g, 10, 999)
    forty_one, many = _digits(g, 41), _digits(g, _int(g, 5_000, 9_999))
    trailing = f"{whole}.{_int(g, 1, 9)}0"
    return [
        _parse("an integer (random)", str(integer), Fraction(integer), "integer"),
        _parse("a negative integer (random)", f"-{negative}", Fraction(-negative), "negative"),
        _parse("a decimal a float holds", decimal, Fraction(decimal), "decimal"),
        _parse("a decimal a float cannot hold", inexact, Fraction(inexact), "float"),
        _parse("an integer a float cannot hold", str(big), Fraction(big), "big"),
        _parse("a fraction a/b (random)", f"{p}/{q}", Fraction(p, q), "fraction"),
        _parse(
            "scientific notation (random)", f"{_int(g, 1, 99)}e{_int(g, 1, 9)}", None, "scientific"
        ),
        _parse(
            "scientific notation with a decimal mantissa",
            f"{_int(g, 0, 9)}.{_int(g, 1, 9)}e{_int(g, 0, 9)}",
            None,
            "scientific",
        ),
        _parse("underscores (random)", f"{group}_{_int(g, 0, 999):03d}", None, "underscores"),
        _parse(
            "full-width digits (random)",
            _script(wide, FULL_WIDTH_ZERO),
            None,
            "scripts",
            show=f"{_script(wide, FULL_WIDTH_ZERO)!r} (full-width digits)",
        ),
        _parse(
            "Arabic-Indic digits",
            _script(wide + 1, ARABIC_INDIC_ZERO),
            None,
            "scripts",
            show=f"{_script(wide + 1, ARABIC_INDIC_ZERO)!r} (Arabic-Indic digits)",
        ),
        _parse(
            "leading zeros (random)",
            "0" * _int(g, 1, 2) + str(group),
            Fraction(group),
            "leading zeros",
        ),
        _parse("a trailing zero (random)", trailing, Fraction(trailing), "trailing zero"),
        _parse("a negative fraction (random)", f"-{q}/{p}", Fraction(-q, p), "negative fraction"),
        _parse("thousands separators (random)", f"{thousands:,}", Fraction(thousands), "thousands"),
        _parse("millions (random)", f"{millions:,}", Fraction(millions), "millions"),
        _parse(
            "spaces around the number (random)",
            " " * _int(g, 1, 3) + str(p) + " " * _int(g, 1, 3),
            Fraction(p),
            "spaces",
        ),
        _parse(
            "a bad thousands group (random)", f"{group},{_int(g, 0, 99):02d}", None, "bad group"
        ),
        _parse("a decimal comma (random)", f"0,{_int(g, 0, 999):03d}", None, "decimal comma"),
        _parse(
            "a comma list (random)",
            ",".join(str(_int(g, 1, 9)) for _ in range(3)),
            None,
            "comma list",
        ),
        _parse("NaN text (random)", _pick(g, ["nan", "NaN", "NAN"]), None, "nan"),
        _parse(
            "infinity text (random)",
            _pick(g, ["inf", "-inf", "Infinity", "infinity"]),
            None,
            "inf",
        ),
        _parse(
            "words (random)",
            _pick(g, ["twelve", "forty-two", "seven", "a hundred"]),
            None,
            "words",
        ),
        _parse("two numbers (random)", f"{p} or {_other(g, p)}", None, "two numbers"),
        _parse(
            "an expression (random)",
            f"{p}{_pick(g, ['+', '*', '**'])}{q}",
            None,
            "expression",
        ),
        _parse("division by zero (random)", f"{p}/0", None, "zero denominator"),
        _parse("two signs (random)", f"--{p}", None, "two signs"),
        _parse("a plus sign (random)", f"+{q}", None, "plus sign"),
        _parse("a point with no digit before it (random)", f".{q}", None, "bare point"),
        _parse("a point with no digit after it (random)", f"{p}.", None, "bare point"),
        _parse("only spaces", " " * _int(g, 1, 4), None, "empty"),
        _parse("41 digits", forty_one, None, "41 digits", show=_long(forty_one)),
        _parse(
            "more digits than Python's int reads",
            many,
            None,
            "4300 digits",
            show=_long(many),
        ),
        _parse("None is not a string", None, None, "not a string"),
        _parse("a number object", _int(g, 1, 99), None, "number object"),
        _at_the_digits_cap(_digits(g, package_answers.MAX_NUMBER_DIGITS)),
    ]


def _at_the_digits_cap(digits: str) -> Case:
    return _parse(
        f"exactly {len(digits)} digits",
        digits,
        Fraction(int(digits)),
        "40 digits",
        show=_long(digits),
    )


def _sign_dropped(text: str) -> Fraction | None:
    """A mistake: the '-' matched, but the value returned without it."""
    value = table_parse_number(text)
    return None if value is None else abs(value)


def _no_leading_zero(text: str) -> Fraction | None:
    """A mistake: integers as [1-9][0-9]*, so a number whose integer part is 0 or starts with 0
    ('0.1', '007', '3/04') is refused."""
    if isinstance(text, str) and re.search(r"(?<![0-9,.])0", text):
        return None
    return table_parse_number(text)


def _cap_off_by_one(text: str) -> Fraction | None:
    """A mistake: a side of exactly MAX_NUMBER_DIGITS digits refused (>= for >)."""
    cap = package_answers.MAX_NUMBER_DIGITS
    if isinstance(text, str) and any(
        sum(ch.isdigit() for ch in side) == cap for side in text.split("/")
    ):
        return None
    return table_parse_number(text)


def _commas_required(text: str) -> Fraction | None:
    """A mistake: integers only as thousands groups ([1-9][0-9]{0,2}(,[0-9]{3})* or 0), so
    '1080' and '007' are refused and '1,080' read."""
    if isinstance(text, str) and re.search(r"(?<![0-9,.])(?:[0-9]{4}|0[0-9])", text):
        return None
    return table_parse_number(text)


PARSE_MISTAKES = [
    Mistake(
        _sign_dropped,
        "the '-' was read but not applied: a number with a leading '-' is negative, "
        "-(its digits' value)",
    ),
    Mistake(_cap_off_by_one, _HINTS["40 digits"]),  # before the others: one case fits many
    Mistake(
        _no_leading_zero,
        "an integer part may be 0 or start with 0 ('0.1', '0', '007'): the table's "
        "integers are [0-9]+ (or thousands groups), not [1-9][0-9]*",
    ),
    Mistake(
        _commas_required,
        "an integer needs no commas: '1080' is a number as much as '1,080' (the table's "
        "integers are [0-9]+, leading zeros allowed, OR thousands groups)",
    ),
]


def check_parse_number(fn: Callable, seed: int | None = None) -> None:
    """The table's examples and their twins; with the grader's ``seed``, fresh twins only.

    The security scan comes first."""
    check_no_evaluator(fn, "parse_number")
    cases = cases_for(PARSE_PUBLIC, parse_twins, seed)
    run_cases(
        fn,
        "parse_number",
        cases,
        table_parse_number,
        compare=_same_number,
        mistakes=PARSE_MISTAKES,
        none_is_an_answer=True,
    )


# --- exercise 2: accuracy_reward ----------------------------------------------------------------

LONG_THINKING = "Let me think. "  # repeated past MAX_COMPLETION_CHARS in the length cases
MAX_CHARS = package_answers.MAX_COMPLETION_CHARS


def _chat(*contents: Any) -> list[dict]:
    """TRL's conversational completion: a list of assistant messages."""
    return [{"role": "assistant", "content": content} for content in contents]


def _boxed(value: Any) -> str:
    return "\\boxed{" + str(value) + "}"


# One hint per kind, shared by the hand-written public case and its drawn twins.
_REWARD_HINTS = {
    "boxed": "read the number inside \\boxed{...} and compare it with the gold",
    "final": "read only the answer spots (\\boxed, 'answer is'), not the first number in the text",
    "phrase": "the answer is the text after 'answer is', up to the end of its sentence (a '.' "
    "followed by a space or the end of the text) or of its line",
    "exact": "compare values (parse_number of both sides), not strings; the '.' of 0.5 does not "
    "end the sentence",
    "cut": "3 is not 3.5: never int(float(x)); compare the exact Fractions",
    "thousands": "1,080 and 1080 are the same number, in the completion and in the gold: read "
    "both with your parse_number, not with Fraction(text) (Fraction refuses '1,080' and reads "
    "'1e5', which the table refuses)",
    "two boxes": "all answer spots must state the same value; two different ones are a hedge: 0.0",
    "expression": "'6*7' is not a number: no answer, 0.0 (never compute model output)",
    "no answer": "no \\boxed{} and no 'answer is': 0.0",
    "chat": "TRL's conversational format: a list of {'role', 'content'} messages; score the "
    "content of the last one",
    "lengths": "len(completions) != len(answer) is a bug in the caller: raise ValueError (zip "
    "would silently drop a completion)",
    "bad gold": "golds come from your data set: a gold parse_number cannot read is a data bug, "
    "raise ValueError (a silent 0.0 would hide it)",
    "hedge in a phrase": "two numbers ('3 or 4') are not one number: no answer. The WHOLE phrase "
    "must be one "
    "number (parse_number of the phrase), never a number searched for inside it",
    "box and phrase": "a phrase that states one number counts, also next to a box; two different "
    "values are a hedge",
    "two phrases": "every spot counts, not only the last one: two different values are a hedge",
    "candidates": "several numbers in one spot are a hedge, even if one of them is the gold: "
    "the whole phrase must be one number, never a number searched for inside it",
    "same twice": "spots that agree in value are fine",
    "box in phrase": "a phrase that is not a plain number is prose when there is a box: skip it, "
    "the box decides",
    "negated": "'not 5' is not a number: no answer (a number searched for inside the phrase "
    "would pay for it)",
    "sum": "an expression is not an answer; evaluating it would run model output",
    "power": "'10**2' is an expression, not a number ('9**9**9**9' would never finish)",
    "payload": "model output is data: this is a program, not a number",
    "shell": "os.system returns 0 on success: an eval grader would run the command AND pay for it",
    "python syntax": "underscores and scientific notation are refused: Fraction reads them, so "
    "check the text with your pattern before calling Fraction",
    "cut 2": "n.d is not n, n.00 is n: compare exact values",
    "repeating": "the float of 1/3 prints as 0.3333333333333333, but the exact values differ: "
    "compare Fractions built from the text, never floats",
    "float digits": "both parse to the same float; the exact values differ: build the Fraction "
    "from the text, never through float()",
    "2**53": "float cannot tell 2**53 + 4k and 2**53 + 4k + 1 apart; Fraction can",
    "signs": "-p/q equals its decimal, kp/kq = p/q exactly; a/0 is no number (and must not raise)",
    "commas": "'1,2,3' and '1,08' are not numbers: do not just delete the commas",
    "nan": "not numbers in our grammar: 0.0, and no crash (int(float('inf')) raises)",
    "scripts": "ASCII digits only: [0-9], not \\d (\\d, Fraction and int read other scripts' "
    "digits)",
    "large": "exact values: a float would call these two equal",
    "upper": "'answer is' in any case (re.IGNORECASE)",
    "digits cap": f"more than MAX_NUMBER_DIGITS = {package_answers.MAX_NUMBER_DIGITS} digits is "
    "not a number: count the digits before calling Fraction (Fraction of more than 4,300 digits "
    "raises ValueError)",
    "over the cap": f"longer than MAX_COMPLETION_CHARS = {MAX_CHARS:,} characters: 0.0 without "
    "reading it",
    "at the cap": f"exactly MAX_COMPLETION_CHARS = {MAX_CHARS:,} characters is still read: only "
    "LONGER texts score 0.0 unread (len(text) > MAX_COMPLETION_CHARS, not >=)",
    "right after the cap": f"longer than MAX_COMPLETION_CHARS = {MAX_CHARS:,} characters scores "
    "0.0 unread, even when right: check len(text) first",
    "answer then the cap": f"longer than MAX_COMPLETION_CHARS = {MAX_CHARS:,} characters scores "
    "0.0 unread, wherever the answer is: do not cut the text to the cap (text[:cap] still reads "
    "the box at its start), check len(text) first",
    "non-strings": "a completion that is neither a str nor a list of messages scores 0.0, it "
    "never raises",
    "content None": "a message's content can be None (a tool call, say): it is not a str, so it "
    "scores 0.0; check isinstance(content, str) before using it, never raise",
    "empty": "an empty spot is no number: 0.0",
    "last message": "in a list of messages, score the content of the LAST one",
}


def _reward(name: str, completions: list, golds: list, expected: list | None, kind: str, **show):
    golds = [str(gold) for gold in golds]
    return Case(name, (completions, golds), expected=expected, hint=_REWARD_HINTS[kind], **show)


ACCURACY_PUBLIC = [
    _reward(
        "a boxed integer, right and wrong",
        ["\\boxed{42}", "\\boxed{41}"],
        [42, 42],
        [1.0, 0.0],
        "boxed",
    ),
    _reward(
        "the final answer, not the first number",
        ["15 + 27 = 42, so \\boxed{42}"],
        [42],
        [1.0],
        "final",
    ),
    _reward(
        "an 'answer is' phrase",
        ["So 6*7 = 42. The answer is 42.", "The answer is 41."],
        [42, 42],
        [1.0, 0.0],
        "phrase",
    ),
    _reward(
        "the phrase ends with its sentence",
        ["The answer is 42. I double-checked it."],
        [42],
        [1.0],
        "phrase",
    ),
    _reward(
        "exact values: 3.0 is 3, 0.5 is 1/2",
        ["\\boxed{3.0}", "The answer is 0.5."],
        ["3", "1/2"],
        [1.0, 1.0],
        "exact",
    ),
    _reward("a decimal is not cut into an integer", ["\\boxed{3}"], ["3.5"], [0.0], "cut"),
    _reward(
        "thousands separators",
        ["\\boxed{1,080}", "The answer is 1080."],
        ["1080", "1,080"],
        [1.0, 1.0],
        "thousands",
    ),
    _reward(
        "a hedge: two different boxed answers",
        ["\\boxed{41} or \\boxed{42}"],
        [42],
        [0.0],
        "two boxes",
    ),
    _reward("an expression is not evaluated", ["\\boxed{6*7}"], [42], [0.0], "expression"),
    _reward("no answer stated", ["I am not sure.", ""], [42, 42], [0.0, 0.0], "no answer"),
    _reward(
        "conversational completions",
        [_chat("\\boxed{42}"), _chat("The answer is 7.")],
        [42, 42],
        [1.0, 0.0],
        "chat",
    ),
]

ACCURACY_PUBLIC_ERRORS = [
    _reward("as many golds as completions", ["\\boxed{1}", "\\boxed{2}"], [1], None, "lengths"),
]


def accuracy_twins(seed: int) -> list[Case]:
    """One case of every kind ``accuracy_reward`` is graded on, with values drawn from ``seed``.

    First the twins of ``ACCURACY_PUBLIC``, then hedges, code, exact numbers, sizes and odd
    completions, in an order that shows each usual mistake's real cause first.
    """
    g = generator(seed)
    gold = _int(g, 10, 999)
    other, third = _other(g, gold), _other(g, gold) + 20
    a, b = _int(g, 2, 99), _int(g, 2, 99)
    n, d = _int(g, 1, 99), _int(g, 1, 9)
    q = _pick(g, [2, 4, 8])  # p/q terminates, and a float holds it exactly (as 0.5)
    p = _pick(g, [k for k in range(1, q) if math.gcd(k, q) == 1])
    k = _int(g, 2, 5)
    thousands = _int(g, 1_000, 999_999)
    repeating_q = _pick(g, [3, 7, 9, 11, 13])
    repeating_p = _pick(g, [k for k in range(1, repeating_q) if math.gcd(k, repeating_q) == 1])
    tenths = _int(g, 1, 9)
    past_53 = 2**53 + 4 * _int(g, 0, 10**6) + 1  # rounds down to past_53 - 1 as a float
    large = int(_digits(g, 20)) | 1
    digit, long_count = _int(g, 1, 9), _int(g, 5_000, 9_990)
    over_count, repeats = _int(g, 20_000, 100_000), _int(g, 720, 800)
    return [
        _reward(
            "a boxed integer, right and wrong (random)",
            [_boxed(gold), _boxed(other)],
            [gold, gold],
            [1.0, 0.0],
            "boxed",
        ),
        _reward(
            "the final answer, not the first number (random)",
            [
                f"{a} + {b} = {a + b}, so {_boxed(a + b)}",
                f"{a} + {b} = {a + b + 1}, so {_boxed(a + b + 1)}",
            ],
            [a + b, a],
            [1.0, 0.0],
            "final",
        ),
        _reward(
            "an 'answer is' phrase (random)",
            [f"So {a}*{b} = {a * b}. The answer is {a * b}.", f"The answer is {a * b + d}."],
            [a * b, a * b],
            [1.0, 0.0],
            "phrase",
        ),
        _reward(
            "the phrase ends with its sentence (random)",
            [
                f"The answer is {a * b}. {_pick(g, ['I checked it twice.', 'Done.', 'That is all.'])}"
            ],
            [a * b],
            [1.0],
            "phrase",
        ),
        _reward(
            "exact values (random)",
            [_boxed(f"{n}.0"), f"The answer is {_decimal_text(Fraction(p, q))}."],
            [n, f"{p}/{q}"],
            [1.0, 1.0],
            "exact",
        ),
        _reward(
            "a decimal is not cut into an integer (random)",
            [_boxed(n)],
            [f"{n}.{d}"],
            [0.0],
            "cut",
        ),
        _reward(
            "thousands separators (random)",
            [_boxed(f"{thousands:,}"), f"The answer is {thousands}."],
            [thousands, f"{thousands:,}"],
            [1.0, 1.0],
            "thousands",
        ),
        _reward(
            "a hedge: two different boxed answers (random)",
            [f"{_boxed(other)} or {_boxed(gold)}"],
            [gold],
            [0.0],
            "two boxes",
        ),
        _reward(
            "an expression is not evaluated (random)",
            [_boxed(f"{a}*{b}")],
            [a * b],
            [0.0],
            "expression",
        ),
        _reward(
            "no answer stated (random)",
            [_pick(g, ["I am not sure.", "Let me think about it.", "Hmm."]), " " * _int(g, 0, 3)],
            [gold, gold],
            [0.0, 0.0],
            "no answer",
        ),
        _reward(
            "conversational completions (random)",
            [_chat(_boxed(gold)), _chat(f"The answer is {other}.")],
            [gold, gold],
            [1.0, 0.0],
            "chat",
        ),
        # hedges
        _reward(
            "a hedge inside one phrase",
            [f"The answer is {gold} or {other}."],
            [gold],
            [0.0],
            "hedge in a phrase",
        ),
        _reward(
            "a hedge between a box and a phrase",
            [f"{_boxed(gold)} The answer is {other}."],
            [gold],
            [0.0],
            "box and phrase",
        ),
        _reward(
            "a hedge between two phrases",
            [f"The answer is {other}. Actually, the answer is {gold}."],
            [gold],
            [0.0],
            "two phrases",
        ),
        _reward(
            "a list of candidates",
            [f"The answer is {other}, {gold}, {third}."],
            [gold],
            [0.0],
            "candidates",
        ),
        _reward(
            "the same answer twice is no hedge",
            [f"{_boxed(gold)} and again {_boxed(f'{gold}.0')}"],
            [gold],
            [1.0],
            "same twice",
        ),
        _reward(
            "a box inside the phrase",
            [f"The answer is {_boxed(gold)}."],
            [gold],
            [1.0],
            "box in phrase",
        ),
        _reward("a negated phrase", [f"The answer is not {gold}."], [gold], [0.0], "negated"),
        # code
        _reward(
            "a sum is not its value",
            [_boxed(f"{a}+{b}"), f"The answer is {a}+{b}."],
            [a + b, a + b],
            [0.0, 0.0],
            "sum",
        ),
        _reward(
            "a power",
            [_boxed(f"{a % 11 + 2}**{d % 4 + 2}")],
            [(a % 11 + 2) ** (d % 4 + 2)],
            [0.0],
            "power",
        ),
        _reward(
            "a Python payload",
            [_boxed(f"__import__('math').factorial({d + 2})")],
            [math.factorial(d + 2)],
            [0.0],
            "payload",
        ),
        _reward(
            "a shell payload whose exit code is the gold",
            [f"The answer is __import__('os').system('{_pick(g, ['true', 'ls', 'id', 'pwd'])}')."],
            [0],
            [0.0],
            "shell",
        ),
        _reward(
            "Python's number syntax is not ours",
            [_boxed(f"{n}_{thousands % 1000:03d}"), _boxed(f"{n}e{d}")],
            [f"{n}{thousands % 1000:03d}", n * 10**d],
            [0.0, 0.0],
            "python syntax",
        ),
        # exact numbers
        _reward(
            "a decimal is not cut, and n.00 is n",
            [_boxed(f"{n}.{d}"), _boxed(f"{n}.00")],
            [n, n],
            [0.0, 1.0],
            "cut 2",
        ),
        _reward(
            "a repeating decimal is not its fraction",
            [
                _boxed(repr(repeating_p / repeating_q)),
                _boxed(f"{k * repeating_p}/{k * repeating_q}"),
            ],
            [f"{repeating_p}/{repeating_q}"] * 2,
            [0.0, 1.0],
            "repeating",
        ),
        _reward(
            "digits past a float's precision",
            [_boxed(f"0.{tenths}{'0' * 15}1"), f"The answer is {tenths}/10."],
            [f"0.{tenths}"] * 2,
            [0.0, 1.0],
            "float digits",
        ),
        _reward(
            "an odd integer past 2**53",
            [_boxed(past_53 - 1), _boxed(past_53)],
            [past_53] * 2,
            [0.0, 1.0],
            "2**53",
        ),
        _reward(
            "fractions and signs",
            [_boxed(f"-{p}/{q}"), _boxed(f"{k * p}/{k * q}"), _boxed(f"{a}/0")],
            [_decimal_text(Fraction(-p, q)), f"{p}/{q}", 0],
            [1.0, 1.0, 0.0],
            "signs",
        ),
        _reward(
            "commas in thousands groups only",
            [_boxed(f"{d},{n % 9 + 1},{b % 9 + 1}"), _boxed(f"{a},{n:02d}")],
            [f"{d}{n % 9 + 1}{b % 9 + 1}", f"{a}{n:02d}"],
            [0.0, 0.0],
            "commas",
        ),
        _reward(
            "NaN and infinity as text",
            [
                _boxed(_pick(g, ["nan", "NaN"])),
                _boxed(_pick(g, ["inf", "-inf"])),
                f"The answer is {_pick(g, ['infinity', '-infinity'])}.",
            ],
            [0, 1, 1],
            [0.0, 0.0, 0.0],
            "nan",
        ),
        _reward(
            "digits of other scripts",
            [
                _boxed(_script(gold, FULL_WIDTH_ZERO)),
                f"The answer is {_script(gold, ARABIC_INDIC_ZERO)}.",
            ],
            [gold, gold],
            [0.0, 0.0],
            "scripts",
        ),
        _reward(
            "a large exact integer",
            [_boxed(large), _boxed(large - 1)],
            [large] * 2,
            [1.0, 0.0],
            "large",
        ),
        _reward("upper case phrase", [f"THE ANSWER IS {gold}."], [gold], [1.0], "upper"),
        # sizes
        _reward(
            "thousands of digits inside the length cap",
            [_boxed(str(digit) * long_count)],
            [digit],
            [0.0],
            "digits cap",
            show=f"['\\\\boxed{{{digit}{digit}{digit}...}}' ({long_count:,} digits)], ['{digit}']",
        ),
        _reward(
            "a number longer than the length cap",
            [_boxed("1" * over_count)],
            [1],
            [0.0],
            "over the cap",
            show=f"['\\\\boxed{{111...1}}' ({over_count:,} ones)], ['1']",
        ),
        _reward(
            "a right answer past the length cap",
            [LONG_THINKING * repeats + _boxed(gold)],
            [gold],
            [0.0],
            "right after the cap",
            show=f"[{LONG_THINKING!r} * {repeats} + '\\\\boxed{{{gold}}}'], ['{gold}']",
        ),
        _reward(
            "a right answer first, then past the length cap",
            [_boxed(gold) + LONG_THINKING * repeats],
            [gold],
            [0.0],
            "answer then the cap",
            show=f"['\\\\boxed{{{gold}}}' + {LONG_THINKING!r} * {repeats}], ['{gold}']",
        ),
        # odd completions
        _reward(
            "None and other non-strings",
            [None, gold, [], {"role": "assistant"}],
            [gold] * 4,
            [0.0] * 4,
            "non-strings",
        ),
        _reward(
            "a message whose content is None",
            [_chat(None), _chat(_boxed(gold))],
            [gold] * 2,
            [0.0, 1.0],
            "content None",
        ),
        _reward(
            "empty answers",
            ["", " " * _int(g, 1, 4), "\\boxed{}", "The answer is ."],
            [gold] * 4,
            [0.0] * 4,
            "empty",
        ),
        _reward(
            "the last message is scored",
            [
                _chat(f"The answer is {other}.", _boxed(gold)),
                _chat(_boxed(gold), f"The answer is {other}."),
            ],
            [gold] * 2,
            [1.0, 0.0],
            "last message",
        ),
        _at_the_length_cap(_int(g, 1, 999)),
    ]


def _at_the_length_cap(gold: int) -> Case:
    """A right box that ends a completion of exactly ``MAX_CHARS`` characters: it is read."""
    box = _boxed(gold)
    padding = MAX_CHARS - len(box)
    text = (LONG_THINKING * (padding // len(LONG_THINKING) + 1))[:padding] + box
    return _reward(
        "a right answer that ends exactly at the length cap",
        [text],
        [gold],
        [1.0],
        "at the cap",
        show=f"[{LONG_THINKING!r} * ... cut to {padding:,} characters + '\\boxed{{{gold}}}' "
        f"({MAX_CHARS:,} characters in all)], ['{gold}']",
    )


def accuracy_error_twins(seed: int) -> list[Case]:
    """The caller's bugs that must raise ValueError, with values drawn from ``seed``."""
    g = generator(seed)
    count = _int(g, 2, 5)
    return [
        _reward(
            "as many golds as completions (random)",
            [_boxed(i) for i in range(count)],
            list(range(count - 1)),
            None,
            "lengths",
        ),
        _reward(
            "a gold that is not a number",
            [_boxed(1)],
            [_pick(g, ["one", "forty-two", "n/a", "unknown", "?"])],
            None,
            "bad gold",
        ),
    ]


def _booleans(completions, answer):
    """A mistake: True / False for each completion instead of the reward 1.0 / 0.0."""
    return [score == 1.0 for score in package_rewards.accuracy_reward(completions, answer)]


def _greedy_boxes(completions, answer):
    r"""A mistake: the box read with a greedy ``\boxed\{(.*)\}``, so a text with two boxes has
    one spot, from the first box to the last brace, which is no number: 0.0 (the rest scored as
    it should be)."""
    scores = package_rewards.accuracy_reward(completions, answer)
    return [
        0.0 if isinstance(text, str) and text.count("\\boxed{") > 1 else score
        for text, score in zip(completions, scores, strict=True)
    ]


ACCURACY_MISTAKES = [
    Mistake(
        _booleans,
        "return floats, 1.0 or 0.0, not bools (True / False): a reward is a "
        "number, and TRL multiplies each reward function's list by its weight",
    ),
    Mistake(
        _greedy_boxes,
        "read each \\boxed{...} up to ITS closing brace ([^{}]* or counting braces): a "
        "greedy .* runs from the first box to the last brace, so two boxes become one spot "
        "that is no number",
    ),
]


def check_accuracy_reward(fn: Callable, seed: int | None = None) -> None:
    """The public cases and their twins (with the grader's ``seed``, fresh twins only), then the
    caller's bugs that must raise; the security scan first. Every case runs: the message details
    the first failure and names the others."""
    check_no_evaluator(fn, "accuracy_reward")
    reference = package_rewards.accuracy_reward
    values = cases_for(ACCURACY_PUBLIC, accuracy_twins, seed)
    errors = cases_for(ACCURACY_PUBLIC_ERRORS, accuracy_error_twins, seed)
    run = partial(run_cases, fn, "accuracy_reward", reference=reference, mistakes=ACCURACY_MISTAKES)
    run_all(
        "accuracy_reward",
        fn,
        [(c.name, partial(run, [c])) for c in values]
        + [(c.name, partial(expect_raises, fn, c, ValueError)) for c in errors],
    )


# --- exercise 3: what GRPO does with a hedge ----------------------------------------------------


lenient_accuracy = package_rewards.lenient_accuracy_reward
"""A deliberately BAD grader (notebook 05, section 5): 1.0 if the gold appears anywhere."""


GROUP = [
    "15 + 27 = 42, so \\boxed{42}",  # honest, right
    "15 + 27 = 32, so \\boxed{32}",  # honest, wrong
    "\\boxed{41} \\boxed{42} \\boxed{43}",  # a hedge
    "The answer is 41 or 42.",  # another hedge
]
"""One group (G = 4) of completions for "15 + 27" (gold 42)."""
GOLDS = ["42"] * len(GROUP)
"""The gold answer of each completion in GROUP."""


def check_hedge_question(hedge_lenient: float, hedge_strict: float) -> None:
    """The GRPO advantage (eq. (2), eps = 1e-4) of GROUP[2] under each grader."""
    for name, got, grader in (
        ("the hedge's advantage, lenient grader", hedge_lenient, lenient_accuracy),
        ("the hedge's advantage, your grader", hedge_strict, package_rewards.accuracy_reward),
    ):
        rewards = torch.tensor(grader(GROUP, GOLDS))
        check_answer(
            name,
            got,
            advantages.group_advantages(rewards, len(GROUP))[2].item(),
            "score checks.GROUP with that grader, then apply eq. (2) to the four rewards "
            "(sample, Bessel-corrected std, eps = 1e-4, as group_advantages does) and take the "
            "third, index 2",
        )
