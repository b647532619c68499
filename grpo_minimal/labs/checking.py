"""Checks for the lab exercises: run a learner's function on named cases, say precisely what failed.

A case is an input with a name, a hint and (optionally) a hand-written expected value; without
one, the expected value comes from the package function the exercise mirrors. A failed check
raises ``CheckFailed`` with the first failing case's name, its input, the expected and the
returned value and the hint (and the names of any other failing cases), so the learner never sees
a bare ``AssertionError``. When the learner's code raises, the message gives the exception's type,
its text and the line of their code that raised it.

Public and hidden cases are twins. Each exercise has a ``twins(seed)`` function that draws one
case of every kind the exercise is graded on (same dtypes, same edges, same refusals) with fresh
values. ``lab check`` runs the hand-written public cases and ``twins(PUBLIC_SEED)``; the grader
runs ``twins(seed)`` with a seed drawn when ``lab build`` writes the autograder zips. Nothing in
the package holds the graded values, and passing ``lab check`` means full points unless a
solution special-cases the public inputs.
"""

from __future__ import annotations

import math
import os
import sysconfig
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

# The twins every learner sees; the grader's seed is drawn by `lab build` (instructor.build).
PUBLIC_SEED = 0


NOT_RUN = "not run by grading: "
"""How a failing case begins whose function grading would not run (``instructor.definitions``):
shown whole, as what the learner's code raised is."""


class CheckFailed(Exception):
    """A lab check failed; the message names the case, the input, expected, got and a hint."""


class InKernel:
    """A learner's function that lives in another process (the kernel that ran their notebook)
    and is called from there: ``instructor.judge.RemoteFunction``. ``apply(helper, *args)`` runs
    ``helper(fn, *args)`` beside it, for a check that needs the function itself."""

    def apply(self, helper: Callable, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def notebook_source(self) -> list[str]:
        """The code cells of the notebook that defined it, as graded: the judge's copy, which
        nothing in the kernel can change."""
        raise NotImplementedError


def beside(fn: Any, helper: Callable, *args: Any, **kwargs: Any) -> Any:
    """``helper(fn, *args, **kwargs)`` where ``fn`` lives: in its kernel when it is judged from
    outside (``helper`` is then a module-level function of the package), here otherwise."""
    if isinstance(fn, InKernel):
        return fn.apply(helper, *args, **kwargs)
    return helper(fn, *args, **kwargs)


@dataclass(frozen=True)
class Case:
    """One input for an exercise: ``fn(*args, **kwargs)`` should return ``expected``.

    ``expected=None`` means "what the package's own function returns for this input".
    ``show`` is how the input is printed when the case fails (default: the arguments).
    """

    name: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    expected: Any = None
    hint: str = ""
    show: str | None = None

    def describe_input(self) -> str:
        if self.show is not None:
            return self.show
        parts = [_short(a) for a in self.args]
        parts += [f"{k}={_short(v)}" for k, v in self.kwargs.items()]
        return ", ".join(parts)


@dataclass(frozen=True)
class Mistake:
    """A mistake learners make, as a wrong implementation, and the hint that names it. When a
    learner's output on a failing case is this implementation's output (and not the expected
    one), the message gives this hint rather than the case's: a hint per mistake made, not per
    case that caught it."""

    fn: Callable
    hint: str


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits: enough to see a wrong value, short enough to read."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, list | tuple):
        return type(value)(_rounded(v) for v in value)
    return value


def _short(value: Any, limit: int = 300) -> str:
    if isinstance(value, torch.Tensor):
        if value.numel() <= 24:
            text = f"tensor({_rounded(value.tolist())}, dtype={str(value.dtype).removeprefix('torch.')})"
        else:
            text = f"tensor of shape {tuple(value.shape)}"
    else:
        text = repr(_rounded(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def failure(case: Case | str, input_text: str, expected: Any, got: Any, hint: str) -> CheckFailed:
    """Build the exception a failed case raises (one format for every lab)."""
    name = case.name if isinstance(case, Case) else case
    expected_text = expected if isinstance(expected, str) else _short(expected)
    shown_whole = isinstance(got, str) and got.startswith(("raised ", NOT_RUN))
    got_text = got if shown_whole else _short(got)
    return CheckFailed(
        f"\n  case:     {name}\n  input:    {input_text}\n  expected: {expected_text}"
        f"\n  got:      {got_text}{_difference(got, expected)}\n  hint:     {hint}"
    )


def _difference(got: Any, expected: Any) -> str:
    """Where two large tensors of one shape differ most (both print as their shape alone)."""
    if not (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)):
        return ""
    if got.shape != expected.shape or expected.numel() <= 24:
        return ""
    gap = (got.double() - expected.double()).abs().nan_to_num(nan=float("inf"))
    index = tuple(int(i) for i in torch.unravel_index(gap.argmax(), gap.shape))
    return (
        f"\n  largest difference: at {list(index)}, got {got[index].item():.6g}, "
        f"expected {expected[index].item():.6g}"
    )


def close(got: Any, expected: Any, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Equal up to float32 rounding: tensors, numbers, lists of numbers, strings, None."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return False
        if got.is_floating_point() or expected.is_floating_point():
            return torch.allclose(
                got.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True
            )
        return torch.equal(got, expected)
    if isinstance(expected, float):
        if isinstance(got, torch.Tensor) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int | float) or isinstance(got, bool):
            return False
        if math.isnan(expected):
            return math.isnan(got)
        return math.isclose(got, expected, rel_tol=rtol, abs_tol=atol)
    if isinstance(expected, list | tuple):
        if isinstance(got, torch.Tensor):
            got = got.tolist()
        if not isinstance(got, list | tuple) or len(got) != len(expected):
            return False
        return all(close(g, e, rtol, atol) for g, e in zip(got, expected, strict=True))
    return got == expected


def cases_for(
    public: Sequence[Case], twins: Callable[[int], list[Case]], seed: int | None
) -> list[Case]:
    """``seed=None``: what ``lab check`` runs (the public cases and their drawn twins);
    a grader's seed: fresh twins of the same kinds (what ``lab grade`` runs)."""
    if seed is None:
        return [*public, *twins(PUBLIC_SEED)]
    return twins(seed)


def generator(seed: int) -> torch.Generator:
    """A torch generator for drawing a case's values (never the global one)."""
    return torch.Generator().manual_seed(seed)


def draw_int(g: torch.Generator, low: int, high: int) -> int:
    """A whole number in ``low..high`` (both included), drawn from ``g``."""
    return int(torch.randint(low, high + 1, (1,), generator=g))


_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)


def raised(error: BaseException) -> str:
    """``raised TypeError: ... (line 7 of your code: x = rewards.std())``: the learner's exception
    with the last line of their own code in its traceback (not the package's, not a library's).
    An error rebuilt from the learner's kernel (``instructor.judge``) brings the text made there."""
    if getattr(error, "raised_text", ""):
        return str(error.raised_text)
    text = f"raised {type(error).__name__}: {error}"
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        filename = str(frame.filename)
        if filename.startswith((_PACKAGE_DIR, *_LIBRARY_DIRS, "<frozen")):
            continue
        source = f": {frame.line.strip()}" if frame.line else ""
        return f"{text}\n            (line {frame.lineno} of your code{source})"
    return text


def _explain_none(got: Any) -> str:
    if got is Ellipsis:
        return " (the answer is still `...`)"
    if got is None:
        return " (the function returned nothing: is the stub `...` still there?)"
    return ""


@dataclass(frozen=True)
class _Raised:
    """What a learner's call raised, as a failing case's result: its type name, its message and
    ``raised``'s text (with the learner's line)."""

    kind: str
    message: str
    text: str

    def matches(self, error: Exception) -> bool:
        return type(error).__name__ == self.kind and str(error) == self.message


def _diagnosed(
    mistakes: Sequence[Mistake],
    failed: Sequence[tuple[Case, Any, Any]],
    compare: Callable[[Any, Any], bool],
) -> str | None:
    """The hint of the first known mistake that gives what the learner got (and not the
    expected value) on every failing ``(case, got, expected)``, raising the same error where the
    learner's code raised. One case alone may fit a mistake the learner did not make (a single
    row cannot tell a count along the row from a count down the batch): a wrong name is worse
    than the case's own hint."""

    def fits(mistake: Mistake, case: Case, got: Any, expected: Any) -> bool:
        try:
            theirs = mistake.fn(*_clone(case.args), **_clone(case.kwargs))
        except Exception as error:
            return isinstance(got, _Raised) and got.matches(error)
        if isinstance(got, _Raised):
            return False
        return compare(got, theirs) and not compare(theirs, expected)

    for mistake in mistakes if failed else ():
        if all(fits(mistake, *one) for one in failed):
            return mistake.hint
    return None


def run_cases(
    fn: Callable | None,
    name: str,
    cases: Sequence[Case],
    reference: Callable | None = None,
    compare: Callable[[Any, Any], bool] = close,
    mistakes: Sequence[Mistake] = (),
    none_is_an_answer: bool = False,
) -> None:
    """Call ``fn`` on every case; raise ``CheckFailed`` if any does not match.

    The message details the first failing case and names the others. A case without
    ``expected`` is compared with ``reference(*args, **kwargs)``. Inputs are cloned for the
    learner's call, so a function that edits its input in place cannot change the expected value.
    Wrong outputs that one of ``mistakes`` gives too are told that mistake's hint
    (``_diagnosed``). A ``None`` returned is taken for a stub (one case told, "is the stub still
    there?"); where ``none_is_an_answer`` (``parse_number`` answers None for a non-number), only a
    function that returned None for every case is.
    """
    require_function(fn, name)
    failures: list[CheckFailed | None] = []  # None: a wrong value, told below
    names: list[str] = []
    wrong: list[tuple[Case, Any, Any]] = []  # (case, got, expected) where a value came back
    answers: list[Any] = []
    for case in cases:
        expected = case.expected
        if expected is None:
            expected = reference(*_clone(case.args), **_clone(case.kwargs))
        try:
            got = fn(*_clone(case.args), **_clone(case.kwargs))
        except Exception as error:  # the learner's code raised: report it as this case's result
            wrong.append((case, _Raised(type(error).__name__, str(error), raised(error)), expected))
            names.append(case.name)
            failures.append(None)
            continue
        answers.append(got)
        if not compare(got, expected):
            wrong.append((case, got, expected))
            names.append(case.name)
            failures.append(None)  # made below, once every case has been seen
            if got is Ellipsis or (got is None and not none_is_an_answer):
                break  # a stub, or nothing returned: every other case would say the same
    hint = _diagnosed(mistakes, wrong, compare) if mistakes else None
    made = iter(wrong)
    for index, failed in enumerate(failures):
        if failed is None:
            case, got, expected = next(made)
            if isinstance(got, _Raised):
                failures[index] = failure(
                    case, case.describe_input(), expected, got.text, hint or case.hint
                )
                continue
            always_none = all(answer is None for answer in answers)
            stub = "" if none_is_an_answer and not always_none else _explain_none(got)
            failures[index] = failure(
                case, case.describe_input(), expected, got, hint or case.hint + stub
            )
    raise_first(failures, names)


def require_function(fn: Any, name: str) -> None:
    """The exercise cell defined ``name`` as a function (it may have failed to run)."""
    if fn is None or fn is Ellipsis or not callable(fn):
        raise failure(
            "definition",
            f"`{name}`",
            f"a function named `{name}`",
            fn,
            f"define `{name}` in the exercise cell and run it before this check; if that cell "
            "shows an error (a SyntaxError, say), fix it first",
        )


def run_all(name: str, fn: Any, checks: Iterable[tuple[str, Callable[[], None]]]) -> None:
    """Run every ``(case name, check)``, where a check raises ``CheckFailed`` when it fails (a
    ``run_cases`` on one case, an ``expect_raises``, a gradient probe): one ``CheckFailed``
    details the first failure and names the others."""
    require_function(fn, name)
    failures: list[CheckFailed] = []
    names: list[str] = []
    for case_name, check in checks:
        try:
            check()
        except CheckFailed as failed:
            failures.append(failed)
            names.append(case_name)
    raise_first(failures, names)


def raise_first(failures: Sequence[CheckFailed], names: Sequence[str]) -> None:
    """Raise the first failure, naming the other failing cases after it."""
    if not failures:
        return
    first = failures[0]
    if len(failures) > 1:
        others = "; ".join(names[1:])
        first = CheckFailed(f"{first}\n  also failing ({len(failures) - 1}): {others}")
    raise first


def expect_raises(fn: Callable, case: Case, error: type[Exception] = ValueError) -> None:
    """The case's input is invalid: ``fn`` must raise ``error`` (a clear error, not a NaN)."""
    try:
        got = fn(*_clone(case.args), **_clone(case.kwargs))
    except error:
        return
    except Exception as other:
        got = raised(other)
    raise failure(case, case.describe_input(), f"raises {error.__name__}", got, case.hint)


def check_answer(
    name: str, got: Any, expected: Any, hint: str, rtol: float = 1e-3, atol: float = 1e-3
) -> None:
    """A numeric (or short text) answer to a question in the lab.

    The expected value is not printed (it would give the answer away); the hint says how to
    find it.
    """
    if not close(got, expected, rtol=rtol, atol=atol):
        raise failure(
            name,
            "(your answer)",
            "(not shown: this is the question)",
            got,
            hint + _explain_none(got),
        )


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, tuple):
        return tuple(_clone(v) for v in value)
    if isinstance(value, list):
        return [_clone(v) for v in value]
    if isinstance(value, dict):
        return {k: _clone(v) for k, v in value.items()}
    return value


# A check may report what it measured (the capstone's accuracy); grading collects it here.
REPORT_ENV = "GRPO_LAB_REPORT"

GRADING_ENV = "GRPO_LAB_GRADING"
"""Set (to 1) in the environment of a notebook ``lab grade`` runs: a check whose work a cell of
the notebook also does (lab 06's training run) then does it once, as grading does it."""


def grading() -> bool:
    return os.environ.get(GRADING_ENV) == "1"


REPORTS: list[str] | None = None
"""Set to a list by the judge (``instructor.judge``): reports are collected there, in its own
memory, where no kernel can add to them."""


def report(text: str) -> None:
    """A measurement for the grader's feedback file (printed when not grading)."""
    if REPORTS is not None:
        REPORTS.append(text.rstrip("\n"))
        return
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as handle:
            handle.write(text.rstrip("\n") + "\n")
    else:
        print(text)
