"""How long one widget update takes, for each explorer in grpo_minimal.course.widgets.

    python bench/widgets.py [--updates 30]

Each explorer is built once; then one control is moved ``--updates`` times, one value at a
time, as a person dragging a slider would. Two times per update are printed (median and max):

- ``update``: what the explorer measures around its callback (compute with the core functions,
  update the artists, render the PNG), ``explorer.timings``;
- ``assign``: the whole ``control.value = x`` in Python (traitlets, the callback, the message to
  the front end). The round trip through a browser adds the comm latency on top.

The target is under 100 ms so that dragging feels live. Times are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import matplotlib
import torch

from grpo_minimal.course import widgets

TARGET_MS = 100.0

# explorer, control, the values it steps through (cycled)
CASES = [
    ("advantage", "reward r1", lambda: widgets.advantage_explorer(), "r1", [0.9, 0.5, 0.1, -0.3]),
    ("advantage", "group size G", lambda: widgets.advantage_explorer(), "G", [8, 16, 3, 4]),
    ("group size", "G", lambda: widgets.group_size_explorer(), "G", [4, 16, 32, 8]),
    ("group size", "p (new curves)", lambda: widgets.group_size_explorer(), "p", [0.5, 0.7, 0.9]),
    ("clipping", "epsilon", lambda: widgets.clipping_explorer(), "epsilon", [0.1, 0.3, 0.2]),
    ("clipping", "probe ratio", lambda: widgets.clipping_explorer(), "ratio", [0.5, 1.1, 1.6]),
    ("KL", "policy logit", lambda: widgets.kl_explorer(), "policy1", [0.0, 1.5, 2.5, 1.0]),
    ("KL", "samples N", lambda: widgets.kl_explorer(), "num_samples", [4, 64, 1024, 16]),
]


def ms(seconds: list[float]) -> tuple[float, float]:
    return 1000 * statistics.median(seconds), 1000 * max(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30, help="control moves per explorer")
    args = parser.parse_args()

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load:.1f}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"matplotlib {matplotlib.__version__}, {args.updates} updates each"
    )
    print(
        f"{'explorer':11s} {'control':16s} {'update median/max ms':>21s} {'assign median/max ms':>21s}"
    )
    worst = 0.0
    for name, control_name, build, control, values in CASES:
        explorer = build()
        explorer.timings.clear()
        assign = []
        for i in range(args.updates):
            value = values[i % len(values)]
            if explorer.controls[control].value == value:
                value = values[(i + 1) % len(values)]
            start = time.perf_counter()
            explorer.controls[control].value = value
            assign.append(time.perf_counter() - start)
        update_median, update_max = ms(explorer.timings)
        assign_median, assign_max = ms(assign)
        worst = max(worst, assign_median)
        print(
            f"{name:11s} {control_name:16s} {update_median:9.1f} / {update_max:7.1f}"
            f"  {assign_median:9.1f} / {assign_max:7.1f}"
        )
    verdict = "under" if worst < TARGET_MS else "OVER"
    print(f"slowest median update {worst:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")


if __name__ == "__main__":
    main()
