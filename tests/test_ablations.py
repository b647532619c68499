"""The ablation sweep's pieces (grpo_minimal/course/ablations.py): split, budgets, summary."""

import pytest
import torch

from grpo_minimal.course import ablations
from grpo_minimal.course.ablations import (
    NOTEBOOK_07,
    VARIANTS,
    append_result,
    budget_of,
    load_results,
    run_variant,
    summarize,
    validation_split,
    variant_config,
)
from grpo_minimal.data import load_math_rows, problem_key
from grpo_minimal.lm_model import load_model
from grpo_minimal.losses import grpo_loss
from grpo_minimal.rewards import accuracy_reward


def test_problem_key_identifies_swapped_twins():
    assert problem_key("23+45=") == problem_key("45+23=") == ("+", 23, 45)
    assert problem_key("7*12=") == problem_key("12*7=")
    assert problem_key("45-23=") != problem_key("23-45=")
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        problem_key("hello")


def test_validation_split_holds_no_twin_of_a_training_problem():
    rows = load_math_rows("arithmetic", "train")
    train, validation = validation_split(rows, 500)
    assert train == rows[:-500]
    assert 0 < len(validation) <= 500
    assert all(r in rows[-500:] for r in validation)
    assert not {problem_key(r["prompt"]) for r in train} & {
        problem_key(r["prompt"]) for r in validation
    }


def test_validation_split_drops_the_twin_by_hand():
    rows = [{"prompt": p, "answer": "0"} for p in ("1+2=", "3+4=", "2+1=", "5+6=")]
    assert validation_split(rows, 2) == (rows[:2], [rows[3]])
    with pytest.raises(ValueError, match="size must be in 1..3"):
        validation_split(rows, 4)


def test_equal_completion_budget_sets_the_steps():
    assert variant_config("default", 0, completions=12800).max_steps == 200
    assert variant_config("G2_P32", 0, completions=12800).max_steps == 200
    cfg = variant_config("G16_P4", 3, completions=640)
    assert (cfg.max_steps, cfg.num_generations, cfg.prompts_per_step, cfg.seed) == (10, 16, 4, 3)
    timed = variant_config("beta0", 0, budget_s=60.0)
    assert (timed.time_budget_s, timed.beta) == (60.0, 0.0)
    with pytest.raises(ValueError, match="multiple of 64"):
        variant_config("default", 0, completions=100)
    with pytest.raises(ValueError, match="one budget"):
        variant_config("default", 0)
    with pytest.raises(ValueError, match="variant must be one of"):
        variant_config("G3", 0, completions=64)


def test_every_variant_is_a_valid_config_and_the_notebook_sweep_is_known():
    for name in VARIANTS:
        variant_config(name, 0, completions=64 * 16).validate()
    assert set(NOTEBOOK_07) <= set(VARIANTS) and "default" in NOTEBOOK_07


def test_summary_by_hand():
    runs = [
        {"variant": "a", "seed": s, "steps": 10 + s, "validation_accuracy": v}
        for s, v in enumerate([0.5, 0.6, 0.7, 0.8, 0.9])
    ]
    runs += [{"variant": "b", "seed": 0, "steps": 7, "validation_accuracy": 0.4}]
    a, b = summarize(runs, ["a", "b", "absent"])
    assert a["accuracy"] == pytest.approx(0.7) and (a["low"], a["high"], a["steps"]) == (
        0.5,
        0.9,
        12,
    )
    low, high = a["interval"]
    assert 0.5 <= low < 0.7 < high <= 0.9
    assert b["interval"] is None and b["seeds"] == 1
    assert budget_of({"completions": 12800, "budget_s": None}) == "12800 completions"
    assert budget_of({"budget_s": 60.0}) == "60 s"


def greedy_accuracy(model, tokenizer, rows) -> float:
    """Held-out accuracy computed here, not by the package's evaluation: one batched greedy
    ``generate`` over all rows, each completion graded against its row's answer."""
    enc = tokenizer(
        [r["prompt"] for r in rows], return_tensors="pt", padding=True, add_special_tokens=False
    )
    with torch.no_grad():
        out = model.generate(
            **enc, do_sample=False, max_new_tokens=5, pad_token_id=tokenizer.pad_token_id
        )
    texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(accuracy_reward(texts, [r["answer"] for r in rows])) / len(rows)


def test_one_short_run_is_recorded(monkeypatch):
    """The record's accuracies are the greedy accuracies of the shipped model (before) and of the
    model the run trained (after) on all the validation rows, each recomputed here."""
    rows = load_math_rows("arithmetic", "train")
    train, validation = validation_split(rows, 40)
    trained, train_math = [], ablations.train_math

    def keep_model(*args, **kwargs):  # the same training, keeping the trained model
        trainer, history = train_math(*args, **kwargs)
        trained.append(trainer.model)
        return trainer, history

    monkeypatch.setattr("grpo_minimal.course.ablations.train_math", keep_model)
    # lr3e-4's step, so that the trained model's accuracy differs from the shipped one's
    record = run_variant("G4_P16", 0, train, validation, completions=128, learning_rate=3e-4)
    assert record["steps"] == 2 and record["completions"] == 128
    assert record["overrides"] == {
        "num_generations": 4,
        "prompts_per_step": 16,
        "learning_rate": 3e-4,
    }
    assert record["validation_n"] == len(validation)
    shipped, tokenizer = load_model("tiny", torch.device("cpu"))
    before = greedy_accuracy(shipped, tokenizer, validation)
    after = greedy_accuracy(trained[0], tokenizer, validation)
    assert before != after  # so that the two checks below cannot be swapped
    assert record["validation_before"] == pytest.approx(before, abs=1e-12)
    assert record["validation_accuracy"] == pytest.approx(after, abs=1e-12)


def test_scale_only_loss_differences_vanish_under_gradient_clipping():
    """Notebook 07's finding, by hand: dr_grpo's gradient is dapo's times N / (B * L) (N tokens
    in the batch, B completions, L = max_completion_length), the same direction; clipped to the
    same norm they are equal. grpo's per-sequence weights change the direction."""
    torch.manual_seed(0)
    B, L = 6, 5
    lengths = torch.tensor([1, 2, 3, 5, 5, 4])
    mask = (torch.arange(L) < lengths[:, None]).double()
    advantages = torch.randn(B, dtype=torch.float64)
    grads = {}
    for loss_type in ("dapo", "dr_grpo", "grpo"):
        logps = torch.randn(B, L, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        logps.requires_grad_(True)
        loss, _ = grpo_loss(
            logps,
            None,
            None,
            advantages,
            mask,
            beta=0.0,
            epsilon=0.2,
            loss_type=loss_type,
            max_completion_length=L,
        )
        loss.backward()
        grads[loss_type] = logps.grad
    factor = mask.sum() / (B * L)  # 20 tokens / 30
    torch.testing.assert_close(grads["dr_grpo"], grads["dapo"] * factor, rtol=1e-12, atol=0)

    def clipped(g: torch.Tensor, max_norm: float) -> torch.Tensor:
        return g * min(1.0, max_norm / g.norm().item())

    max_norm = 0.5 * grads["dr_grpo"].norm().item()  # both norms exceed it: both are clipped
    torch.testing.assert_close(
        clipped(grads["dr_grpo"], max_norm),
        clipped(grads["dapo"], max_norm),
        rtol=1e-12,
        atol=1e-15,
    )
    cosine = torch.nn.functional.cosine_similarity(
        grads["grpo"].flatten(), grads["dapo"].flatten(), dim=0
    )
    assert cosine < 1 - 1e-3  # unequal lengths: grpo points elsewhere


def test_results_are_appended_stamped_and_reloadable(tmp_path):
    path = tmp_path / "results" / "runs.json"
    data = load_results(path)
    assert data == {"runs": []}
    record = append_result(path, data, {"variant": "default", "seed": 0})
    again = append_result(path, data, {"variant": "beta0", "seed": 0})
    saved = load_results(path)
    assert saved == data and [r["variant"] for r in saved["runs"]] == ["default", "beta0"]
    assert record["threads"] == torch.get_num_threads() and {"machine", "date"} <= set(record)
    assert (saved["machine"], saved["date"]) == (again["machine"], again["date"])
    assert not list(path.parent.glob("*.tmp"))  # written to a temporary file, then moved
