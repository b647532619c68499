"""Write the course's math data: synthetic arithmetic splits and a small GSM8K-format sample.

Run from the repository root (the output is the same on every run, seed 0):

    python data/make_arithmetic.py            # or: --out DIR

It writes, next to this script:

- ``arithmetic_train.jsonl`` (3000 rows) and ``arithmetic_test.jsonl`` (500 rows): two-digit
  addition, ``{"prompt": "23+45=", "answer": "68"}``;
- ``arithmetic_mix_train.jsonl`` (3000) and ``arithmetic_mix_test.jsonl`` (500): a harder mix of
  two-digit addition (40%), two-digit subtraction with negative results allowed (40%) and
  multiplication of a two-digit by a one-digit number (20%);
- ``gsm8k_sample.jsonl``: word problems written for this project in the GSM8K format
  (``question``, and ``answer`` = worked solution ending in ``#### N``), for tests and the CPU path.

No test problem appears in any train split, counting ``a+b`` and ``b+a`` (and ``a*b``, ``b*a``)
as the same problem, so a model cannot pass the test by remembering a swapped train prompt.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from grpo_minimal.data import problem_key  # a+b and b+a are one problem

SEED = 0
HERE = Path(__file__).resolve().parent
TRAIN_SIZE, TEST_SIZE = 3000, 500
MIX_SHARES = {"+": 0.4, "-": 0.4, "*": 0.2}


def all_problems(op: str) -> list[dict[str, str]]:
    """Every problem of one kind, in a fixed order."""
    if op == "*":
        pairs = [(a, b) for a in range(10, 100) for b in range(2, 10)]
    else:
        pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    results = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    return [{"prompt": f"{a}{op}{b}=", "answer": str(results[op](a, b))} for a, b in pairs]


def sample(rng: random.Random, pool: list[dict[str, str]], n: int, taken: set) -> list[dict]:
    """Draw ``n`` problems from ``pool`` whose keys are not in ``taken`` (and mark them taken)."""
    rows = []
    for row in rng.sample(pool, len(pool)):
        key = problem_key(row["prompt"])
        if key not in taken:
            taken.add(key)
            rows.append(row)
            if len(rows) == n:
                return rows
    raise ValueError(f"pool too small: wanted {n}, found {len(rows)}")


def make_splits(seed: int = SEED) -> dict[str, list[dict[str, str]]]:
    """All four arithmetic splits; test problems are drawn first and never reused."""
    rng = random.Random(seed)
    pools = {op: all_problems(op) for op in "+-*"}
    taken: set = set()
    counts = {
        split: {op: round(share * size) for op, share in MIX_SHARES.items()}
        for split, size in (("mix_test", TEST_SIZE), ("mix_train", TRAIN_SIZE))
    }
    splits = {"test": sample(rng, pools["+"], TEST_SIZE, taken)}
    splits["mix_test"] = [
        r for op in "+-*" for r in sample(rng, pools[op], counts["mix_test"][op], taken)
    ]
    test_keys = set(taken)
    # Train splits may share problems with each other, never with a test split.
    splits["train"] = sample(rng, pools["+"], TRAIN_SIZE, set(test_keys))
    mix_taken = set(test_keys)
    splits["mix_train"] = [
        r for op in "+-*" for r in sample(rng, pools[op], counts["mix_train"][op], mix_taken)
    ]
    for name in ("mix_test", "mix_train"):
        rng.shuffle(splits[name])
    return splits


# Word problems written for this project in the GSM8K format. Each step's value is computed
# by Python from the numbers (the string beside it is only what the solution text shows), and
# the gold is the last step's value, so the golds cannot be wrong.
def gsm8k_sample() -> list[dict[str, str]]:
    """A few GSM8K-format problems: integers, thousands separators, a negative and a zero."""
    rows = []

    def add(question: str, *steps: tuple[str, str, int]) -> None:
        lines = [f"{text} {shown} = <<{shown}={value}>>{value}" for text, shown, value in steps]
        lines.append(f"#### {steps[-1][2]:,}")
        rows.append({"question": question, "answer": "\n".join(lines)})

    add(
        "Mia buys 3 packs of pencils with 12 pencils in each pack. How many pencils does she have?",
        ("She has", "3*12", 3 * 12),
    )
    add(
        "A bakery sells 45 loaves in the morning and 27 in the afternoon. How many loaves does it "
        "sell in total?",
        ("In total it sells", "45+27", 45 + 27),
    )
    add(
        "A school orders 24 boxes of paper with 45 reams in each box. How many reams arrive?",
        ("The school gets", "24*45", 24 * 45),
    )
    add(
        "Tom has $50. He spends $18 on a book and $7 on lunch. How much money does he have left?",
        ("He spends", "18+7", 18 + 7),
        ("He has left", "50-25", 50 - 25),
    )
    add(
        "The temperature was 4 degrees at noon and fell by 11 degrees by midnight. What was the "
        "temperature at midnight?",
        ("At midnight it was", "4-11", 4 - 11),
    )
    add(
        "A farmer has 120 eggs and packs them in cartons of 12. How many cartons does he fill?",
        ("He fills", "120/12", 120 // 12),
    )
    add(
        "A train travels 85 miles an hour for 6 hours. How many miles does it travel?",
        ("It travels", "85*6", 85 * 6),
    )
    add(
        "Lena reads 15 pages a day for 4 weeks. How many pages does she read?",
        ("Four weeks is", "4*7", 4 * 7),
        ("She reads", "15*28", 15 * 28),
    )
    add(
        "A concert hall has 48 rows of 52 seats. 1,000 seats are sold. How many seats are empty?",
        ("The hall has", "48*52", 48 * 52),
        ("Empty seats:", "2496-1000", 2496 - 1000),
    )
    add(
        "Sam earns $12 an hour and works 35 hours a week. How much does he earn in 52 weeks?",
        ("Each week he earns", "12*35", 12 * 35),
        ("In 52 weeks he earns", "420*52", 420 * 52),
    )
    add(
        "A tank holds 600 liters. It loses 25 liters a day. How many liters are left after 8 days?",
        ("It loses", "25*8", 25 * 8),
        ("Left:", "600-200", 600 - 200),
    )
    add(
        "A jar holds 7 red, 8 blue and 5 green marbles. What percent of the marbles are green?",
        ("There are", "7+8+5", 7 + 8 + 5),
        ("Green share:", "5*100/20", 5 * 100 // 20),
    )
    add(
        "Ana had 9 stickers and gave away all 9. How many stickers does she have now?",
        ("She has", "9-9", 9 - 9),
    )
    add(
        "A shop had 350 apples, sold 128 on Monday and 95 on Tuesday. How many apples are left?",
        ("It sold", "128+95", 128 + 95),
        ("Left:", "350-223", 350 - 223),
    )
    add(
        "A bike costs $240. It is on sale for 25% off. What is the sale price in dollars?",
        ("The discount is", "240*25/100", 240 * 25 // 100),
        ("The sale price is", "240-60", 240 - 60),
    )
    add(
        "A diver is 30 meters below sea level and swims up 12 meters. At what height relative to "
        "sea level is she now, in meters?",
        ("She is at", "-30+12", -30 + 12),
    )
    add(
        "A library has 8 shelves with 125 books each and buys 3,500 more books. How many books "
        "does it have?",
        ("It had", "8*125", 8 * 125),
        ("Now it has", "1000+3500", 1000 + 3500),
    )
    add(
        "Each of 16 students brings 3 cans of food. The class already had 52 cans. How many cans "
        "are there now?",
        ("Students bring", "16*3", 16 * 3),
        ("Total:", "52+48", 52 + 48),
    )
    add(
        "A recipe needs 3 eggs for 12 cookies. How many eggs are needed for 60 cookies?",
        ("Batches:", "60/12", 60 // 12),
        ("Eggs:", "5*3", 5 * 3),
    )
    add(
        "A company made a profit of $2,500 in May and a loss of $4,000 in June. What is its total "
        "profit in dollars for the two months?",
        ("Total:", "2500-4000", 2500 - 4000),
    )
    return rows


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> None:
    """One JSON object per line, keys in a fixed order, ASCII only."""
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Write every file (next to this script, or to ``--out DIR``) and print what was written."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="output folder (default: data/)")
    out = parser.parse_args(argv).out
    out.mkdir(parents=True, exist_ok=True)
    for split, rows in make_splits().items():
        write_jsonl(out / f"arithmetic_{split}.jsonl", rows)
        print(f"arithmetic_{split}.jsonl: {len(rows)} rows")
    rows = gsm8k_sample()
    write_jsonl(out / "gsm8k_sample.jsonl", rows)
    print(f"gsm8k_sample.jsonl: {len(rows)} rows")


if __name__ == "__main__":
    main()
