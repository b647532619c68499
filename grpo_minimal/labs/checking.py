"""Checks for the lab exercises: run a learner's function on named cases, say precisely what failed.

A case is an input with a name, a hint and (optionally) a hand-written expected value; without
one, the expected value comes from the package function the exercise mirrors. The first case that
fails raises ``CheckFailed`` with the case's name, its input, the expected and the returned value
and the hint, so the learner never sees a bare ``AssertionError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


class CheckFailed(Exception):
    """A lab check failed; the message names the case, the input, expected, got and a hint."""


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
    got_text = got if isinstance(got, str) and got.startswith("raised ") else _short(got)
    return CheckFailed(
        f"\n  case:     {name}\n  input:    {input_text}\n  expected: {expected_text}"
        f"\n  got:      {got_text}\n  hint:     {hint}"
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


def _explain_none(got: Any) -> str:
    if got is Ellipsis:
        return " (the answer is still `...`)"
    if got is None:
        return " (the function returned nothing: is the stub `...` still there?)"
    return ""


def run_cases(
    fn: Callable | None,
    name: str,
    cases: Sequence[Case],
    reference: Callable | None = None,
    compare: Callable[[Any, Any], bool] = close,
) -> None:
    """Call ``fn`` on every case; raise ``CheckFailed`` at the first that does not match.

    A case without ``expected`` is compared with ``reference(*args, **kwargs)``. Inputs are
    cloned for the learner's call, so a function that edits its input in place cannot change
    the expected value.
    """
    if fn is None or fn is Ellipsis or not callable(fn):
        raise failure(
            "definition",
            f"`{name}`",
            f"a function named `{name}`",
            fn,
            f"define `{name}` in the exercise cell and run it before this check",
        )
    for case in cases:
        expected = case.expected
        if expected is None:
            expected = reference(*_clone(case.args), **_clone(case.kwargs))
        try:
            got = fn(*_clone(case.args), **_clone(case.kwargs))
        except Exception as error:  # the learner's code raised: report it as this case's result
            raise failure(
                case,
                case.describe_input(),
                expected,
                f"raised {type(error).__name__}: {error}",
                case.hint,
            ) from None
        if not compare(got, expected):
            raise failure(
                case, case.describe_input(), expected, got, case.hint + _explain_none(got)
            )


def expect_raises(fn: Callable, case: Case, error: type[Exception] = ValueError) -> None:
    """The case's input is invalid: ``fn`` must raise ``error`` (a clear error, not a NaN)."""
    try:
        got = fn(*_clone(case.args), **_clone(case.kwargs))
    except error:
        return
    except Exception as other:
        got = f"raised {type(other).__name__}: {other}"
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
