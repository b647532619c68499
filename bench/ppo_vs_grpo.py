"""PPO vs GRPO on CartPole-v1: the same seeds, one process, ratios GRPO / PPO with intervals.

    .venv/bin/python bench/ppo_vs_grpo.py              # seeds 1-5, standard configs
    .venv/bin/python bench/ppo_vs_grpo.py --variants   # plus GRPO mean-only and RLOO
    .venv/bin/python bench/ppo_vs_grpo.py --quick      # 2 seeds, 20k-step budgets (smoke test)

GRPO runs ``CartPoleConfig()`` (the course default) and PPO ``PPOConfig()``: our CleanRL-style
PPO (``grpo_minimal/ppo.py``) with the hyper-parameters of CleanRL's ``ppo.py`` for CartPole-v1
(up to 500k steps, 4 envs x 128 steps, ...). Both stop by the same rule
(``envs.stopping_check``): a 10-episode greedy screen, then 100 greedy episodes from reset
seed ``STOP_SEED`` (10000) must average >= 475, and 100 fresh ones from ``CONFIRM_SEED`` (20000)
must too; so "steps to solve" means the same for both. Training start states come from
``[TRAIN_SEED_LOW, 2**31)``. Environment steps count training steps only (evaluation episodes
are not counted for either). The final greedy return is a fresh 100-episode greedy evaluation
of the policy training returned on the held-out start states ``HELD_OUT_SEED`` (100000-100099),
which decided nothing, so the stopping rule cannot flatter it.

Time to solve is given twice. "wall s" is the trainer's own clock at the solving update, so it
includes the greedy evaluations, which both methods run by the same rule but PPO, updating every
512 steps, runs more often. "train s" / "train cpu s" replay the same seed with evaluation
switched off up to the same step count (evaluation draws nothing from training's random
streams, so the replay follows the same trajectory): the cost of learning alone, in wall and in
CPU seconds (``time.process_time``, less disturbed by other processes on the cores). Wall time
is measured on whatever else the machine is doing: compare ratios from one run, never absolute
seconds across machines. By default torch runs on one thread: the networks are
tiny, and on a shared 2-core machine a second thread mostly waits (it made GRPO 10-40x slower
here). ``--threads 0`` keeps torch's default.

Every ratio GRPO / PPO comes with a 95% percentile bootstrap interval over seeds
(``bootstrap_ci``: the seeds of each method resampled with replacement, independently, 10,000
times, numpy seed 0). An interval that contains 1 is printed "not resolved with N seeds".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grpo_minimal.course.stats import bootstrap_ci  # noqa: E402
from grpo_minimal.envs import HELD_OUT_SEED, evaluate_policy  # noqa: E402
from grpo_minimal.gym_grpo import CartPoleConfig, train_cartpole  # noqa: E402
from grpo_minimal.ppo import PPOConfig, train_ppo  # noqa: E402

METHODS = {
    "grpo": (train_cartpole, CartPoleConfig()),
    "ppo": (train_ppo, PPOConfig()),
}
VARIANTS = {
    "grpo mean-only": (train_cartpole, CartPoleConfig(scale_rewards="none")),
    "rloo": (train_cartpole, CartPoleConfig(scale_rewards="none", baseline="rloo")),
}


class _Reached(Exception):
    pass


def training_time(train, cfg, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds to train ``steps`` environment steps with evaluation switched off."""

    def stop_at(record: dict) -> None:
        if record["env_steps"] >= steps:
            raise _Reached

    wall, cpu = time.perf_counter(), time.process_time()
    try:
        train(replace(cfg, solve_threshold=float("inf")), progress=False, on_update=stop_at)
    except _Reached:
        pass
    return time.perf_counter() - wall, time.process_time() - cpu


def run(train, cfg, seed: int) -> dict:
    """Train one seed: steps and seconds to solve (None if unsolved), final greedy return."""
    cfg = replace(cfg, seed=seed)
    policy, history = train(cfg, progress=False)
    last = next((r for r in history if r.get("solved")), history[-1])
    greedy = evaluate_policy(policy, cfg.env_id, 100, seed=HELD_OUT_SEED)  # decides nothing
    train_s, train_cpu_s = training_time(train, cfg, last["env_steps"])
    return {
        "seed": seed,
        "solved": bool(last.get("solved")),
        "steps": last["env_steps"],
        "wall_s": last["wall_s"],
        "train_s": train_s,
        "train_cpu_s": train_cpu_s,
        "eval_steps": last["eval_env_steps"],
        "updates": last["update"],
        "greedy": float(greedy.mean()),
        "greedy_std": float(greedy.std()),
    }


def median(rows: list[dict], key: str, fmt: str = ".2f") -> str:
    """Median over seeds; an unsolved seed counts with its whole budget, marked '>='."""
    value = statistics.median(r[key] for r in rows)
    return ("" if all(r["solved"] for r in rows) else ">=") + format(value, fmt)


def ratio_text(rows: list[dict], baseline: list[dict], key: str, stat=np.median) -> str:
    """'1.23x [0.90, 1.70]' for stat(rows) / stat(baseline), with 'not resolved' if CI has 1."""
    estimate, low, high = bootstrap_ci(
        [r[key] for r in rows], [r[key] for r in baseline], stat=stat
    )
    text = f"{estimate:.2f}x [{low:.2f}, {high:.2f}]"
    if low <= 1.0 <= high:
        text += f" not resolved with {min(len(rows), len(baseline))} seeds"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--quick", action="store_true", help="2 seeds, 20k-step budgets")
    parser.add_argument("--variants", action="store_true", help="add GRPO mean-only and RLOO")
    parser.add_argument("--threads", type=int, default=1, help="torch threads; 0 keeps default")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    methods = dict(METHODS, **(VARIANTS if args.variants else {}))
    seeds = args.seeds[:2] if args.quick else args.seeds
    if args.quick:
        methods = {k: (t, replace(c, total_env_steps=20_000)) for k, (t, c) in methods.items()}

    print(f"CartPole-v1, seeds {seeds}, torch threads {torch.get_num_threads()}")
    for name, (_, cfg) in methods.items():
        print(f"  {name}: {type(cfg).__name__} budget {cfg.total_env_steps} steps")
    results: dict[str, list[dict]] = {name: [] for name in methods}
    jobs = [(name, seed) for seed in seeds for name in methods]  # interleaved: fairer timing
    for name, seed in tqdm(jobs, desc="runs", leave=False):
        train, cfg = methods[name]
        results[name].append(run(train, cfg, seed))

    print()
    print("to solve: steps = training env steps; wall s = trainer clock, evaluation included;")
    print("train s / train cpu s = the same run replayed without evaluation; eval steps = env")
    print("steps spent on greedy evaluation (not counted in steps). '>' marks an unsolved run.")
    print(f"greedy, held-out = 100 greedy episodes from reset seed {HELD_OUT_SEED} (mean +/- std).")
    print(
        f"{'method':<15}{'seed':>5}{'steps':>9}{'wall s':>8}{'train s':>9}{'train cpu s':>12}"
        f"{'eval steps':>11}{'updates':>8}{'greedy, held-out':>19}"
    )
    for name, rows in results.items():
        for r in rows:
            mark = "" if r["solved"] else ">"
            print(
                f"{name:<15}{r['seed']:>5}{mark + str(r['steps']):>9}"
                f"{mark + format(r['wall_s'], '.2f'):>8}{mark + format(r['train_s'], '.2f'):>9}"
                f"{mark + format(r['train_cpu_s'], '.2f'):>12}{r['eval_steps']:>11}"
                f"{r['updates']:>8}{r['greedy']:>12.1f} +/- {r['greedy_std']:<5.1f}"
            )

    print()
    print(
        f"{'method':<15}{'solved':>8}{'steps':>11}{'wall s':>9}{'train s':>9}"
        f"{'train cpu s':>12}{'greedy':>8}   (medians; greedy: mean)"
    )
    for name, rows in results.items():
        greedy = statistics.mean(r["greedy"] for r in rows)
        print(
            f"{name:<15}{sum(r['solved'] for r in rows):>6}/{len(rows)}"
            f"{median(rows, 'steps', '.0f'):>11}{median(rows, 'wall_s'):>9}"
            f"{median(rows, 'train_s'):>9}{median(rows, 'train_cpu_s'):>12}{greedy:>8.1f}"
        )

    print()
    print("ratios X / ppo over seeds, with 95% percentile bootstrap intervals (10,000 resamples):")
    ppo = results["ppo"]
    for name, rows in results.items():
        if name != "ppo":
            print(f"{name}/ppo, medians: env steps to solve {ratio_text(rows, ppo, 'steps')};")
            print(f"  wall time to solve {ratio_text(rows, ppo, 'wall_s')};")
            print(
                f"  training only: wall {ratio_text(rows, ppo, 'train_s')},"
                f" cpu {ratio_text(rows, ppo, 'train_cpu_s')};"
            )
            print(f"  held-out greedy return (means) {ratio_text(rows, ppo, 'greedy', np.mean)}")
    if not all(r["solved"] for rows in results.values() for r in rows):
        print("(an unsolved run counts with its whole budget in the medians and ratios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
