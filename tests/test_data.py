"""The shipped math data and its loaders: splits, disjointness, GSM8K format, JSONL errors."""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from grpo_minimal.data import (
    ARITHMETIC_SPLITS,
    DATA_DIR,
    check_held_out,
    count_overlap,
    gsm8k_final_answer,
    gsm8k_row,
    load_arithmetic,
    load_chat_arithmetic,
    load_gsm8k,
    load_gsm8k_sample,
    load_jsonl,
    load_math_dataset,
    load_train_eval_rows,
    problem_key,
    read_jsonl,
)
from grpo_minimal.rewards import accuracy_reward, parse_gold


def make_module() -> dict:
    """The globals of data/make_arithmetic.py (a script, not a package module)."""
    return runpy.run_path(str(DATA_DIR / "make_arithmetic.py"), run_name="make_arithmetic")


SIZES = {"train": 3000, "test": 500, "mix_train": 3000, "mix_test": 500}


@pytest.mark.parametrize("split", ARITHMETIC_SPLITS)
def test_arithmetic_splits(split):
    rows = load_arithmetic(split)
    assert len(rows) == SIZES[split]
    for row in rows:
        assert set(row) == {"prompt", "answer"}
        assert row["prompt"].endswith("=") and len(row["prompt"]) <= 7
        assert parse_gold(row["answer"]) == int(row["answer"])
    assert len({row["prompt"] for row in rows}) == len(rows), "duplicate prompts"


def test_arithmetic_answers_are_right():
    """Recompute every answer from its prompt (by hand, no evaluator)."""
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    for split in ARITHMETIC_SPLITS:
        for row in load_arithmetic(split):
            body = row["prompt"][:-1]
            op = next(ch for ch in "+-*" if ch in body[1:])
            left, right = body.split(op, 1)
            assert ops[op](int(left), int(right)) == int(row["answer"]), row


def test_two_digit_addition_and_the_mix():
    assert all("+" in row["prompt"] for row in load_arithmetic("train"))
    ops = {op: sum(op in r["prompt"] for r in load_arithmetic("mix_train")) for op in "+-*"}
    assert ops == {"+": 1200, "-": 1200, "*": 600}
    assert any(int(r["answer"]) < 0 for r in load_arithmetic("mix_test"))


def test_no_test_problem_is_in_any_train_split():
    """Counting a+b and b+a as one problem, across both train splits."""
    key = make_module()["problem_key"]
    train = {key(r["prompt"]) for s in ("train", "mix_train") for r in load_arithmetic(s)}
    for split in ("test", "mix_test"):
        test = {key(r["prompt"]) for r in load_arithmetic(split)}
        assert not test & train, split
    assert not {r["prompt"] for r in load_arithmetic("test")} & {
        r["prompt"] for r in load_arithmetic("train")
    }


def test_script_reproduces_the_shipped_files(tmp_path):
    """Byte for byte: the committed data is what the seeded script writes."""
    script = DATA_DIR / "make_arithmetic.py"
    subprocess.run(
        [sys.executable, str(script), "--out", str(tmp_path)], check=True, capture_output=True
    )
    written = sorted(p.name for p in tmp_path.iterdir())
    expected = [f"arithmetic_{split}.jsonl" for split in ARITHMETIC_SPLITS] + ["gsm8k_sample.jsonl"]
    assert written == sorted(expected)
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name


def test_gsm8k_sample_format():
    raw = read_jsonl(DATA_DIR / "gsm8k_sample.jsonl")
    assert len(raw) >= 20
    for example in raw:
        assert set(example) == {"question", "answer"}
        assert example["answer"].splitlines()[-1].startswith("#### ")
    rows = load_gsm8k_sample()
    golds = [row["answer"] for row in rows]
    assert "1080" in golds and any(g.startswith("-") for g in golds)
    # the full GSM8K solution, as a completion, is correct against the mapped gold
    assert accuracy_reward([e["answer"] for e in raw], golds) == [1.0] * len(raw)


def test_gsm8k_mapping():
    example = {"question": "How many?", "answer": "3*360=<<3*360=1080>>1080\n#### 1,080"}
    assert gsm8k_row(example) == {"prompt": "How many?", "answer": "1080"}
    assert gsm8k_final_answer("#### -5") == "-5"
    with pytest.raises(ValueError, match="####"):
        gsm8k_final_answer("no marker")
    with pytest.raises(ValueError, match="question"):
        gsm8k_row({"answer": "#### 1"})


def test_read_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "1+1=", "answer": "2"}\n\n{"prompt": "2+2=", "answer": \n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: not valid JSON"):
        read_jsonl(path)
    path.write_text('{"prompt": "1+1=", "answer": "2"}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: expected a JSON object"):
        read_jsonl(path)


def test_load_jsonl_checks_fields(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "answer": 2}) + "\n")
    with pytest.raises(ValueError, match="row 0 needs a string field 'answer'"):
        load_jsonl(path)
    path.write_text(json.dumps({"prompt": "1+1=", "answer": "2", "extra": 1}) + "\n")
    assert load_jsonl(path) == [{"prompt": "1+1=", "answer": "2"}]
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "q", "answer": "x\n#### 7"}) + "\n")
    assert load_math_dataset(str(gsm)) == [{"prompt": "q", "answer": "7"}]


def test_load_math_dataset_names():
    assert load_math_dataset("arithmetic", "test") == load_arithmetic("test")
    assert load_math_dataset("arithmetic_mix", "train") == load_arithmetic("mix_train")
    assert load_math_dataset("gsm8k_sample") == load_gsm8k_sample()
    with pytest.raises(ValueError, match="dataset must be"):
        load_math_dataset("mnist")
    with pytest.raises(ValueError, match="split must be one of"):
        load_arithmetic("validation")
    with pytest.raises(ValueError, match="dataset: no file missing.jsonl"):
        load_math_dataset(str(Path("missing.jsonl")))


def test_load_gsm8k_uses_datasets_lazily(monkeypatch):
    """The GPU path, without the network: a fake `datasets` module stands in for the Hub."""
    calls = []

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, config, split):
            calls.append((name, config, split))
            return [{"question": "q", "answer": "work\n#### 1,234"}]

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    assert load_gsm8k("test") == [{"prompt": "q", "answer": "1234"}]
    assert calls == [("openai/gsm8k", "main", "test")]
    with pytest.raises(ValueError, match="'train' or 'test'"):
        load_gsm8k("validation")


def test_load_gsm8k_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"needs the \[gpu\] extra \(missing: datasets\)"):
        load_gsm8k("train")


def test_the_held_out_check_compares_problems_not_strings(tmp_path):
    """An evaluation file of training problems with their operands swapped is not held out
    (``problem_key``: 23+45= and 45+23= are one problem); subtraction is not swapped, and a
    prompt that is not arithmetic is compared as text."""
    train = load_arithmetic("train")
    swapped = []
    for row in train[:3]:
        a, b = row["prompt"].rstrip("=").split("+")
        swapped.append({"prompt": f"{b}+{a}=", "answer": row["answer"]})
    assert all(s["prompt"] != r["prompt"] for s, r in zip(swapped, train, strict=False))
    path = tmp_path / "swapped.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in swapped))
    with pytest.raises(
        ValueError,
        match=r"3 of 3 evaluation prompts are also training prompts"
        r".*45\+23= are one, data\.problem_key",
    ):
        load_train_eval_rows("arithmetic", str(path), 3)
    _, rows = load_train_eval_rows("arithmetic", str(path), 3, allow_overlap=True)
    assert rows == swapped
    assert (
        count_overlap(
            [{"prompt": "45-23="}, {"prompt": " 2*9="}], [{"prompt": "23-45="}, {"prompt": "9*2= "}]
        )
        == 1
    )
    question = "Tom has 3+4 apples. How many?"
    assert count_overlap([{"prompt": question}], [{"prompt": f" {question}"}]) == 1
    assert check_held_out(train, load_arithmetic("test"), allow_overlap=False) == 0


# --- notebook 11's questions for a chat model ----------------------------------------------------


def test_chat_arithmetic_splits_are_disjoint_right_and_reproduced(tmp_path):
    """Every problem of the three kinds once, in exactly one split (a + b with b + a), each
    answer right, and the committed files are what the seeded script writes."""
    splits = {s: load_chat_arithmetic(s) for s in ("train", "validation", "test")}
    assert {s: len(rows) for s, rows in splits.items()} == {
        "train": 155,
        "validation": 37,
        "test": 60,
    }
    keys = {s: [problem_key(r["prompt"]) for r in rows] for s, rows in splits.items()}
    assert sum(len(k) for k in keys.values()) == 81 + 90 + 81
    assert not set(keys["test"]) & (set(keys["train"]) | set(keys["validation"]))
    assert not set(keys["train"]) & set(keys["validation"])
    for row in [r for rows in splits.values() for r in rows]:
        a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
        assert int(row["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b)) > 0
    assert problem_key("What is 7 + 5?") == problem_key("What is 5 + 7?") == ("+", 5, 7)
    assert problem_key("What is 12 - 5?") != problem_key("What is 5 - 12?")
    subprocess.run(
        [sys.executable, str(DATA_DIR / "make_chat_arithmetic.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for split in splits:
        name = f"chat_arithmetic_{split}.jsonl"
        assert (tmp_path / name).read_bytes() == (DATA_DIR / name).read_bytes(), name
    assert load_math_dataset("chat_arithmetic", "validation") == splits["validation"]
    with pytest.raises(ValueError, match="validation"):
        load_chat_arithmetic("dev")
