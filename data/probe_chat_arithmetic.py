"""Probe SmolLM2-135M-Instruct before any training: on which kinds of problem, with which prompt
and at which temperature are its groups of samples mixed (some right, some wrong)? GRPO learns
only from such groups (notebook 01). This is the probe behind notebook 11's task
(``data/README.md``, "Notebook 11's task").

Run from the repository root after ``grpo-minimal fetch smollm2-135m`` (seed 0, 2 threads):

    python data/probe_chat_arithmetic.py            # or: --out FILE --problems N --samples G

It writes ``chat_arithmetic_probe.json`` (notebook 11 reads it) and prints the table that
``data/README.md`` shows.

**Problems**: ``--problems`` (16) of each kind, drawn with seed 0. The task's three kinds
(``make_chat_arithmetic.py``) are drawn from its **train split only**, so no validation or test
problem is probed. Three kinds outside the task are made here: one-digit products
(``What is 7 * 5?``), two-digit sums (both in 10..99) and one-step word problems
(``Sam has 7 apples and buys 5 more. How many apples does Sam have now?``).

**Prompts**: ``alone`` (the chat template around the question, nothing added), ``final`` (the
course's ``final`` template: " Give only the final answer in \\boxed{}.") and ``boxed`` (the
course's ``boxed`` template: reason step by step, then ``\\boxed{}``), each through the model's
chat template with its default system prompt, as ``lm_model.format_prompt`` renders them.

**Measured** for each (kind, prompt): one greedy completion per problem, and ``--samples`` (4)
samples per problem at each temperature, sampled as training samples them
(``completions.sample_completions``: top-p 1, no top-k, the model's own sampling settings off),
all with at most 32 new tokens (training's ``max_completion_length``). Each cell reports:
greedy accuracy; sampled accuracy; the share of problems whose samples are mixed; the share of
completions cut at 32 tokens before their end-of-turn token. Answers are scored by
``rewards.accuracy_reward`` (the training reward). Grid (the committed run took 1,181 s on 2 cores
that other jobs shared): every prompt at temperature 0.7 on the task's kinds; ``final`` at 0.7 and 1.0 on every
kind. Training samples 8 per problem, not 4: a group of 8 is mixed at least as often as a group of 4.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from grpo_minimal.completions import sample_completions, truncated_fraction
from grpo_minimal.course.stats import wilson_interval
from grpo_minimal.data import load_chat_arithmetic
from grpo_minimal.lm_model import eos_token_ids, format_prompt, load_model
from grpo_minimal.rewards import accuracy_reward

HERE = Path(__file__).resolve().parent
MODEL, SEED, MAX_NEW_TOKENS = "smollm2-135m", 0, 32
TASK_KINDS = ("add_small", "add_teens", "subtract")
OTHER_KINDS = ("times", "add_two_digit", "word_problem")
PROMPTS = ("alone", "final", "boxed")
KIND_NAMES = {
    "add_small": "a + b, one digit each (task)",
    "add_teens": "a + b, a in 10..19, b one digit (task)",
    "subtract": "a - b, a in 10..18, b one digit (task)",
    "times": "a * b, one digit each",
    "add_two_digit": "a + b, two digits each",
    "word_problem": "one-step word problem (apples)",
}


def kind_of(prompt: str) -> str:
    """The task kind of a ``chat_arithmetic`` prompt (``What is a + b?`` / ``What is a - b?``)."""
    a, op, b = prompt.removeprefix("What is ").removesuffix("?").split()
    if op == "-":
        return "subtract"
    return "add_teens" if max(int(a), int(b)) >= 10 else "add_small"


def problems(n: int, seed: int = SEED) -> dict[str, list[dict]]:
    """``n`` problems of each kind: the task's kinds from the train split, the others made here."""
    rng = random.Random(seed)
    train = load_chat_arithmetic("train")
    out = {
        kind: rng.sample([r for r in train if kind_of(r["prompt"]) == kind], n)
        for kind in TASK_KINDS
    }
    pairs = [(rng.randint(2, 9), rng.randint(2, 9)) for _ in range(n)]
    out["times"] = [{"prompt": f"What is {a} * {b}?", "answer": str(a * b)} for a, b in pairs]
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(n)]
    out["add_two_digit"] = [
        {"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in pairs
    ]
    pairs = [(rng.randint(2, 20), rng.randint(2, 9)) for _ in range(n)]
    out["word_problem"] = [
        {
            "prompt": f"Sam has {a} apples and buys {b} more. How many apples does Sam have now?",
            "answer": str(a + b),
        }
        for a, b in pairs
    ]
    return out


def render(question: str, tokenizer, prompt: str) -> str:
    if prompt == "alone":
        messages = [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return format_prompt(question, tokenizer, prompt)


def measure(model, tokenizer, rows, prompt, temperature, samples, seed) -> dict:
    """Greedy (``temperature`` None) or ``samples`` samples per row: accuracy, mixed groups, cut."""
    torch.manual_seed(seed)
    texts = [render(r["prompt"], tokenizer, prompt) for r in rows]
    G = 1 if temperature is None else samples
    done = sample_completions(
        model,
        tokenizer,
        rows,
        texts,
        num_generations=G,
        max_new_tokens=MAX_NEW_TOKENS,
        temperature=temperature or 1.0,
        do_sample=temperature is not None,
        eos_ids=eos_token_ids(model, tokenizer),
    )
    right = accuracy_reward(done.completions, [r["answer"] for r in done.rows])
    per_problem = [int(sum(right[i : i + G])) for i in range(0, len(right), G)]
    cell = {
        "accuracy": round(sum(right) / len(right), 4),
        "cut": round(truncated_fraction(done.completion_ids, eos_token_ids(model, tokenizer)), 4),
        "right": per_problem,
        "example": done.completions[0],
    }
    if G > 1:
        mixed = [float(0 < k < G) for k in per_problem]
        cell["mixed_groups"] = round(sum(mixed) / len(mixed), 4)
        # Wilson's interval: a bootstrap of 16 yes/no outcomes collapses to a point at 0 of 16
        cell["mixed_interval"] = [
            round(x, 4) for x in wilson_interval(int(sum(mixed)), len(mixed))[1:]
        ]
    return cell


def bootstrap(a, b=None, paired=True, resamples=10_000, seed=SEED) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``a`` (or of ``a - b``) and its 95% percentile bootstrap
    interval over problems; ``paired``: ``a`` and ``b`` are the same problems, resampled together;
    otherwise each list is resampled on its own (a difference of two groups of problems)."""
    rng = np.random.default_rng(seed)
    a = np.asarray(a, dtype=float)
    if b is None:
        boot = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1)
        return float(a.mean()), *np.quantile(boot, [0.025, 0.975]).tolist()
    b = np.asarray(b, dtype=float)
    if paired:
        return bootstrap(a - b, resamples=resamples, seed=seed)
    boot = a[rng.integers(0, len(a), (resamples, len(a)))].mean(axis=1) - b[
        rng.integers(0, len(b), (resamples, len(b)))
    ].mean(axis=1)
    return float(a.mean() - b.mean()), *np.quantile(boot, [0.025, 0.975]).tolist()


def comparisons(rows: list[dict], samples: int) -> list[dict]:
    """The differences the choice rests on, each with its 95% interval over problems: the
    ``final`` prompt against the others and temperature 0.7 against 1.0 on the task's problems
    (the same problems: paired), and the task's kinds against each other kind (unpaired)."""
    cells = {(r["kind"], r["prompt"], r["temperature"]): r for r in rows}

    def per_problem(kinds, prompt, t, what):
        out = []
        for kind in kinds:
            for k in cells[(kind, prompt, t)]["right"]:
                out.append(float(0 < k < samples) if what == "mixed_groups" else k / samples)
        return out

    out = []
    for what in ("mixed_groups", "sampled_accuracy"):
        for label, x, y in [
            ("final - boxed, T 0.7", ("final", 0.7), ("boxed", 0.7)),
            ("final - alone, T 0.7", ("final", 0.7), ("alone", 0.7)),
            ("final T 0.7 - final T 1.0", ("final", 0.7), ("final", 1.0)),
        ]:
            a, b = per_problem(TASK_KINDS, *x, what), per_problem(TASK_KINDS, *y, what)
            mean, low, high = bootstrap(a, b, paired=True)
            out.append(
                {
                    "measure": what,
                    "difference": f"{label}, the task's kinds",
                    "problems": len(a),
                    "mean": mean,
                    "low": low,
                    "high": high,
                }
            )
        task = per_problem(TASK_KINDS, "final", 0.7, what)
        for other in OTHER_KINDS:
            b = per_problem([other], "final", 0.7, what)
            mean, low, high = bootstrap(task, b, paired=False)
            out.append(
                {
                    "measure": what,
                    "difference": f"the task's kinds - {other}, final, T 0.7",
                    "problems": [len(task), len(b)],
                    "mean": mean,
                    "low": low,
                    "high": high,
                }
            )
    for r in out:
        r.update({k: round(r[k], 4) for k in ("mean", "low", "high")})
        r["resolved"] = not (r["low"] <= 0.0 <= r["high"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "chat_arithmetic_probe.json")
    parser.add_argument("--problems", type=int, default=16, help="problems of each kind")
    parser.add_argument("--samples", type=int, default=4, help="samples per problem")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model, tokenizer = load_model(MODEL, torch.device("cpu"))
    drawn = problems(args.problems)
    grid = [(k, p, t) for k in TASK_KINDS for p in PROMPTS for t in (None, 0.7)]
    grid += [(k, "final", 1.0) for k in TASK_KINDS]
    grid += [(k, "final", t) for k in OTHER_KINDS for t in (None, 0.7, 1.0)]
    rows = []
    for i, (kind, prompt, temperature) in enumerate(grid):
        cell = measure(model, tokenizer, drawn[kind], prompt, temperature, args.samples, SEED + i)
        rows.append({"kind": kind, "prompt": prompt, "temperature": temperature, **cell})
        print(
            f"{kind:14s} {prompt:6s} {'greedy' if temperature is None else temperature!s:6s} "
            f"{json.dumps(cell)[:150]}",
            flush=True,
        )
    result = {
        "script": "data/probe_chat_arithmetic.py",
        "model": MODEL,
        "seed": SEED,
        "problems_per_kind": args.problems,
        "samples": args.samples,
        "max_new_tokens": MAX_NEW_TOKENS,
        "threads": args.threads,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch "
        f"{torch.__version__}, transformers {transformers.__version__}",
        "date": datetime.date.today().isoformat(),
        "wall_s": round(time.perf_counter() - started, 1),
        "kinds": KIND_NAMES,
        "problems": drawn,
        "rows": rows,
        "comparisons": comparisons(rows, args.samples),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(table(result))
    for c in result["comparisons"]:
        print(
            f"{c['measure']:16s} {c['difference']:44s} {c['mean']:+.2f} [{c['low']:+.2f}, "
            f"{c['high']:+.2f}]{'' if c['resolved'] else ' not resolved'}"
        )


def table(result: dict) -> str:
    """The Markdown table of ``data/README.md``: greedy accuracy in its own column, then per
    temperature: sampled accuracy / mixed groups / cut at the token limit."""
    cells = {(r["kind"], r["prompt"], r["temperature"]): r for r in result["rows"]}

    def sampled(kind, prompt, t):
        r = cells.get((kind, prompt, t))
        return f"{r['accuracy']:.2f} / {r['mixed_groups']:.2f} / {r['cut']:.2f}" if r else ""

    lines = [
        "| kind | prompt | greedy accuracy | T 0.7: sampled accuracy / mixed groups / cut "
        "| T 1.0: sampled accuracy / mixed groups / cut |",
        "|---|---|---|---|---|",
    ]
    for kind in (*TASK_KINDS, *OTHER_KINDS):
        for prompt in PROMPTS:
            greedy = cells.get((kind, prompt, None))
            if greedy is None:
                continue
            lines.append(
                f"| {result['kinds'][kind]} | `{prompt}` | {greedy['accuracy']:.2f} | "
                f"{sampled(kind, prompt, 0.7)} | {sampled(kind, prompt, 1.0)} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
