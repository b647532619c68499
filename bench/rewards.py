"""Benchmark the math rewards: completions per second and the worst single call.

    python bench/rewards.py [--repeats 3]

The mix is normal completions (R1-formatted GSM8K-style reasoning, bare arithmetic answers,
boxed answers, hedges) and adversarial ones (code injection, power towers, 10^4-digit numbers,
megabyte strings, deep nesting, unicode digits, NUL bytes). Each completion is scored alone, one
call each, to find the worst single call (the bar: under 50 ms); then the whole mix is scored in
batches of 64 (TRL-sized) for throughput. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import platform
import random
import time

from grpo_minimal.rewards import accuracy_reward, combined_reward, format_reward

MB = 1_048_576


def normal_completions(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """(completion, gold) pairs that look like real model output."""
    rows = []
    for _ in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        gold = a + b
        guess = gold if rng.random() < 0.6 else gold + rng.choice([-10, -1, 1, 10])
        steps = " ".join(
            f"Step {i}: {rng.randint(1, 999)} + {rng.randint(1, 999)} is some number."
            for i in range(rng.randint(2, 40))
        )
        kind = rng.randrange(6)
        if kind == 0:
            text = f"{guess}"
        elif kind == 1:
            text = f"{a}+{b}={guess}"
        elif kind == 2:
            text = f"<think>{steps}</think>\n<answer>{guess}</answer>"
        elif kind == 3:
            text = f"{steps}\nSo the final answer is $\\boxed{{{guess:,}}}$."
        elif kind == 4:
            text = f"{steps}\n#### {guess}"
        else:
            text = f"{steps}\nThe answer is {guess} or {guess + 1}."
        rows.append((text, str(gold)))
    return rows


def adversarial_completions() -> list[tuple[str, str]]:
    """(completion, gold) pairs built to break graders."""
    touch = "__import__('pathlib').Path('MARKER').touch()"
    texts = [
        touch,
        f"\\boxed{{{touch}}}",
        f"<think>x</think><answer>{touch}</answer>",
        "9**9**9**9",
        "\\boxed{9^{9^{9^{9}}}}",
        "1e999999999",
        "9" * 1_000_000,
        "9" * 9000,
        "\\boxed{" + "9" * 9000 + "}",
        "\\frac{" + "9" * 4000 + "}{" + "9" * 4000 + "}",
        "1," + "000," * 2400 + "000",
        "a" * MB,
        "7 " * 4999,
        " ".join(str(i) for i in range(2000)),
        "\\boxed{" * 1000 + "7" + "}" * 1000,
        "{" * 9000 + "7",
        "<think>" * 1400,
        "</think>" * 1200,
        "<answer>" * 1200,
        "####" * 2400,
        "#### 7 " * 1400,
        "The answer is 7 " * 600,
        "answer: 7, " * 900,
        "\\boxed{7}" * 1100,
        "<answer>7</answer>" * 500,
        "<think>a</think>7 " * 500,
        "answer is " * 999,
        "The answer is " + "1 or " * 1900 + "2",
        "".join(f"\\boxed{{{i}}}" for i in range(900)),
        "".join(f"<answer>{i}</answer>" for i in range(500)),
        "**1**" * 1999,
        "1/" * 4999,
        "1." * 4999,
        "\\frac{1}{2}" * 900,
        "\\frac" + " " * 9000 + "{1}{2}",
        " " * 9999 + "7",
        "\x00" * 9999,
        "\uff14\uff12",
        "\U0001f600" * 2000,
    ]
    return [(t, "7") for t in texts]


def worst_single_call(fn, pairs, repeats: int) -> tuple[float, float, str]:
    """The slowest single call (ms) over all completions: the completion whose best of
    ``repeats`` timings is largest (the input's own cost, with machine noise filtered out), and
    the largest raw timing of any call (noise included), with the slowest input."""
    worst, worst_raw, worst_text = 0.0, 0.0, ""
    for text, gold in pairs:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            if fn is format_reward:
                fn([text])
            else:
                fn([text], [gold])
            elapsed = time.perf_counter() - start
            best = min(best, elapsed)
            worst_raw = max(worst_raw, elapsed)
        if best > worst:
            worst, worst_text = best, text
    return worst * 1000, worst_raw * 1000, worst_text


def throughput(fn, pairs, batch: int = 64) -> float:
    """Completions per second, scoring the mix in batches."""
    start = time.perf_counter()
    for i in range(0, len(pairs), batch):
        texts = [t for t, _ in pairs[i : i + batch]]
        golds = [g for _, g in pairs[i : i + batch]]
        if fn is format_reward:
            fn(texts)
        else:
            fn(texts, golds)
    return len(pairs) / (time.perf_counter() - start)


def main() -> None:
    """Print a table: completions/s on the normal set, the mix, and the worst single call."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timings per single call (best)")
    parser.add_argument("--normal", type=int, default=2000, help="normal completions")
    args = parser.parse_args()

    rng = random.Random(0)
    normal = normal_completions(rng, args.normal)
    adversarial = adversarial_completions()
    mix = normal + adversarial * 10
    rng.shuffle(mix)
    print(
        f"python {platform.python_version()} on {platform.machine()}, "
        f"{len(normal)} normal + {len(adversarial)} adversarial completions "
        f"(the mix repeats the adversarial ones 10x: {len(mix)} in all)"
    )
    header = (
        f"{'reward':<16}{'normal/s':>12}{'mix/s':>12}{'worst call ms':>15}{'raw max ms':>12}"
        "  worst input"
    )
    print(header)
    print("-" * len(header))
    for fn in (accuracy_reward, format_reward, combined_reward):
        normal_rate = throughput(fn, normal)
        mix_rate = throughput(fn, mix)
        worst_ms, raw_ms, worst_text = worst_single_call(fn, normal + adversarial, args.repeats)
        shown = repr(worst_text[:30]) + ("..." if len(worst_text) > 30 else "")
        print(
            f"{fn.__name__:<16}{normal_rate:>12,.0f}{mix_rate:>12,.0f}{worst_ms:>15.2f}"
            f"{raw_ms:>12.2f}  "
            f"{shown} ({len(worst_text):,} chars)"
        )


if __name__ == "__main__":
    main()
