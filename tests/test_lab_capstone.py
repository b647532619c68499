"""Lab 07's hidden check grades the weights a run trained, in a fresh model of the shipped
architecture, never the learner's object: a model whose own ``generate`` would answer is graded
on its weights, and weights of another shape are refused by name."""

from __future__ import annotations

import pytest
import torch

from grpo_minimal.labs import capstone
from grpo_minimal.labs.checking import CheckFailed
from grpo_minimal.lm_model import TINY_MODEL, load_model
from grpo_minimal.lm_train import MathConfig

SEED = 7


def _config() -> MathConfig:
    return MathConfig(dataset="arithmetic_mix", max_steps=300, eval_every=0)


def test_the_graded_model_is_a_fresh_one_with_the_learners_weights():
    model, _ = load_model(str(TINY_MODEL), "cpu")
    with torch.no_grad():
        next(model.parameters()).add_(0.5)  # "trained": weights other than the shipped ones

    class Cheat(type(model)):
        def generate(self, *args, **kwargs):
            raise AssertionError("the learner's own object was used")

    model.__class__ = Cheat
    fresh, tokenizer = capstone.shipped_model_with_weights_of(model)
    assert type(fresh) is not Cheat and type(fresh).generate is not Cheat.generate
    for (name, ours), theirs in zip(
        fresh.state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs), name
    assert fresh is not model


def test_a_model_that_would_answer_by_itself_scores_what_its_weights_score():
    model, tokenizer = load_model(str(TINY_MODEL), "cpu")  # untrained weights

    class Cheat(type(model)):
        def generate(self, *args, **kwargs):
            raise AssertionError("the learner's own object was used")

    model.__class__ = Cheat
    with pytest.raises(CheckFailed, match="accuracy gain"):  # untrained weights: no gain
        capstone.check_model(model, tokenizer, _config(), target=0, seed=SEED)


def test_weights_of_another_shape_are_refused_by_name():
    model, tokenizer = load_model(str(TINY_MODEL), "cpu")
    state = model.state_dict()
    name = next(iter(state))

    class Pruned(type(model)):
        def state_dict(self, *args, **kwargs):
            return {k: v for k, v in state.items() if k != name}

    model.__class__ = Pruned
    with pytest.raises(CheckFailed, match="differ in name or shape") as failed:
        capstone.check_model(model, tokenizer, _config(), target=0, seed=SEED)
    assert name in str(failed.value)


def test_the_grade_is_what_the_config_trains_not_what_the_cell_did(monkeypatch):
    """A training cell edited to train past its config: the notebook's weights gain, the
    grader's own run of ``capstone_config()`` does not, and the lower gain counts. (The runs are
    stood in for: the notebook's weights are marked, and the graded accuracy is 40% for marked
    weights, the untrained 19.3% otherwise; the real retraining runs in
    tests/test_labs_build.py, where the solution keeps its points.)"""
    shipped, tokenizer = load_model(str(TINY_MODEL), "cpu")
    trained = {k: v.clone() for k, v in shipped.state_dict().items()}
    first = next(k for k in trained if ".layers." in k)  # not the tied embedding
    trained[first] += 0.5  # the mark of the notebook's run

    def graded(model, tokenizer, cfg, seed):
        marked = torch.equal(model.state_dict()[first], trained[first])
        return (0.40 if marked else 0.193), 0.193

    monkeypatch.setattr(capstone, "measure_gain", graded)
    notebook_model, _ = load_model(str(TINY_MODEL), "cpu")
    notebook_model.load_state_dict(trained)
    monkeypatch.setattr(capstone, "retrained_model", lambda cfg: shipped)
    with pytest.raises(CheckFailed, match="the grader's run of capstone_config") as failed:
        capstone.check_model(notebook_model, tokenizer, _config(), target=0, seed=SEED)
    assert "your notebook's model: 40.0%" in str(failed.value)
    monkeypatch.setattr(capstone, "retrained_model", lambda cfg: notebook_model)  # the same run
    capstone.check_model(notebook_model, tokenizer, _config(), target=1, seed=SEED)
