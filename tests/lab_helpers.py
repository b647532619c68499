"""Shared assertions for the lab tests: a wrong implementation must fail with useful feedback."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from grpo_minimal.labs.checking import CheckFailed


def assert_passes(check: Callable, fn: Callable) -> None:
    """Public and hidden cases both pass."""
    check(fn)
    check(fn, hidden=True)


def assert_fails(check: Callable, fn: Callable, hidden: bool = False) -> str:
    """The check rejects ``fn`` and says which case, the input, expected, got and a hint."""
    with pytest.raises(CheckFailed) as failed:
        check(fn, hidden=hidden)
    message = str(failed.value)
    for field in ("case:", "input:", "expected:", "got:", "hint:"):
        assert field in message, f"feedback lacks {field!r}:\n{message}"
    return message


def assert_fails_somewhere(check: Callable, fn: Callable) -> str:
    """Rejected by the public cases or, failing that, by the hidden ones (used for grading)."""
    try:
        check(fn)
    except CheckFailed:
        return assert_fails(check, fn)
    return assert_fails(check, fn, hidden=True)
