"""CartPole GRPO: environment steps and wall seconds until solved, for several seeds.

Solved = the greedy policy averages >= 475 over 100 evaluation episodes (CartPole-v1), checked
whenever the batch's sampled return reaches half of that (a 10-episode screen first).
Training steps exclude the evaluation episodes, which are reported separately; wall seconds
include everything (rollouts, updates, evaluations).

    python bench/cartpole.py                 # default config, seeds 1-5
    python bench/cartpole.py --seeds 1 2 3 --advantage all_steps
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import torch

from grpo_minimal.config import ADVANTAGE_MODES, CartPoleConfig
from grpo_minimal.control import train_cartpole


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--advantage", choices=ADVANTAGE_MODES, default="per_step")
    parser.add_argument("--budget", type=int, default=500_000, help="max env steps per seed")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: a 64-unit MLP gains nothing from more)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"config: CartPoleConfig defaults, advantage={args.advantage}, budget={args.budget}")
    print(
        f"{'seed':>4} {'solved':>6} {'env steps':>10} {'eval steps':>10} {'wall s':>7} {'updates':>7} {'greedy':>7}"
    )
    steps, walls = [], []
    for seed in args.seeds:
        cfg = CartPoleConfig(seed=seed, advantage=args.advantage, total_env_steps=args.budget)
        _, history = train_cartpole(cfg, progress=False)
        last = history[-1]
        solved = bool(last.get("solved"))
        if solved:
            steps.append(last["env_steps"])
            walls.append(last["wall_s"])
        print(
            f"{seed:>4} {str(solved):>6} {last['env_steps']:>10} {last['eval_env_steps']:>10} "
            f"{last['wall_s']:>7.1f} {last['update']:>7} {last.get('eval_return', float('nan')):>7.1f}"
        )
    print(f"solved {len(steps)}/{len(args.seeds)} seeds")
    if steps:
        print(
            f"median over solved seeds: {statistics.median(steps):.0f} env steps, "
            f"{statistics.median(walls):.1f} wall s"
        )


if __name__ == "__main__":
    main()
