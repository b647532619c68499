# %% [raw]
# # ASSIGNMENT CONFIG
# name: 04_reward
# tests:
#   ok_format: false
# export_cell: false
# check_all_cell: true
# run_tests: true

# %% [markdown]
# # Lab 04 · A safe verifiable reward
#
# **Goals** (about 35 minutes). Write the accuracy reward that GRPO trains math on, for a small,
# stated set of answer formats, so that it is **exact** (no float tolerance), **strict** (a hedge
# earns nothing) and **safe** (model output is never run, and no input can crash it or make it
# hang). Then see what GRPO does with a hedge under a lenient grader and under yours.
#
# **Recap** (lesson: [notebook 05](../05_verifiable_math_rewards.ipynb)). A verifiable reward
# reads the final answer out of a completion $o$ and compares it with the gold answer $a^\star$:
#
# $$r_{\text{acc}}(o, a^\star) = \mathbb{1}\big[\operatorname{value}(\operatorname{extract}(o)) = \operatorname{value}(a^\star)\big] \tag{17}$$
#
# $\operatorname{extract}$ returns **one** answer or nothing; $\operatorname{value}$ is an exact
# `fractions.Fraction`, so `"0.5"`, `"1/2"` and `"1,080"` vs `"1080"` need no tolerance. One of
# the course's seed documents leaves both steps undefined (seed 000, lines 428-437; the Korean
# comments say "extract the answer and check it (simplified)" and "extract a number from the
# response"; `extract_number` and `check_answer` appear nowhere else in the seeds):
#
# ```python
# def math_reward(prompt: str, response: str) -> float:
#     """수학 문제 보상 함수 예시"""
#     # 정답 추출 및 검증 (간소화)
#     try:
#         # response에서 숫자 추출
#         answer = extract_number(response)
#         correct = check_answer(prompt, answer)
#         return 1.0 if correct else 0.0
#     except:
#         return 0.0
# ```
#
# Those two lines are where a grader gets hacked: "the first number", "any number equal to the
# gold", `float(x) == float(gold)` or `eval(x)` all look fine on honest answers. GRPO optimises
# whatever the grader pays for (notebook 05, section 5), so here you write them carefully.
#
# **How this lab works.** Each exercise asks for a function with the same name and signature as
# the package's (`grpo_minimal.answers.parse_number`, `grpo_minimal.rewards.accuracy_reward`), so
# you can compare afterwards (not before!). Replace each `...`, run the cell, then the check below
# it. A failed check names the case, the input, the expected value, what you returned and a
# hint. The checks also read your code: `eval`, `exec`, `compile`, `ast.literal_eval`, `sympify`
# or `parse_expr` anywhere in it fails the exercise. From a terminal,
# `grpo-minimal lab check notebooks/labs/04_reward.ipynb` checks the whole notebook.
#
# **Grading** runs the same kinds of case as the checks below, with other values: other numbers
# in each row of the table below (accepted and refused), other hedges, payloads, lengths and odd
# completions. If every check here passes and your functions do not special-case the inputs they
# were shown, they earn full points.
#
# ## The formats of this lab
#
# The package reads more (`\frac{1}{2}`, `<answer>` tags, `####`, `50%`, `$5`, "42 apples",
# think blocks, a last-line fallback); this lab's subset is smaller, and every check stays
# inside it or tests a refusal:
#
# | | accepted | refused (not a number: `None`, reward 0.0) |
# |---|---|---|
# | numbers | `42`, `-7`, `007`, `3.5`, `3.50`, `1,080`, `12,345,678`, `3/4`, `-3/4`, spaces around | `1,08`, `0,500`, `1,2,3`, `1e5`, `1_000`, `nan`, `inf`, `2+2`, `3 or 4`, `1/0`, `--5`, `４２` |
# | where | every `\boxed{...}` (no nested braces) and every "answer is" (any case) up to the end of its sentence | text anywhere else |
# | size | up to `MAX_NUMBER_DIGITS` = 40 digits per number (per side of `a/b`), completions up to `MAX_COMPLETION_CHARS` = 10,000 characters | anything longer: not read |
#
# Digits are ASCII `0-9`; `-` is the only sign; a thousands comma is followed by exactly three
# digits, and the first group has no leading zero. The checks try every example of this table,
# accepted and refused, and others like them.

# %%
import re
from fractions import Fraction

import torch

from grpo_minimal.advantages import group_advantages
from grpo_minimal.answers import MAX_COMPLETION_CHARS, MAX_NUMBER_DIGITS
from grpo_minimal.labs import reward as checks

print(f"MAX_COMPLETION_CHARS = {MAX_COMPLETION_CHARS:,}, MAX_NUMBER_DIGITS = {MAX_NUMBER_DIGITS}")

# %% [markdown]
# ## Exercise 1 · `parse_number`
#
# Return the exact value of a text that is **one number** of the table, as a `Fraction`, and
# `None` for anything else: every refusal of the table, a number with more than
# `MAX_NUMBER_DIGITS` digits, and anything that is not a `str` (`None`, the int `42`). Never raise.
#
# Why so strict: `Fraction` and `int` also accept text that is not in the grammar
# (`Fraction("1e999999999")` computes a billion-digit number, `Fraction("1_000")` is 1000,
# `Fraction("４２")` is 42), and `float` is not exact (`float("0.1")` is not 1/10, and float cannot
# tell $2^{53}$ from $2^{53}+1$). So check the **whole** text with a pattern first
# (`re.fullmatch`), count the digits, and only then build the `Fraction` from the text.
#
# A pattern for the integer part: `[1-9][0-9]{0,2}(?:,[0-9]{3})+` (with commas) or `[0-9]+`
# (without); a number is an optional `-`, then either an integer part with an optional `.digits`,
# or `integer/integer`.

# %% [raw]
# # BEGIN QUESTION
# name: parse_number
# points: 3

# %% [raw]
# # BEGIN SOLUTION


# %%
def parse_number(text: str) -> Fraction | None:
    """Exact value of a text that states one number of the lab's grammar, else None."""
    # BEGIN SOLUTION
    if not isinstance(text, str):
        return None
    integer = r"(?:[1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)"
    match = re.fullmatch(rf"(-?)(?:({integer}(?:\.[0-9]+)?)|({integer})/({integer}))", text.strip())
    if match is None:
        return None
    sign, decimal, numerator, denominator = match.groups()
    parts = [decimal] if decimal is not None else [numerator, denominator]
    parts = [part.replace(",", "") for part in parts]
    if any(sum(ch.isdigit() for ch in part) > MAX_NUMBER_DIGITS for part in parts):
        return None  # checked before Fraction: the cost of exact arithmetic stays bounded
    if decimal is not None:
        value = Fraction(parts[0])
    elif int(parts[1]) == 0:
        return None
    else:
        value = Fraction(int(parts[0]), int(parts[1]))
    return -value if sign else value
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_parse_public(parse_number):
    from grpo_minimal.labs import reward as checks

    checks.check_parse_number(parse_number)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 2
"""  # END TEST CONFIG


def test_parse_hidden(parse_number):
    from grpo_minimal.labs import reward as checks

    checks.check_parse_number(parse_number, seed=GRADER_SEED)  # noqa: F821 (set by lab build)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Try it on a few texts. A right `parse_number` shows `Fraction(1, 2)` for the first three and
# `None` for the rest.

# %%
for text in ["1/2", "0.5", " 0.50 ", "0.5e0", "1,2", "2**-1"]:
    print(f"{text!r:>10} -> {parse_number(text)!r}")

# %% [markdown]
# ## Exercise 2 · `accuracy_reward`
#
# Equation (17) with TRL's calling convention: `completions` (one per sample) and, by keyword,
# every column of the data set, here `answer` (the gold of each completion). Return one float per
# completion: 1.0 when its final answer equals the gold exactly, else 0.0.
#
# 1. **Text.** A completion is a `str`, or TRL's conversational format: a list of
#    `{"role": ..., "content": ...}` messages, of which you score the `content` of the **last**
#    one. Anything else (`None`, a number, an empty list, content that is not a `str`) scores 0.0;
#    a message's `content` can be `None` (a tool call, say).
# 2. **Length.** A text longer than `MAX_COMPLETION_CHARS` scores 0.0 without being read (it
#    bounds the work per completion; no timeout needed).
# 3. **Answer spots.** Every `\boxed{...}` (its content, up to the next `}`) and every
#    "answer is" (any case, as words) with the text after it, up to the end of its sentence (a
#    `.` followed by whitespace or by the end of the text) or of its line.
# 4. **One answer.** Each box must be exactly one number (`parse_number`), else there is no
#    answer. An "answer is" spot that is one number counts; one that is not (`"3 or 4"`,
#    `"not 5"`) means no answer, except when the completion has a box: then it is prose and is
#    skipped (`"The answer is \boxed{42}."` is 42). The counted values must all be equal (else it
#    is a hedge), and at least one must be there.
# 5. **Golds** are texts of the grammar (`"42"`, `"1,080"`, `"3/4"`). A gold `parse_number`
#    cannot read is a bug in the data: raise `ValueError`. So is
#    `len(completions) != len(answer)`.
#
# A completion never raises, whatever it holds: it scores 0.0.

# %% [raw]
# # BEGIN QUESTION
# name: accuracy_reward
# points: 5

# %% [raw]
# # BEGIN SOLUTION


# %%
def accuracy_reward(completions: list, answer: list, **kwargs) -> list[float]:
    """Equation (17): 1.0 when a completion's one final answer equals its gold exactly."""
    # BEGIN SOLUTION
    if len(completions) != len(answer):
        raise ValueError(f"{len(completions)} completions but {len(answer)} gold answers")
    golds = []
    for gold in answer:
        value = parse_number(gold)
        if value is None:
            raise ValueError(f"gold answer {gold!r} is not a number")
        golds.append(value)

    def text_of(completion):
        if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
            completion = completion[-1].get("content")
        return completion if isinstance(completion, str) else None

    def final_answer(text):
        if text is None or len(text) > MAX_COMPLETION_CHARS:
            return None
        boxes = [parse_number(box) for box in re.findall(r"\\boxed\{([^}]*)\}", text)]
        if None in boxes:
            return None
        values = list(boxes)
        for phrase in re.findall(r"\banswer is\b(.*?)(?:\.(?:\s|$)|\n|$)", text, re.IGNORECASE):
            value = parse_number(phrase)
            if value is not None:
                values.append(value)
            elif not boxes:
                return None
        return values[0] if values and len(set(values)) == 1 else None

    return [
        1.0 if final_answer(text_of(c)) == g else 0.0
        for c, g in zip(completions, golds, strict=True)
    ]
    # END SOLUTION


# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_accuracy_public(accuracy_reward):
    from grpo_minimal.labs import reward as checks

    checks.check_accuracy_reward(accuracy_reward)


# %%
""" # BEGIN TEST CONFIG
hidden: true
points: 3
"""  # END TEST CONFIG


def test_accuracy_hidden(accuracy_reward):
    from grpo_minimal.labs import reward as checks

    checks.check_accuracy_reward(accuracy_reward, seed=GRADER_SEED)  # noqa: F821 (set by lab build)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Now attack your grader. Each completion below tries to earn a reward it should not (gold 42):
# a hedge, an expression, Python code, a float look-alike, a huge number. A safe grader gives
# every one 0.0, at once. Add your own attempts.

# %%
attacks = [
    "\\boxed{41} \\boxed{42} \\boxed{43}",
    "The answer is 41 or 42.",
    "\\boxed{6*7}",
    "The answer is __import__('os').system('true').",
    "\\boxed{42.000000000000001e0}",
    "\\boxed{" + "4" * 5000 + "}",
    [{"role": "assistant", "content": None}],
]
scores = accuracy_reward(attacks, ["42"] * len(attacks))
print(scores if scores is not None else "accuracy_reward is not written yet")

# %% [markdown]
# ## Exercise 3 · What GRPO does with a hedge
#
# GRPO only sees rewards through the group advantage of notebook 01:
#
# $$A_i = \frac{r_i - \operatorname{mean}(r)}{\operatorname{std}(r) + \varepsilon} \tag{2}$$
#
# with the sample (Bessel-corrected) std and $\varepsilon = 10^{-4}$ (`group_advantages`). Below
# is one group of four completions for "15 + 27" (gold 42): an honest right answer, an honest
# wrong one and two hedges, scored by the *lenient* grader of notebook 05 ("the gold appears
# somewhere in the text", `checks.lenient_accuracy`, a deliberately bad example).
#
# Compute the advantage of the boxed hedge `checks.GROUP[2]` under the lenient grader
# (`hedge_lenient`) and under an exact grader such as yours (`hedge_strict`), as floats.

# %%
lenient = checks.lenient_accuracy(checks.GROUP, checks.GOLDS)
for completion, reward in zip(checks.GROUP, lenient, strict=True):
    print(f"lenient reward {reward}  {completion!r}")

# %% [raw]
# # BEGIN QUESTION
# name: hedge_advantage
# points: 2

# %% [raw]
# # BEGIN SOLUTION

# %%
hedge_lenient = group_advantages(torch.tensor(lenient), 4)[2].item()  # SOLUTION
strict = accuracy_reward(checks.GROUP, checks.GOLDS)  # SOLUTION
hedge_strict = group_advantages(torch.tensor(strict), 4)[2].item()  # SOLUTION

# %% [raw]
# # END SOLUTION

# %% [raw]
# # BEGIN TESTS


# %%
def test_hedge_answers(hedge_lenient, hedge_strict):
    from grpo_minimal.labs import reward as checks

    checks.check_hedge_question(hedge_lenient, hedge_strict)


# %% [raw]
# # END TESTS

# %% [raw]
# # END QUESTION

# %% [markdown]
# Under the lenient grader the hedge gets the **same** positive advantage as the honest right
# answer (+0.5), so each update raises the probability of hedging as much as that of solving,
# and the one completion pushed down hard is the honest mistake (-1.5). Under the exact grader
# only the right answer goes up (+1.5) and the hedges go down with the wrong answer (-0.5).
#
# **Afterwards.** Read `grpo_minimal/answers.py` and `grpo_minimal/rewards.py` and compare: the
# package reads more formats (`\frac`, nested braces, `<answer>` tags, `####`, words around the
# number, a last-line fallback), refuses a different number after "The answer is 3." (`"Or maybe
# 4."`), skips `<think>` blocks, and scores each completion inside `try`/`except`, so a bug in
# one rule costs one completion 0.0 instead of crashing the training step.
