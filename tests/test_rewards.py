"""The grading rules of grpo_minimal.rewards: a table of cases, then property tests."""

from __future__ import annotations

import ast
import json
import re
import string
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_minimal import answers, rewards
from grpo_minimal.data import DATA_DIR
from grpo_minimal.rewards import (
    accuracy_reward,
    combined_reward,
    completion_text,
    extract_answer,
    extract_value,
    format_reward,
    is_r1_format,
    make_combined_reward,
    parse_gold,
    parse_number,
)

R1 = "<think>{}</think><answer>{}</answer>"

# (completion, gold, expected accuracy reward, rule it checks)
CASES = [
    # GSM8K golds and markers
    ("#### 72", "72", 1.0, "gsm8k marker"),
    ("Some work.\n#### 1,080", "1080", 1.0, "gsm8k marker with thousands"),
    ("Half of 144 is 72.\n#### 72", "Half of 144 is <<144/2=72>>72.\n#### 72", 1.0, "gsm8k gold"),
    ("#### -7", "#### -7", 1.0, "gsm8k negative"),
    ("#### 72\n#### 73", "72", 0.0, "two different gsm8k answers"),
    ("#### 72\n#### 72", "72", 1.0, "repeated same gsm8k answer"),
    # \boxed
    (r"\boxed{72}", "72", 1.0, "boxed"),
    (r"So the result is $\boxed{72}$.", "72", 1.0, "boxed in math mode"),
    (r"\boxed{\frac{1}{2}}", "0.5", 1.0, "boxed frac, nested braces"),
    (r"\boxed{\text{72 apples}}", "72", 1.0, "boxed with text"),
    (r"\boxed{3} or \boxed{4}", "3", 0.0, "boxed hedge"),
    (r"\boxed{4} \boxed{4}", "4", 1.0, "two boxed that agree"),
    (r"\boxed{3, 4}", "3", 0.0, "two numbers in one box"),
    (r"\boxed{}", "0", 0.0, "empty box"),
    (r"\boxed{72", "72", 0.0, "unclosed box"),
    (r"\boxed{\sqrt{2}}", "2", 0.0, "leftover math: sqrt"),
    (r"\boxed{2^{10}}", "2", 0.0, "leftover math: power"),
    (r"\boxed{x^2}", "2", 0.0, "leftover math: x squared"),
    # <answer> blocks and think blocks
    (R1.format("6*7", "42"), "42", 1.0, "answer block"),
    (R1.format("6*7", " 42 "), "42", 1.0, "answer block spacing"),
    (R1.format("6*7", r"\boxed{42}"), "42", 1.0, "boxed inside answer"),
    (R1.format("6*7", "The answer is 42."), "42", 1.0, "phrase inside answer"),
    (R1.format("it might be 41", "42"), "42", 1.0, "think block is ignored"),
    (R1.format("6*7", "41 or 42"), "42", 0.0, "hedge inside answer"),
    ("<answer>41</answer><answer>42</answer>", "42", 0.0, "two answer blocks disagree"),
    ("<answer>42</answer><answer>42</answer>", "42", 1.0, "repeated answer blocks agree"),
    ("<answer>42</answer> \\boxed{41}", "42", 0.0, "answer block vs boxed"),
    ("<answer>42", "42", 0.0, "unclosed answer"),
    ("<think>6*7 = 42", "42", 0.0, "unclosed think hides the rest"),
    ("<think>6*7 = 42</think>", "42", 0.0, "answer only inside think"),
    ("6*7 = 42</think><answer>42</answer>", "42", 1.0, "think opened by the prompt"),
    ("<answer></answer>", "0", 0.0, "empty answer block"),
    # "the answer is" phrases
    ("The answer is 72.", "72", 1.0, "phrase"),
    ("Answer: 72", "72", 1.0, "answer colon"),
    ("**Answer:** 72", "72", 1.0, "markdown answer"),
    ("The final answer is **72**.", "72", 1.0, "markdown bold number"),
    ("The answer is 3 or 4.", "4", 0.0, "phrase hedge"),
    ("The answer is 3. No, the answer is 4.", "4", 0.0, "two phrases disagree"),
    ("The answer is 3.5. Then we stop.", "3.5", 1.0, "decimal then sentence end"),
    ("The answer is below.\n\\boxed{8}", "8", 1.0, "phrase without a number"),
    ("The answer is 7.\n\\boxed{8}", "8", 0.0, "phrase disagrees with boxed"),
    ("The answer is the sum: 3 + 4 = 7.\n\\boxed{7}", "7", 1.0, "prose phrase, boxed decides"),
    ("The answer is 6*7", "42", 0.0, "phrase with an expression"),
    ("The answer is 3. Or maybe 4.", "3", 0.0, "a different number after the phrase"),
    ("The answer is 4. Yes: 4 apples.", "4", 1.0, "the same number after the phrase"),
    ("The answer is not 5.", "5", 0.0, "negated phrase"),
    ("The answer isn't 5", "5", 0.0, "negated phrase, contracted"),
    ("<answer>3</answer> but the answer might be 4", "3", 0.0, "hedge after an answer block"),
    # fallback: the last line, after its last '='
    ("68", "68", 1.0, "bare number"),
    ("23+45=68", "68", 1.0, "char-level model output"),
    ("First 15 + 27.\nSo 15 + 27 = 42.", "42", 1.0, "last line after ="),
    ("It costs 5 dollars", "5", 1.0, "one number on last line"),
    ("I think 3 or 4", "4", 0.0, "fallback hedge"),
    # the last line with a letter or a digit: markup after the answer is not a line of text
    ("15 - 3 = 12\n```", "12", 1.0, "fallback skips a closing code fence"),
    ("12\n---\n", "12", 1.0, "fallback skips a rule"),
    ("7 + 5 = 12\n\\]", "12", 1.0, "fallback skips a closing display-math bracket"),
    ("3 + 4\n=", "7", 0.0, "fallback: nothing after the last '='"),
    ("The sum is 12.\nDone", "12", 0.0, "fallback: a last line of words states no number"),
    ("2+2", "2", 0.0, "expression is not an answer"),
    ("42!", "42", 0.0, "factorial is not 42"),
    ("", "0", 0.0, "empty completion"),
    ("no numbers here", "0", 0.0, "no number"),
    # normalization: separators, $, %, decimals, signs, fractions, spacing
    ("1,080", "1080", 1.0, "thousands"),
    ("1,234,567", "1234567", 1.0, "several thousands groups"),
    ("1,08", "108", 0.0, "bad thousands group"),
    ("0,500", "500", 0.0, "a leading 0 group is a decimal comma, not thousands"),
    ("$18", "18", 1.0, "dollar"),
    (r"\$18.00", "18", 1.0, "latex dollar and cents"),
    ("-$5", "-5", 1.0, "minus dollar"),
    ("$-5", "-5", 1.0, "dollar minus"),
    ("50%", "50", 1.0, "percent kept as 50"),
    (r"50\%", "50", 1.0, "latex percent"),
    ("50%", "0.5", 0.0, "percent is not a fraction"),
    ("72.0", "72", 1.0, "trailing zero"),
    ("72.", "72", 1.0, "trailing period"),
    ("-3", "-3", 1.0, "negative"),
    ("\u22123", "-3", 1.0, "unicode minus"),
    ("+3", "3", 1.0, "plus sign"),
    ("3", "-3", 0.0, "sign matters"),
    ("0.5", "1/2", 1.0, "seed: 0.5 == 1/2"),
    (r"\frac{1}{2}", "0.5", 1.0, "seed: frac == 0.5"),
    ("1/2", r"\frac{1}{2}", 1.0, "seed: 1/2 == frac"),
    (r"\dfrac{3}{4}", "0.75", 1.0, "dfrac"),
    (r"\tfrac{3}{4}", "3/4", 1.0, "tfrac"),
    (r"\frac12", "0.5", 1.0, "frac shorthand"),
    (r"\frac{ 6 }{ 8 }", "3/4", 1.0, "frac with spaces, unreduced"),
    (r"-\frac{1}{2}", "-0.5", 1.0, "negative frac"),
    ("1 / 2", "0.5", 1.0, "spaced fraction"),
    (".5", "1/2", 1.0, "leading decimal point"),
    ("0.33", "1/3", 0.0, "no float tolerance"),
    ("1/0", "0", 0.0, "division by zero"),
    ("x = 42", "42", 1.0, "variable equals"),
    ("  42  ", "42", 1.0, "surrounding whitespace"),
    ("42 apples", "42", 1.0, "unit word"),
    ("42km", "42", 0.0, "number glued to letters"),
    ("1e5", "100000", 0.0, "scientific notation unsupported"),
    # a number is the whole token or nothing: never a shorter number (module docstring)
    (r"\boxed{72.5km}", "72", 0.0, "glued unit: 72.5km is not 72"),
    (r"\boxed{72.5km}", "72.5", 0.0, "glued unit: 72.5km is not 72.5 either"),
    ("<answer>72.5kg</answer>", "72", 0.0, "glued unit in an answer block"),
    (r"\boxed{1,080.5km}", "1080", 0.0, "glued unit after thousands and decimals"),
    ("1,080km", "1", 0.0, "glued unit after thousands is not 1"),
    (r"\boxed{5.0e3}", "5", 0.0, "exponent is not cut to 5"),
    (r"\boxed{5.0e3}", "5000", 0.0, "exponent is refused, not read as 5000"),
    ("3.14.15", "3.14", 0.0, "second decimal point"),
    ("1/2.5.3", "0.4", 0.0, "second decimal point in a denominator"),
    ("3.14x", "3", 0.0, "decimal glued to a letter is not its integer part"),
    ("The answer is 72 (or 72.5km).", "72", 0.0, "a glued token in the phrase is not prose"),
    ("The answer is 72. Or maybe 72.5km.", "72", 0.0, "a glued token after the phrase"),
    ("The answer is 42 (\u0664\u0662).", "42", 0.0, "digits outside a number, other script"),
    ("72 km", "72", 1.0, "unit after a space"),
    ("72.5 km", "72.5", 1.0, "unit after a space keeps the decimals"),
    (r"\boxed{72\,\text{km}}", "72", 1.0, "unit after latex markup"),
    ("It is 72.Done", "72", 1.0, "a period before a letter ends the sentence"),
    (r"\frac{1,000}{3}", "1000/3", 1.0, "thousands inside frac braces"),
    (r"\frac{1,0000}{3}", "1/3", 0.0, "bad thousands group inside frac braces"),
    ("\u0664\u0662", "42", 0.0, "arabic-indic digits are not numbers"),
    ("\uff14\uff12", "42", 0.0, "full-width digits are not numbers"),
    ("9" * 41, "9", 0.0, "too many digits"),
]


def test_table_is_large():
    assert len(CASES) >= 60


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [case[:3] for case in CASES],
    ids=[case[3] for case in CASES],
)
def test_accuracy_table(completion, gold, expected):
    assert accuracy_reward([completion], [gold]) == [expected]


def test_too_many_digits_gold_is_a_data_error():
    with pytest.raises(ValueError, match="not one number"):
        parse_gold("9" * 41)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,080", Fraction(1080)),
        (r"\frac{1}{2}", Fraction(1, 2)),
        ("0.5", Fraction(1, 2)),
        ("50%", Fraction(50)),
        ("-$1,234.50", Fraction(-246900, 200)),
        ("72 km", Fraction(72)),
        (r"\frac{1,000}{3}", Fraction(1000, 3)),
        ("72.5km", None),
        ("1,080.5km", None),
        ("5.0e3", None),
        ("3.14.15", None),
        ("1,0800", None),
        ("3 or 4", None),
        ("", None),
        ("x^2", None),
    ],
)
def test_parse_number(text, expected):
    assert parse_number(text) == expected


def test_extract_answer_returns_the_text_as_written():
    assert extract_answer(r"so \boxed{1,080}") == "1,080"
    assert extract_answer(R1.format("a", r"\frac{1}{2}")) == r"\frac{1}{2}"
    assert extract_answer("3 or 4") is None
    assert extract_value("The answer is $-5.") == -5


@pytest.mark.parametrize(
    ("gold", "value"),
    [
        ("72", 72),
        ("#### 1,080", 1080),
        ("a\n#### -3\n", -3),
        (7, 7),
        (Fraction(1, 2), 0.5),
        (2.5, 2.5),
        (r"\frac{1}{4}", 0.25),
    ],
)
def test_parse_gold(gold, value):
    assert parse_gold(gold) == Fraction(value)


@pytest.mark.parametrize("gold", ["", "three", "3 or 4", None, True, [1], float("nan"), "####"])
def test_bad_gold_is_a_clear_error(gold):
    with pytest.raises(ValueError, match="answer"):
        accuracy_reward(["1"], [gold])


def test_lengths_must_match():
    with pytest.raises(ValueError, match="2 completions but 1 answers"):
        accuracy_reward(["1", "2"], ["1"])


# --- completions in TRL's formats ---------------------------------------------------------------


def test_conversational_completions():
    chat = [{"role": "assistant", "content": R1.format("6*7", "42")}]
    parts = [{"role": "assistant", "content": [{"type": "text", "text": "#### 42"}]}]
    assert accuracy_reward([chat, parts, "42"], ["42", "42", "42"]) == [1.0, 1.0, 1.0]
    assert format_reward([chat, parts]) == [1.0, 0.0]
    assert completion_text(chat) == R1.format("6*7", "42")


@pytest.mark.parametrize("bad", [None, 42, b"42", [], [{}], [{"content": None}], {"x": 1}])
def test_unusable_completions_score_zero(bad):
    assert accuracy_reward([bad], ["42"]) == [0.0]
    assert format_reward([bad]) == [0.0]


def test_trl_keyword_arguments_are_accepted():
    kwargs = {"prompts": ["p"], "completion_ids": [[1]], "trainer_state": None, "other": [1]}
    assert accuracy_reward(completions=["42"], answer=["42"], **kwargs) == [1.0]
    assert format_reward(completions=["42"], **kwargs) == [0.0]


# --- format reward --------------------------------------------------------------------------------

FORMAT_CASES = [
    ("<think>6*7</think><answer>42</answer>", 1.0),
    ("\n<think>\n6*7\n</think>\n<answer>\n42\n</answer>\n", 1.0),
    ("<think>6*7</think><answer>forty-two</answer>", 1.0),  # format only, not correctness
    ("<think></think><answer>42</answer>", 0.0),  # empty think
    ("<think>   </think><answer>42</answer>", 0.0),  # blank think
    ("<think>6*7</think><answer></answer>", 0.0),  # empty answer
    ("<think>6*7</think><answer>42</answer><answer>42</answer>", 0.0),  # repeated answer
    ("<think>a</think><think>b</think><answer>42</answer>", 0.0),  # two think blocks
    ("<think>6*7</think>so<answer>42</answer>", 0.0),  # text between blocks
    ("<think>6*7</think><answer>42</answer> bye", 0.0),  # text after
    ("hi <think>6*7</think><answer>42</answer>", 0.0),  # text before
    ("<answer>42</answer><think>6*7</think>", 0.0),  # wrong order
    ("<think>6*7<answer>42</answer></think>", 0.0),  # nested
    ("<THINK>6*7</THINK><ANSWER>42</ANSWER>", 0.0),  # tags are lower case
    ("42", 0.0),
]


@pytest.mark.parametrize(("text", "expected"), FORMAT_CASES)
def test_format_reward(text, expected):
    assert format_reward([text]) == [expected]
    assert is_r1_format(text) is bool(expected)


def test_combined_reward_weights():
    good, wrong, bare = R1.format("6*7", "42"), R1.format("6*7", "41"), "42"
    assert combined_reward([good, wrong, bare], ["42"] * 3) == [1.2, 0.2, 1.0]
    custom = make_combined_reward(accuracy_weight=2.0, format_weight=0.5)
    assert custom([good, wrong, bare], ["42"] * 3) == [2.5, 0.5, 2.0]
    assert custom.__name__ == "combined_reward"
    with pytest.raises(ValueError, match="format_weight"):
        make_combined_reward(format_weight=float("nan"))


def test_rewards_source_never_runs_model_text():
    """No eval/exec/compile/__import__ and no sympy anywhere in the rewards modules."""
    source = "\n".join(Path(m.__file__).read_text(encoding="utf-8") for m in (rewards, answers))
    tree = ast.parse(source)
    banned_names = {"eval", "exec", "compile", "__import__", "getattr", "globals", "locals"}
    banned_attrs = {"eval", "exec", "sympify", "parse_expr", "literal_eval", "Number", "system"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            assert node.id not in banned_names, node.id
        if isinstance(node, ast.Attribute):
            assert node.attr not in banned_attrs, node.attr
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            assert not any("sympy" in n or "math_verify" in n for n in names)
        assert not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Pow)


# --- property tests -------------------------------------------------------------------------------

INT_FORMATS = [
    lambda n: str(n),
    lambda n: f"{n:,}",
    lambda n: f"{n}.0",
    lambda n: f"${n}" if n >= 0 else f"-${-n}",
    lambda n: f"\\${n:,}",
    lambda n: f"{n}%",
    lambda n: f"\\boxed{{{n}}}",
    lambda n: f"\\boxed{{{n:,}}}",
    lambda n: R1.format("let me think", n),
    lambda n: R1.format("step 1, step 2", f"\\boxed{{{n}}}"),
    lambda n: f"The answer is {n}.",
    lambda n: f"**Answer:** {n}",
    lambda n: f"Work: 1 + 1 = 2\n#### {n:,}",
    lambda n: f"x = {n}",
    lambda n: f"\\frac{{{n}}}{{1}}",
    lambda n: f"{2 * n}/2",
    lambda n: f"  {n}  ",
]

integers = st.integers(min_value=-pow(10, 15), max_value=pow(10, 15))


@settings(max_examples=60, deadline=None)
@given(n=integers, fmt=st.sampled_from(INT_FORMATS), gold_fmt=st.sampled_from(INT_FORMATS[:8]))
def test_every_integer_format_is_correct(n, fmt, gold_fmt):
    gold = gold_fmt(n)
    assert accuracy_reward([fmt(n)], [gold]) == [1.0]
    assert accuracy_reward([fmt(n + 1)], [gold]) == [0.0]


FRACTION_FORMATS = [  # (sign, numerator, denominator) -> text
    lambda s, p, q: f"{s}{p}/{q}",
    lambda s, p, q: f"{s}{p} / {q}",
    lambda s, p, q: f"{s}\\frac{{{p}}}{{{q}}}",
    lambda s, p, q: f"\\frac{{{s}{p}}}{{{q}}}",
    lambda s, p, q: f"{s}\\dfrac{{{p}}}{{{q}}}",
    lambda s, p, q: f"\\boxed{{{s}\\frac{{{p}}}{{{q}}}}}",
    lambda s, p, q: R1.format("...", f"{s}{p}/{q}"),
    lambda s, p, q: f"The answer is {s}{p}/{q}.",
]


def write_fraction(fmt, value: Fraction, scale: int = 1) -> str:
    """``value`` written with ``fmt``, numerator and denominator both multiplied by ``scale``."""
    sign = "-" if value < 0 else ""
    return fmt(sign, abs(value.numerator) * scale, value.denominator * scale)


def decimal_text(value: Fraction) -> str:
    """The exact decimal of a fraction whose denominator is 2^a 5^b."""
    places = 0
    while (value * pow(10, places)).denominator != 1:
        places += 1
    digits = str(abs(value) * pow(10, places)).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return sign + (digits[:-places] + "." + digits[-places:] if places else digits)


fractions_ = st.builds(Fraction, st.integers(-1_000_000, 1_000_000), st.integers(1, 10_000))
decimal_fractions = st.builds(
    lambda n, a, b: Fraction(n, pow(2, a) * pow(5, b)),
    st.integers(-1_000_000, 1_000_000),
    st.integers(0, 6),
    st.integers(0, 6),
)


@settings(max_examples=60, deadline=None)
@given(
    value=fractions_,
    scale=st.integers(1, 9),
    fmt=st.sampled_from(FRACTION_FORMATS),
    gold_fmt=st.sampled_from(FRACTION_FORMATS[:5]),
)
def test_every_fraction_format_is_correct(value, scale, fmt, gold_fmt):
    gold = write_fraction(gold_fmt, value)
    assert accuracy_reward([write_fraction(fmt, value, scale)], [gold]) == [1.0]
    assert accuracy_reward([write_fraction(fmt, value + 1, scale)], [gold]) == [0.0]


@settings(max_examples=60, deadline=None)
@given(value=decimal_fractions, fmt=st.sampled_from(FRACTION_FORMATS))
def test_decimal_equals_fraction(value, fmt):
    """Seed requirement, generalised: 0.5 == 1/2 == \\frac{1}{2} for every terminating decimal."""
    assert accuracy_reward([write_fraction(fmt, value)], [decimal_text(value)]) == [1.0]
    assert accuracy_reward([decimal_text(value)], [write_fraction(fmt, value)]) == [1.0]
    assert accuracy_reward([decimal_text(value)], [write_fraction(fmt, value + 1)]) == [0.0]


@settings(max_examples=40, deadline=None)
@given(a=integers, b=integers, fmt=st.sampled_from(INT_FORMATS[6:12]))
def test_two_different_answers_are_a_hedge(a, b, fmt):
    if a == b:
        b = a + 1
    assert accuracy_reward([fmt(a) + "\n" + fmt(b)], [str(a)]) == [0.0]
    assert accuracy_reward([fmt(a) + "\n" + fmt(b)], [str(b)]) == [0.0]


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_any_text_scores_without_raising(text):
    assert accuracy_reward([text], ["42"])[0] in (0.0, 1.0)
    assert format_reward([text])[0] in (0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    think=st.text(max_size=40).filter(lambda s: s.strip() and "<" not in s),
    ans=st.text(max_size=40).filter(lambda s: s.strip() and "<" not in s),
)
def test_r1_format_accepts_any_clean_contents(think, ans):
    assert format_reward([R1.format(think, ans)]) == [1.0]
    assert format_reward([R1.format(think, ans) + R1.format(think, ans)]) == [0.0]


# --- numbers are whole tokens ---------------------------------------------------------------------

WRAPPERS = [
    "{}",
    "\\boxed{{{}}}",
    R1.format("let me think", "{}"),
    "The answer is {}.",
    "**Answer:** {}",
    "Work: 1 + 1 = 2\n#### {}",
    "x = {}",
]
# The reference grammar of a plain number (sign and $ aside), written out here independently of
# the module's regex: 1080, 1,080, 1,080.5, 72.0.
PLAIN_NUMBER = re.compile(r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?")


@st.composite
def number_texts(draw) -> tuple[str, str]:
    """(sign, body): an int or decimal, maybe with thousands commas, e.g. ("-$", "1,080.5")."""
    n = draw(st.integers(0, pow(10, 12)))
    body = f"{n:,}" if draw(st.booleans()) else str(n)
    if draw(st.booleans()):
        body += "." + draw(st.text(string.digits, min_size=1, max_size=3))
    return draw(st.sampled_from(["", "-", "\u2212", "$", "-$"])), body


letters = st.text(string.ascii_letters, min_size=1, max_size=4)
digits = st.text(string.digits, min_size=1, max_size=4)
continuations = st.one_of(
    letters,  # km, kg, th, x, e
    digits.map(lambda d: "." + d),  # a (second) decimal point
    st.tuples(st.sampled_from("eE"), st.sampled_from(["", "+", "-"]), digits).map("".join),
    digits.map(lambda d: "," + d),  # a thousands group, good or bad
    digits.map(lambda d: "_" + d),
    st.tuples(letters, digits).map("".join),  # x2, th1
)


def plain_value(sign: str, body: str) -> Fraction | None:
    """The value of sign + body by the reference grammar, or None when body is not a number."""
    if not PLAIN_NUMBER.fullmatch(body):
        return None
    value = Fraction(body.replace(",", ""))
    return -value if sign.startswith(("-", "\u2212")) else value


@settings(max_examples=300, deadline=None)
@given(number=number_texts(), cont=continuations, wrapper=st.sampled_from(WRAPPERS))
def test_a_number_is_never_cut_short(number, cont, wrapper):
    """A glued continuation gives the whole, longer number or nothing: never the number before it.

    ``72`` + ``.5`` is the number 72.5; ``72.5`` + ``km``, ``.3``, ``e3`` or ``,5`` is no number.
    """
    sign, body = number
    whole = plain_value(sign, body + cont)
    got = extract_value(wrapper.format(sign + body + cont))
    assert got == whole  # None when the whole token is not a number
    if whole != plain_value(sign, body):
        assert accuracy_reward([wrapper.format(sign + body + cont)], [sign + body]) == [0.0]


@settings(max_examples=100, deadline=None)
@given(number=number_texts(), unit=letters, wrapper=st.sampled_from(WRAPPERS))
def test_a_unit_after_a_space_keeps_the_whole_number(number, unit, wrapper):
    sign, body = number
    assert extract_value(wrapper.format(f"{sign}{body} {unit}")) == plain_value(sign, body)
    assert extract_value(wrapper.format(f"{sign}{body}{unit}")) is None  # glued: no number


# --- real completions of a real model ------------------------------------------------------------
# data/real_completions.jsonl: 32 sampled completions of SmolLM2-135M-Instruct (notebook 11's
# model, prompt and temperature; data/make_real_completions.py). What each one states as its
# final answer under the course's strict rules (notebook 05: a marked answer, an answer phrase,
# else the last line of text), read by a person from the text, not from the parser. None: it
# states none a strict grader can hold it to. 16, 19 and 24 state the right number and then
# run on into another sentence, cut off by the 32-token limit: a lenient reader
# would credit them; the strict rule reads the last line, which states no number.
REAL_ANSWERS = {
    1: "12",
    2: "20",
    3: "8",
    4: None,
    5: "6",
    6: None,
    7: None,
    8: None,
    9: None,
    10: None,
    11: "9",
    12: None,
    13: "12",  # "15 - 3 = 12" then a closing code fence: the fence is markup, the answer 12
    14: "4",
    15: "10",
    16: None,
    17: None,
    18: "13",
    19: None,
    20: None,
    21: "6",
    22: "3",
    23: None,
    24: None,
    25: None,
    26: "5",
    27: "24",
    28: None,
    29: "13",
    30: None,
    31: None,
    32: None,
}


def test_real_completions_get_the_strict_verdicts_a_person_reads():
    rows = [json.loads(line) for line in (DATA_DIR / "real_completions.jsonl").open()]
    assert len(rows) == len(REAL_ANSWERS) == 32
    for number, row in enumerate(rows, start=1):
        assert extract_answer(row["completion"]) == REAL_ANSWERS[number], (number, row)
        right = REAL_ANSWERS[number] == row["answer"]
        assert accuracy_reward([row["completion"]], [row["answer"]]) == [float(right)], number
    assert sum(REAL_ANSWERS[n] == r["answer"] for n, r in enumerate(rows, 1)) == 4  # 13, 15, 26, 27
