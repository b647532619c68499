"""An adversarial corpus against the rewards: no code runs, nothing raises, nothing hangs.

Time is never asserted. Each call runs in a worker thread (which also proves the rewards need no
signals, so they work off the main thread), and the test fails only if a call has not returned
after a generous ``HANG_SECONDS``: that detects a hang, not slowness.
"""

from __future__ import annotations

import itertools
import re
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from grpo_minimal.rewards import (
    MAX_COMPLETION_CHARS,
    accuracy_reward,
    answer_segments,
    combined_reward,
    extract_answer,
    extract_value,
    format_reward,
    is_r1_format,
    parse_gold,
    parse_number,
)

HANG_SECONDS = 10.0
GOLD = "31337"  # no corpus entry states this number
MB = 1_048_576


def injection_corpus(marker: str) -> list[str]:
    """Completions that would create ``marker`` if any grader evaluated or executed them."""
    touch = f"__import__('pathlib').Path({marker!r}).touch()"
    write = f"open({marker!r}, 'w').write('pwned')"
    system = f"__import__('os').system('touch {marker}')"
    payloads = [touch, write, system, "exec(" + repr(touch) + ")", "eval(" + repr(write) + ")"]
    wrappers = [
        "{}",
        "\\boxed{{{}}}",
        "<think>x</think><answer>{}</answer>",
        "The answer is {}.",
        "#### {}",
        "x = {}",
        "{} or 7",
        "\\frac{{{}}}{{2}}",
        "$\\boxed{{{}}}$ ** 2",
        "7 if {} else 8",
        "[{}][0] + 1",
        "Symbol('x').__class__.__init__.__globals__['{}']",
        "lambda: {}",
    ]
    corpus = [w.format(p) for w in wrappers for p in payloads]
    corpus += [
        "().__class__.__base__.__subclasses__()",
        f"sympify('{touch}')",
        f"parse_expr('{touch}')",
        f"Number('{touch}')",
        f"\\boxed{{{touch}}} \\boxed{{{write}}}",
        "__import__('subprocess').run(['touch', " + repr(marker) + "])",
    ]
    return corpus


def nasty_corpus() -> list[object]:
    """Towers, huge numbers, huge strings, deep nesting, odd unicode, NUL bytes, odd types."""
    corpus: list[object] = [
        # power towers and big exponents
        "9**9**9**9",
        "\\boxed{9**9**9**9}",
        "<think>x</think><answer>9**9**9**9</answer>",
        "2^2^2^2^2^2",
        "\\boxed{9^{9^{9^{9}}}}",
        "10^10^10^10",
        "1e999999999",
        "1e-999999999",
        "(10**100000)",
        "pow(10, 10**9)",
        "9" * 1000 + "**" + "9" * 1000,
        # huge numbers
        "1" * 1_000_000,
        "\\boxed{" + "9" * 1_000_000 + "}",
        "9" * 5000,
        "\\boxed{" + "9" * 9000 + "}",
        "#### " + "9" * 4301,
        "0." + "0" * 9000 + "1",
        "1/" + "0" * 5000,
        "1/0",
        "\\frac{1}{0}",
        "\\frac{" + "9" * 4000 + "}{" + "9" * 4000 + "}",
        "1," + "000," * 2400 + "000",
        "-" * 9999 + "1",
        # megabyte strings
        "a" * MB,
        "7 " * (MB // 2),
        "<think>" + "x" * MB + "</think><answer>7</answer>",
        "\\boxed{" * (MB // 7),
        "answer is " * (MB // 10),
        # deeply nested braces and tags
        "\\boxed{" * 1000 + "7" + "}" * 1000,
        "\\boxed{" * 30 + "7" + "}" * 30,
        "\\boxed{" * 1400,
        "{" * 9000 + "7" + "}" * 900,
        "}" * 9999,
        "\\frac{" * 2000,
        "\\frac{1}{2}" * 900,
        "<think>" * 1400,
        "</think>" * 1200,
        "<answer>" * 1200,
        "</answer>" * 1100,
        "<think><think><think>7</think></think></think><answer>7</answer>",
        "<answer><answer>7</answer>8</answer>",
        "####" * 2400,
        "#### 7 " * 1400,
        "The answer is 7 " * 600,
        "answer: 7, " * 900,
        "\\boxed{7}" * 1100,
        "<answer>7</answer>" * 500,
        "<think>a</think>7 " * 500,
        "answer is answer is answer is " * 300,
        "The answer is " + "1 or " * 1900 + "2",
        "\\boxed{1}" * 1000,
        "".join(f"\\boxed{{{i}}}" for i in range(900)),
        "".join(f"<answer>{i}</answer>" for i in range(500)),
        " ".join(str(i) for i in range(2000)),
        "**" * 4999,
        "**1**" * 1999,
        "$" * 9999,
        "\\" * 9999,
        "%" * 9999,
        "1," * 4999,
        "1." * 4999,
        "1/" * 4999,
        "=" * 9999 + "7",
        " " * 9999 + "7",
        "\n" * 9999,
        "\\boxed" + " " * 9990,
        "\\frac" + " " * 9000 + "{1}{2}",
        # unicode digits and look-alikes
        "\u0664\u0662",
        "\u096a\u0968",
        "\uff14\uff12",
        "\U0001d7d2\U0001d7d0",
        "\u2074\u00b2",
        "\u2463\u2461",
        "4\u200b2",
        "4\u20622",
        "\u202e24",
        "7\u0301",
        "\ud800\udc00",
        "\ud800",
        "\U0001f600" * 1000,
        "\u2212\u2212\u22127",
        "\\boxed{\u0664\u0662}",
        # NUL bytes and control characters
        "\x00",
        "\x00" * 9999,
        "4\x002",
        "<answer>4\x002</answer>",
        "<think>\x00</think><answer>\x00</answer>",
        "\x1b[2J\x1b[H7 or 8",
        "\r\n" * 4000,
        "\t\v\f" * 3000,
        # almost-numbers
        "-$-5",
        "++5",
        "--5",
        "5-",
        ".",
        ",",
        "1,2,3,4",
        "0x1F",
        "0b101",
        "1_000",
        "inf",
        "nan",
        "NaN",
        "-inf",
        "1e5",
        "\\infty",
        "\\sqrt{-1}",
        "i",
        # things a lenient grader would pay for
        "The answer is 3 or 4 or 5 or 31336 or 31338.",
        "<think></think><answer>7</answer>",
        "<think>x</think><answer>7</answer><answer>8</answer>",
        "<answer>7</answer>" * 100,
        # the gold with a glued continuation: a grader that cuts numbers short pays for these
        "\\boxed{31337.5km}",
        "<answer>31337.5kg</answer>",
        "\\boxed{31,337.5km}",
        "#### 31337.0e3",
        "31337.31337.1",
        "The answer is 31,337km.",
        "The answer is 31337x",
        "x = 31337_1",
        "The answer is 31337 (or 31337.5km).",
        "The answer is 31337. Or maybe 31337.5km.",
    ]
    return corpus


ODD_TYPES: list[object] = [
    None,
    7,
    7.0,
    b"31337",
    bytearray(b"7"),
    [],
    [{}],
    [{"content": None}],
    [{"content": 31337}],
    {"content": ["31337"]},
    [{"role": "assistant", "content": [{"type": "image"}]}],
    object(),
    float("nan"),
]


@pytest.fixture
def call_with_hang_check():
    """Run ``fn(*args)`` in a worker thread; fail if it has not returned after HANG_SECONDS."""
    pool = ThreadPoolExecutor(max_workers=1)

    def call(fn, *args):
        future = pool.submit(fn, *args)
        try:
            return future.result(timeout=HANG_SECONDS)
        except FutureTimeout:
            pytest.fail(f"{fn.__name__} did not return within {HANG_SECONDS} s: a hang")

    yield call
    pool.shutdown(wait=False, cancel_futures=True)


def check_rewards(call, completion) -> None:
    """Every reward function returns one float per completion, and nothing escapes."""
    accuracy = call(accuracy_reward, [completion], [GOLD])
    assert accuracy == [0.0]
    fmt = call(format_reward, [completion])
    assert len(fmt) == 1 and fmt[0] in (0.0, 1.0)
    combined = call(combined_reward, [completion], [GOLD])
    assert len(combined) == 1 and 0.0 <= combined[0] <= 1.2
    if isinstance(completion, str):
        assert call(extract_answer, completion) != GOLD
        call(parse_number, completion)


def test_corpus_is_large(tmp_path):
    corpus = injection_corpus(str(tmp_path / "MARKER")) + nasty_corpus() + ODD_TYPES
    assert len(corpus) >= 100
    assert sum(isinstance(c, str) and len(c) > MAX_COMPLETION_CHARS for c in corpus) >= 5


def test_no_code_runs(tmp_path, monkeypatch, call_with_hang_check):
    """If anything evaluated model text, a MARKER file would appear (absolute or relative)."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "MARKER"
    corpus = injection_corpus(str(marker)) + injection_corpus("MARKER")
    for completion in corpus:
        check_rewards(call_with_hang_check, completion)
    assert not marker.exists()
    assert list(tmp_path.iterdir()) == []


def test_nasty_inputs_never_raise_or_hang(call_with_hang_check):
    for completion in nasty_corpus() + ODD_TYPES:
        check_rewards(call_with_hang_check, completion)


def test_a_whole_batch_of_nasty_inputs(call_with_hang_check):
    """One TRL-sized batch mixing good and nasty completions: the good ones still score."""
    nasty = [c for c in nasty_corpus() if isinstance(c, str)][:60]
    good = "<think>31000 + 337</think><answer>31,337</answer>"
    batch = [good, *nasty, good]
    scores = call_with_hang_check(accuracy_reward, batch, [GOLD] * len(batch))
    assert scores[0] == scores[-1] == 1.0
    assert scores[1:-1] == [0.0] * len(nasty)
    combined = call_with_hang_check(combined_reward, batch, [GOLD] * len(batch))
    assert combined[0] == pytest.approx(1.2)


def test_long_completions_score_zero_even_when_right():
    """The documented length cap: longer than MAX_COMPLETION_CHARS is not read at all."""
    padded = "x" * MAX_COMPLETION_CHARS + " The answer is 31337."
    assert accuracy_reward([padded], [GOLD]) == [0.0]
    fits = "x" * (MAX_COMPLETION_CHARS - 40) + " The answer is 31337."
    assert accuracy_reward([fits], [GOLD]) == [1.0]


FRAGMENTS = [
    "\\boxed{",
    "{",
    "}",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "####",
    "The answer is ",
    "answer: ",
    "**",
    "\\frac{",
    "\\dfrac",
    "\\frac12",
    "\\$",
    "$",
    "%",
    "\\%",
    "-",
    "\u2212",
    "+",
    "/",
    "*",
    "^",
    "=",
    ",",
    ".",
    " ",
    "\n",
    "\x00",
    "0",
    "1",
    "7",
    "42",
    "999",
    "1,000",
    "0.5",
    "\u0664",
    "\uff14",
    "x",
    "or",
    "\\sqrt{",
    "\\text{",
    "e",
]


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=40))
@example(parts=["-", "7"])  # answers whose text and value could disagree, always tried
@example(parts=["The answer is ", "\u2212", "\\$", "1,000", "%"])
@example(parts=["\\boxed{", "\\frac{", "1", "}", "{", "42", "}", "}"])
@example(parts=["<think>", "7", "</think>", "<answer>", "\\frac12", "</answer>"])
def test_fuzzed_markup_never_raises_without_the_safety_net(parts):
    """The extractor itself (not just the try/except around it) handles any mix of markup."""
    text = "".join(parts)
    answer = extract_answer(text)
    value = extract_value(text)
    # the answer as written and its value agree: the text reads back as the same exact number
    assert (answer is None) == (value is None)
    if answer is not None:
        assert parse_gold(answer) == value and parse_number(answer) == value
    segments = answer_segments(text)
    assert segments is None or all(isinstance(s, str) for part in segments for s in part)
    number = parse_number(text)
    assert number is None or isinstance(number, Fraction)
    assert is_r1_format(text) is r1_format_by_regex(text)


_R1_RE = re.compile(r"\s*<think>(.*)</think>\s*<answer>(.*)</answer>\s*", re.DOTALL)


def r1_format_by_regex(text: str) -> bool:
    """An independent reading of the strict R1 format: one regex, each tag exactly once, both
    blocks non-empty after stripping whitespace."""
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    match = _R1_RE.fullmatch(text)
    return (
        match is not None
        and all(text.count(tag) == 1 for tag in tags)
        and all(group.strip() for group in match.groups())
    )


# Near misses of <think>...</think><answer>...</answer>: each slot's first entry is right, the
# others are its mistakes (a missing, swapped, doubled or upper-case tag, an empty block, text
# between or around the blocks)
R1_SLOTS = [
    ["", " ", "\n", "x"],
    ["<think>", "", "<answer>", "<think><think>", "<THINK>"],
    ["a", "", " ", "\n", "</think>", "1"],
    ["</think>", "", "</answer>"],
    ["", " \n", "x"],
    ["<answer>", "", "<think>"],
    ["42", "", " ", "</answer>", "<answer>"],
    ["</answer>", "", "</think>"],
    ["", "\n", "x", "<answer>"],
]


def r1_near_misses() -> list[str]:
    """The right form with every choice of at most two slots changed (one of each mistake)."""
    texts = []
    for changed in itertools.chain.from_iterable(
        itertools.combinations(range(len(R1_SLOTS)), k) for k in (0, 1, 2)
    ):
        choices = [slot[1:] if i in changed else slot[:1] for i, slot in enumerate(R1_SLOTS)]
        texts += ["".join(parts) for parts in itertools.product(*choices)]
    return texts


def test_r1_format_agrees_with_a_regex_on_near_misses():
    texts = r1_near_misses()
    verdicts = [is_r1_format(text) for text in texts]
    assert verdicts == [r1_format_by_regex(text) for text in texts]
    assert sum(verdicts) >= 10 and verdicts.count(False) >= 300  # both answers, many times


def test_the_r1_oracle_by_hand():
    assert is_r1_format("<think>a</think><answer>1</answer>") is True
    assert r1_format_by_regex("<think>a</think><answer>1</answer>") is True
    assert r1_format_by_regex(" <think>a</think>\n<answer>1</answer>\n") is True
    for bad in (
        "<think> </think><answer>1</answer>",
        "<think>a</think>x<answer>1</answer>",
        "<think>a</think><answer>1</answer><answer>1</answer>",
        "<answer>1</answer>",
    ):
        assert r1_format_by_regex(bad) is False and is_r1_format(bad) is False, bad
