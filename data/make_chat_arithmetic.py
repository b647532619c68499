"""Write notebook 11's task: small sums and differences asked as questions, for a chat model.

Run from the repository root (the output is the same on every run, seed 0):

    python data/make_chat_arithmetic.py            # or: --out DIR

Every problem of three kinds, 252 in all, each asked as ``What is 7 + 5?``:

- ``a + b`` with a and b in 1..9 (81 problems, counting ``a + b`` and ``b + a`` apart);
- ``a + b`` with a in 10..19 and b in 1..9 (90);
- ``a - b`` with a in 10..18 and b in 1..9 (81; every result is positive).

It writes ``chat_arithmetic_{train,validation,test}.jsonl`` (155 / 37 / 60 rows, each kind in
about the same shares: a + b and b + a move together), ``{"prompt": "What is 7 + 5?", "answer": "12"}``. ``a + b`` and ``b + a`` are one
problem (``grpo_minimal.data.problem_key``) and go to the same split, so no problem is in two.
The test split is for the reported result alone; choices (prompt, temperature, learning rate,
steps) are made on train and validation.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from grpo_minimal.data import problem_key  # a + b and b + a are one problem

SEED = 0
HERE = Path(__file__).resolve().parent
SHARES = {"validation": 1 / 7, "test": 5 / 21}  # of each kind; the rest is train
KINDS = {
    "add_small": [(a, "+", b) for a in range(1, 10) for b in range(1, 10)],
    "add_teens": [(a, "+", b) for a in range(10, 20) for b in range(1, 10)],
    "subtract": [(a, "-", b) for a in range(10, 19) for b in range(1, 10)],
}


def row(a: int, op: str, b: int) -> dict[str, str]:
    return {"prompt": f"What is {a} {op} {b}?", "answer": str(a + b if op == "+" else a - b)}


def make_splits(seed: int = SEED) -> dict[str, list[dict[str, str]]]:
    """The three splits: each kind's problems are grouped by ``problem_key`` (a + b with b + a),
    shuffled, and dealt to test, validation and train in that order."""
    rng = random.Random(seed)
    splits: dict[str, list[dict[str, str]]] = {"train": [], "validation": [], "test": []}
    for problems in KINDS.values():
        groups: dict[tuple, list[dict[str, str]]] = {}
        for a, op, b in problems:
            r = row(a, op, b)
            groups.setdefault(problem_key(r["prompt"]), []).append(r)
        keys = sorted(groups)
        rng.shuffle(keys)
        n = len(problems)
        wanted = {split: round(share * n) for split, share in SHARES.items()}
        for key in keys:
            split = next((s for s in ("test", "validation") if wanted[s] > 0), "train")
            wanted[split] = wanted.get(split, 0) - len(groups[key])
            splits[split] += groups[key]
    for rows in splits.values():
        rng.shuffle(rows)
    return splits


def write(out: Path) -> dict[str, int]:
    out.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for split, rows in make_splits().items():
        path = out / f"chat_arithmetic_{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        sizes[path.name] = len(rows)
    return sizes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="folder to write the files in")
    print(write(parser.parse_args().out))
