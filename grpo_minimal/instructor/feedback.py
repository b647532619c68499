"""What a graded submission becomes: its CSV row, the learner's feedback and the instructor's.

The learner's file reduces a hidden case to its name, its hint and the exception's type and first
line, every number in them as ``#`` (``learner_message``: never a drawn value); the instructor's
holds every message whole, the cells that raised and the grading process's stderr.

Everything here may carry a submission's text (its file name, its exception, its output), so
none of it reaches a terminal or a spreadsheet as it is: control characters are shown as
``\\xNN`` escapes (``printable``), and a CSV cell that a spreadsheet would read as a formula
starts with a quote (``csv_cell``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from grpo_minimal.instructor.grading import Graded
from grpo_minimal.labs.checking import NOT_RUN

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_FORMULA_START = ("=", "+", "-", "@")  # what spreadsheets read as the start of a formula


def printable(text: str) -> str:
    """``text`` with every control character but the newline and the tab written as ``\\xNN``:
    an escape sequence in a learner's file name or exception cannot drive the terminal."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)


def csv_cell(value):
    """A CSV cell: numbers as they are; text on one line, printable, and quoted with a leading
    ``'`` where a spreadsheet would take it for a formula (OWASP's CSV injection advice)."""
    if not isinstance(value, str):
        return value
    value = printable(value).replace("\n", " ").replace("\t", " ")
    return "'" + value if value.startswith(_FORMULA_START) else value


def row(result: Graded, points: dict[str, float], column: Callable[[str, str], str]) -> dict:
    """A submission's CSV row; ``points`` are its lab's exercises and their points (what it is
    worth even when it was not graded), ``column(lab, exercise)`` names a column. Every text
    cell goes through ``csv_cell``."""
    cells = {"notebook": result.notebook, "lab": result.lab}
    for exercise in result.exercises:
        cells[column(result.lab, exercise.name)] = exercise.score
        cells[f"{column(result.lab, exercise.name)} first failure"] = _case_name(
            exercise.first_failure
        )
    cells["total"] = sum(e.score for e in result.exercises)
    # what the lab is worth, whether or not it was graded (a time-out still says out of what)
    cells["possible"] = sum(points.values()) or sum(e.possible for e in result.exercises)
    cells["problem"] = result.problem or ""
    cells["seconds"] = round(result.seconds, 1)
    return {name: csv_cell(value) for name, value in cells.items()}


def _case_name(message: str | None) -> str:
    """The first line that names the failing case, for one CSV cell."""
    if message is None:
        return ""
    for line in message.splitlines():
        if line.strip().startswith("case:"):
            return line.split("case:", 1)[1].strip()[:100]
    return "raised " + _exception_line(message) if _exception_line(message) else "failed"


_EXCEPTION_LINE = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failed)): ?(.*)")


def _exception_line(message: str) -> str:
    """``Type: first line`` (at most 200 characters) of the exception a message reports."""
    for line in message.splitlines():
        if match := _EXCEPTION_LINE.match(line.strip()):
            return f"{match.group(1)}: {match.group(2)}"[:200].rstrip(": ")
    return ""


_FIELDS = ("case", "input", "expected", "got", "largest difference", "hint", "also failing")
"""The fields of a ``CheckFailed`` message (``labs.checking.failure``), one line each."""


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")  # 6, -1, 0.33, 2e-05


def numbers_hashed(text: str) -> str:
    """``text`` with every number shown as ``#``: what a learner sees of a hidden case's name and
    hint, which are drawn with its values (``3 groups of 6``, ``epsilon_high=0.33``)."""
    return _NUMBER.sub("#", text)


def learner_message(message: str, hidden: bool) -> str:
    """What a learner is shown of a failing check. Of a public case: its fields. Of a hidden
    case: its name, its hint and what the code raised, never the drawn input, the expected
    value or what came back. Of an exception, either way: its type and first line (at most 200
    characters) and the learner's line that raised it; the rest of its text (which the code
    chose: the hidden tests' text, say) is not shown.

    The learner's text sits between the ``got:`` line and the checker's last ``hint:`` line
    (``labs.checking.failure`` writes the fields in that order), so a line there that looks
    like a field (``"x\n  hint: " + repr(inputs)``) is taken for what it is: the learner's.
    Of a hidden case, every number is shown as ``#``: in its name and hint (a case's name may
    say its drawn size, ``groups of 6``) and in what the learner's code raised (its text may
    carry the hidden input)."""
    lines = message.strip("\n").splitlines()
    fields = [line.strip().split(":", 1)[0] for line in lines]
    got_at = fields.index("got") if "got" in fields else None
    hint_at = len(fields) - 1 - fields[::-1].index("hint") if "hint" in fields else len(lines)
    kept: list[str] = []
    for index, line in enumerate(lines):
        stripped, name = line.strip(), fields[index]
        learners = got_at is not None and got_at < index < hint_at
        if stripped.startswith("(line ") and kept and "raised " in kept[-1]:
            shown = stripped if not hidden else _learners_line(stripped)
            kept.append("  " + shown[:200])  # the learner's own line that raised
        elif learners and not (name == "largest difference" and not hidden):
            continue  # the learner's text, going on over more lines: not shown
        elif name in _FIELDS:
            value = stripped.split(":", 1)[1].strip()
            if name == "got" and value.startswith(("raised ", NOT_RUN)):
                kept.append(f"  got:      {numbers_hashed(value) if hidden else value}"[:200])
            elif not (hidden and name in ("input", "expected", "got", "largest difference")):
                kept.append("  " + (numbers_hashed(stripped) if hidden else stripped)[:300])
        # any other line continues a value of many lines (an exception's text): not shown
    if not kept:  # not our checker's message: an exception from the test itself
        exception = _exception_line(message)
        if hidden:
            exception = numbers_hashed(exception)
        kept.append(f"  raised {exception}" if exception else "  failed")
    if hidden:
        kept.append("  (a hidden case: its input and expected value are not shown)")
    return "\n".join(kept)


def _learners_line(text: str) -> str:
    """``(line 7 of your code: SOURCE)`` with the numbers of SOURCE as ``#`` (the line number
    stays): from the learner's kernel, SOURCE is the learner's to write."""
    head, colon, source = text.partition(": ")
    return head + colon + numbers_hashed(source)


def feedback_text(result: Graded, learner: bool, possible: float | None = None) -> str:
    """A submission's feedback: the learner's (hidden cases reduced, ``learner_message``) or the
    instructor's (every message whole, and the grading process's stderr)."""
    total = sum(e.score for e in result.exercises)
    if possible is None:
        possible = sum(e.possible for e in result.exercises)
    lines = [f"{result.notebook} (lab {result.lab or '?'}): {total:g} / {possible:g} points"]
    if result.problem:
        lines.append(f"problem: {result.problem}")
    for exercise in result.exercises:
        lines.append("")
        status = "PASS" if exercise.passed else "FAIL"
        lines.append(f"{status}  {exercise.name}: {exercise.score:g} / {exercise.possible:g}")
        hidden = exercise.hidden or [False] * len(exercise.failures)
        for message, is_hidden in zip(exercise.failures, hidden, strict=False):
            shown = learner_message(message, is_hidden) if learner else message
            lines.append("      " + shown.strip("\n").replace("\n", "\n      "))
    if result.cell_errors:  # what stopped a cell (the training cell, say) is never silent
        lines += ["", "cells that raised an error while the notebook ran:"]
        for error in result.cell_errors:
            if not error["cell"] and not error["traceback"]:  # the count of those not kept
                lines.append(f"  {error['error']}")
                continue
            lines.append(f"  the cell starting `{error['cell']}`: {error['error']}")
            if not learner:
                lines.append("    " + error["traceback"].replace("\n", "\n    "))
    if result.reports:
        lines += ["", "measured:", *(f"  {r}" for r in result.reports)]
    if not learner and result.log.strip():
        lines += ["", "the grading process's stderr:", result.log.rstrip()]
    return printable("\n".join(lines) + "\n")
