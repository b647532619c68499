"""Math data for the course: the shipped arithmetic splits, GSM8K, and JSONL files.

Every loader returns a list of rows ``{"prompt": str, "answer": str}``: ``prompt`` is what the
model sees and ``answer`` is the gold that `grpo_minimal.rewards.accuracy_reward` compares
against (it reads the ``answer`` column by name). For TRL, wrap the rows with
``datasets.Dataset.from_list(rows)``.

- ``load_arithmetic(split)``: the synthetic splits shipped in ``data/`` (written by
  ``data/make_arithmetic.py``, seeded): ``train`` / ``test`` (two-digit addition, ``"23+45="``)
  and ``mix_train`` / ``mix_test`` (addition, subtraction, multiplication). No test problem is in
  a train split.
- ``load_reasoning(split)``: notebook 10's three-digit additions (``train`` / ``test``, written
  by ``data/make_reasoning.py``, seeded), each with its column sums (``steps``; see
  ``grpo_minimal.course.reasoning``). No problem is in both splits.
- ``load_chat_arithmetic(split)``: notebook 11's questions for a chat model, ``What is 7 + 5?``
  (``train`` / ``validation`` / ``test``, written by ``data/make_chat_arithmetic.py``). No problem
  is in two splits.
- ``load_gsm8k(split)``: GSM8K from the Hugging Face Hub through ``datasets`` (the GPU path; it
  needs the network and ``pip install datasets``). The gold is the number after ``####``.
- ``load_gsm8k_sample()``: a 20-problem GSM8K-format file written by this project, no network.
- ``load_shapes(split)``: notebook 13's images, 1 to 6 shapes to count (``train`` /
  ``validation`` / ``test``, drawn by ``data/make_shapes.py``, seeded): rows
  ``{"prompt": "", "answer": "3", "image": <PIL image>}``. No image is in two splits.
- ``read_jsonl(path)`` / ``load_jsonl(path)``: your own data; a malformed line is an error that
  names the file and the line number. A row with an ``image`` field (a file path, relative to
  the JSONL file's folder) is a row for a vision-language model: the image is read at load.

Held out means never trained on: ``load_train_eval_rows`` gives the training rows and the
held-out rows of a run, and refuses evaluation prompts that are also training prompts
(``check_held_out``) unless asked for knowingly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import shipped
from .extras import MissingExtra

__all__ = [
    "ARITHMETIC_SPLITS",
    "DATA_DIR",
    "check_held_out",
    "check_rows",
    "count_overlap",
    "gsm8k_final_answer",
    "gsm8k_row",
    "held_out_key",
    "load_arithmetic",
    "load_chat_arithmetic",
    "load_gsm8k",
    "load_gsm8k_sample",
    "load_jsonl",
    "load_eval_rows",
    "load_math_dataset",
    "load_math_rows",
    "load_reasoning",
    "load_shapes",
    "load_train_eval_rows",
    "problem_key",
    "read_jsonl",
]

DATA_DIR = shipped.data_dir()
"""The shipped data: the repository's ``data/`` in a checkout, the package's copy in a wheel
(``grpo_minimal.shipped``)."""

ARITHMETIC_SPLITS = ("train", "test", "mix_train", "mix_test")
REASONING_SPLITS = ("train", "test")
CHAT_ARITHMETIC_SPLITS = ("train", "validation", "test")
SHAPES_SPLITS = ("train", "validation", "test")


_QUESTION_RE = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")


def problem_key(prompt: str) -> tuple[str, int, int]:
    """The identity of a problem: ``23+45=`` and ``45+23=`` are the same problem, and so are
    ``What is 7 + 5?`` and ``What is 5 + 7?`` (notebook 11's questions)."""
    question = _QUESTION_RE.fullmatch(prompt)
    if question:
        prompt = "".join(question.groups())
    for op in "+-*":
        left, sep, right = prompt.rstrip("=").partition(op)
        if sep and left:
            a, b = int(left), int(right)
            return (op, *sorted((a, b))) if op in "+*" else (op, a, b)
    raise ValueError(f"not an arithmetic prompt: {prompt!r}")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSON-lines file: one JSON object per line; blank lines are skipped.

    Raises FileNotFoundError if the file is missing, and ValueError naming the file and the
    1-based line number when a line is not valid JSON or not a JSON object.
    """
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}:{number}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def gsm8k_final_answer(solution: str) -> str:
    """The gold number of a GSM8K solution: the text after the last ``####``, without commas.

    >>> gsm8k_final_answer("24*45 = <<24*45=1080>>1080\\n#### 1,080")
    '1080'
    """
    if "####" not in solution:
        raise ValueError(f"a GSM8K answer must end with '#### N', got {solution[-80:]!r}")
    final = solution.rpartition("####")[2].strip().replace(",", "")
    if not final:
        raise ValueError(f"nothing after '####' in {solution[-80:]!r}")
    return final


def gsm8k_row(example: dict[str, Any]) -> dict[str, str]:
    """Map one GSM8K example ``{"question", "answer"}`` to ``{"prompt", "answer"}``."""
    for field in ("question", "answer"):
        if not isinstance(example.get(field), str):
            raise ValueError(f"GSM8K example needs a string field {field!r}, got {example!r:.120}")
    return {"prompt": example["question"], "answer": gsm8k_final_answer(example["answer"])}


def _math_rows(rows: list[dict[str, Any]], source: str) -> list[dict[str, str]]:
    """Check that every row has string ``prompt`` and ``answer`` fields; keep only those two."""
    out = []
    for index, row in enumerate(rows):
        for field in ("prompt", "answer"):
            if not isinstance(row.get(field), str):
                raise ValueError(
                    f"{source}: row {index} needs a string field {field!r} "
                    f"(fields are 'prompt' and 'answer'), got {row!r:.120}"
                )
        out.append({"prompt": row["prompt"], "answer": row["answer"]})
    return out


def load_jsonl(path: str | Path) -> list[dict]:
    """Read a math JSONL file with ``prompt`` and ``answer`` fields (or GSM8K's ``question``
    and ``answer``, mapped to ``prompt`` and the number after ``####``). Rows with an ``image``
    field are image rows (``load_image_rows``)."""
    rows = read_jsonl(path)
    if rows and "question" in rows[0] and "prompt" not in rows[0]:
        return [gsm8k_row(row) for row in rows]
    if any("image" in row for row in rows):
        return load_image_rows(rows, path)
    return _math_rows(rows, str(path))


def load_image_rows(rows: list[dict[str, Any]], path: str | Path) -> list[dict]:
    """Rows ``{"prompt", "answer", "image"}`` of a vision-language task: each ``image`` is a
    path relative to the JSONL file's folder (or absolute), read as an RGB ``PIL.Image`` now,
    so that a missing or unreadable file is one error naming its line, before any training."""
    from .vlm import load_image

    folder = Path(path).parent
    out = _math_rows(rows, str(path))
    for index, (row, kept) in enumerate(zip(rows, out, strict=True)):
        image = row.get("image")
        if not isinstance(image, str):
            raise ValueError(
                f"{path}: row {index} needs a string field 'image' (an image file's path, "
                f"relative to the JSONL file), got {row!r:.120}"
            )
        kept["image"] = load_image(folder / image, f"{path}: row {index}: image")
    return out


def _shipped_or(folder: str | Path | None, name: str) -> Path:
    """``name`` in ``folder`` when one is given, else the shipped file (a clear error if absent)."""
    return Path(folder) / name if folder is not None else shipped.data_path(name)


def load_arithmetic(split: str = "train", data_dir: str | Path | None = None) -> list[dict]:
    """The shipped arithmetic split: ``train``, ``test``, ``mix_train`` or ``mix_test``."""
    if split not in ARITHMETIC_SPLITS:
        raise ValueError(f"split must be one of {ARITHMETIC_SPLITS}, got {split!r}")
    return load_jsonl(_shipped_or(data_dir, f"arithmetic_{split}.jsonl"))


def load_chat_arithmetic(split: str = "train", data_dir: str | Path | None = None) -> list[dict]:
    """Notebook 11's task for a chat model, ``train``, ``validation`` or ``test``: small sums and
    differences asked as questions, ``{"prompt": "What is 7 + 5?", "answer": "12"}``."""
    if split not in CHAT_ARITHMETIC_SPLITS:
        raise ValueError(f"split must be one of {CHAT_ARITHMETIC_SPLITS}, got {split!r}")
    return load_jsonl(_shipped_or(data_dir, f"chat_arithmetic_{split}.jsonl"))


def load_reasoning(split: str = "train", data_dir: str | Path | None = None) -> list[dict]:
    """Notebook 10's split, ``train`` or ``test``: rows ``{"prompt", "answer"}``. The column
    sums (``steps`` in the file) are for the tests and the notebook: a reward never reads them."""
    if split not in REASONING_SPLITS:
        raise ValueError(f"reasoning split must be one of {REASONING_SPLITS}, got {split!r}")
    return load_jsonl(_shipped_or(data_dir, f"reasoning_{split}.jsonl"))


def load_shapes(split: str = "train", data_dir: str | Path | None = None) -> list[dict]:
    """Notebook 13's images, ``train``, ``validation`` or ``test``: how many shapes (1 to 6) a
    32x32 picture holds, ``{"prompt": "", "answer": "3", "image": <PIL image>}``."""
    if split not in SHAPES_SPLITS:
        raise ValueError(f"shapes split must be one of {SHAPES_SPLITS}, got {split!r}")
    return load_jsonl(_shipped_or(data_dir, f"shapes/shapes_{split}.jsonl"))


def load_gsm8k_sample(data_dir: str | Path | None = None) -> list[dict[str, str]]:
    """The project's 20 GSM8K-format problems as ``{"prompt", "answer"}`` rows (no network)."""
    return load_jsonl(_shipped_or(data_dir, "gsm8k_sample.jsonl"))


def load_gsm8k(split: str = "train") -> list[dict[str, str]]:
    """GSM8K (``openai/gsm8k``, config ``main``) from the Hugging Face Hub as rows.

    Needs ``datasets`` (the ``gpu`` extra) and the network; it is
    the GPU path, never used by the tests or the default notebooks.
    """
    if split not in ("train", "test"):
        raise ValueError(f"GSM8K split must be 'train' or 'test', got {split!r}")
    try:
        import datasets
    except ImportError as err:
        raise MissingExtra(
            "GSM8K from the Hub needs the [gpu] extra (missing: datasets): pip install datasets;"
            " load_gsm8k_sample() is the offline sample"
        ) from err

    return [
        gsm8k_row(example) for example in datasets.load_dataset("openai/gsm8k", "main", split=split)
    ]


def load_math_dataset(name: str, split: str = "train") -> list[dict[str, str]]:
    """One name for every math source: ``arithmetic``, ``arithmetic_mix``, ``reasoning``,
    ``chat_arithmetic``, ``gsm8k``, ``gsm8k_sample`` or a path to a ``.jsonl`` file (then ``split`` is ignored).

    ``arithmetic_mix`` with split ``train`` reads ``mix_train``.
    """
    if name == "arithmetic":
        return load_arithmetic(split)
    if name == "arithmetic_mix":
        return load_arithmetic(f"mix_{split}")
    if name == "reasoning":
        return load_reasoning(split)
    if name == "chat_arithmetic":
        return load_chat_arithmetic(split)
    if name == "shapes":
        return load_shapes(split)
    if name == "gsm8k":
        return load_gsm8k(split)
    if name == "gsm8k_sample":
        return load_gsm8k_sample()
    if name.endswith(".jsonl"):
        if not Path(name).is_file():
            raise ValueError(f"dataset: no file {name}")
        return load_jsonl(name)
    raise ValueError(
        "dataset must be 'arithmetic', 'arithmetic_mix', 'reasoning', 'chat_arithmetic', "
        f"'shapes', 'gsm8k', 'gsm8k_sample' or a .jsonl path, got {name!r}"
    )


# --- rows for a training run ---------------------------------------------------------------------


def check_rows(rows: Sequence[dict], name: str, needs_answer: bool = False) -> None:
    """A data set must have rows, each with a string ``prompt`` (and an ``answer`` when the
    accuracy reward scores it)."""
    if len(rows) == 0:
        raise ValueError(f"the {name} dataset is empty: it needs at least one row with a prompt")
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise ValueError(f"{name} row {index} needs a string 'prompt' field, got {row!r:.120}")
        if needs_answer and row.get("answer") is None:
            raise ValueError(
                f"{name} row {index} needs an 'answer' field (the gold the accuracy reward "
                f"compares with), got {row!r:.120}"
            )


def load_math_rows(dataset: str, split: str) -> list[dict]:
    """Rows ``{"prompt", "answer"}`` of a named dataset (``load_math_dataset``), checked."""
    rows = load_math_dataset(dataset, split)
    check_rows(rows, f"{dataset!r} ({split})")
    return rows


def load_eval_rows(dataset: str, eval_split: str, n: int) -> tuple[str, list[dict]]:
    """The evaluation data set's name and its first ``n`` rows: ``eval_split`` of ``dataset``,
    or the file ``eval_split`` when it is a ``.jsonl`` path."""
    held_out = eval_split if eval_split.endswith(".jsonl") else dataset
    if held_out == eval_split and not Path(eval_split).is_file():
        raise ValueError(f"eval_split: no file {eval_split}")
    return held_out, load_math_rows(held_out, eval_split)[:n]


def load_train_eval_rows(
    dataset: str, eval_split: str, eval_n: int, allow_overlap: bool = False
) -> tuple[list[dict], list[dict]]:
    """Training rows of ``dataset`` and the first ``eval_n`` held-out rows (``load_eval_rows``).

    Evaluation rows that are also training problems (``count_overlap``) are an error (some
    datasets, e.g. ``gsm8k_sample`` or a ``.jsonl`` file, have one split, so ``eval_split``
    cannot separate them), unless ``allow_overlap`` (``MathConfig.allow_eval_overlap``) asks for
    it knowingly.
    """
    train_rows = load_math_rows(dataset, "train")
    held_out, eval_rows = load_eval_rows(dataset, eval_split, eval_n)
    where = f" ({dataset!r}; evaluation: {held_out!r}, eval_split={eval_split!r})"
    check_held_out(train_rows, eval_rows, allow_overlap, where)
    return train_rows, eval_rows


def held_out_key(prompt: str) -> tuple[str, int, int] | str:
    """What the held-out check compares: ``problem_key`` for an arithmetic prompt (``23+45=``
    and ``45+23=`` are one problem), otherwise the prompt without surrounding spaces."""
    try:
        return problem_key(prompt.strip())
    except ValueError:  # not an arithmetic prompt (a GSM8K question, a chat text)
        return prompt.strip()


def row_key(row: dict) -> tuple:
    """A row's identity for the held-out check: its prompt (``held_out_key``) and, for an image
    row, its image's pixels (``vlm.image_key``): the same question about two pictures is two
    problems."""
    from .vlm import image_key

    image = row.get("image")
    return (held_out_key(row["prompt"]), None if image is None else image_key(image))


def count_overlap(train_rows: Sequence[dict], eval_rows: Sequence[dict]) -> int:
    """How many evaluation rows are a problem seen in training (``row_key``: swapped
    operands of ``+`` or ``*`` and surrounding spaces are the same problem; an image row is
    also its picture)."""
    seen = {row_key(row) for row in train_rows}
    return sum(row_key(row) in seen for row in eval_rows)


def check_held_out(
    train_rows: Sequence[dict], eval_rows: Sequence[dict], allow_overlap: bool, where: str = ""
) -> int:
    """The overlap count; an error when it is not 0 and ``allow_overlap`` (``allow_eval_overlap``)
    does not ask for it knowingly."""
    overlap = count_overlap(train_rows, eval_rows)
    if overlap and not allow_overlap:
        raise ValueError(
            f"{overlap} of {len(eval_rows)} evaluation prompts are also training prompts{where} "
            "(compared as problems: 23+45= and 45+23= are one, data.problem_key), "
            "so the accuracy would not be held out; give held-out rows (eval_split=FILE.jsonl, "
            "--eval-split) or set allow_eval_overlap=True (--allow-eval-overlap true) to "
            "measure on training problems knowingly"
        )
    return overlap
