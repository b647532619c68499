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
    for (name, ours), theirs in zip(fresh.state_dict().items(), model.state_dict().values(),
                                    strict=True):  # fmt: skip
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
