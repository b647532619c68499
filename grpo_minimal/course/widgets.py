"""Interactive explorers for the notebooks: advantages, clipping, KL and group size.

Each explorer is a function that returns a widget (an ``ipywidgets.VBox``): controls on top, a
text readout with the numbers being shown, and a matplotlib figure. Every number comes from the
core (``grpo_minimal.advantages`` and ``grpo_minimal.losses``); this module only draws.

    advantage_explorer()    equations (1)-(3): a group of G rewards -> the G advantages
    group_size_explorer()   a Bernoulli reward with success probability p: how G changes the
                            chance of a zero-variance group and the noise of the advantage
    clipping_explorer()     equation (6): the clipped surrogate against the ratio, A > 0 and A < 0
    kl_explorer()           equation (7): k1, k2, k3 against the exact KL between two categoricals

Speed: each figure is built once. A change of a control updates the artists (``set_height``,
``set_data``) and renders the figure with Agg into an ``ipywidgets.Image``: no pyplot, no
``ipympl``, the same picture in JupyterLab, in VS Code and in a test. ``explorer.timings`` keeps
the seconds each update took (``bench/widgets.py`` prints them).

Testing: ``explorer.shown`` holds the numbers currently on screen, ``explorer.readout`` the text,
``explorer.figure`` the artists. A callback that raises records the error in ``explorer.errors``,
shows it in the readout (ipywidgets would otherwise only log it) and re-raises.
"""

from __future__ import annotations

import contextlib
import html
import io
import math
import time
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import numpy as np
import PIL.Image
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..advantages import group_advantages, population_std_advantages, rloo_advantages
from ..losses import categorical_kl, clipped_surrogate, kl_k1, kl_k2, kl_k3

__all__ = [
    "ADVANTAGE_METHODS",
    "Explorer",
    "advantage_explorer",
    "clipping_explorer",
    "group_size_explorer",
    "group_size_statistics",
    "kl_estimates",
    "kl_explorer",
    "surrogate_and_gradient",
]

POSITIVE, NEGATIVE, NEUTRAL = "#2a7ab9", "#d1495b", "#888888"
DPI = 72  # figure resolution in the widget; the render is most of an update's time

# the advantage formulas the advantage explorer offers: label -> function of (rewards, G)
ADVANTAGE_METHODS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "GRPO (2), sample std (TRL)": lambda r, g: group_advantages(r, g, scale_rewards="group"),
    "GRPO (2), population std": lambda r, g: population_std_advantages(r, g),
    "mean-only (1), scale_rewards='none'": lambda r, g: group_advantages(
        r, g, scale_rewards="none"
    ),
    "RLOO (3)": lambda r, g: rloo_advantages(r, g),
}


def _fmt(values: Sequence[float], digits: int = 3) -> str:
    """Signed fixed-point list, e.g. ``[+0.500, -1.500]`` (ASCII minus, easy to parse back)."""
    return "[" + ", ".join(f"{v:+.{digits}f}" for v in values) + "]"


def _check_range(name: str, values, low: float, high: float) -> None:
    """Sliders clamp silently; refuse a starting value they cannot show instead."""
    for value in values if isinstance(values, Sequence) else [values]:
        if not low <= value <= high:
            raise ValueError(
                f"{name} must lie in [{low}, {high}] (the slider's range), got {value}"
            )


def _slider(cls, description: str, **kwargs) -> widgets.Widget:
    style = {"description_width": kwargs.pop("description_width", "initial")}
    return cls(description=description, style=style, **kwargs)


class Explorer(widgets.VBox):
    """A VBox with controls, a readout and a figure; subclasses fill in ``_update``.

    ``controls`` maps a name to each input widget; any change of their ``value`` calls
    :meth:`refresh`. After every update, ``shown`` holds the displayed numbers, ``timings`` the
    seconds the update took (compute + render), ``errors`` the exceptions raised (if any).
    """

    def __init__(self, controls: dict[str, widgets.Widget], rows: list[widgets.Widget], figure):
        super().__init__()
        self.controls = controls
        self.figure = figure
        FigureCanvasAgg(figure)
        self.readout = widgets.HTML(layout=widgets.Layout(min_height="3em"))
        self.image = widgets.Image(format="png")
        self.shown: dict = {}
        self.errors: list[BaseException] = []
        self.timings: list[float] = []
        self._held = False
        self.children = [*rows, self.readout, self.image]
        self.add_class("grpo-explorer")
        for control in controls.values():
            control.observe(self.refresh, names="value")
        self.refresh()
        # the first render placed the axes; freeze them so later renders skip the layout pass
        self.figure.set_layout_engine("none")

    def __repr__(self) -> str:  # the text a saved notebook shows instead of the live widget
        return f"<{type(self).__name__}: run the notebook in Jupyter to use the controls>"

    @contextlib.contextmanager
    def hold(self):
        """Change several controls with one update at the end (a test, or a notebook cell).

        ``with explorer.hold(): explorer.controls["G"].value = 8; explorer.controls["r1"]...``
        """
        self._held = True
        try:
            yield self
        finally:
            self._held = False
        self.refresh()

    def refresh(self, change=None) -> None:
        """Recompute from the current control values, update the artists and redraw."""
        if self._held:
            return
        start = time.perf_counter()
        threads = torch.get_num_threads()
        try:
            # the tensors here are tiny: handing work to a second thread costs more than it saves
            # (on a busy 2-core machine, ~10 ms per operation), so compute on one thread
            torch.set_num_threads(1)
            self._update()
            torch.set_num_threads(threads)
            self._render()
        except Exception as error:  # show it where the learner looks, then let it propagate
            self.errors.append(error)
            message = html.escape(f"{type(error).__name__}: {error}")
            self.readout.value = (
                f'<pre class="grpo-error" style="color:#b00020">explorer error: {message}</pre>'
            )
            raise
        finally:
            torch.set_num_threads(threads)
        self.timings.append(time.perf_counter() - start)

    def _update(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _render(self) -> None:
        canvas = self.figure.canvas
        canvas.draw()
        pixels = PIL.Image.frombuffer("RGBA", canvas.get_width_height(), canvas.buffer_rgba())
        buffer = io.BytesIO()
        pixels.save(buffer, format="png", compress_level=1)  # fast; the picture is flat colour
        self.image.value = buffer.getvalue()


# --------------------------------------------------------------------------------------------
# Advantages, equations (1)-(3)
# --------------------------------------------------------------------------------------------

MAX_GROUP = 16
# Reward sliders move in binary fractions: the float32 mean of G equal rewards is then exact, so a
# zero-variance group shows exactly 0. (With steps of 0.1, e.g. three rewards of -0.9, float32
# rounding leaves r - mean(r) ~ 1e-8, which equation (2) divides by std + eps ~ 1e-4: ~1e-3.)
REWARD_STEP = 0.25


class AdvantageExplorer(Explorer):
    def __init__(self, rewards: Sequence[float], method: str):
        if not 2 <= len(rewards) <= MAX_GROUP:
            raise ValueError(f"rewards must hold 2 to {MAX_GROUP} values, got {len(rewards)}")
        if method not in ADVANTAGE_METHODS:
            raise ValueError(f"method must be one of {list(ADVANTAGE_METHODS)}, got {method!r}")
        _check_range("rewards", rewards, -1.0, 1.0)
        initial = list(rewards) + [0.0] * (MAX_GROUP - len(rewards))
        self.reward_sliders = [
            widgets.FloatSlider(
                value=float(v),
                min=-1.0,
                max=1.0,
                step=REWARD_STEP,
                description=f"r{i + 1}",
                orientation="vertical",
                readout_format=".2f",
                layout=widgets.Layout(width="52px", height="170px"),
            )
            for i, v in enumerate(initial)
        ]
        group_size = _slider(
            widgets.IntSlider, "group size G", value=len(rewards), min=2, max=MAX_GROUP
        )
        method_box = widgets.Dropdown(
            options=list(ADVANTAGE_METHODS),
            value=method,
            description="advantage",
            layout=widgets.Layout(width="420px"),
        )
        self.reward_box = widgets.HBox(self.reward_sliders[: len(rewards)])
        controls = {"G": group_size, "method": method_box}
        controls.update({f"r{i + 1}": s for i, s in enumerate(self.reward_sliders)})

        figure = Figure(dpi=DPI, facecolor="white", figsize=(9.0, 3.0), layout="constrained")
        ax_r, ax_a = figure.subplots(1, 2)
        x = np.arange(MAX_GROUP)
        self.reward_bars = ax_r.bar(x, np.zeros(MAX_GROUP), color=NEUTRAL)
        self.std_band = ax_r.axhspan(0.0, 0.0, color=POSITIVE, alpha=0.12, label="mean ± std")
        self.mean_line = ax_r.axhline(0.0, color="black", lw=1.5, label="mean(r)")
        ax_r.set_ylim(-1.15, 1.15)
        ax_r.set_title("rewards $r_i$")
        ax_r.legend(loc="lower right", fontsize=8)
        self.advantage_bars = ax_a.bar(x, np.zeros(MAX_GROUP), color=POSITIVE)
        ax_a.axhline(0.0, color="black", lw=0.8)
        self.advantage_title = ax_a.set_title("advantages $A_i$")
        for ax in (ax_r, ax_a):
            ax.set_xlabel("output i in the group")
            ax.grid(axis="y", alpha=0.3)
        self.axes = (ax_r, ax_a)
        rows = [widgets.HBox([group_size, method_box]), self.reward_box]
        super().__init__(controls, rows, figure)

    def _update(self) -> None:
        g = self.controls["G"].value
        method = self.controls["method"].value
        sliders = self.reward_sliders[:g]
        if list(self.reward_box.children) != sliders:
            self.reward_box.children = sliders
        rewards = torch.tensor([s.value for s in sliders], dtype=torch.float32)
        advantages = ADVANTAGE_METHODS[method](rewards, g)
        mean, std = rewards.mean().item(), rewards.std().item()
        population_std = rewards.std(unbiased=False).item()
        zero_variance = bool((rewards == rewards[0]).all())

        for i, (r_bar, a_bar) in enumerate(zip(self.reward_bars, self.advantage_bars, strict=True)):
            visible = i < g
            r_bar.set_visible(visible)
            a_bar.set_visible(visible)
            if visible:
                r_bar.set_height(rewards[i].item())
                a = advantages[i].item()
                a_bar.set_height(a)
                a_bar.set_color(POSITIVE if a > 0 else NEGATIVE if a < 0 else NEUTRAL)
        self.mean_line.set_ydata([mean, mean])
        self.std_band.set_y(mean - std)
        self.std_band.set_height(2 * std)
        top = max(1.0, 1.15 * advantages.abs().max().item())
        for ax in self.axes:
            ax.set_xlim(-0.6, g - 0.4)
            ax.set_xticks(range(g), [str(i + 1) for i in range(g)])
        self.axes[1].set_ylim(-top, top)
        self.advantage_title.set_text(f"advantages $A_i$: {method}")

        self.shown = {
            "G": g,
            "method": method,
            "rewards": rewards.tolist(),
            "advantages": advantages.tolist(),
            "mean": mean,
            "std": std,
            "population_std": population_std,
            "zero_variance": zero_variance,
        }
        why = ""
        if zero_variance:
            why = (
                '<div class="grpo-zero-variance"><b>Zero-variance group:</b> all G rewards are '
                "equal, so every r<sub>i</sub> &minus; mean(r) is 0 and every advantage is 0 "
                "(GRPO: 0 / (0 + &epsilon;), never NaN). This group gives no gradient.</div>"
            )
        self.readout.value = (
            f"<div>G = {g} &nbsp; mean(r) = {mean:.3f} &nbsp; std(r) = {std:.3f} (sample, "
            f"G&minus;1) &nbsp; population std = {population_std:.3f}</div>"
            f'<div class="grpo-advantages" style="font-family:monospace">A = '
            f"{_fmt(advantages.tolist())}</div>{why}"
        )


def advantage_explorer(
    rewards: Sequence[float] = (1.0, 1.0, 0.0, 1.0),
    method: str = "GRPO (2), sample std (TRL)",
) -> AdvantageExplorer:
    """Sliders for a group of G rewards (G from 2 to 16); bars of their advantages.

    ``method`` picks the formula (a key of ``ADVANTAGE_METHODS``): GRPO with the sample
    (Bessel-corrected) std (equation (2), TRL), with the population std, mean-only (equation (1))
    or RLOO (equation (3)).
    The readout prints the group mean and both stds; a zero-variance group shows zeros and why.
    """
    return AdvantageExplorer(rewards, method)


# --------------------------------------------------------------------------------------------
# Group size with a Bernoulli reward
# --------------------------------------------------------------------------------------------

GROUP_SIZES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def group_size_statistics(
    p: float, g: int, num_groups: int = 2000, scale_rewards: str = "group", seed: int = 0
) -> tuple[float, float, float]:
    """Simulate ``num_groups`` groups of G Bernoulli(p) rewards (seeded by ``seed + G``).

    Returns the share of zero-variance groups and the mean and std of the advantage that a
    correct output receives (zero-variance groups count with their advantage 0), all through
    ``group_advantages``.
    """
    generator = torch.Generator().manual_seed(seed + g)
    rewards = (torch.rand(num_groups * g, generator=generator) < p).float()
    advantages = group_advantages(rewards, g, scale_rewards=scale_rewards).view(num_groups, g)
    zero_share = (advantages == 0).all(dim=1).float().mean().item()
    correct = advantages[rewards.view(num_groups, g) == 1]
    if correct.numel() < 2:
        return zero_share, math.nan, math.nan
    return zero_share, correct.mean().item(), correct.std().item()


class GroupSizeExplorer(Explorer):
    def __init__(self, p: float, group_size: int, num_groups: int, seed: int):
        _check_range("p", p, 0.01, 0.99)
        _check_range("group_size", group_size, 2, 64)
        self.num_groups, self.seed = num_groups, seed
        controls = {
            "p": _slider(
                widgets.FloatSlider,
                "success probability p",
                value=p,
                min=0.01,
                max=0.99,
                step=0.01,
            ),
            "G": _slider(widgets.IntSlider, "group size G", value=group_size, min=2, max=64),
            "scale_rewards": widgets.ToggleButtons(
                options=["group", "none"], value="group", description="scale_rewards"
            ),
        }
        self._curve_key = None
        figure = Figure(dpi=DPI, facecolor="white", figsize=(9.0, 3.0), layout="constrained")
        ax_z, ax_a = figure.subplots(1, 2)
        sizes = np.arange(2, 65)
        (self.zero_exact,) = ax_z.plot(sizes, np.zeros_like(sizes, float), label="$p^G+(1-p)^G$")
        (self.zero_sim,) = ax_z.plot([], [], "o", ms=4, label="simulated")
        (self.zero_here,) = ax_z.plot([], [], "o", ms=9, mfc="none", mew=2, color=NEGATIVE)
        ax_z.set_xscale("log", base=2)
        ax_z.set_ylim(-0.02, 1.02)
        ax_z.set_xlabel("group size G")
        ax_z.set_title("P(zero-variance group): no gradient")
        ax_z.legend(fontsize=8)
        (self.adv_mean,) = ax_a.plot([], [], "o-", ms=3, label="mean")
        (self.adv_low,) = ax_a.plot([], [], "--", color=POSITIVE, lw=1, label="mean ± std")
        (self.adv_high,) = ax_a.plot([], [], "--", color=POSITIVE, lw=1)
        self.adv_limit = ax_a.axhline(0.0, color="black", lw=1, ls=":", label="G → ∞")
        (self.adv_here,) = ax_a.plot([], [], "o", ms=9, mfc="none", mew=2, color=NEGATIVE)
        ax_a.set_xscale("log", base=2)
        ax_a.set_xlabel("group size G")
        ax_a.set_title("advantage of a correct output")
        ax_a.legend(fontsize=8)
        for ax in (ax_z, ax_a):
            ax.set_xlim(1.8, 70)
            ax.set_xticks(GROUP_SIZES[::2], [str(s) for s in GROUP_SIZES[::2]])
            ax.grid(alpha=0.3)
        self.axes = (ax_z, ax_a)
        rows = [widgets.HBox([controls["p"], controls["G"]]), controls["scale_rewards"]]
        super().__init__(controls, rows, figure)

    def _update(self) -> None:
        p = self.controls["p"].value
        g = self.controls["G"].value
        scale = self.controls["scale_rewards"].value
        if self._curve_key != (p, scale):  # the curves over G change only with p and the scale
            sizes = np.arange(2, 65)
            self.zero_exact.set_ydata(p**sizes + (1 - p) ** sizes)
            sims = [
                group_size_statistics(p, s, self.num_groups, scale, self.seed) for s in GROUP_SIZES
            ]
            zero, mean, std = (np.array(column) for column in zip(*sims, strict=True))
            self.zero_sim.set_data(GROUP_SIZES, zero)
            self.adv_mean.set_data(GROUP_SIZES, mean)
            self.adv_low.set_data(GROUP_SIZES, mean - std)
            self.adv_high.set_data(GROUP_SIZES, mean + std)
            # as G grows, mean -> p and std -> sqrt(p (1 - p)): A(correct) -> (1 - p) / std
            limit = math.sqrt((1 - p) / p) if scale == "group" else 1 - p
            self.adv_limit.set_ydata([limit, limit])
            finite = np.isfinite(mean)
            high = max(limit, np.max((mean + std)[finite], initial=0.0))
            self.axes[1].set_ylim(min(0.0, np.min((mean - std)[finite], initial=0.0)), 1.1 * high)
            self._curve_key = (p, scale)
            self._limit = limit
        zero_exact = p**g + (1 - p) ** g
        zero_sim, mean, std = group_size_statistics(p, g, self.num_groups, scale, self.seed)
        self.zero_here.set_data([g], [zero_exact])
        self.adv_here.set_data([g], [mean])
        self.shown = {
            "p": p,
            "G": g,
            "scale_rewards": scale,
            "zero_variance_exact": zero_exact,
            "zero_variance_simulated": zero_sim,
            "correct_advantage_mean": mean,
            "correct_advantage_std": std,
            "limit": self._limit,
        }
        self.readout.value = (
            f'<div class="grpo-group-size">p = {p:.2f}, G = {g}: P(zero-variance group) = '
            f"{zero_exact:.3f} (simulated {zero_sim:.3f} over {self.num_groups} groups)</div>"
            f"<div>a correct output gets A = {mean:.3f} &plusmn; {std:.3f} "
            f"(zero-variance groups count as 0); as G &rarr; &infin;: {self._limit:.3f}</div>"
        )


def group_size_explorer(
    p: float = 0.8, group_size: int = 8, num_groups: int = 2000, seed: int = 0
) -> GroupSizeExplorer:
    """A Bernoulli(p) reward and groups of G outputs: how G changes the chance that a group has
    zero variance (exact ``p**G + (1-p)**G`` and simulated) and the spread of the advantage a
    correct output receives (``num_groups`` simulated groups per G, seeded)."""
    return GroupSizeExplorer(p, group_size, num_groups, seed)


# --------------------------------------------------------------------------------------------
# Clipping, equation (6)
# --------------------------------------------------------------------------------------------

RATIO_MAX = 2.5


def surrogate_and_gradient(
    ratio: torch.Tensor, advantage: float, epsilon: float, epsilon_high: float | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """L_clip of equation (6) at each ratio and its derivative dL_clip/d(rho), by autograd."""
    ratio = ratio.detach().clone().requires_grad_(True)
    value = clipped_surrogate(ratio, torch.tensor(advantage), epsilon, epsilon_high)
    (gradient,) = torch.autograd.grad(value.sum(), ratio)
    return value.detach(), gradient


class ClippingExplorer(Explorer):
    def __init__(self, epsilon: float, epsilon_high: float | None, ratio: float, points: int):
        _check_range("epsilon", epsilon, 0.0, 0.5)
        _check_range("epsilon_high", epsilon if epsilon_high is None else epsilon_high, 0.0, 0.5)
        _check_range("ratio", ratio, 0.0, RATIO_MAX)
        self.ratios = torch.linspace(0.0, RATIO_MAX, points)
        controls = {
            "epsilon": _slider(
                widgets.FloatSlider, "epsilon (low)", value=epsilon, min=0.0, max=0.5, step=0.01
            ),
            "epsilon_high": _slider(
                widgets.FloatSlider,
                "epsilon_high",
                value=epsilon if epsilon_high is None else epsilon_high,
                min=0.0,
                max=0.5,
                step=0.01,
            ),
            "ratio": _slider(
                widgets.FloatSlider,
                "probe ratio ρ",
                value=ratio,
                min=0.0,
                max=RATIO_MAX,
                step=0.01,
            ),
        }
        figure = Figure(dpi=DPI, facecolor="white", figsize=(9.0, 3.0), layout="constrained")
        axes = figure.subplots(1, 2, sharey=True)
        x = self.ratios.numpy()
        self.panels = {}
        for ax, advantage in zip(axes, (1.0, -1.0), strict=True):
            span = ax.axvspan(0.0, 0.0, color=NEUTRAL, alpha=0.25, label="gradient = 0")
            ax.plot(x, x * advantage, "--", color=NEUTRAL, lw=1, label=r"$\rho A$ (unclipped)")
            (line,) = ax.plot(
                x,
                x * advantage,
                color=POSITIVE if advantage > 0 else NEGATIVE,
                lw=2.2,
                label=r"$L^{clip}$ (6)",
            )
            low = ax.axvline(0.8, color="black", lw=0.8, ls=":")
            high = ax.axvline(1.2, color="black", lw=0.8, ls=":")
            (probe,) = ax.plot([], [], "o", ms=8, color="black")
            ax.set_title(f"A = {advantage:+.0f}")
            ax.set_xlabel(r"ratio $\rho = \pi_\theta / \pi_{old}$")
            ax.set_xlim(0.0, RATIO_MAX)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="lower right" if advantage > 0 else "upper right")
            self.panels[advantage] = {
                "span": span,
                "line": line,
                "low": low,
                "high": high,
                "probe": probe,
            }
        axes[0].set_ylim(-RATIO_MAX - 0.1, RATIO_MAX + 0.1)
        axes[0].set_ylabel("objective (maximised)")
        rows = [widgets.HBox([controls["epsilon"], controls["epsilon_high"]]), controls["ratio"]]
        super().__init__(controls, rows, figure)

    def _update(self) -> None:
        eps = self.controls["epsilon"].value
        eps_high = self.controls["epsilon_high"].value
        rho = self.controls["ratio"].value
        shown = {
            "epsilon": eps,
            "epsilon_high": eps_high,
            "ratio": rho,
            "zero_gradient": {},
            "probe": {},
        }
        lines = []
        for advantage, artists in self.panels.items():
            value, gradient = surrogate_and_gradient(self.ratios, advantage, eps, eps_high)
            artists["line"].set_ydata(value.numpy())
            flat = self.ratios[gradient == 0]
            region = (flat.min().item(), flat.max().item()) if flat.numel() else None
            artists["span"].set_visible(region is not None)
            if region is not None:
                artists["span"].set_x(region[0])
                artists["span"].set_width(region[1] - region[0])
            artists["low"].set_xdata([1 - eps, 1 - eps])
            artists["high"].set_xdata([1 + eps_high, 1 + eps_high])
            probe_value, probe_gradient = surrogate_and_gradient(
                torch.tensor([rho]), advantage, eps, eps_high
            )
            artists["probe"].set_data([rho], [probe_value.item()])
            shown["zero_gradient"][advantage] = region
            shown["probe"][advantage] = (probe_value.item(), probe_gradient.item())
            where = "nowhere" if region is None else f"ρ in [{region[0]:.2f}, {region[1]:.2f}]"
            lines.append(
                f"<div>A = {advantage:+.0f}: at ρ = {rho:.2f}, L<sup>clip</sup> = "
                f"{probe_value.item():+.3f}, dL/dρ = {probe_gradient.item():+.3f} "
                f"&nbsp; (gradient 0 {where})</div>"
            )
        self.shown = shown
        self.readout.value = (
            f'<div class="grpo-clipping">clip range [1 &minus; {eps:.2f}, 1 + {eps_high:.2f}] = '
            f"[{1 - eps:.2f}, {1 + eps_high:.2f}]</div>" + "".join(lines)
        )


def clipping_explorer(
    epsilon: float = 0.2, epsilon_high: float | None = None, ratio: float = 1.3, points: int = 1001
) -> ClippingExplorer:
    """The clipped surrogate (6) against the ratio for A = +1 and A = -1.

    Sliders for ``epsilon`` and ``epsilon_high`` (DAPO's clip-higher; None starts symmetric) and a
    probe ratio. The region where dL_clip/d(rho) = 0 (found by autograd on ``clipped_surrogate``)
    is shaded; the readout prints the objective and its slope at the probe ratio.
    """
    return ClippingExplorer(epsilon, epsilon_high, ratio, points)


# --------------------------------------------------------------------------------------------
# KL estimators, equation (7)
# --------------------------------------------------------------------------------------------

SAMPLE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
KL_ESTIMATORS = {"k1": kl_k1, "k2": kl_k2, "k3": kl_k3}


def kl_estimates(
    policy_logits: torch.Tensor,
    ref_logits: torch.Tensor,
    num_samples: int,
    draws: int,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """``draws`` Monte-Carlo estimates of KL(pi || pi_ref), each the mean of k1, k2 or k3 (7)
    over ``num_samples`` actions sampled from pi. Returns {"k1": [draws], "k2": ..., "k3": ...}."""
    log_p = torch.log_softmax(policy_logits, dim=-1)
    log_q = torch.log_softmax(ref_logits, dim=-1)
    generator = torch.Generator().manual_seed(seed)
    actions = torch.multinomial(log_p.exp(), draws * num_samples, True, generator=generator)
    logps, ref_logps = log_p[actions], log_q[actions]
    return {
        name: estimator(logps, ref_logps).view(draws, num_samples).mean(dim=1)
        for name, estimator in KL_ESTIMATORS.items()
    }


class KLExplorer(Explorer):
    def __init__(self, policy_logits, ref_logits, num_samples: int, draws: int, seed: int):
        if len(policy_logits) != len(ref_logits):
            raise ValueError("policy_logits and ref_logits must have the same length")
        _check_range("policy_logits", policy_logits, -3.0, 3.0)
        _check_range("ref_logits", ref_logits, -3.0, 3.0)
        if num_samples not in SAMPLE_SIZES:
            raise ValueError(f"num_samples must be one of {SAMPLE_SIZES}, got {num_samples}")
        self.draws, self.seed = draws, seed
        k = len(policy_logits)

        def logit_slider(prefix, i, value):
            return widgets.FloatSlider(
                value=float(value),
                min=-3.0,
                max=3.0,
                step=0.1,
                description=f"{prefix}{i + 1}",
                orientation="vertical",
                readout_format=".1f",
                layout=widgets.Layout(width="52px", height="150px"),
            )

        self.policy_sliders = [logit_slider("π", i, v) for i, v in enumerate(policy_logits)]
        self.ref_sliders = [logit_slider("ref", i, v) for i, v in enumerate(ref_logits)]
        controls = {f"policy{i + 1}": s for i, s in enumerate(self.policy_sliders)}
        controls.update({f"ref{i + 1}": s for i, s in enumerate(self.ref_sliders)})
        controls["num_samples"] = _slider(
            widgets.SelectionSlider,
            "samples per estimate N",
            options=SAMPLE_SIZES,
            value=num_samples,
        )

        figure = Figure(dpi=DPI, facecolor="white", figsize=(9.0, 3.2), layout="constrained")
        ax_d, ax_k = figure.subplots(1, 2, width_ratios=(1, 1.3))
        x = np.arange(k)
        self.policy_bars = ax_d.bar(x - 0.2, np.zeros(k), 0.4, color=POSITIVE, label=r"$\pi$")
        self.ref_bars = ax_d.bar(x + 0.2, np.zeros(k), 0.4, color=NEUTRAL, label=r"$\pi_{ref}$")
        ax_d.set_ylim(0.0, 1.0)
        ax_d.set_xticks(x, [f"a{i + 1}" for i in range(k)])
        ax_d.set_title("two categorical distributions")
        ax_d.legend(fontsize=8)
        self.exact_line = ax_k.axhline(0.0, color="black", lw=1.2, label="exact KL")
        rng = np.random.default_rng(seed)
        self.jitter = rng.uniform(-0.18, 0.18, size=draws)
        self.estimate_artists = {}
        for j, name in enumerate(KL_ESTIMATORS):
            (dots,) = ax_k.plot([], [], ".", ms=3, alpha=0.35, color=f"C{j}")
            (spread,) = ax_k.plot([], [], "-", lw=3, color="black")
            (mean,) = ax_k.plot([], [], "D", ms=7, color="black")
            self.estimate_artists[name] = (dots, spread, mean)
        self.estimate_artists["k1"][2].set_label("mean, ± std over draws")
        ax_k.set_xticks(range(3), [f"{name} (7)" for name in KL_ESTIMATORS])
        ax_k.set_xlim(-0.5, 2.5)
        self.kl_title = ax_k.set_title("")
        ax_k.legend(fontsize=8, loc="upper right")
        for ax in (ax_d, ax_k):
            ax.grid(axis="y", alpha=0.3)
        self.axes = (ax_d, ax_k)
        rows = [
            widgets.HBox(
                [
                    widgets.HBox(self.policy_sliders),
                    widgets.HTML("&nbsp;" * 4),
                    widgets.HBox(self.ref_sliders),
                ]
            ),
            controls["num_samples"],
        ]
        super().__init__(controls, rows, figure)

    def _update(self) -> None:
        policy_logits = torch.tensor([s.value for s in self.policy_sliders])
        ref_logits = torch.tensor([s.value for s in self.ref_sliders])
        n = self.controls["num_samples"].value
        exact = categorical_kl(policy_logits, ref_logits).item()
        estimates = kl_estimates(policy_logits, ref_logits, n, self.draws, self.seed)
        for bar, prob in zip(self.policy_bars, torch.softmax(policy_logits, -1), strict=True):
            bar.set_height(prob.item())
        for bar, prob in zip(self.ref_bars, torch.softmax(ref_logits, -1), strict=True):
            bar.set_height(prob.item())
        self.exact_line.set_ydata([exact, exact])
        stats = {}
        low, high = min(exact, 0.0), exact
        for j, (name, values) in enumerate(estimates.items()):
            mean, std = values.mean().item(), values.std().item()
            stats[name] = {
                "mean": mean,
                "bias": mean - exact,
                "std": std,
                "negative_share": (values < 0).float().mean().item(),
            }
            dots, spread, mean_marker = self.estimate_artists[name]
            dots.set_data(j + self.jitter, values.numpy())
            spread.set_data([j, j], [mean - std, mean + std])
            mean_marker.set_data([j], [mean])
            # zoom on the bulk: 1st-99th percentile of the draws and the mean ± std
            low = min(low, values.quantile(0.01).item(), mean - std)
            high = max(high, values.quantile(0.99).item(), mean + std)
        pad = 0.08 * (high - low) + 1e-3
        self.axes[1].set_ylim(low - pad, high + pad)
        self.kl_title.set_text(f"{self.draws} estimates, each from N = {n} samples of π")
        self.shown = {
            "exact": exact,
            "num_samples": n,
            "draws": self.draws,
            "estimators": stats,
            "policy_probs": torch.softmax(policy_logits, -1).tolist(),
            "ref_probs": torch.softmax(ref_logits, -1).tolist(),
        }
        rows = "".join(
            f"<tr><td>{name}</td><td>{s['mean']:.4f}</td><td>{s['bias']:+.4f}</td>"
            f"<td>{s['std']:.4f}</td><td>{s['negative_share']:.2f}</td></tr>"
            for name, s in stats.items()
        )
        self.readout.value = (
            f'<div class="grpo-kl">exact KL(π || π_ref) = {exact:.4f} &nbsp; '
            f"(N = {n} samples per estimate, {self.draws} draws)</div>"
            '<table style="font-family:monospace"><tr><th>estimator</th><th>mean</th>'
            "<th>bias</th><th>std over draws</th><th>share &lt; 0</th></tr>"
            f"{rows}</table>"
        )


def kl_explorer(
    policy_logits: Sequence[float] = (1.0, 0.0, -1.0, 0.2),
    ref_logits: Sequence[float] = (0.5, 0.0, -0.5, 0.2),
    num_samples: int = 16,
    draws: int = 300,
    seed: int = 0,
) -> KLExplorer:
    """Exact KL(pi || pi_ref) between two categoricals (logit sliders) against the Monte-Carlo
    estimators k1, k2, k3 of equation (7): ``draws`` estimates, each the mean over
    ``num_samples`` actions from pi (seeded); their mean (bias) and spread are drawn and printed."""
    return KLExplorer(policy_logits, ref_logits, num_samples, draws, seed)
