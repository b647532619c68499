r"""Reading the final answer out of a completion: answer segments, numbers, gold answers.

The rules below are the whole grader behind ``rewards.accuracy_reward`` (notebook 05 walks
through each one with examples): ``extract_answer`` / ``extract_value`` read a completion,
``parse_gold`` a gold answer, and two values are equal only when they are exactly equal.

Where the answer is read from (the "answer segments")
-----------------------------------------------------
Everything inside ``<think>...</think>`` is scratch work and is ignored (an unclosed ``<think>``
hides the rest of the text; a ``</think>`` with no opener, as when the chat template opened the
block in the prompt, hides everything before it). In the rest of the text, every place that
states a final answer is a segment:

1. each ``<answer>...</answer>`` block,
2. each ``\boxed{...}`` (nested braces allowed, up to ``MAX_BRACE_DEPTH`` deep),
3. each GSM8K marker ``#### ...`` (to the end of its line),
4. each phrase "the answer is ...", "answer: ...", "final answer = ..." (to the end of its
   sentence or line).

If there is none of these, the documented fallback is the last line with a letter or a digit
(a closing code fence or a rule of dashes after the answer is markup, not a line of text), after
its last ``=`` if it has one (so ``"23+45=68"`` gives 68, a bare ``"68"`` gives 68 and
``"15 - 3 = 12\n```"`` gives 12).

What a segment must contain
---------------------------
Exactly one number, with only words and light punctuation around it (``"x = 42"``,
``"42 apples"``, ``"$1,080."`` are fine). A segment with two different numbers is a hedge
(``"3 or 4"``) and a segment with math left over is an expression, not an answer
(``"\sqrt{2}"``, ``"2^10"``, ``"9**9"``, ``"6*7"``, ``"42!"``): both give no answer. A segment that
repeats one value (``"6/2 = 3"``) is fine.

Marked segments (1-3) must each hold one number. Phrases (4) are prose, so when something is
marked, a phrase only counts if it states exactly one number ("The answer is the sum of 3 and
4: 3 + 4 = 7. \boxed{7}" is fine, the box decides); when nothing is marked, the phrases are the
answer and each must hold exactly one number.

All counted segments must agree: two boxed answers, two answer blocks, or an answer block and
a "the answer is" phrase with different values are a hedge, and score 0. So are a negated phrase
("the answer is not 5", "isn't"), a phrase that only says what the answer "might be" while
disagreeing with a marked answer, and, when phrases are the answer, a different number after
the last phrase's sentence ("The answer is 3. Or maybe 4.").

Numbers
-------
ASCII digits, an optional sign (``-``, ``+`` or the unicode minus), an optional ``$`` (or ``\$``),
thousands separators in groups of three (``1,080``; not ``0,500``, which may be a decimal
comma), decimals (``72.0``, ``.5``), fractions ``a/b``, ``\frac{a}{b}``, ``\dfrac``, ``\tfrac``
and ``\frac12``, spaces around ``/`` and inside the braces. Values are exact
``fractions.Fraction`` objects, so ``"1/2" == "0.5" == "\frac{1}{2}"`` and ``"72.0" == "72"``;
there is no float tolerance (``0.33`` is not ``1/3``). The same grammar holds inside ``\frac``
braces, thousands separators included: ``\frac{1,000}{3}`` is 1000/3.

A number is a whole token, never cut short. A token that goes on with a letter, a digit, an
underscore, a second decimal point or a bad thousands group is not a number at all, and since
every digit in a segment must belong to a number, the segment then gives no answer (reward 0).
So ``"72.5km"`` is not 72 (nor 72.5), ``"3.14.15"`` is not 3.14, ``"1,080km"`` is not 1, and
``"5.0e3"`` is not 5. Why refuse rather than guess: a glued suffix can change the value
(``"10k"`` is 10,000, ``"5.0e3"`` is 5,000, ``"0x1F"`` is 31), so the only safe readings are the
whole token or nothing. A unit is accepted when whitespace or LaTeX markup separates it:
``"72 km"`` and ``"72\,\text{km}"`` are 72, ``"72.5 km"`` is 72.5, ``"72km"`` gives no answer.
A period followed by a non-digit ends a sentence (``"It is 72."``, ``"72.Done"`` are 72).

A trailing ``%`` (or ``\%``) is dropped: ``"50%"`` equals 50, not 0.5, because GSM8K-style golds
write percentages as plain numbers ("What percent ...? #### 50"). Not supported, so not an
answer: scientific notation (``1e5``, ``5.0e3``: refused, never read as 1 or 5; exact values
would be possible, but ``1e999999999`` is a short string with a billion-digit value), mixed
numbers (``1 1/2``), spaces as thousands separators (``1 080`` is two numbers), digits from
other scripts (``"٤٢"``, full-width digits), digits glued to letters (``"42km"``, ``"5th"``,
``"x2"``).

Safety
------
Model output is data, never code: nothing here runs Python, SymPy or any evaluator on it. Every
call is bounded in time without signals (so it works in any thread): completions longer than
``MAX_COMPLETION_CHARS`` score 0 without being read; numbers with more than
``MAX_NUMBER_DIGITS`` digits are not numbers (Python's ``int`` refuses 4300+ digits anyway); the
regular expressions have no ambiguous nested repetition, so they cannot backtrack
catastrophically; every scan moves forward only and answer segments never overlap. The reward
functions (``rewards.py``) also score each completion inside ``try``/``except``: a pathological
completion gets 0.0, never an exception.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

__all__ = [
    "MAX_BRACE_DEPTH",
    "MAX_COMPLETION_CHARS",
    "MAX_NUMBER_DIGITS",
    "answer_segments",
    "extract_answer",
    "extract_value",
    "parse_gold",
    "parse_number",
]

MAX_COMPLETION_CHARS = 10_000
"""Longer completions score 0 without being read (a bound on time, and no hedging hides in them)."""

MAX_NUMBER_DIGITS = 40
"""A number with more digits than this is not a number (bounds the cost of exact arithmetic)."""

MAX_BRACE_DEPTH = 20
"""Deeper nesting inside ``\\boxed{...}`` gives no answer."""

# --- numbers ------------------------------------------------------------------------------------

_INT = r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+(?![0-9])|[0-9]+)"  # 1,080 or 1080 (not 0,500)
_DEC = rf"(?:{_INT}(?:\.[0-9]+)?|\.[0-9]+)"  # 72, 72.0, .5
_SIGNED = rf"[-+\u2212]?{_DEC}"  # inside \frac braces: the same grammar, plus a sign
_NUMBER_RE = re.compile(
    r"(?<![0-9A-Za-z_.])(?<![0-9],)"  # not the middle of a word or of another number
    r"(?P<sign>[-+\u2212]?)(?:\\?\$ ?)?(?P<sign2>[-\u2212]?)"  # -$5, $-5, +5, \$5
    r"(?:"
    rf"\\[dt]?frac *\{{ *(?P<fnum>{_SIGNED}) *\}} *\{{ *(?P<fden>{_SIGNED}) *\}}"  # \frac{1}{2}
    r"|\\[dt]?frac(?P<snum>[0-9])(?P<sden>[0-9])"  # \frac12
    rf"|(?P<num>{_DEC})(?: */ *(?P<den>{_DEC}))?"  # 1,080.5 and 3/4
    r")"
    # The whole token or nothing: without this the regex would backtrack out of "72.5km" (to
    # 72), "3.14.15" (to 3.14), "5.0e3" (to 5) or "1,080km" (to 1) and match a shorter number.
    r"(?![0-9A-Za-z_]|[.,][0-9])"
    r"(?: ?\\?%)?"  # a trailing % is dropped: 50% == 50
)
# Markup that may surround an answer; removed before looking for leftover math.
_MARKUP_RE = re.compile(
    r"\\(?:boxed|text|textbf|textrm|mathrm|mathbf|displaystyle|left|right)\b"
    r"|\\[,;:! \[\]()]|\^ ?\{? ?\\circ ?\}?|[{}$]"
)
_BOLD_RE = re.compile(r"\*\*([^*\n]{1,100}?)\*\*")  # markdown **42**
# Math left over once numbers and markup are gone: the segment is an expression, not an answer.
_LEFTOVER_MATH_RE = re.compile(r"[\\^_*+/\-\u2212<>!|\u00d7\u00f7\u00b7\u221a\u03c0\u221e]")
# A digit left over is part of a token that is not a number (72.5km, 3.14.15, x2, 5th).
_DIGIT_RE = re.compile(r"\d")  # any script's decimal digits, so "42 (٤٢)" is no answer either
_WORD_RE = re.compile(r"[^\W_]")  # a letter or a digit: a line of text, not only markup


def _decimal(text: str) -> Fraction | None:
    """Exact value of a plain decimal string such as ``-1,080.50`` (None when too long)."""
    text = text.replace(",", "").replace("\u2212", "-")
    if sum(ch.isdigit() for ch in text) > MAX_NUMBER_DIGITS:
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _token_value(match: re.Match[str]) -> Fraction | None:
    """Exact value of one `_NUMBER_RE` match (None for ``x/0``, too many digits, ``-$-5``)."""
    if match["sign"] and match["sign2"]:
        return None
    if match["num"] is not None:
        num, den = _decimal(match["num"]), _decimal(match["den"]) if match["den"] else Fraction(1)
    elif match["fnum"] is not None:
        num, den = _decimal(match["fnum"]), _decimal(match["fden"])
    else:
        num, den = Fraction(int(match["snum"])), Fraction(int(match["sden"]))
    if num is None or den is None or den == 0:
        return None
    value = num / den
    return -value if (match["sign"] + match["sign2"]) in ("-", "\u2212") else value


def _segment_numbers(segment: str) -> list[tuple[str, Fraction]] | None:
    """The distinct numbers of one answer segment, in order, as (text, value).

    Returns None when the segment holds something that is not a plain number (an unparseable
    number, a digit outside any number as in ``72.5km``, or math left over, such as ``\\sqrt{2}``
    or ``2^10``). Stops after two distinct values, since two already make a hedge.
    """
    segment = _BOLD_RE.sub(r" \1 ", segment)
    found: dict[Fraction, str] = {}
    cache: dict[str, Fraction | None] = {}
    leftover: list[str] = []
    last = 0
    for match in _NUMBER_RE.finditer(segment):
        token = match.group()
        if token not in cache:
            cache[token] = _token_value(match)
        value = cache[token]
        if value is None:
            return None
        found.setdefault(value, token.strip())
        leftover.append(segment[last : match.start()])
        last = match.end()
        if len(found) > 1:
            return [(text, val) for val, text in found.items()]
    leftover.append(segment[last:])
    rest = _MARKUP_RE.sub(" ", " ".join(leftover))
    if _LEFTOVER_MATH_RE.search(rest) or _DIGIT_RE.search(rest):
        return None
    return [(text, val) for val, text in found.items()]


def _single_number(segment: str) -> tuple[str, Fraction] | None:
    """The one number a segment states, or None (no number, a hedge, or an expression)."""
    numbers = _segment_numbers(segment)
    if numbers is None or len(numbers) != 1:
        return None
    return numbers[0]


def parse_number(text: str) -> Fraction | None:
    r"""Exact value of a text that states one number: ``"1,080"``, ``"\frac{1}{2}"``, ``"50%"``.

    Returns None for anything else: no number, several numbers, an expression, too long.

    >>> parse_number("1/2") == parse_number("0.5") == parse_number(r"\frac{1}{2}")
    True
    """
    if not isinstance(text, str) or len(text) > MAX_COMPLETION_CHARS:
        return None
    found = _single_number(text)
    return None if found is None else found[1]


# --- answer segments ----------------------------------------------------------------------------

_PHRASE_RE = re.compile(
    r"\banswer(?:\*\*)?[ \t]*"
    r"(?:(?:is|was)(?=n't\b)|(?:is|was|(?:would|will|might|could|may|should) be)\b|[:=])"
    r"(?:[ \t]*:)?(?:\*\*(?= ))?",
    re.IGNORECASE,
)
_SENTENCE_END_RE = re.compile(r"\.(?:\s|$)|<")  # a phrase ends at its sentence or at a tag
_NEGATION_RE = re.compile(r"\s*(?:not\b|n't\b)", re.IGNORECASE)  # "the answer is not 5"
_BRACE_RE = re.compile(r"[{}]")


def _after_last_phrase(visible: str) -> str:
    """The text after the sentence of the last "the answer is ..." phrase ("" if none)."""
    last = next(reversed(list(_PHRASE_RE.finditer(visible))), None)
    if last is None:
        return ""
    end = _line_end(visible, last.end())
    stop = _SENTENCE_END_RE.search(visible, last.end(), end)
    return visible[end if stop is None else stop.start() :]


def _strip_think(text: str) -> str:
    """The text outside ``<think>...</think>`` blocks (blocks become line breaks)."""
    first_open, first_close = text.find("<think>"), text.find("</think>")
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        text = text[first_close + len("</think>") :]  # the prompt opened the block
    parts, pos = [], 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            parts.append(text[pos:])
            break
        parts.append(text[pos:start])
        end = text.find("</think>", start)
        if end < 0:  # never closed: the rest is still thinking
            break
        pos = end + len("</think>")
    return "\n".join(parts)


def _tag_blocks(text: str, open_tag: str, close_tag: str) -> list[str] | None:
    """Contents of each ``open_tag ... close_tag`` block; None if one is never closed."""
    blocks, pos = [], 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            return None
        blocks.append(text[start + len(open_tag) : end])
        pos = end + len(close_tag)


def _boxed_blocks(text: str) -> list[str] | None:
    r"""Contents of each top-level ``\boxed{...}``; None if one is unbalanced or too deep."""
    blocks, pos = [], 0
    while True:
        start = text.find("\\boxed", pos)
        if start < 0:
            return blocks
        brace = start + len("\\boxed")
        while brace < len(text) and text[brace] == " ":
            brace += 1
        if brace >= len(text) or text[brace] != "{":
            return None  # "\boxed 42" and friends are not supported
        depth, end = 0, -1
        for match in _BRACE_RE.finditer(text, brace):
            depth += 1 if match.group() == "{" else -1
            if depth > MAX_BRACE_DEPTH:
                return None
            if depth == 0:
                end = match.start()
                break
        if end < 0:
            return None
        blocks.append(text[brace + 1 : end])
        pos = end + 1


def _line_end(text: str, start: int, limit: int = -1) -> int:
    """Index of the end of the line that ``start`` is on, but at most ``limit`` (-1: no limit)."""
    limit = len(text) if limit < 0 else limit
    end = text.find("\n", start, limit)
    return limit if end < 0 else end


def answer_segments(text: str) -> tuple[list[str], list[str]] | None:
    r"""Where a completion states its final answer: (marked segments, phrase segments).

    Marked segments come from ``<answer>`` blocks, ``\boxed{}`` and ``####``; phrase segments
    from "the answer is ...". Think blocks are skipped. Returns None when the structure is broken
    (an unclosed ``<answer>`` or an unbalanced ``\boxed{``), which gives no answer.
    """
    visible = _strip_think(text)
    tags = _tag_blocks(visible, "<answer>", "</answer>")
    boxes = _boxed_blocks(visible)
    if tags is None or boxes is None:
        return None
    marked = tags + boxes
    # A "####" or phrase segment ends at its line's end, at its sentence's end (phrases), or where
    # the next marker starts, so segments never overlap and the work stays linear in the text.
    pos = visible.find("####")
    while pos >= 0:
        following = visible.find("####", pos + 4)
        marked.append(visible[pos + 4 : _line_end(visible, pos + 4, following)])
        pos = following
    phrases = []
    matches = list(_PHRASE_RE.finditer(visible))
    for i, match in enumerate(matches):
        limit = matches[i + 1].start() if i + 1 < len(matches) else -1
        end = _line_end(visible, match.end(), limit)
        stop = _SENTENCE_END_RE.search(visible, match.end(), end)
        phrases.append(visible[match.end() : end if stop is None else stop.start()])
    return marked, phrases


def _states_another_number(text: str, value: Fraction) -> bool:
    """True if ``text`` has a number other than ``value``, or digits that are not a number."""
    leftover, last = [], 0
    for match in _NUMBER_RE.finditer(text):
        if _token_value(match) != value:
            return True
        leftover.append(text[last : match.start()])
        last = match.end()
    leftover.append(text[last:])
    return _DIGIT_RE.search(" ".join(leftover)) is not None  # "Or maybe 4km."


def _extract(text: str) -> tuple[str, Fraction] | None:
    """The final answer of a completion as (text, exact value), or None (see module docstring)."""
    if not isinstance(text, str) or len(text) > MAX_COMPLETION_CHARS:
        return None
    segments = answer_segments(text)
    if segments is None:
        return None
    marked, phrases = segments
    stated: list[tuple[str, Fraction]] = []
    for segment in marked:  # each must state exactly one number
        found = _single_number(segment)
        if found is None:
            return None
        stated.append(found)
    for segment in phrases:
        if _NEGATION_RE.match(segment):
            return None  # "the answer is not 5" states no answer, and hides a 5
        numbers = _segment_numbers(segment)
        if numbers is not None and len(numbers) == 1:
            stated.extend(numbers)
        elif (numbers is None or len(numbers) > 1) and not marked:
            return None  # the phrase is the answer: "3 or 4" is a hedge, "6*7" an expression
        # else: no number ("the answer is below"), or prose around a marked answer: skipped
    if not stated:  # nothing marked and no phrase with a number: the documented fallback
        lines = [line for line in _strip_think(text).splitlines() if _WORD_RE.search(line)]
        return _single_number(lines[-1].rpartition("=")[2]) if lines else None
    if len({value for _, value in stated}) != 1:
        return None  # several different final answers: a hedge
    if not marked:  # "The answer is 3. Or maybe 4.": a different number after the phrase
        if _states_another_number(_after_last_phrase(_strip_think(text)), stated[-1][1]):
            return None
    return stated[-1]


def extract_answer(text: str) -> str | None:
    r"""The final answer a completion states, as written (e.g. ``"1,080"``, ``"\frac{1}{2}"``).

    None when there is no single, unambiguous answer. See the module docstring for the rules.

    >>> extract_answer("<think>6*7</think><answer>42</answer>")
    '42'
    >>> extract_answer("It is \\boxed{3} or \\boxed{4}.") is None
    True
    """
    found = _extract(text)
    return None if found is None else found[0]


def extract_value(text: str) -> Fraction | None:
    """The exact value of the final answer a completion states (None when there is none)."""
    found = _extract(text)
    return None if found is None else found[1]


def parse_gold(gold: Any) -> Fraction:
    r"""Exact value of a gold answer: ``"72"``, ``"1,080"``, ``"\frac{1}{2}"``, a GSM8K solution
    ending in ``#### 72``, any text the completion rules read one answer from (such as a worked
    solution ending in ``\boxed{5}``), or an int / Fraction.

    Golds come from the data set, not from the model, so a bad gold is a bug in the data: it
    raises ValueError naming the value instead of silently scoring 0.
    """
    if isinstance(gold, bool):
        raise ValueError(f"answer must be a number or a string, got the bool {gold!r}")
    if isinstance(gold, (int, Fraction)):
        return Fraction(gold)
    if isinstance(gold, float) and math.isfinite(gold):
        gold = repr(gold)
    if not isinstance(gold, str):
        raise ValueError(f"answer must be a number or a string, got {type(gold).__name__}")
    if "####" in gold:  # a GSM8K solution: the answer follows the last marker
        start = gold.rfind("####") + 4
        gold_text = gold[start : _line_end(gold, start)]
    else:
        gold_text = gold
    value = parse_number(gold_text)
    if value is None:  # a worked solution, e.g. MATH's "... so the answer is \boxed{5}."
        value = extract_value(gold_text)
    if value is None:
        raise ValueError(
            f"answer {gold[:80]!r} is not one number (allowed: 72, -3, 1,080, 0.5, 1/2, "
            r"\frac{1}{2}, 50%, or a solution ending in '#### 72' or '\boxed{72}')"
        )
    return value
