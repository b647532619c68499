r"""Lab 04 checks: a safe verifiable reward (notebook 05, equation (17)).

Exercises mirror ``grpo_minimal.answers.parse_number`` and ``grpo_minimal.rewards.accuracy_reward``
with the same names and signatures, for the subset of formats the lab states: the final answer in
``\boxed{...}`` or after "answer is", written as an integer (thousands commas allowed), a decimal
or ``a/b``; exact comparison with ``fractions.Fraction``. Public cases stay inside that subset;
hidden cases are adversarial (hedges, code, huge numbers, NaN text, non-string completions), and
for every case the expected value is what the package returns, so a learner who delegates to the
package passes.

Every check first scans the learner's code (and the functions it calls) for ``eval``, ``exec``,
``compile``, ``ast.literal_eval``, ``sympify`` and ``parse_expr``: model output is data, never
code, so using one of them is a failed case whatever the outputs are.
"""

from __future__ import annotations

import ast
import builtins
import dis
import sys
import types
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import torch

from grpo_minimal import advantages
from grpo_minimal import answers as package_answers
from grpo_minimal import rewards as package_rewards
from grpo_minimal.labs.checking import Case, check_answer, expect_raises, failure, run_cases

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


def check_no_evaluator(fn: Callable, name: str) -> None:
    """Fail (as a case with a hint) if ``fn`` or a function it calls can evaluate its input."""
    if not isinstance(fn, types.FunctionType):
        return  # not a function yet: run_cases reports it
    found = forbidden_call(fn)
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


# --- exercise 1: parse_number -------------------------------------------------------------------


def _same_number(got: Any, expected: Any) -> bool:
    """None for None; otherwise a Fraction equal to the expected one (a float is not exact)."""
    if expected is None:
        return got is None
    return isinstance(got, Fraction) and got == expected


PARSE_PUBLIC = [
    Case(
        "an integer",
        ("42",),
        expected=Fraction(42),
        hint="a text that is one integer: return its exact value, a fractions.Fraction",
    ),
    Case("a negative integer", ("-7",), expected=Fraction(-7), hint="a leading '-' is allowed"),
    Case(
        "a decimal, exactly",
        ("3.5",),
        expected=Fraction(7, 2),
        hint="return a fractions.Fraction (Fraction('3.5') is exactly 7/2), not a float",
    ),
    Case("a fraction a/b", ("3/4",), expected=Fraction(3, 4), hint="a/b is Fraction(a, b)"),
    Case(
        "thousands separators",
        ("1,080",),
        expected=Fraction(1080),
        hint="commas between groups of three digits are thousands separators: drop them",
    ),
    Case(
        "spaces around the number",
        (" 12 ",),
        expected=Fraction(12),
        hint="strip the whitespace around the number first",
    ),
    Case("words are not a number", ("twelve",), hint="no number: return None"),
    Case(
        "two numbers are not one number",
        ("3 or 4",),
        hint="the WHOLE text must be one number (re.fullmatch, not re.search): return None",
    ),
    Case(
        "an expression is not a number",
        ("2+2",),
        hint="never compute: '2+2' is not a number, return None (and never call eval)",
    ),
    Case("the empty string", ("",), hint="no number: return None"),
]

PARSE_HIDDEN = [
    Case(
        "0.1 exactly",
        ("0.1",),
        expected=Fraction(1, 10),
        hint="Fraction(float('0.1')) is 3602879701896397/36028797018963968: build the Fraction "
        "from the text, never through a float",
    ),
    Case(
        "an integer float cannot hold",
        ("12345678901234567891",),
        expected=Fraction(12345678901234567891),
        hint="float has 53 bits: build the Fraction from the text",
    ),
    Case("a negative fraction", ("-3/4",), expected=Fraction(-3, 4), hint="-a/b is -(a/b)"),
    Case(
        "millions",
        ("12,345,678",),
        expected=Fraction(12345678),
        hint="several thousands groups",
    ),
    Case("a trailing zero", ("3.50",), expected=Fraction(7, 2), hint="3.50 is 7/2"),
    Case(
        "a bad thousands group",
        ("1,08",),
        hint="a comma must be followed by exactly three digits: '1,08' is not a number (None)",
    ),
    Case(
        "a decimal comma is not a thousands group",
        ("0,500",),
        hint="a thousands group never starts the number with 0: '0,500' is None",
    ),
    Case(
        "a comma list",
        ("1,2,3",),
        hint="'1,2,3' is a list, not 123: do not just delete commas, check the groups",
    ),
    Case(
        "scientific notation is refused",
        ("1e5",),
        hint="not in the grammar (Fraction('1e999999999') would compute a billion-digit "
        "number): check the text with your pattern before calling Fraction",
    ),
    Case(
        "Python's underscores are not a number format",
        ("1_000",),
        hint="Fraction('1_000') and int('1_000') accept underscores: check the text with your "
        "pattern before calling Fraction",
    ),
    Case("NaN text", ("nan",), hint="'nan' is not a number here: return None"),
    Case("infinity text", ("-inf",), hint="'-inf' is not a number here: return None"),
    Case(
        "full-width digits",
        ("\uff14\uff12",),
        show="'４２' (full-width digits)",
        hint="use [0-9], not \\d: \\d (and Fraction) also accept other scripts' digits",
    ),
    Case(
        "Arabic-Indic digits",
        ("\u0664\u0662",),
        show="'٤٢' (Arabic-Indic digits)",
        hint="use [0-9], not \\d: \\d (and Fraction) also accept other scripts' digits",
    ),
    Case(
        "division by zero",
        ("1/0",),
        hint="a zero denominator is not a number: return None, never raise ZeroDivisionError",
    ),
    Case("two signs", ("--5",), hint="at most one leading '-'"),
    Case(
        "41 digits",
        ("9" * 41,),
        show="'999...9' (41 nines)",
        hint=f"more than MAX_NUMBER_DIGITS = {package_answers.MAX_NUMBER_DIGITS} digits is "
        "not a number (it bounds the cost of exact arithmetic): return None",
    ),
    Case(
        "9,000 digits",
        ("9" * 9000,),
        show="'999...9' (9,000 nines)",
        hint="count the digits BEFORE calling Fraction: Fraction('9' * 9000) raises "
        "ValueError (Python's 4,300-digit limit); return None",
    ),
    Case("not a string", (None,), hint="anything but a str: return None"),
    Case("a number object", (42,), hint="anything but a str: return None (no str(text))"),
]


def check_parse_number(fn: Callable, hidden: bool = False) -> None:
    """Public cases, or the hidden ones used for grading; the security scan first."""
    check_no_evaluator(fn, "parse_number")
    run_cases(
        fn,
        "parse_number",
        PARSE_HIDDEN if hidden else PARSE_PUBLIC,
        package_answers.parse_number,
        compare=_same_number,
    )


# --- exercise 2: accuracy_reward ----------------------------------------------------------------

LONG_THINKING = "Let me think. " * 720  # 10,080 characters: over MAX_COMPLETION_CHARS


def _chat(*contents: Any) -> list[dict]:
    """TRL's conversational completion: a list of assistant messages."""
    return [{"role": "assistant", "content": content} for content in contents]


ACCURACY_PUBLIC = [
    Case(
        "a boxed integer, right and wrong",
        (["\\boxed{42}", "\\boxed{41}"], ["42", "42"]),
        expected=[1.0, 0.0],
        hint="read the number inside \\boxed{...} and compare it with the gold",
    ),
    Case(
        "the final answer, not the first number",
        (["15 + 27 = 42, so \\boxed{42}"], ["42"]),
        expected=[1.0],
        hint="read only the answer spots (\\boxed, 'answer is'), not the first number in the text",
    ),
    Case(
        "an 'answer is' phrase",
        (["So 6*7 = 42. The answer is 42.", "The answer is 41."], ["42", "42"]),
        expected=[1.0, 0.0],
        hint="the answer is the text after 'answer is', up to the end of its sentence "
        "(a '.' followed by a space or the end of the text) or of its line",
    ),
    Case(
        "exact values: 3.0 is 3, 0.5 is 1/2",
        (["\\boxed{3.0}", "The answer is 0.5."], ["3", "1/2"]),
        expected=[1.0, 1.0],
        hint="compare values (parse_number of both sides), not strings; the '.' of 0.5 does "
        "not end the sentence",
    ),
    Case(
        "a decimal is not cut into an integer",
        (["\\boxed{3}"], ["3.5"]),
        expected=[0.0],
        hint="3 is not 3.5: never int(float(x)); compare the exact Fractions",
    ),
    Case(
        "thousands separators",
        (["\\boxed{1,080}", "The answer is 1080."], ["1080", "1,080"]),
        expected=[1.0, 1.0],
        hint="1,080 and 1080 are the same number, in the completion and in the gold",
    ),
    Case(
        "a hedge: two different boxed answers",
        (["\\boxed{41} or \\boxed{42}"], ["42"]),
        expected=[0.0],
        hint="all answer spots must state the same value; two different ones are a hedge: 0.0",
    ),
    Case(
        "an expression is not evaluated",
        (["\\boxed{6*7}"], ["42"]),
        expected=[0.0],
        hint="'6*7' is not a number: no answer, 0.0 (never compute model output)",
    ),
    Case(
        "no answer stated",
        (["I am not sure.", ""], ["42", "42"]),
        expected=[0.0, 0.0],
        hint="no \\boxed{} and no 'answer is': 0.0",
    ),
    Case(
        "conversational completions",
        ([_chat("\\boxed{42}"), _chat("The answer is 7.")], ["42", "42"]),
        expected=[1.0, 0.0],
        hint="TRL's conversational format: a list of {'role', 'content'} messages; score the "
        "content of the last one",
    ),
]

ACCURACY_PUBLIC_ERRORS = [
    Case(
        "as many golds as completions",
        (["\\boxed{1}", "\\boxed{2}"], ["1"]),
        hint="len(completions) != len(answer) is a bug in the caller: raise ValueError "
        "(zip would silently drop a completion)",
    ),
]

HEDGES = [
    Case(
        "a hedge inside one phrase",
        (["The answer is 3 or 4."], ["3"]),
        expected=[0.0],
        hint="'3 or 4' is not one number: no answer",
    ),
    Case(
        "a hedge between a box and a phrase",
        (["\\boxed{42} The answer is 41."], ["42"]),
        expected=[0.0],
        hint="a phrase that states one number counts, also next to a box; 41 != 42 is a hedge",
    ),
    Case(
        "a hedge between two phrases",
        (["The answer is 41. Actually, the answer is 42."], ["42"]),
        expected=[0.0],
        hint="every spot counts, not only the last one: 41 and 42 are a hedge",
    ),
    Case(
        "a list of candidates",
        (["The answer is 41, 42, 43."], ["42"]),
        expected=[0.0],
        hint="several numbers in one spot are a hedge, even if one of them is the gold",
    ),
    Case(
        "the same answer twice is no hedge",
        (["\\boxed{42} and again \\boxed{42.0}"], ["42"]),
        expected=[1.0],
        hint="spots that agree in value are fine",
    ),
    Case(
        "a box inside the phrase",
        (["The answer is \\boxed{42}."], ["42"]),
        expected=[1.0],
        hint="a phrase that is not a plain number is prose when there is a box: skip it, the "
        "box decides",
    ),
    Case(
        "a negated phrase",
        (["The answer is not 5."], ["5"]),
        expected=[0.0],
        hint="'not 5' is not a number: no answer",
    ),
]

CODE = [
    Case(
        "'2+2' is not 4",
        (["\\boxed{2+2}", "The answer is 2+2."], ["4", "4"]),
        expected=[0.0, 0.0],
        hint="an expression is not an answer; evaluating it would run model output",
    ),
    Case(
        "a power",
        (["\\boxed{10**2}"], ["100"]),
        expected=[0.0],
        hint="'10**2' is an expression, not a number ('9**9**9**9' would never finish)",
    ),
    Case(
        "a Python payload",
        (["\\boxed{__import__('math').factorial(4)}"], ["24"]),
        expected=[0.0],
        hint="model output is data: this is a program, not a number",
    ),
    Case(
        "a shell payload whose exit code is the gold",
        (["The answer is __import__('os').system('true')."], ["0"]),
        expected=[0.0],
        hint="os.system returns 0 on success: an eval grader would run the command AND pay for it",
    ),
    Case(
        "Python's number syntax is not ours",
        (["\\boxed{1_000}", "\\boxed{1e2}"], ["1000", "100"]),
        expected=[0.0, 0.0],
        hint="underscores and scientific notation are refused: check the text with your "
        "pattern before calling Fraction",
    ),
]

NUMBERS = [
    Case(
        "a decimal is not cut (2)",
        (["\\boxed{3.9}", "\\boxed{3.00}"], ["3", "3"]),
        expected=[0.0, 1.0],
        hint="3.9 is not 3, 3.00 is 3: compare exact values",
    ),
    Case(
        "1/3 is not 0.3333333333333333",
        (["\\boxed{0.3333333333333333}", "\\boxed{2/6}"], ["1/3", "1/3"]),
        expected=[0.0, 1.0],
        hint="float(1/3) == 0.3333333333333333, but the exact values differ: compare Fractions",
    ),
    Case(
        "0.30000000000000001 is not 0.3",
        (["\\boxed{0.30000000000000001}", "The answer is 3/10."], ["0.3", "0.3"]),
        expected=[0.0, 1.0],
        hint="both parse to the same float; exact values differ",
    ),
    Case(
        "2**53 + 1",
        (["\\boxed{9007199254740992}", "\\boxed{9007199254740993}"], ["9007199254740993"] * 2),
        expected=[0.0, 1.0],
        hint="float cannot tell 2**53 and 2**53 + 1 apart; Fraction can",
    ),
    Case(
        "fractions and signs",
        (["\\boxed{-3/4}", "\\boxed{6/8}", "\\boxed{1/0}"], ["-0.75", "3/4", "0"]),
        expected=[1.0, 1.0, 0.0],
        hint="-3/4 = -0.75, 6/8 = 3/4 exactly; 1/0 is no number (and must not raise)",
    ),
    Case(
        "commas in thousands groups only",
        (["\\boxed{1,2,3}", "\\boxed{1,08}"], ["123", "108"]),
        expected=[0.0, 0.0],
        hint="'1,2,3' and '1,08' are not numbers: do not just delete the commas",
    ),
    Case(
        "NaN and infinity as text",
        (["\\boxed{nan}", "\\boxed{inf}", "The answer is -infinity."], ["0", "1", "1"]),
        expected=[0.0, 0.0, 0.0],
        hint="not numbers in our grammar: 0.0, and no crash (int(float('inf')) raises)",
    ),
    Case(
        "digits of other scripts",
        (["\\boxed{\uff14\uff12}", "The answer is \u0664\u0662."], ["42", "42"]),
        expected=[0.0, 0.0],
        show="['\\\\boxed{４２}', 'The answer is ٤٢.'], ['42', '42']",
        hint="ASCII digits only: [0-9], not \\d",
    ),
    Case(
        "a large exact integer",
        (
            ["\\boxed{12345678901234567891}", "\\boxed{12345678901234567890}"],
            ["12345678901234567891"] * 2,
        ),
        expected=[1.0, 0.0],
        hint="exact values: a float would call these two equal",
    ),
    Case(
        "upper case phrase",
        (["THE ANSWER IS 42."], ["42"]),
        expected=[1.0],
        hint="'answer is' in any case (re.IGNORECASE)",
    ),
]

HUGE = [
    Case(
        "9,000 digits inside the length cap",
        (["\\boxed{" + "9" * 9000 + "}"], ["9"]),
        expected=[0.0],
        show="['\\\\boxed{999...9}' (9,000 nines, 9,007 characters)], ['9']",
        hint="more than 40 digits is not a number; Fraction('9' * 9000) raises ValueError",
    ),
    Case(
        "100,000 digits",
        (["\\boxed{" + "1" * 100_000 + "}"], ["1"]),
        expected=[0.0],
        show="['\\\\boxed{111...1}' (100,000 ones)], ['1']",
        hint="longer than MAX_COMPLETION_CHARS = 10,000 characters: 0.0 without reading it",
    ),
    Case(
        "a right answer after 10,080 characters",
        ([LONG_THINKING + "\\boxed{42}"], ["42"]),
        expected=[0.0],
        show="['Let me think. ' * 720 + '\\\\boxed{42}'], ['42']",
        hint="longer than MAX_COMPLETION_CHARS = 10,000 characters scores 0.0 unread, even "
        "when right: check len(text) first",
    ),
]

ODD_COMPLETIONS = [
    Case(
        "None and other non-strings",
        ([None, 42, [], {"role": "assistant"}, _chat(None)], ["42"] * 5),
        expected=[0.0] * 5,
        hint="a completion that is neither a str nor a list of messages with string content "
        "scores 0.0, it never raises",
    ),
    Case(
        "empty answers",
        (["", "   ", "\\boxed{}", "The answer is ."], ["0"] * 4),
        expected=[0.0] * 4,
        hint="an empty spot is no number: 0.0",
    ),
    Case(
        "the last message is scored",
        ([_chat("The answer is 41.", "\\boxed{42}")], ["42"]),
        expected=[1.0],
        hint="in a list of messages, score the content of the LAST one",
    ),
]

ACCURACY_HIDDEN = HEDGES + CODE + NUMBERS + HUGE + ODD_COMPLETIONS

ACCURACY_HIDDEN_ERRORS = [
    *ACCURACY_PUBLIC_ERRORS,
    Case(
        "a gold that is not a number",
        (["\\boxed{1}"], ["one"]),
        hint="golds come from your data set: a gold parse_number cannot read is a data bug, "
        "raise ValueError (a silent 0.0 would hide it)",
    ),
]


def check_accuracy_reward(fn: Callable, hidden: bool = False) -> None:
    """Public cases, or the hidden ones used for grading; the security scan first."""
    check_no_evaluator(fn, "accuracy_reward")
    cases = ACCURACY_HIDDEN if hidden else ACCURACY_PUBLIC
    run_cases(fn, "accuracy_reward", cases, package_rewards.accuracy_reward)
    for case in ACCURACY_HIDDEN_ERRORS if hidden else ACCURACY_PUBLIC_ERRORS:
        expect_raises(fn, case, ValueError)


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
GOLD = ["42"] * len(GROUP)


def check_hedge_question(hedge_lenient: float, hedge_strict: float) -> None:
    """The GRPO advantage (eq. (2), eps = 1e-4) of GROUP[2] under each grader."""
    for name, got, grader in (
        ("the hedge's advantage, lenient grader", hedge_lenient, lenient_accuracy),
        ("the hedge's advantage, your grader", hedge_strict, package_rewards.accuracy_reward),
    ):
        rewards = torch.tensor(grader(GROUP, GOLD))
        check_answer(
            name,
            got,
            advantages.group_advantages(rewards, len(GROUP))[2].item(),
            "score checks.GROUP with that grader, then apply eq. (2) to the four rewards "
            "(unbiased std, eps = 1e-4, as group_advantages does) and take the third, index 2",
        )
