"""The explorers in grpo_minimal.course.widgets, in-process: set controls, read what is displayed.

What is displayed (the readout text, the bar heights, the line data) must equal what the core
functions compute. Two ways a broken callback could hide are closed:

- a change made in Python (``slider.value = x``) runs the callback synchronously: it raises here;
- a change from the browser arrives as a comm message, and ipywidgets catches and only logs what
  the callback raises. ``send_from_browser`` takes that path; the autouse fixture fails the test if
  any explorer recorded an error or ipywidgets logged an exception.
"""

from __future__ import annotations

import logging
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from traitlets.log import get_logger

from grpo_minimal import (
    categorical_kl,
    clipped_surrogate,
    group_advantages,
    kl_k1,
    kl_k2,
    kl_k3,
    rloo_advantages,
)
from grpo_minimal.advantages import population_std_advantages
from grpo_minimal.course import widgets as gw

# the readout prints 3 decimals: half a unit in the last place, plus float32 noise
TEXT_TOLERANCE = 5e-4 + 1e-6

# the four formulas of the advantage explorer, written against the core directly
CORE_ADVANTAGES = {
    "GRPO (2), sample std (TRL)": lambda r, g: group_advantages(r, g, scale_rewards="group"),
    "GRPO (2), population std": population_std_advantages,
    "mean-only (1), scale_rewards='none'": lambda r, g: group_advantages(r, g, "none"),
    "RLOO (3)": rloo_advantages,
}


class _Recorder(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


class _CallbackErrors:
    expected = 0  # a test that provokes errors on purpose sets how many


@pytest.fixture(autouse=True)
def callback_errors(monkeypatch):
    """Fail the test if a callback raised anywhere, even where ipywidgets swallowed it."""
    created: list[gw.Explorer] = []
    original_init = gw.Explorer.__init__

    def tracking_init(self, *args, **kwargs):
        created.append(self)
        original_init(self, *args, **kwargs)

    monkeypatch.setattr(gw.Explorer, "__init__", tracking_init)
    recorder = _Recorder()
    logger = get_logger()
    logger.addHandler(recorder)
    state = _CallbackErrors()
    try:
        yield state
    finally:
        logger.removeHandler(recorder)
    errors = [e for explorer in created for e in explorer.errors]
    logged = [r.getMessage() for r in recorder.records if r.exc_info]
    if len(errors) != state.expected or len(logged) > state.expected:
        pytest.fail(f"widget callbacks raised: {errors!r}; ipywidgets logged: {logged!r}")


def send_from_browser(widget, **state) -> None:
    """Deliver state the way the browser does: a comm 'update' message to ``_handle_msg``."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state}}})


def numbers_after(label: str, text: str) -> list[float]:
    """The bracketed list after ``label`` in the readout, e.g. 'A = [+0.500, -1.500]'."""
    plain = re.sub(r"<[^>]+>", "", text)
    match = re.search(re.escape(label) + r"\s*\[([^\]]*)\]", plain)
    assert match, f"{label!r} not found in readout: {plain!r}"
    return [float(v) for v in match.group(1).split(",")]


def visible_heights(bars) -> list[float]:
    return [bar.get_height() for bar in bars if bar.get_visible()]


def set_rewards(explorer, rewards) -> None:
    with explorer.hold():
        explorer.controls["G"].value = len(rewards)
        for slider, value in zip(explorer.reward_sliders, rewards, strict=False):
            slider.value = value


# ------------------------------------------------------------------------------------------------
# advantage explorer
# ------------------------------------------------------------------------------------------------


def test_advantage_explorer_shows_the_core_advantages_of_the_worked_example():
    explorer = gw.advantage_explorer(rewards=[1.0, 1.0, 0.0, 1.0])
    expected = group_advantages(torch.tensor([1.0, 1.0, 0.0, 1.0]), 4)
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )
    assert visible_heights(explorer.advantage_bars) == pytest.approx(expected.tolist(), abs=1e-6)
    assert visible_heights(explorer.reward_bars) == [1.0, 1.0, 0.0, 1.0]
    assert "mean(r) = 0.750" in explorer.readout.value
    assert "std(r) = 0.500 (sample, G&minus;1)" in explorer.readout.value  # as TRL
    assert "population std = 0.433" in explorer.readout.value
    assert bytes(explorer.image.value[:4]) == b"\x89PNG"
    assert explorer.mean_line.get_ydata()[0] == pytest.approx(0.75)


@pytest.mark.parametrize("method", list(CORE_ADVANTAGES))
def test_moving_a_reward_slider_updates_text_and_bars_as_the_core_says(method):
    explorer = gw.advantage_explorer(rewards=[1.0, 1.0, 0.0, 1.0], method=method)
    image_before = explorer.image.value
    text_before = explorer.readout.value
    explorer.controls["r1"].value = 0.25  # one callback, as a person moving one slider
    rewards = torch.tensor([0.25, 1.0, 0.0, 1.0])
    expected = CORE_ADVANTAGES[method](rewards, 4)
    assert explorer.readout.value != text_before
    assert explorer.image.value != image_before
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )
    assert visible_heights(explorer.advantage_bars) == pytest.approx(expected.tolist(), abs=1e-6)
    assert explorer.shown["advantages"] == pytest.approx(expected.tolist(), abs=1e-6)


def test_a_change_from_the_browser_takes_the_comm_path_and_updates():
    explorer = gw.advantage_explorer(rewards=[1.0, -1.0, 1.0, -1.0])
    send_from_browser(explorer.controls["r2"], value=-0.5)
    expected = group_advantages(torch.tensor([1.0, -0.5, 1.0, -1.0]), 4)
    assert explorer.controls["r2"].value == -0.5
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )


def test_changing_the_group_size_shows_g_sliders_and_g_bars():
    explorer = gw.advantage_explorer(rewards=[1.0, 1.0, 0.0, 1.0])
    explorer.controls["G"].value = 7  # sliders 5-7 join with reward 0
    assert len(explorer.reward_box.children) == 7
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0])
    expected = group_advantages(rewards, 7)
    assert len(visible_heights(explorer.advantage_bars)) == 7
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )
    assert explorer.axes[1].get_xlim() == pytest.approx((-0.6, 6.6))
    explorer.controls["G"].value = 3  # back down: the first three rewards only
    assert len(explorer.reward_box.children) == 3
    expected = group_advantages(torch.tensor([1.0, 1.0, 0.0]), 3)
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )
    assert len(visible_heights(explorer.advantage_bars)) == 3


@pytest.mark.parametrize("method", list(CORE_ADVANTAGES))
def test_a_zero_variance_group_shows_zeros_and_says_why(method):
    explorer = gw.advantage_explorer(rewards=[0.5, 0.5, 0.5], method=method)
    assert numbers_after("A =", explorer.readout.value) == [0.0, 0.0, 0.0]
    assert visible_heights(explorer.advantage_bars) == [0.0, 0.0, 0.0]
    assert explorer.shown["zero_variance"]
    assert "Zero-variance group" in explorer.readout.value
    assert "no gradient" in explorer.readout.value
    explorer.controls["r2"].value = 0.6
    assert "Zero-variance" not in explorer.readout.value
    assert not explorer.shown["zero_variance"]


def test_every_slider_value_gives_exact_zeros_for_a_zero_variance_group():
    # reward sliders step in binary fractions, so the float32 group mean is exact (see widgets.py)
    slider = gw.advantage_explorer().reward_sliders[0]
    values = np.arange(slider.min, slider.max + slider.step / 2, slider.step)
    for g in range(2, gw.MAX_GROUP + 1):
        for value in values:
            for method, formula in CORE_ADVANTAGES.items():
                advantages = formula(torch.full((g,), float(value)), g)
                assert advantages.abs().max().item() == 0.0, (g, value, method)


@settings(max_examples=25, deadline=None)
@given(
    rewards=st.lists(st.integers(-4, 4), min_size=2, max_size=16).map(
        lambda xs: [x * gw.REWARD_STEP for x in xs]  # the values a reward slider can take
    ),
    method=st.sampled_from(list(CORE_ADVANTAGES)),
)
def test_displayed_advantages_equal_the_core_for_any_group(rewards, method):
    explorer = _shared_advantage_explorer()
    explorer.controls["method"].value = method
    set_rewards(explorer, rewards)
    expected = CORE_ADVANTAGES[method](torch.tensor(rewards), len(rewards))
    assert explorer.shown["rewards"] == pytest.approx(rewards, abs=1e-6)
    assert visible_heights(explorer.advantage_bars) == pytest.approx(expected.tolist(), abs=1e-5)
    assert numbers_after("A =", explorer.readout.value) == pytest.approx(
        expected, abs=TEXT_TOLERANCE
    )
    assert not explorer.errors


_ADVANTAGE_EXPLORER: list[gw.Explorer] = []


def _shared_advantage_explorer():
    # one explorer for all hypothesis examples (building one costs a first render)
    if not _ADVANTAGE_EXPLORER:
        _ADVANTAGE_EXPLORER.append(gw.advantage_explorer())
    return _ADVANTAGE_EXPLORER[0]


def test_bad_arguments_get_clear_errors():
    with pytest.raises(ValueError, match="rewards must hold 2 to 16"):
        gw.advantage_explorer(rewards=[1.0])
    with pytest.raises(ValueError, match="method must be one of"):
        gw.advantage_explorer(method="grpo")
    with pytest.raises(ValueError, match="num_samples must be one of"):
        gw.kl_explorer(num_samples=3)
    with pytest.raises(ValueError, match=r"rewards must lie in \[-1.0, 1.0\].*got 5"):
        gw.advantage_explorer(rewards=[0.0, 5.0])
    with pytest.raises(ValueError, match="epsilon_high must lie in"):
        gw.clipping_explorer(epsilon_high=0.9)
    with pytest.raises(ValueError, match="ref_logits must lie in"):
        gw.kl_explorer(ref_logits=(0.0, 0.0, 0.0, 9.0))
    with pytest.raises(ValueError, match="p must lie in"):
        gw.group_size_explorer(p=1.0)


# ------------------------------------------------------------------------------------------------
# a callback that raises must not pass silently
# ------------------------------------------------------------------------------------------------


def _broken(*args, **kwargs):
    raise RuntimeError("core exploded")


def test_a_raising_callback_raises_in_python_and_is_shown(monkeypatch, callback_errors):
    explorer = gw.advantage_explorer()
    monkeypatch.setattr(gw, "group_advantages", _broken)
    callback_errors.expected = 1
    with pytest.raises(RuntimeError, match="core exploded"):
        explorer.controls["r1"].value = 0.2
    assert "explorer error: RuntimeError: core exploded" in explorer.readout.value
    assert len(explorer.errors) == 1


def test_a_raising_callback_from_the_browser_is_recorded_not_lost(monkeypatch, callback_errors):
    explorer = gw.advantage_explorer()
    monkeypatch.setattr(gw, "group_advantages", _broken)
    callback_errors.expected = 1
    send_from_browser(
        explorer.controls["r1"], value=0.2
    )  # ipywidgets swallows the exception here ...
    assert [type(e) for e in explorer.errors] == [RuntimeError]  # ... the explorer keeps it
    assert 'class="grpo-error"' in explorer.readout.value


# ------------------------------------------------------------------------------------------------
# clipping explorer, equation (6)
# ------------------------------------------------------------------------------------------------


def test_clipping_explorer_draws_the_core_surrogate_and_shades_zero_gradient():
    explorer = gw.clipping_explorer(epsilon=0.2)
    step = gw.RATIO_MAX / (len(explorer.ratios) - 1)
    with explorer.hold():
        explorer.controls["epsilon"].value = 0.1
        explorer.controls["epsilon_high"].value = 0.3
    for advantage in (1.0, -1.0):
        line = explorer.panels[advantage]["line"]
        expected = clipped_surrogate(explorer.ratios, torch.tensor(advantage), 0.1, 0.3)
        np.testing.assert_allclose(line.get_ydata(), expected.numpy(), atol=1e-6)
    low, high = explorer.shown["zero_gradient"][1.0]  # A > 0: flat beyond 1 + epsilon_high
    assert low == pytest.approx(1.3, abs=1.01 * step)
    assert high == pytest.approx(gw.RATIO_MAX)
    low, high = explorer.shown["zero_gradient"][-1.0]  # A < 0: flat below 1 - epsilon
    assert (low, high) == pytest.approx((0.0, 0.9), abs=1.01 * step)
    span = explorer.panels[-1.0]["span"]
    assert (span.get_x(), span.get_x() + span.get_width()) == pytest.approx((low, high))
    assert explorer.panels[1.0]["high"].get_xdata()[0] == pytest.approx(1.3)
    assert "[0.90, 1.30]" in explorer.readout.value


@pytest.mark.parametrize(
    ("ratio", "value_pos", "slope_pos", "value_neg", "slope_neg"),
    [
        (1.5, 1.2, 0.0, -1.5, -1.0),  # A > 0 capped; A < 0 pessimistic, full gradient
        (0.5, 0.5, 1.0, -0.8, 0.0),  # A > 0 unclipped; A < 0 capped
        (1.1, 1.1, 1.0, -1.1, -1.0),  # inside the trust region
    ],
)
def test_clipping_probe_reads_value_and_slope(ratio, value_pos, slope_pos, value_neg, slope_neg):
    explorer = gw.clipping_explorer(epsilon=0.2)
    explorer.controls["ratio"].value = ratio
    assert explorer.shown["probe"][1.0] == pytest.approx((value_pos, slope_pos), abs=1e-6)
    assert explorer.shown["probe"][-1.0] == pytest.approx((value_neg, slope_neg), abs=1e-6)
    assert (
        f"L<sup>clip</sup> = {value_pos:+.3f}, dL/dρ = {slope_pos:+.3f}" in explorer.readout.value
    )
    marker = explorer.panels[1.0]["probe"]
    assert marker.get_xdata()[0] == pytest.approx(ratio)
    assert marker.get_ydata()[0] == pytest.approx(value_pos, abs=1e-6)


# ------------------------------------------------------------------------------------------------
# KL explorer, equation (7)
# ------------------------------------------------------------------------------------------------


def _independent_kl_estimates(policy_logits, ref_logits, n, draws, seed):
    log_p = torch.log_softmax(torch.tensor(policy_logits), -1)
    log_q = torch.log_softmax(torch.tensor(ref_logits), -1)
    generator = torch.Generator().manual_seed(seed)
    actions = torch.multinomial(log_p.exp(), draws * n, True, generator=generator).view(draws, n)
    logps, ref_logps = log_p[actions], log_q[actions]
    return {
        "k1": kl_k1(logps, ref_logps).mean(1),
        "k2": kl_k2(logps, ref_logps).mean(1),
        "k3": kl_k3(logps, ref_logps).mean(1),
    }


def test_kl_explorer_shows_exact_kl_and_estimator_statistics():
    explorer = gw.kl_explorer(draws=200, seed=3)
    with explorer.hold():
        for i, value in enumerate([2.0, 0.0, -2.0, 0.0]):
            explorer.controls[f"policy{i + 1}"].value = value
        explorer.controls["num_samples"].value = 64
    policy, ref = [2.0, 0.0, -2.0, 0.0], [0.5, 0.0, -0.5, 0.2]
    exact = categorical_kl(torch.tensor(policy), torch.tensor(ref)).item()
    assert explorer.shown["exact"] == pytest.approx(exact)
    assert explorer.exact_line.get_ydata()[0] == pytest.approx(exact)
    assert f"exact KL(π || π_ref) = {exact:.4f}" in explorer.readout.value
    expected = _independent_kl_estimates(policy, ref, 64, 200, 3)
    for name, values in expected.items():
        stats = explorer.shown["estimators"][name]
        assert stats["mean"] == pytest.approx(values.mean().item(), rel=1e-5)
        assert stats["std"] == pytest.approx(values.std().item(), rel=1e-5)
        assert stats["bias"] == pytest.approx(values.mean().item() - exact, abs=1e-6)
        dots = explorer.estimate_artists[name][0]
        np.testing.assert_allclose(dots.get_ydata(), values.numpy(), rtol=1e-6)
        assert f"<td>{name}</td><td>{stats['mean']:.4f}</td>" in explorer.readout.value
    probs = torch.softmax(torch.tensor(policy), -1).tolist()
    assert [b.get_height() for b in explorer.policy_bars] == pytest.approx(probs)
    # the statistics behave as the lesson says: k1 and k3 unbiased, k2 biased low, k2/k3 >= 0
    stats = explorer.shown["estimators"]
    for name in ("k1", "k3"):
        standard_error = stats[name]["std"] / math.sqrt(200)
        assert abs(stats[name]["bias"]) < 4 * standard_error
    assert stats["k2"]["bias"] < -4 * stats["k2"]["std"] / math.sqrt(200)
    assert stats["k2"]["negative_share"] == stats["k3"]["negative_share"] == 0.0


def test_kl_estimates_are_all_zero_when_policy_equals_reference():
    explorer = gw.kl_explorer(policy_logits=(0.3, 0.1, -0.2, 0.0), ref_logits=(0.3, 0.1, -0.2, 0.0))
    assert explorer.shown["exact"] == pytest.approx(0.0, abs=1e-7)
    for stats in explorer.shown["estimators"].values():
        assert stats["mean"] == pytest.approx(0.0, abs=1e-7)
        assert stats["std"] == pytest.approx(0.0, abs=1e-7)


def test_kl_spread_shrinks_with_more_samples():
    explorer = gw.kl_explorer()
    spread_16 = explorer.shown["estimators"]["k1"]["std"]
    index = gw.SAMPLE_SIZES.index(256)
    send_from_browser(explorer.controls["num_samples"], index=index)  # a SelectionSlider's state
    assert explorer.shown["num_samples"] == 256
    spread_256 = explorer.shown["estimators"]["k1"]["std"]
    assert spread_256 == pytest.approx(spread_16 / 4, rel=0.25)  # 1 / sqrt(N)


# ------------------------------------------------------------------------------------------------
# group-size explorer
# ------------------------------------------------------------------------------------------------


def _independent_group_statistics(p, g, num_groups, scale, seed):
    generator = torch.Generator().manual_seed(seed + g)
    rewards = (torch.rand(num_groups * g, generator=generator) < p).float()
    advantages = group_advantages(rewards, g, scale_rewards=scale).view(num_groups, g)
    correct = advantages[rewards.view(num_groups, g) == 1]
    zero = (rewards.view(num_groups, g).std(dim=1) == 0).float().mean().item()
    return zero, correct.mean().item(), correct.std().item()


@pytest.mark.parametrize("scale", ["group", "none"])
def test_group_size_explorer_numbers_match_simulation_and_formula(scale):
    explorer = gw.group_size_explorer(p=0.8, group_size=8, num_groups=500, seed=1)
    with explorer.hold():
        explorer.controls["p"].value = 0.9
        explorer.controls["G"].value = 6
        explorer.controls["scale_rewards"].value = scale
    shown = explorer.shown
    assert shown["zero_variance_exact"] == pytest.approx(0.9**6 + 0.1**6)
    zero, mean, std = _independent_group_statistics(0.9, 6, 500, scale, 1)
    assert shown["zero_variance_simulated"] == pytest.approx(zero)
    assert shown["correct_advantage_mean"] == pytest.approx(mean, rel=1e-5)
    assert shown["correct_advantage_std"] == pytest.approx(std, rel=1e-5)
    standard_error = math.sqrt(
        shown["zero_variance_exact"] * (1 - shown["zero_variance_exact"]) / 500
    )
    assert abs(zero - shown["zero_variance_exact"]) < 4 * standard_error
    limit = math.sqrt(0.1 / 0.9) if scale == "group" else 0.1
    assert shown["limit"] == pytest.approx(limit)
    assert f"P(zero-variance group) = {0.9**6 + 0.1**6:.3f}" in explorer.readout.value
    sizes = np.arange(2, 65)
    np.testing.assert_allclose(explorer.zero_exact.get_ydata(), 0.9**sizes + 0.1**sizes)
    curve = [_independent_group_statistics(0.9, g, 500, scale, 1)[1] for g in gw.GROUP_SIZES]
    np.testing.assert_allclose(explorer.adv_mean.get_ydata(), curve, rtol=1e-5)
    assert list(explorer.zero_here.get_xdata()) == [6]


def test_large_groups_approach_the_limit_and_rarely_have_zero_variance():
    explorer = gw.group_size_explorer(p=0.5, group_size=2, num_groups=1000)
    small = explorer.shown["correct_advantage_std"]
    explorer.controls["G"].value = 64
    shown = explorer.shown
    assert shown["zero_variance_simulated"] == 0.0
    assert shown["correct_advantage_mean"] == pytest.approx(shown["limit"], rel=0.05)
    assert shown["correct_advantage_std"] < small


def test_updates_are_timed(monkeypatch):
    """``timings`` holds the time of each whole update (compute and render), read off a clock
    that only the (slow) render moves: every timing must be exactly that render's time."""
    explorer = gw.clipping_explorer()
    assert len(explorer.timings) == 1  # the first render
    clock = [0.0]
    monkeypatch.setattr(gw.time, "perf_counter", lambda: clock[0])
    render = explorer._render

    def slow_render():
        clock[0] += 0.25
        render()

    monkeypatch.setattr(explorer, "_render", slow_render)
    for value in (0.1, 0.15, 0.25):
        explorer.controls["epsilon"].value = value
    assert explorer.timings[1:] == [0.25, 0.25, 0.25]
