"""Lab 04: the reference passes, delegates to the package pass, known mistakes fail where meant.

Each wrong variant is one realistic mistake, and each must be rejected by the case written for
it (the test names the case), not by accident somewhere else.
"""

from __future__ import annotations

import ast
import builtins
import math
import re
from fractions import Fraction

import pytest
import torch
from lab_helpers import assert_fails, assert_fails_somewhere, assert_passes

from grpo_minimal import advantages, answers, rewards
from grpo_minimal.labs import reward as checks
from grpo_minimal.labs.checking import CheckFailed

MAX_CHARS = answers.MAX_COMPLETION_CHARS
MAX_DIGITS = answers.MAX_NUMBER_DIGITS
INTEGER = r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)"

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
    return reference_parse(text, make=lambda digits: Fraction(float(digits)))


def parse_int_cut(text):
    return reference_parse(text, make=lambda digits: Fraction(int(float(digits))))


def parse_first_word(text):
    """Reads the first word only: '3 or 4' becomes 3."""
    words = text.split() if isinstance(text, str) else []
    return reference_parse(words[0]) if words else None


def parse_unicode_digits(text):
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


def parse_crashes_on_non_string(text):
    return reference_parse(text.strip())


def parse_with_eval(text):
    try:
        return Fraction(eval(text.replace(",", ""))).limit_denominator()
    except Exception:
        return None


PARSE_WRONG = [
    (parse_via_float, "0.1 exactly"),
    (parse_int_cut, "a decimal, exactly"),
    (parse_first_word, "two numbers are not one number"),
    (parse_unicode_digits, "full-width digits"),
    (parse_no_digit_cap, "41 digits"),
    (parse_divides_by_zero, "division by zero"),
    (parse_deletes_commas, "a bad thousands group"),
    (parse_fraction_unchecked, "a bad thousands group"),
    (parse_crashes_on_non_string, "not a string"),
    (parse_with_eval, "no evaluator on model output"),
]


@pytest.mark.parametrize("fn", [reference_parse, answers.parse_number, rewards.parse_number])
def test_parse_reference_and_package_pass(fn):
    assert_passes(checks.check_parse_number, fn)


@pytest.mark.parametrize(("fn", "case"), PARSE_WRONG, ids=lambda x: getattr(x, "__name__", x))
def test_parse_mistakes_fail_on_their_case(fn, case):
    message = assert_fails_somewhere(checks.check_parse_number, fn)
    assert f"case:     {case}\n" in message, message


def test_parse_float_is_not_exact():
    def returns_float(text):
        value = reference_parse(text)
        return None if value is None else float(value)

    assert "an integer" in assert_fails(checks.check_parse_number, returns_float)


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


def reward_first_message(completions, answer, **kwargs):
    def text_of(completion):
        if isinstance(completion, list) and completion:
            completion = completion[0].get("content")
        return completion if isinstance(completion, str) else None

    return reference_reward(completions, answer, text_of=text_of)


def reward_fraction_unchecked(completions, answer, **kwargs):
    parse = parse_fraction_unchecked
    return reference_reward(
        completions, answer, parse=parse, final=lambda t: _final_answer(t, parse=parse)
    )


def reward_unicode_digits(completions, answer, **kwargs):
    parse = parse_unicode_digits
    return reference_reward(
        completions, answer, parse=parse, final=lambda t: _final_answer(t, parse=parse)
    )


def reward_no_digit_cap(completions, answer, **kwargs):
    parse = parse_no_digit_cap  # Fraction('9' * 9000) raises ValueError: the reward crashes
    return reference_reward(
        completions, answer, parse=parse, final=lambda t: _final_answer(t, parse=parse)
    )


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


ACCURACY_WRONG = [
    (reward_float_equality, "1/3 is not 0.3333333333333333"),
    (reward_int_cut, "a decimal is not cut into an integer"),
    (reward_first_number, "the final answer, not the first number"),
    (reward_accepts_hedges, "a hedge: two different boxed answers"),
    (reward_last_spot_only, "a hedge: two different boxed answers"),
    (reward_uses_eval, "no evaluator on model output"),
    (reward_eval_hidden_from_the_scan, "an expression is not evaluated"),
    (reward_no_length_cap, "a right answer after 10,080 characters"),
    (reward_crashes_on_none, "None and other non-strings"),
    (reward_first_message, "the last message is scored"),
    (reward_fraction_unchecked, "Python's number syntax is not ours"),
    (reward_unicode_digits, "digits of other scripts"),
    (reward_no_digit_cap, "9,000 digits inside the length cap"),
    (reward_boxes_only, "a hedge between a box and a phrase"),
    (reward_compares_strings, "exact values: 3.0 is 3, 0.5 is 1/2"),
    (reward_zip_truncates, "as many golds as completions"),
    (reward_bad_gold_scores_zero, "a gold that is not a number"),
]


@pytest.mark.parametrize("fn", [reference_reward, rewards.accuracy_reward])
def test_accuracy_reference_and_package_pass(fn):
    assert_passes(checks.check_accuracy_reward, fn)


def test_a_notebook_style_delegate_passes():
    def accuracy_reward(completions, answer, **kwargs):
        return rewards.accuracy_reward(completions, answer, **kwargs)

    assert_passes(checks.check_accuracy_reward, accuracy_reward)


@pytest.mark.parametrize(("fn", "case"), ACCURACY_WRONG, ids=lambda x: getattr(x, "__name__", x))
def test_accuracy_mistakes_fail_on_their_case(fn, case):
    message = assert_fails_somewhere(checks.check_accuracy_reward, fn)
    assert f"case:     {case}\n" in message, message


def test_feedback_for_a_crash_names_the_error():
    message = assert_fails(checks.check_accuracy_reward, reward_crashes_on_none, hidden=True)
    assert "raised TypeError" in message and "never raises" in message


def test_stubs_get_clear_feedback():
    def stub(completions, answer, **kwargs): ...

    assert "stub" in assert_fails(checks.check_accuracy_reward, stub)
    assert "define `accuracy_reward`" in assert_fails(checks.check_accuracy_reward, None)
    assert "define `parse_number`" in assert_fails(checks.check_parse_number, ...)


# --- the cases: expected values are the package's ---------------------------------------------


def test_every_expected_value_is_the_packages():
    for case in checks.PARSE_PUBLIC + checks.PARSE_HIDDEN:
        got = answers.parse_number(*case.args)
        assert case.expected is None or got == case.expected, case.name
    for case in checks.ACCURACY_PUBLIC + checks.ACCURACY_HIDDEN:
        assert case.expected is not None, case.name
        assert rewards.accuracy_reward(*case.args) == case.expected, case.name
    for case in checks.ACCURACY_HIDDEN_ERRORS:
        with pytest.raises(ValueError):
            rewards.accuracy_reward(*case.args)


def test_hidden_cases_outnumber_public_ones_and_names_are_unique():
    assert len(checks.PARSE_HIDDEN) > len(checks.PARSE_PUBLIC)
    assert len(checks.ACCURACY_HIDDEN) > len(checks.ACCURACY_PUBLIC)
    for cases in (
        checks.PARSE_PUBLIC + checks.PARSE_HIDDEN,
        checks.ACCURACY_PUBLIC + checks.ACCURACY_HIDDEN + checks.ACCURACY_HIDDEN_ERRORS[1:],
    ):
        names = [case.name for case in cases]
        assert len(names) == len(set(names)), "case names must be unique within an exercise"


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
    lenient = torch.tensor(checks.lenient_accuracy(checks.GROUP, checks.GOLD))
    strict = torch.tensor(rewards.accuracy_reward(checks.GROUP, checks.GOLD))
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
