"""CartPole GRPO: environment steps and wall seconds until solved, for several seeds.

Solved (``envs.stopping_check``) = the greedy policy averages >= 475 (CartPole-v1) over 100
episodes from the stopping start states (``STOP_SEED``, after a 10-episode screen) and again over
100 fresh ones (``CONFIRM_SEED``); the check runs whenever the batch's sampled return reaches half
of that. Both sets decide when to stop, so their means are selected, not measured: the figure to
report is "held-out", 100 greedy episodes from ``HELD_OUT_SEED`` start states, which decide nothing
(``evaluate_policy`` with its default seed), run once after training.

Training steps exclude the evaluation episodes, which are reported separately; wall seconds
include everything the trainer does (rollouts, updates, stopping checks), not the held-out run.

    python bench/cartpole.py                 # default config, seeds 1-5
    python bench/cartpole.py --seeds 1 2 3 --advantage all_steps
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics

import torch

from grpo_minimal.envs import HELD_OUT_SEED, evaluate_policy
from grpo_minimal.gym_grpo import ADVANTAGE_MODES, CartPoleConfig, train_cartpole

NAN = float("nan")


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

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else NAN
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {load:.1f}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"config: CartPoleConfig defaults, advantage={args.advantage}, budget={args.budget}")
    print(
        "stop = greedy mean of the last stopping check, confirm = on the confirming set (both"
        " decide);"
        f"\nheld-out = 100 greedy episodes from seed {HELD_OUT_SEED} on (decide nothing): report it"
    )
    print(
        f"{'seed':>4} {'solved':>6} {'env steps':>10} {'eval steps':>10} {'wall s':>7} "
        f"{'updates':>7} {'stop':>6} {'confirm':>7} {'held-out':>16}"
    )
    steps, walls, held_out = [], [], []
    for seed in args.seeds:
        cfg = CartPoleConfig(seed=seed, advantage=args.advantage, total_env_steps=args.budget)
        policy, history = train_cartpole(cfg, progress=False)
        last = history[-1]
        checks = [r for r in history if "eval_return" in r]
        check = checks[-1] if checks else {}  # the last stopping check
        solved = bool(last.get("solved"))
        if solved:
            steps.append(last["env_steps"])
            walls.append(last["wall_s"])
        greedy = evaluate_policy(policy, cfg.env_id, 100)  # HELD_OUT_SEED start states
        held_out.append(float(greedy.mean()))
        print(
            f"{seed:>4} {str(solved):>6} {last['env_steps']:>10} {last['eval_env_steps']:>10} "
            f"{last['wall_s']:>7.1f} {last['update']:>7} {check.get('eval_return', NAN):>6.1f} "
            f"{check.get('confirm_return', NAN):>7.1f} "
            f"{f'{greedy.mean():.1f} +/- {greedy.std():.1f}':>16}"
        )
    print(f"solved {len(steps)}/{len(args.seeds)} seeds")
    if steps:
        print(
            f"median over solved seeds: {statistics.median(steps):.0f} env steps, "
            f"{statistics.median(walls):.1f} wall s"
        )
    print(
        f"held-out greedy mean over seeds: median {statistics.median(held_out):.1f}, "
        f"min {min(held_out):.1f}, {sum(h >= 475 for h in held_out)}/{len(held_out)} seeds >= 475"
    )


if __name__ == "__main__":
    main()
