"""Lab 07 checks: the capstone. Raise the tiny model's accuracy on the arithmetic mix within a
fixed budget of sampled completions; graded on problems the learner never sees.

The hidden checks grade two runs, and the lower gain counts: the weights the notebook's run
trained, loaded into a fresh model of the shipped architecture (never the learner's object), and
the weights of the grader's own run of ``capstone_config()`` from the shipped model (so a
training cell edited to train past the budget, or on other problems, earns nothing the config
does not). With the cell as handed out, the two runs are the same run.

The grader's problems are drawn from every problem of each kind (``data/make_arithmetic.py``'s
``all_problems``), minus every problem in any shipped split (``a+b`` and ``b+a`` count as one),
so nothing the learner trained or evaluated on is graded. The draw uses the grader's seed, which
``lab build`` writes only into the autograder zip: no learner can draw the same 300 problems.
Few unseen problems are left of two kinds (264 additions, 20 multiplications; 6,700
subtractions), so the graded set is 140 of the additions, 150 subtractions and 10 of the
multiplications.
"""

from __future__ import annotations

import importlib.util
import random
from functools import cache

from grpo_minimal.data import load_math_rows
from grpo_minimal.labs.checking import failure, report
from grpo_minimal.lm_train import MathConfig, evaluate_accuracy
from grpo_minimal.shipped import data_path

# 300 steps of the default lesson (8 prompts x 8 completions): about 50 s on 2 CPU cores.
BUDGET_COMPLETIONS = 19_200
DATASET = "arithmetic_mix"
GRADED_COUNTS = {"+": 140, "-": 150, "*": 10}
# Points of the hidden checks: greedy accuracy on the graded problems, in points above the
# untrained model's (19.3%). Measured 2026-11-23 (seed 0, 300 steps, one thread): the lesson's
# settings reach 26.7% (+7.3); beta=0 24.7%; learning_rate=2e-4 25.7%; 3e-4 with beta=0
# collapses (1.7% on the test split). The second target is set so the lesson's settings pass
# with a margin for other CPUs; raise it once better settings are known.
GAIN_TARGETS = (3.0, 5.0)
VALIDATION_ROWS = 300
"""The training cell keeps the last 300 training rows out, as its validation set."""


def _make_arithmetic():
    spec = importlib.util.spec_from_file_location(
        "make_arithmetic", data_path("make_arithmetic.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def graded_problems(seed: int) -> tuple[dict, ...]:
    """The grader's problems: arithmetic-mix problems that appear in no shipped split, drawn with
    the grader's ``seed``."""
    make_arithmetic = _make_arithmetic()
    seen = set()
    for dataset in ("arithmetic", DATASET):
        for split in ("train", "test"):
            seen |= {
                make_arithmetic.problem_key(r["prompt"]) for r in load_math_rows(dataset, split)
            }
    rng = random.Random(seed)
    rows = []
    for op, count in GRADED_COUNTS.items():
        unseen = [
            r
            for r in make_arithmetic.all_problems(op)
            if make_arithmetic.problem_key(r["prompt"]) not in seen
        ]
        keys: set = set()
        unique = []
        for row in unseen:  # one of a+b / b+a
            key = make_arithmetic.problem_key(row["prompt"])
            if key not in keys:
                keys.add(key)
                unique.append(row)
        rows += rng.sample(unique, count)
    return tuple(rows)


def check_config(cfg) -> None:
    """Public: the run stays within the budget, on the tiny model and the arithmetic mix."""
    if not isinstance(cfg, MathConfig):
        raise failure(
            "capstone_config",
            "capstone_config()",
            "a MathConfig",
            cfg,
            "return MathConfig(dataset='arithmetic_mix', ...) with your settings",
        )
    spent = cfg.max_steps * cfg.prompts_per_step * cfg.num_generations
    rules = [
        (
            "the budget of sampled completions",
            spent <= BUDGET_COMPLETIONS,
            f"<= {BUDGET_COMPLETIONS}",
            spent,
            "max_steps * prompts_per_step * num_generations is what the budget counts",
        ),
        (
            "the dataset",
            cfg.dataset == DATASET,
            DATASET,
            cfg.dataset,
            "the capstone trains on the arithmetic mix",
        ),
        ("the model", cfg.model == "tiny", "tiny", cfg.model, "start from the shipped tiny model"),
        (
            "no time limit hides the budget",
            cfg.time_budget_s == 0,
            0.0,
            cfg.time_budget_s,
            "the budget is counted in completions; leave time_budget_s at 0",
        ),
    ]
    for name, ok, expected, got, hint in rules:
        if not ok:
            raise failure(name, "capstone_config()", expected, got, hint)


def graded_accuracy(model, tokenizer, cfg: MathConfig, seed: int) -> float:
    """Greedy accuracy on the grader's problems (prompts as ``cfg`` formats them)."""
    return evaluate_accuracy(model, tokenizer, list(graded_problems(seed)), cfg)[0]


@cache
def _base_accuracy(max_completion_length: int, prompt_template: str, seed: int) -> float:
    from grpo_minimal.lm_model import TINY_MODEL, load_model

    cfg = MathConfig(max_completion_length=max_completion_length, prompt_template=prompt_template)
    model, tokenizer = load_model(str(TINY_MODEL), "cpu")
    return graded_accuracy(model, tokenizer, cfg, seed)


def measure_gain(model, tokenizer, cfg: MathConfig, seed: int) -> tuple[float, float]:
    """(trained accuracy, untrained accuracy) on the grader's problems drawn with ``seed``."""
    base = _base_accuracy(cfg.max_completion_length, cfg.prompt_template, seed)
    return graded_accuracy(model, tokenizer, cfg, seed), base


def shipped_model_with_weights_of(model):
    """A fresh tiny model of the shipped architecture, and the shipped tokenizer, holding
    ``model``'s weights: what is graded is the weights the run trained, never the learner's
    object (a subclass whose ``generate`` computes the answer scores what its weights score).

    Every weight of the shipped model must be there, with its shape; none may be extra."""
    import torch

    from grpo_minimal.lm_model import TINY_MODEL, load_model

    fresh, tokenizer = load_model(str(TINY_MODEL), "cpu")
    expected = fresh.state_dict()
    try:
        state = dict(model.state_dict())
        weights = {
            k: torch.as_tensor(v).detach().to(torch.float32).clone() for k, v in state.items()
        }
    except Exception as error:
        raise failure(
            "the trained model's weights",
            "model.state_dict()",
            "the tiny model's weights",
            f"raised {type(error).__name__}: {str(error)[:100]}",
            "keep the model the training cell returns (trainer.model)",
        ) from None
    wrong = sorted(set(expected) ^ set(weights)) or sorted(
        k for k in expected if tuple(weights[k].shape) != tuple(expected[k].shape)
    )
    if wrong:
        raise failure(
            "the trained model's weights",
            "model.state_dict()",
            "the shipped tiny model's weights, shape for shape",
            f"{len(wrong)} weights differ in name or shape, e.g. {wrong[0]!r}",
            "train the shipped tiny model (model='tiny'); its architecture is graded as shipped",
        )
    fresh.load_state_dict(weights, strict=True)
    return fresh.eval(), tokenizer


_RETRAINED: dict[tuple, object] = {}


def retrained_model(cfg: MathConfig):
    """The model of the grader's own run of ``cfg``: the notebook's training cell as handed out
    (``train_math`` on the training rows but the last ``VALIDATION_ROWS``, from the shipped tiny
    model), run here; once per config (both hidden checks grade it)."""
    key = tuple(sorted(cfg.to_dict().items()))
    if key not in _RETRAINED:
        from grpo_minimal.lm_train import train_math

        rows = load_math_rows(DATASET, "train")
        trainer, _ = train_math(
            cfg,
            train_rows=rows[:-VALIDATION_ROWS],
            eval_rows=rows[-VALIDATION_ROWS:],
            progress=False,
        )
        _RETRAINED[key] = trainer.model.eval()
    return _RETRAINED[key]


def check_model(model, tokenizer, cfg, target: int, seed: int) -> None:
    """Hidden: the trained weights, loaded into a fresh model of the shipped architecture, beat
    the untrained model by ``GAIN_TARGETS[target]`` points on the problems drawn with the
    grader's ``seed``, and so do the weights of the grader's own run of ``cfg``
    (``retrained_model``): the lower gain counts. The measurements go to the feedback file."""
    check_config(cfg)
    if model is None or tokenizer is None:
        raise failure(
            "the trained model",
            "model, tokenizer",
            "the model your run trained",
            model,
            "run the training cell; it sets `model` and `tokenizer`",
        )
    model, tokenizer = shipped_model_with_weights_of(model)
    accuracy, base = measure_gain(model, tokenizer, cfg, seed)
    gain, goal = 100 * (accuracy - base), GAIN_TARGETS[target]
    count = len(graded_problems(seed))
    measured = (
        f"capstone: {100 * accuracy:.1f}% on {count} unseen problems, untrained {100 * base:.1f}%: "
        f"{gain:+.1f} points against the target of +{goal:g}"
    )
    if gain >= goal:  # the notebook's weights pass: does the config itself train them?
        again_accuracy, _ = measure_gain(retrained_model(cfg), tokenizer, cfg, seed)
        again_gain = 100 * (again_accuracy - base)
        measured += (
            f"; the grader's own run of capstone_config(): {100 * again_accuracy:.1f}% "
            f"({again_gain:+.1f} points)"
        )
        report(measured)
        if again_gain < goal:
            raise failure(
                f"the grader's run of capstone_config(): gain >= {goal:g} points",
                "capstone_config(), trained by the grader from the shipped model",
                f">= {100 * base + goal:.1f}% (your notebook's model: {100 * accuracy:.1f}%)",
                f"{100 * again_accuracy:.1f}% ({again_gain:+.1f} points)",
                "the points go to what capstone_config() trains: keep the training cell as "
                "handed out (train_math(cfg, ...) on the training rows), and put every setting "
                "in the config",
            )
        return
    report(measured)
    if gain < goal:
        raise failure(
            f"accuracy gain >= {goal:g} points on {count} unseen problems",
            "the grader's problems",
            f">= {100 * base + goal:.1f}% (untrained: {100 * base:.1f}%)",
            f"{100 * accuracy:.1f}% ({gain:+.1f} points)",
            "compare settings on the validation rows you carve from train; see notebook 06",
        )
