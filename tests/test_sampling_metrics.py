"""pass@k (Chen et al. 2021's unbiased estimator) and majority vote, by hand and as properties;
``evaluate math --samples`` end to end on the shipped tiny model."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from itertools import combinations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpo_minimal.cli import main
from grpo_minimal.sampling_metrics import majority_vote, pass_at_k


def test_pass_at_k_hand_computed():
    # n = 5 samples, c = 2 correct
    assert pass_at_k(5, 2, 1) == pytest.approx(2 / 5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert pass_at_k(5, 2, 4) == 1.0  # only 3 wrong samples: any 4 hold a correct one


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 0, 4, 0.0),
        (4, 1, 4, 1.0),
        (4, 4, 4, 1.0),  # n = k: did any sample succeed?
        (10, 0, 3, 0.0),
        (10, 10, 3, 1.0),
        (1, 1, 1, 1.0),
        (1, 0, 1, 0.0),
    ],
)
def test_pass_at_k_edge_cases(n, c, k, expected):
    assert pass_at_k(n, c, k) == expected


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_pass_at_k_is_the_fraction_of_k_subsets_with_a_correct_sample(nc):
    """The estimator equals the exact average over all k-subsets of the n samples."""
    n, c = nc
    samples = [True] * c + [False] * (n - c)
    for k in range(1, n + 1):
        subsets = list(combinations(samples, k))
        exact = Fraction(sum(any(s) for s in subsets), len(subsets))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-12)
        if k > 1:
            assert pass_at_k(n, c, k) >= pass_at_k(n, c, k - 1)


@pytest.mark.parametrize(
    ("n", "c", "k", "field"),
    [
        (0, 0, 1, "n"),
        (3, 4, 1, "c"),
        (3, -1, 1, "c"),
        (3, 1, 0, "k"),
        (3, 1, 4, "k"),
        (3.0, 1, 1, "n"),
    ],
)
def test_pass_at_k_refuses_bad_counts_naming_them(n, c, k, field):
    with pytest.raises(ValueError, match=rf"^{field} "):
        pass_at_k(n, c, k)


def test_majority_vote_counts_values_and_breaks_ties_by_first_sample():
    assert majority_vote([3, 4, 4, 3]) == 3  # a tie: 3 was sampled first
    assert majority_vote([3, 4, 3, 4]) == 3
    assert majority_vote([4, 3, 3, 4]) == 4
    assert majority_vote([2, 4, 4, 3]) == 4  # no tie
    assert majority_vote([None, 5, None, None]) == 5  # no answer does not vote
    assert majority_vote([None, None]) is None
    assert majority_vote([]) is None
    assert majority_vote([Fraction(1, 2), 7, Fraction(1, 2)]) == Fraction(1, 2)
    assert majority_vote([7, Fraction(14, 2)]) == 7  # equal values are one answer


def test_evaluate_math_reports_pass_and_majority_from_one_sampled_set(capsys):
    main(["evaluate", "math", "--n", "24", "--samples", "8", "--device", "cpu"])
    result = json.loads(capsys.readouterr().out)
    assert result["samples"] == 8 and result["temperature"] == 1.0
    for key in ("accuracy", "pass@1", "pass@8", "maj@8"):
        assert 0.0 <= result[key] <= 1.0
    assert result["pass@1"] <= result["pass@8"]
    # pass@1 is a mean of c / 8 over 24 problems: a multiple of 1 / 192
    assert math.isclose(result["pass@1"] * 192, round(result["pass@1"] * 192), abs_tol=1e-9)
    main(["evaluate", "math", "--n", "4", "--device", "cpu"])  # greedy only: no sampled keys
    assert "pass@1" not in json.loads(capsys.readouterr().out)


def test_a_negative_sample_count_is_one_clear_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "math", "--n", "4", "--samples", "-1"])
    assert exc.value.code == 2 and "--samples must be 0" in capsys.readouterr().err


def test_near_zero_temperature_sampling_agrees_with_greedy():
    """At temperature 1e-6 every sample is the greedy completion, so each problem has c = 0 or
    c = N: pass@1, pass@N and maj@N must all equal the greedy accuracy."""
    import torch

    from grpo_minimal.data import load_math_rows
    from grpo_minimal.lm_model import load_model
    from grpo_minimal.lm_train import MathConfig, evaluate_accuracy, evaluate_samples

    model, tokenizer = load_model("tiny", torch.device("cpu"))
    cfg = MathConfig(device="cpu", temperature=1e-6)
    rows = load_math_rows("arithmetic", "test")[:40]
    greedy, _ = evaluate_accuracy(model, tokenizer, rows, cfg)
    torch.manual_seed(0)
    sampled = evaluate_samples(model, tokenizer, rows, cfg, samples=4, batch_size=16)
    assert 0 < greedy < 1  # both right and wrong problems
    assert sampled == {"pass@1": greedy, "pass@4": greedy, "maj@4": greedy}
    curves = evaluate_samples(model, tokenizer, rows, cfg, samples=4, batch_size=16, ks=[1, 2, 4])
    assert curves == {f"{m}@{k}": greedy for m in ("pass", "maj") for k in (1, 2, 4)}
    with pytest.raises(ValueError, match="ks must be integers in 1..samples=4"):
        evaluate_samples(model, tokenizer, rows, cfg, samples=4, ks=[8])
