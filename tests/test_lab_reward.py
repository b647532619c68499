"""Lab 04: the reference passes, delegates to the package pass, known mistakes are caught publicly.

Each wrong variant is one realistic mistake. ``lab check`` (the public cases: the table's
examples and the twins drawn from the public seed) must reject it, the first failing case must be
the one written for that mistake, and its hint must name the real cause, at ``lab check`` and at
grading alike (``GRADER_SEEDS`` stand in for the grader's seed).
"""

from __future__ import annotations

import ast
import builtins
import math
import re
from fractions import Fraction

import pytest
import torch
from lab_helpers import (
    GRADER_SEEDS,
    assert_caught_publicly,
    assert_fails,
    assert_passes,
    assert_same_verdict,
    assert_told,
)

from grpo_minimal import advantages, answers, rewards
from grpo_minimal.labs import reward as checks
from grpo_minimal.labs.checking import PUBLIC_SEED, CheckFailed

MAX_CHARS = answers.MAX_COMPLETION_CHARS
MAX_DIGITS = answers.MAX_NUMBER_DIGITS
INTEGER = r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)"


def assert_caught_with_hint(check, fn, case: str, hint: str) -> None:
    """Caught by ``lab check`` on ``case`` with ``hint``; grading shows the same hint first."""
    message = assert_caught_publicly(check, fn)
    assert f"case:     {case}\n" in message, message
    assert hint in message.split("  hint:", 1)[1].split("\n  also failing", 1)[0], message
    for seed in GRADER_SEEDS:
        graded = assert_fails(check, fn, seed=seed)
        assert hint in graded.split("  hint:", 1)[1].split("\n  also failing", 1)[0], graded


# --- parse_number ---------------------------------------------------------------------------------


def reference_parse(text, *, integer=INTEGER, cap=True, zero_check=True, make=Fraction):
    """The lab's solution; the keywords plant one mistake each (defaults: no mistake)."""
    if not isinstance(text, str):
        return None
    match = re.fullmatch(rf"(-?)(?:({integer}(?:\.[0-9]+)?)|({integer})/({integer}))", text.strip())
    if match is None:
        return None
    sign, decimal, numerator, denominator = match.groups()
    parts = [decimal] if decimal is not None else [numerator, denominator]
    parts = [part.replace(",", "") for part in parts]
    if cap and any(sum(ch.isdigit() for ch in part) > MAX_DIGITS for part in parts):
        return None
    if decimal is not None:
        value = make(parts[0])
    elif zero_check and int(parts[1]) == 0:
        return None
    else:
        value = Fraction(int(parts[0]), int(parts[1]))
    return -value if sign else value


def parse_via_float(text):
    """The pattern is right, the value goes through a float."""
    return reference_parse(text, make=lambda digits: Fraction(float(digits)))


def parse_float(text):
    """A float parser: float() decides what a number is, and its value."""
    if not isinstance(text, str):
        return None
    try:
        return Fraction(float(text.replace(",", "")))
    except (ValueError, OverflowError):
        return None


def parse_int_cut(text):
    return reference_parse(text, make=lambda digits: Fraction(int(float(digits))))


def parse_first_word(text):
    """Reads the first word only: '3 or 4' becomes 3."""
    words = text.split() if isinstance(text, str) else []
    return reference_parse(words[0]) if words else None


def parse_unicode_digits(text):
    """A \\d regex: \\d matches full-width and other scripts' digits, and Fraction reads them."""
    return reference_parse(text, integer=r"(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)")


def parse_no_digit_cap(text):
    return reference_parse(text, cap=False)


def parse_divides_by_zero(text):
    return reference_parse(text, zero_check=False)


def parse_deletes_commas(text):
    return reference_parse(text, integer=r"[0-9][0-9,]*")


def parse_fraction_unchecked(text):
    """Let Fraction decide: it also reads '1,08' (commas deleted), '1e5', '1_000', '４２'."""
    if not isinstance(text, str):
        return None
    try:
        return Fraction(text.strip().replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None


def parse_fraction_plain(text):
    """Fraction(text) as the parser: it accepts '1e5', '1_000', ' 3/4 ', '４２'..."""
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError, TypeError):
        return None


def parse_crashes_on_non_string(text):
    return reference_parse(text.strip())


def parse_with_eval(text):
    try:
        return Fraction(eval(text.replace(",", ""))).limit_denominator()
    except Exception:
        return None


def parse_returns_float(text):
    value = reference_parse(text)
    return None if value is None else float(value)


def parse_plus_sign(text):
    """'+5' read as 5 (the package does; the lab's table does not)."""
    if isinstance(text, str) and text.strip().startswith("+"):
        text = text.strip()[1:]
    return reference_parse(text)


def parse_bare_point(text):
    """'.5' and '5.' read as numbers (Fraction and the package do; the table does not)."""
    if isinstance(text, str) and re.fullmatch(r"-?(?:[0-9]+\.|\.[0-9]+)", text.strip()):
        return Fraction(text.strip())
    return reference_parse(text)


def parse_no_leading_zero(text):
    return reference_parse(text, integer=r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[1-9][0-9]*)")


def parse_commas_required(text):
    return reference_parse(text, integer=r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})*|0)")


def parse_refuses_the_cap(text):
    """The digit cap off by one: exactly MAX_NUMBER_DIGITS digits refused (>= for >)."""
    value = reference_parse(text)
    if value is not None and sum(ch.isdigit() for ch in text) >= MAX_DIGITS:
        return None
    return value


PARSE_WRONG = [
    (parse_plus_sign, "a plus sign", "the only sign"),
    (parse_refuses_the_cap, f"exactly {MAX_DIGITS} digits", "not >="),
    (parse_no_leading_zero, "0.1 exactly", "not [1-9][0-9]*"),
    (parse_commas_required, "leading zeros", "needs no commas"),
    (parse_bare_point, "a point with no digit before it", "digits on both sides"),
    (parse_via_float, "0.1 exactly", "never through float()"),
    (parse_float, "0.1 exactly", "never through float()"),
    (parse_int_cut, "a decimal, exactly", "never int() of it"),
    (parse_first_word, "two numbers are not one number", "not re.search or the first word"),
    (parse_unicode_digits, "full-width digits", "use [0-9], not \\d"),
    (parse_no_digit_cap, "41 digits", "count the digits"),
    (parse_divides_by_zero, "division by zero", "never raise ZeroDivisionError"),
    (parse_deletes_commas, "a bad thousands group", "do not just delete the commas"),
    (parse_fraction_unchecked, "scientific notation is refused", "BEFORE calling Fraction"),
    (parse_fraction_plain, "scientific notation is refused", "BEFORE calling Fraction"),
    (parse_crashes_on_non_string, "not a string", "anything but a str"),
    (parse_with_eval, "no evaluator on model output", "model output is data"),
    (parse_returns_float, "an integer", "a fractions.Fraction"),
]


def _name(item):
    return getattr(item, "__name__", None) or str(item)


@pytest.mark.parametrize("fn", [reference_parse, checks.table_parse_number])
def test_parse_reference_and_package_pass(fn):
    assert_passes(checks.check_parse_number, fn)


@pytest.mark.parametrize("fn", [answers.parse_number, rewards.parse_number])
def test_the_package_reads_more_than_the_table_and_only_that(fn):
    """The package also reads '+5', '.5' and '5.' (a lenient reward for training); the lab is
    graded on its table, which refuses them: those cases alone fail the package's function."""
    message = assert_fails(checks.check_parse_number, fn)
    failing = [message.split("case:", 1)[1].split("\n", 1)[0].strip()]
    if "also failing" in message:
        failing += message.split("also failing", 1)[1].split(":", 1)[1].strip().split("; ")
    assert failing and all("plus sign" in n or "point with no digit" in n for n in failing), failing
    for text in ("+5", ".5", "5."):
        assert fn(text) is not None and checks.table_parse_number(text) is None


@pytest.mark.parametrize(
    ("fn", "case", "hint"), PARSE_WRONG, ids=[f.__name__ for f, *_ in PARSE_WRONG]
)
def test_parse_mistakes_are_caught_by_lab_check_with_their_hint(fn, case, hint):
    assert_caught_with_hint(checks.check_parse_number, fn, case, hint)


@pytest.mark.parametrize(
    "fn", [fn for fn, *_ in PARSE_WRONG] + [reference_parse], ids=lambda f: f.__name__
)
def test_parse_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_parse_number, fn)


def test_parse_public_cases_cover_the_whole_table():
    """Every example of the lab's table (accepted and refused) and the demo cell's inputs."""
    table = ["42", "-7", "007", "3.5", "3.50", "1,080", "12,345,678", "3/4", "-3/4", " 12 "]
    refused = ["1,08", "0,500", "1,2,3", "1e5", "1_000", "nan", "inf", "2+2", "3 or 4", "1/0"]
    refused += ["--5", "\uff14\uff12", "0.5e0"]
    public = {case.args[0]: case for case in checks.PARSE_PUBLIC}
    for text in table:
        assert public[text].expected == answers.parse_number(text) is not None, text
    for text in refused:
        assert public[text].expected is None and answers.parse_number(text) is None, text


def test_the_demo_cells_mistake_is_caught():
    """The notebook's demo printed '0.5e0' -> Fraction(1, 2) while the old check passed."""

    def parse_accepts_exponent(text):
        if isinstance(text, str) and re.fullmatch(r"[0-9]+\.[0-9]+e[0-9]+", text.strip()):
            return Fraction(text.strip())
        return reference_parse(text)

    message = assert_caught_publicly(checks.check_parse_number, parse_accepts_exponent)
    assert "the demo cell's 0.5e0 is refused" in message


# --- accuracy_reward ------------------------------------------------------------------------------


def _text_of(completion):
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        completion = completion[-1].get("content")
    return completion if isinstance(completion, str) else None


def _spots(text):
    boxes = re.findall(r"\\boxed\{([^}]*)\}", text)
    phrases = re.findall(r"\banswer is\b(.*?)(?:\.(?:\s|$)|\n|$)", text, re.IGNORECASE)
    return boxes, phrases


def _final_answer(text, parse=reference_parse, cap=True, phrases_next_to_boxes=True):
    if text is None or (cap and len(text) > MAX_CHARS):
        return None
    boxes, phrases = _spots(text)
    values = [parse(box) for box in boxes]
    if None in values:
        return None
    for phrase in phrases if phrases_next_to_boxes or not boxes else []:
        value = parse(phrase)
        if value is not None:
            values.append(value)
        elif not boxes:
            return None
    return values[0] if values and len(set(values)) == 1 else None


def reference_reward(
    completions,
    answer,
    *,
    text_of=_text_of,
    final=_final_answer,
    equal=lambda value, gold: value == gold,
    parse=reference_parse,
    check_lengths=True,
    strict_gold=True,
    **kwargs,
):
    """The lab's solution; the keywords plant one mistake each (defaults: no mistake)."""
    if check_lengths and len(completions) != len(answer):
        raise ValueError("lengths differ")
    golds = [parse(gold) for gold in answer]
    if strict_gold and None in golds:
        raise ValueError("a gold is not a number")
    scores = []
    for completion, gold in zip(completions, golds, strict=False):
        value = final(text_of(completion))
        scores.append(1.0 if value is not None and gold is not None and equal(value, gold) else 0.0)
    return scores


def _with_parse(parse):
    """A reward that is right but for its parse_number (used for golds and answers alike)."""

    def reward(completions, answer, **kwargs):
        return reference_reward(
            completions, answer, parse=parse, final=lambda t: _final_answer(t, parse=parse)
        )

    return reward


def reward_float_equality(completions, answer, **kwargs):
    return reference_reward(completions, answer, equal=lambda v, g: float(v) == float(g))


def reward_int_cut(completions, answer, **kwargs):
    return reference_reward(completions, answer, equal=lambda v, g: int(v) == int(g))


def reward_first_number(completions, answer, **kwargs):
    def first(text):
        if text is None:
            return None
        match = re.search(r"-?[0-9][0-9,]*(?:\.[0-9]+)?", text)
        return None if match is None else reference_parse(match.group())

    return reference_reward(completions, answer, final=first)


def reward_number_inside_the_phrase(completions, answer, **kwargs):
    """Searches each answer spot for a number instead of requiring the spot to BE one number."""

    def search(text):
        if not isinstance(text, str):
            return None
        match = re.search(r"-?[0-9][0-9,]*(?:\.[0-9]+)?(?:/[0-9]+)?", text)
        return None if match is None else reference_parse(match.group())

    return reference_reward(completions, answer, final=lambda t: _final_answer(t, parse=search))


def reward_accepts_hedges(completions, answer, **kwargs):
    """Pays if ANY answer spot equals the gold ('the right answer is among them')."""
    golds = [reference_parse(gold) for gold in answer]
    scores = []
    for completion, gold in zip(completions, golds, strict=True):
        text = _text_of(completion) or ""
        boxes, phrases = _spots(text)
        scores.append(float(any(reference_parse(s) == gold for s in boxes + phrases)))
    return scores


def reward_last_spot_only(completions, answer, **kwargs):
    def last(text):
        if text is None or len(text) > MAX_CHARS:
            return None
        boxes, phrases = _spots(text)
        spots = boxes + phrases
        return reference_parse(spots[-1]) if spots else None

    return reference_reward(completions, answer, final=last)


def _parse_with_eval(text):
    value = reference_parse(text)
    if value is None:
        try:
            value = Fraction(eval(text, {"__builtins__": {}}))
        except Exception:
            return None
    return value


def reward_uses_eval(completions, answer, **kwargs):
    """eval in a helper: the scan follows the helper."""
    return reference_reward(
        completions, answer, final=lambda t: _final_answer(t, parse=_parse_with_eval)
    )


def reward_eval_hidden_from_the_scan(completions, answer, **kwargs):
    """An evaluator the scan cannot see: caught by what it returns."""
    run = getattr(builtins, "".join(["ev", "al"]))

    def parse(text):
        value = reference_parse(text)
        if value is None and isinstance(text, str) and len(text) < 20:
            try:
                return Fraction(run(text, {"__builtins__": {}}))
            except Exception:
                return None
        return value

    return reference_reward(completions, answer, final=lambda t: _final_answer(t, parse=parse))


def reward_no_length_cap(completions, answer, **kwargs):
    return reference_reward(completions, answer, final=lambda t: _final_answer(t, cap=False))


def reward_crashes_on_none(completions, answer, **kwargs):
    def text_of(completion):
        return completion if isinstance(completion, str) else completion[-1]["content"]

    return reference_reward(completions, answer, text_of=text_of)


def reward_crashes_on_content_none(completions, answer, **kwargs):
    """Handles odd completions, but trusts a message's content to be a str."""

    def text_of(completion):
        if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
            return completion[-1].get("content", "")
        return completion if isinstance(completion, str) else ""

    def final(text):
        return _final_answer(text.strip())  # None.strip(): AttributeError

    return reference_reward(completions, answer, text_of=text_of, final=final)


def reward_first_message(completions, answer, **kwargs):
    def text_of(completion):
        if isinstance(completion, list) and completion:
            completion = completion[0].get("content")
        return completion if isinstance(completion, str) else None

    return reference_reward(completions, answer, text_of=text_of)


def reward_boxes_only(completions, answer, **kwargs):
    final = lambda t: _final_answer(t, phrases_next_to_boxes=False)  # noqa: E731
    return reference_reward(completions, answer, final=final)


def reward_compares_strings(completions, answer, **kwargs):
    def final(text):
        if text is None:
            return None
        boxes, phrases = _spots(text)
        return (boxes + phrases)[-1].strip() if boxes + phrases else None

    return [
        float(final(_text_of(c)) == g.strip()) for c, g in zip(completions, answer, strict=True)
    ]


def reward_zip_truncates(completions, answer, **kwargs):
    return reference_reward(completions, answer, check_lengths=False)


def reward_bad_gold_scores_zero(completions, answer, **kwargs):
    return reference_reward(completions, answer, strict_gold=False)


reward_fraction_unchecked = _with_parse(parse_fraction_unchecked)
reward_fraction_plain = _with_parse(parse_fraction_plain)
reward_unicode_digits = _with_parse(parse_unicode_digits)
reward_parses_via_float = _with_parse(parse_via_float)
reward_no_digit_cap = _with_parse(parse_no_digit_cap)  # Fraction('9' * 9000) raises ValueError
for _fn, _name_ in [
    (reward_fraction_unchecked, "reward_fraction_unchecked"),
    (reward_fraction_plain, "reward_fraction_plain"),
    (reward_unicode_digits, "reward_unicode_digits"),
    (reward_parses_via_float, "reward_parses_via_float"),
    (reward_no_digit_cap, "reward_no_digit_cap"),
]:
    _fn.__name__ = _fn.__qualname__ = _name_


def reward_cuts_to_the_cap(completions, answer, **kwargs):
    """Reads the first MAX_COMPLETION_CHARS characters of a longer text instead of scoring 0."""
    return reference_reward(
        completions, answer, final=lambda t: _final_answer(t if t is None else t[:MAX_CHARS])
    )


def _final_past_the_sentence(text):
    """'answer is' read to the end of the line (one trailing '.' dropped), not of its sentence."""
    if text is None or len(text) > MAX_CHARS:
        return None
    boxes = re.findall(r"\\boxed\{([^}]*)\}", text)
    phrases = [p.strip().rstrip(".") for p in re.findall(r"\banswer is\b(.*)", text, re.I)]
    values = [reference_parse(spot) for spot in boxes + phrases]
    return values[0] if values and None not in values and len(set(values)) == 1 else None


def _final_greedy_boxes(text):
    """The boxes read with a greedy .*: two boxes are one spot, from the first to the last '}'."""
    if text is None or len(text) > MAX_CHARS:
        return None
    boxes = re.findall(r"\\boxed\{(.*)\}", text, re.DOTALL)
    values = [reference_parse(box) for box in boxes]
    values += [reference_parse(phrase) for phrase in _spots(text)[1]]
    return values[0] if values and None not in values and len(set(values)) == 1 else None


def reward_greedy_boxes(completions, answer, **kwargs):
    return reference_reward(completions, answer, final=_final_greedy_boxes)


def reward_refuses_the_length_cap(completions, answer, **kwargs):
    """The length cap off by one: a text of exactly MAX_COMPLETION_CHARS scores 0 (>= for >)."""
    return reference_reward(
        completions,
        answer,
        final=lambda t: None if t is not None and len(t) >= MAX_CHARS else _final_answer(t),
    )


def reward_phrase_past_the_sentence(completions, answer, **kwargs):
    return reference_reward(completions, answer, final=_final_past_the_sentence)


def reward_returns_bools(completions, answer, **kwargs):
    return [score == 1.0 for score in reference_reward(completions, answer)]


ACCURACY_WRONG = [
    (reward_cuts_to_the_cap, "a right answer first, then past the length cap", "do not cut"),
    (reward_phrase_past_the_sentence, "the phrase ends with its sentence", "end of its sentence"),
    (reward_returns_bools, "a boxed integer, right and wrong", "not bools"),
    (reward_greedy_boxes, "the same answer twice is no hedge", "ITS closing brace"),
    (reward_float_equality, "a repeating decimal is not its fraction", "never floats"),
    (reward_parses_via_float, "digits past a float's precision", "never through float()"),
    (reward_int_cut, "a decimal is not cut into an integer", "never int(float(x))"),
    (reward_first_number, "the final answer, not the first number", "not the first number"),
    (reward_number_inside_the_phrase, "a hedge inside one phrase", "never a number searched"),
    (reward_accepts_hedges, "a hedge: two different boxed answers", "a hedge"),
    (reward_last_spot_only, "a hedge: two different boxed answers", "a hedge"),
    (reward_uses_eval, "no evaluator on model output", "model output is data"),
    (reward_eval_hidden_from_the_scan, "an expression is not evaluated", "never compute"),
    (reward_no_length_cap, "a right answer past the length cap", "check len(text) first"),
    (reward_refuses_the_length_cap, "a right answer that ends exactly at the length cap", "not >="),
    (reward_crashes_on_none, "None and other non-strings", "it never raises"),
    (reward_crashes_on_content_none, "a message whose content is None", "content can be None"),
    (reward_first_message, "the last message is scored", "the LAST one"),
    (reward_fraction_unchecked, "Python's number syntax is not ours", "before calling Fraction"),
    (reward_fraction_plain, "thousands separators", "not with Fraction(text)"),
    (reward_unicode_digits, "digits of other scripts", "[0-9], not \\d"),
    (reward_no_digit_cap, "thousands of digits inside the length cap", "count the digits"),
    (reward_boxes_only, "a hedge between a box and a phrase", "also next to a box"),
    (reward_compares_strings, "exact values: 3.0 is 3, 0.5 is 1/2", "compare values"),
    (reward_zip_truncates, "as many golds as completions", "raise ValueError"),
    (reward_bad_gold_scores_zero, "a gold that is not a number", "a data bug"),
]


@pytest.mark.parametrize("fn", [reference_reward, rewards.accuracy_reward])
def test_accuracy_reference_and_package_pass(fn):
    assert_passes(checks.check_accuracy_reward, fn)


def test_a_notebook_style_delegate_passes():
    def accuracy_reward(completions, answer, **kwargs):
        return rewards.accuracy_reward(completions, answer, **kwargs)

    assert_passes(checks.check_accuracy_reward, accuracy_reward)


@pytest.mark.parametrize(
    ("fn", "case", "hint"), ACCURACY_WRONG, ids=[f.__name__ for f, *_ in ACCURACY_WRONG]
)
def test_accuracy_mistakes_are_caught_by_lab_check_with_their_hint(fn, case, hint):
    assert_caught_with_hint(checks.check_accuracy_reward, fn, case, hint)


@pytest.mark.parametrize(
    "fn", [fn for fn, *_ in ACCURACY_WRONG] + [reference_reward], ids=lambda f: f.__name__
)
def test_accuracy_public_verdict_is_the_graded_one(fn):
    assert_same_verdict(checks.check_accuracy_reward, fn)


@pytest.mark.parametrize(
    ("fn", "error"),
    [
        (reward_crashes_on_none, "raised TypeError"),
        (reward_crashes_on_content_none, "raised AttributeError"),
    ],
    ids=lambda x: getattr(x, "__name__", x),
)
def test_feedback_for_a_crash_names_the_error_and_the_line(fn, error):
    message = assert_fails(checks.check_accuracy_reward, fn)
    assert error in message and "never raise" in message and "of your code" in message, message


def test_every_failing_case_is_named():
    """Every case runs, the error cases too: the others that fail are listed after the first."""
    message = assert_fails(checks.check_accuracy_reward, reward_zip_truncates)
    assert "as many golds as completions (random)" in message.split("also failing", 1)[1]


def test_stubs_get_clear_feedback():
    def stub(completions, answer, **kwargs): ...

    assert "stub" in assert_fails(checks.check_accuracy_reward, stub)
    assert "define `accuracy_reward`" in assert_fails(checks.check_accuracy_reward, None)
    assert "define `parse_number`" in assert_fails(checks.check_parse_number, ...)


# --- the cases: expected values are the package's, hidden cases are twins of public ones ---------


@pytest.mark.parametrize("seed", [PUBLIC_SEED, *GRADER_SEEDS, *range(100, 140)])
def test_every_expected_value_is_the_packages(seed):
    for case in checks.parse_twins(seed) + (checks.PARSE_PUBLIC if seed == PUBLIC_SEED else []):
        got = checks.table_parse_number(*case.args)
        assert got == case.expected if case.expected is not None else got is None, case.name
    accuracy = checks.accuracy_twins(seed) + (checks.ACCURACY_PUBLIC if seed == PUBLIC_SEED else [])
    for case in accuracy:
        assert case.expected is not None, case.name
        assert rewards.accuracy_reward(*case.args) == case.expected, case.name
    errors = checks.accuracy_error_twins(seed) + checks.ACCURACY_PUBLIC_ERRORS
    for case in errors:
        with pytest.raises(ValueError):
            rewards.accuracy_reward(*case.args)


def _kind(case):
    """A case's kind: its name without drawn numbers, and the types of its inputs."""
    shape = [type(arg).__name__ for arg in case.args]
    if len(case.args) == 2:  # accuracy_reward: the types of the completions
        shape += sorted({type(c).__name__ for c in case.args[0]})
    return re.sub(r"[0-9][0-9,.]*", "#", case.name), shape


@pytest.mark.parametrize(
    "twins", [checks.parse_twins, checks.accuracy_twins, checks.accuracy_error_twins]
)
def test_hidden_twins_are_fresh_values_of_the_public_kinds(twins):
    public = twins(PUBLIC_SEED)
    for seed in (*GRADER_SEEDS, 98_765):
        hidden = twins(seed)
        assert [_kind(c) for c in public] == [_kind(c) for c in hidden]
        different = [p.args != h.args for p, h in zip(public, hidden, strict=True)]
        assert sum(different) >= len(public) // 2, seed


def test_case_names_are_unique_within_an_exercise():
    for cases in (
        checks.PARSE_PUBLIC + checks.parse_twins(PUBLIC_SEED),
        checks.ACCURACY_PUBLIC
        + checks.accuracy_twins(PUBLIC_SEED)
        + checks.ACCURACY_PUBLIC_ERRORS
        + checks.accuracy_error_twins(PUBLIC_SEED),
    ):
        names = [case.name for case in cases]
        assert len(names) == len(set(names)), "case names must be unique within an exercise"


def test_no_hidden_case_list_ships():
    assert not [name for name in vars(checks) if name.endswith("HIDDEN")]


# --- the security scan ----------------------------------------------------------------------------

run = eval  # an alias at module level: caught by identity


def uses_alias(text):
    return run(text)


def uses_attribute(text):
    return builtins.eval(text)


def uses_getattr(text):
    return getattr(builtins, "exec")(text)  # noqa: B009


def uses_literal_eval(text):
    return ast.literal_eval(text)


def uses_sympy(text):
    return sympy.sympify(text)  # noqa: F821 (never called: the scan reads bytecode)


def uses_compile(text):
    return compile(text, "<answer>", "eval")


def uses_default(text, evaluate=eval):
    return evaluate(text)


def calls_a_helper(text):
    return uses_attribute(text)


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (uses_alias, "eval"),
        (uses_attribute, "eval"),
        (uses_getattr, "'exec'"),
        (uses_literal_eval, "literal_eval"),
        (uses_sympy, "sympify"),
        (uses_compile, "compile"),
        (uses_default, "eval"),
        (calls_a_helper, "eval"),
    ],
    ids=lambda x: getattr(x, "__name__", x),
)
def test_scan_finds_evaluators(fn, what):
    found = checks.forbidden_call(fn)
    assert found is not None and what in found[0], found
    with pytest.raises(CheckFailed, match="no evaluator on model output") as failed:
        checks.check_no_evaluator(fn, fn.__name__)
    assert "hint:" in str(failed.value)


def test_scan_allows_ordinary_code():
    def careful(text):
        """Never eval model output: re.compile and Fraction are fine."""
        pattern = re.compile(r"[0-9]+")
        return Fraction(text) if pattern.fullmatch(text) else None

    assert checks.forbidden_call(careful) is None
    assert checks.forbidden_call(reference_reward) is None
    assert checks.forbidden_call(rewards.accuracy_reward) is None
    assert checks.forbidden_call(answers.parse_number) is None


# --- exercise 3 -----------------------------------------------------------------------------------


def test_hedge_question():
    lenient = torch.tensor(checks.lenient_accuracy(checks.GROUP, checks.GOLDS))
    strict = torch.tensor(rewards.accuracy_reward(checks.GROUP, checks.GOLDS))
    assert lenient.tolist() == [1.0, 0.0, 1.0, 1.0] and strict.tolist() == [1.0, 0.0, 0.0, 0.0]
    right_lenient = advantages.group_advantages(lenient, 4)[2].item()
    right_strict = advantages.group_advantages(strict, 4)[2].item()
    assert math.isclose(right_lenient, 0.25 / 0.5001, rel_tol=1e-5)
    checks.check_hedge_question(right_lenient, right_strict)
    population = 0.25 / math.sqrt(0.1875)
    for wrong in [
        (right_strict, right_lenient),  # swapped
        (right_lenient, right_lenient),  # the lenient grader for both
        (population, -population),  # population std
        (1.0, 0.0),  # rewards, not advantages
        (..., right_strict),  # unanswered
    ]:
        with pytest.raises(CheckFailed, match="case:"):
            checks.check_hedge_question(*wrong)


def parse_sign_read_not_applied(text):
    """The '-' is matched, then the digits alone are turned into the value."""
    if not isinstance(text, str):
        return None
    match = re.fullmatch(r"\s*(-?)([0-9][0-9,]*(?:\.[0-9]+)?(?:/[0-9]+)?)\s*", text)
    value = reference_parse(match.group(2)) if match else None
    return value  # match.group(1) never used


@pytest.mark.parametrize("seed", [None, GRADER_SEEDS[0]])
def test_a_dropped_sign_is_told_so(seed):
    """Its first failing case once told it only that "a leading '-' is allowed"."""
    assert_told(
        checks.check_parse_number, parse_sign_read_not_applied, "read but not applied", seed
    )


def parse_no_leading_zero(text):
    """Integers written [1-9][0-9]*: "0.1" and "007" are not read (None)."""
    if not isinstance(text, str) or re.fullmatch(r"\s*-?0[0-9.,/]*\s*", text):
        return None
    return reference_parse(text)


def test_a_wrong_none_is_not_called_a_stub_and_every_failing_case_is_named():
    """None is one of parse_number's answers: a wrong None is not "the stub", and the check goes
    on to name every case it fails (a stub's None stops at the first)."""
    message = assert_fails(checks.check_parse_number, parse_no_leading_zero)
    assert "stub" not in message and "also failing" in message, message
    stub = assert_fails(checks.check_parse_number, lambda text: None)  # what `...` returns
    assert "is the stub `...` still there?" in stub, stub


class _PatchedKernel(checks.InKernel):
    """A learner's function in a kernel whose own scan was patched to find nothing."""

    def __init__(self, cells: list[str]) -> None:
        self.cells = cells

    def apply(self, helper, *args, **kwargs):
        return None  # what the patched kernel answers for any scan

    def notebook_source(self) -> list[str]:
        return self.cells


@pytest.mark.parametrize(
    ("cells", "what"),
    [
        (
            ["import functools\nread = functools.partial(eval)\ndef f(x):\n    return read(x)"],
            "eval",
        ),
        (
            ["import functools\n(read := functools.partial(eval))\ndef f(x):\n    return read(x)"],
            "eval",
        ),
        (["def f(x):\n    from ast import literal_eval as le\n    return le(x)"], "literal_eval"),
        (["import builtins\ndef f(x):\n    return getattr(builtins, 'exec')(x)"], "'exec'"),
        (["%timeit 1\n", "import sympy\nf = lambda x: sympy.sympify(x)"], "sympify"),
        (
            [
                "%%capture\nimport functools\nread = functools.partial(eval)",
                "def f(x):\n    return read(x)",
            ],
            "eval",
        ),
        (
            [
                "import builtins\nglobals().update(read=builtins.eval)",
                "def f(x):\n    return read(x)",
            ],
            "eval",
        ),
        (["def f(x):\n    return int(x)", "f.__code__ = (lambda x: eval(x)).__code__"], "eval"),
    ],
)
def test_judged_apart_the_ban_reads_the_notebooks_source_not_the_kernels_answer(cells, what):
    with pytest.raises(CheckFailed, match="no evaluator on model output") as failed:
        checks.check_no_evaluator(_PatchedKernel(cells), "f")
    assert what in str(failed.value)
    clean = [
        "import re\nPATTERN = re.compile(r'[0-9]+')",
        "result = eval('6 * 7')  # a scratch cell the function does not use",
        "from re import findall, compile\ndef f(x):\n    result = findall(PATTERN, x)\n"
        "    return int(result[0])",
    ]
    checks.check_no_evaluator(_PatchedKernel(clean), "f")  # ordinary code passes
