"""Write the reasoning task's splits (notebook 10): three-digit additions with their column sums.

Run from the repository root (seeded; a second run rewrites the same bytes):

    .venv/bin/python data/make_reasoning.py            # data/reasoning_{train,test}.jsonl
    .venv/bin/python data/make_reasoning.py --fresh 500 --out /tmp/fresh.jsonl --seed 7

Each row is ``{"prompt": "347+285=", "answer": "632", "steps": "7+5=12 4+8+1=13 3+2+1=6"}``:
both numbers in 100..999, ``steps`` the column sums from the units up
(``grpo_minimal.course.reasoning.column_steps``). ``a+b`` and ``b+a`` are one problem, and no problem
is in two splits. ``--fresh N`` writes N more problems that are in neither shipped split (a test
set nothing in the repository has seen: the CLI's bar is measured on one).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing the package
from grpo_minimal.course.reasoning import column_steps, operands  # noqa: E402

SEED = 0
SIZES = {"train": 4000, "test": 500}
LOW, HIGH = 100, 999  # three-digit operands


def row(a: int, b: int) -> dict[str, str]:
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "steps": " ".join(column_steps(a, b))}


def draw(rng: random.Random, n: int, taken: set[str]) -> list[dict[str, str]]:
    """``n`` problems not in ``taken`` (which grows); ``a+b`` and ``b+a`` are one problem."""
    rows = []
    while len(rows) < n:
        a, b = rng.randint(LOW, HIGH), rng.randint(LOW, HIGH)
        key = f"{min(a, b)}+{max(a, b)}="
        if key not in taken:
            taken.add(key)
            rows.append(row(a, b))
    return rows


def write(rows: list[dict[str, str]], path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def splits(seed: int = SEED) -> dict[str, list[dict[str, str]]]:
    rng, taken = random.Random(seed), set()
    return {name: draw(rng, size, taken) for name, size in SIZES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output folder (or file with --fresh); default data/")
    parser.add_argument("--fresh", type=int, default=0, help="write N problems in no split")
    parser.add_argument("--seed", type=int, default=1, help="seed of --fresh (default 1)")
    args = parser.parse_args()
    shipped = splits()
    if args.fresh:
        taken = {
            "{}+{}=".format(*sorted(operands(r["prompt"])))
            for rows in shipped.values()
            for r in rows
        }
        path = Path(args.out or "reasoning_fresh.jsonl")
        write(draw(random.Random(args.seed), args.fresh, taken), path)
        print(f"{path}: {args.fresh} problems in no shipped split")
        return
    out = Path(args.out or HERE)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in shipped.items():
        write(rows, out / f"reasoning_{name}.jsonl")
        print(f"{out / f'reasoning_{name}.jsonl'}: {len(rows)} problems")


if __name__ == "__main__":
    main()
