"""PPO vs GRPO on a language model: the same task, seeds and completions sampled per step.

    .venv/bin/python bench/llm_ppo_vs_grpo.py            # the tiny model, 2 settings x 5 seeds
    .venv/bin/python bench/llm_ppo_vs_grpo.py --quick    # 2 seeds, 40 steps (a smoke test)
    .venv/bin/python bench/llm_ppo_vs_grpo.py --real     # SmolLM2-135M: memory and s / step
    .venv/bin/python bench/llm_ppo_vs_grpo.py --epochs   # GRPO with PPO's 4 epochs (a control)
    .venv/bin/python bench/llm_ppo_vs_grpo.py --controls # what PPO's lead is made of (below)
    .venv/bin/python bench/llm_ppo_vs_grpo.py --replan   # --real's plan at the run's prompt length

**The tiny model** (``data/tiny_math_lm``, two-digit addition), in two settings, each with the
same number of completions sampled per step for both methods:

- ``defaults``: each command's own defaults. GRPO: ``MathConfig.for_device("cpu")``, 8 prompts
  x 8 completions. PPO: ``LMPPOConfig.for_device("cpu")``, 64 prompts x 1, the critic's settings
  of TRL's last PPOConfig (4 epochs, 1 minibatch, lambda 0.95, c_V 0.1, value clip 0.2). Both:
  600 steps, learning rate 1e-4 decaying to 0, beta 0.04, at most 5 new tokens.
- ``seed_batch``: the seed's "equal effective batch" (``shared/seeds/003``): GRPO 4 prompts x 4,
  PPO 16 x 1; everything else as in ``defaults``.

Every run is its own process (so its peak memory is its own) on one torch thread, two runs at a
time on two cores (``--workers``): seconds are comparable between methods in this run, not
across machines. Held-out greedy accuracy is measured on the first 500 test problems every 50
steps; nothing was chosen on them (PPO's settings are TRL's defaults, GRPO's the course's).

Reported for each setting, with 95% Student-t intervals over the paired seeds
(``course.stats.t_interval``; "not resolved" when an interval contains 0, or 1 for a ratio):

- accuracy after the same steps (= the same completions sampled), PPO - GRPO;
- accuracy at equal training seconds: for each seed, the later of each method's evaluations
  made within the seconds of the faster method's whole run;
- seconds per step, split into sampling, the critic's pass over the rollout (PPO) and the rest
  (scoring, the fixed log-prob passes and the update, for both), and their ratio;
- memory: each run's peak resident memory above what it held once the model was loaded
  (``device.peak_memory_mb`` after ``reset_peak_memory``; evaluation included), beside
  notebook 09's planner (``course.memory.plan_update``, float32) for the same batch;
- the critic's explained variance (PPO) at the start, middle and end of training;
- stability: the spread of final accuracy over seeds, the largest KL to the reference, the
  shortest mean completion, and collapses (held-out accuracy ending 10 points or more below the
  run's own best).

**The control** (``--epochs``): PPO's default update takes 4 AdamW steps per sampled batch (4
epochs), GRPO's 1. GRPO with ``num_iterations=4`` (its clipped epochs, the same knob) at the
``defaults`` batch, over the same seeds, separates the epochs from the critic; it is compared
with the PPO runs of ``llm_ppo_vs_grpo.json``, paired by seed.

**The controls** (``--controls``): what PPO's lead per completion at the defaults is made of.
Each control changes one thing, over the same 5 seeds, 600 steps, paired by seed with the
committed ``defaults`` runs (PPO, GRPO) and the ``--epochs`` runs (``CONTROLS``,
``COMPARISONS`` say which difference separates what): PPO at GRPO's layout, 8 prompts x 8
(the same rollouts); PPO with no critic (``value_coef`` 0 with the head at 0: V = 0, so the
baseline is the batch whitening alone); both methods at ``beta`` 0 (no KL anywhere); GRPO over
group sizes at 64 completions (32 x 2, 16 x 4: more prompts, smaller groups); PPO over the steps
that fit GRPO's seconds, its schedule annealed within them (``fit_steps``); GRPO's defaults
again (its share of all-equal groups, ``frac_zero_std``, which the committed runs did not keep).
Then the three reference settings again for 60 steps each per seed, interleaved in the same
pool: their seconds per step. Every run keeps its prompts drawn and passes over the 3,000
training problems. Results: ``llm_ppo_vs_grpo_controls.json``; finished runs are kept in a
partial file, and ``--resume`` goes on from it.

Every results file records its ``provenance`` (date, machine, CPUs, threads, versions, commit).

**The real model** (``--real``, SmolLM2-135M-Instruct after ``grpo-minimal fetch smollm2-135m``):
a few steps of each at notebook 11's settings (16 completions per step: GRPO 2 x 8, PPO 16 x 1),
with and without a reference (beta 0 and 0.04): peak memory and seconds per step, split; one
run at a time, on 2 torch threads.
Results: ``bench/results/llm_ppo_vs_grpo.json`` (``--real``: ``llm_ppo_vs_grpo_real.json``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provenance import provenance  # noqa: E402  (bench/ is on the path when it runs)

RESULTS = Path(__file__).resolve().parent / "results"
SETTINGS = {  # (GRPO prompts x G, PPO prompts): the same completions per step
    "defaults": ((8, 8), 64),
    "seed_batch": ((4, 4), 16),
}
COLLAPSE = 0.10  # held-out accuracy ending this far below the run's own best


def resident_mb() -> float:
    """The process's resident memory now (VmRSS), MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**10
    return float("nan")


def planned_mb(model, algo: str, completions: int, seq_len: int, beta: float) -> float:
    """Notebook 09's planner for one update of this batch, float32, MiB."""
    from grpo_minimal.course.memory import plan_update

    rows = plan_update(model.config, algo, completions, seq_len, "float32", beta)
    return sum(row.total for row in rows) / 2**20


def longest_prompt_tokens(rows, tokenizer, cfg) -> int:
    """The longest prompt in tokens as the run feeds it: formatted with ``cfg.prompt_template``
    (for a chat model the chat template around the question), tokenized as sampling does."""
    from grpo_minimal.lm_model import format_prompt

    return max(
        len(
            tokenizer(
                format_prompt(r["prompt"], tokenizer, cfg.prompt_template), add_special_tokens=False
            )["input_ids"]
        )
        for r in rows
    )


def one_run(job: dict) -> dict:
    """Train one (method, setting, seed) in this process; return what the summary needs."""
    import torch

    from grpo_minimal.data import load_math_rows
    from grpo_minimal.device import reset_peak_memory
    from grpo_minimal.lm_ppo import LMPPOConfig
    from grpo_minimal.lm_train import MathConfig, setup, train_math

    torch.set_num_threads(job.get("threads", 1))
    ppo = job["algo"] == "ppo"
    cls = LMPPOConfig if ppo else MathConfig
    cfg = cls.for_device("cpu", **job["config"])
    model, tokenizer = setup(cfg)
    baseline = resident_mb()
    reset_peak_memory(torch.device("cpu"))
    start = time.perf_counter()
    _, history = train_math(cfg, model, tokenizer, progress=False)  # the config picks the trainer
    wall = time.perf_counter() - start
    steps = [r for r in history if "reward_mean" in r]
    per_step = cfg.prompts_per_step * cfg.num_generations
    keys = (
        "kl",
        "completion_length",
        "reward_mean",
        "sample_s",
        "critic_s",
        "update_s",
        "step_s",
        "explained_variance",
        "value_loss",
        "frac_zero_std",
    )
    train_rows = load_math_rows(cfg.dataset, "train")
    rows = train_rows[:1000]
    longest_prompt = longest_prompt_tokens(rows, tokenizer, cfg)
    return {
        **{k: job[k] for k in ("algo", "setting", "seed")},
        "config": cfg.to_dict(),
        "completions_per_step": per_step,
        "train_problems": len(train_rows),
        "evals": [
            {
                "step": r["step"],
                "train_s": r["train_s"],
                "accuracy": r["eval_accuracy"],
                "completions": r["step"] * per_step,
            }
            for r in history
            if "eval_accuracy" in r
        ],
        "curves": {k: [r.get(k) for r in steps] for k in keys if k in steps[0]},
        "train_s": history[-1]["train_s"],
        "wall_s": round(wall, 1),
        "peak_above_model_mb": round(history[-1]["peak_memory_mb"] - baseline, 1),
        "planned_update_mb": round(
            planned_mb(
                model,
                job["algo"],
                per_step // max(1, cfg.gradient_accumulation_steps),
                longest_prompt + cfg.max_completion_length,
                cfg.beta,
            ),
            2,
        ),
    }


def jobs_for(seeds, steps: int, eval_every: int) -> list[dict]:
    jobs = []
    for setting, ((prompts, group), ppo_prompts) in SETTINGS.items():
        for seed in seeds:
            common = {"seed": seed, "max_steps": steps, "eval_every": eval_every, "eval_n": 500}
            jobs.append(
                {
                    "algo": "grpo",
                    "setting": setting,
                    "seed": seed,
                    "config": common | {"prompts_per_step": prompts, "num_generations": group},
                }
            )
            jobs.append(
                {
                    "algo": "ppo",
                    "setting": setting,
                    "seed": seed,
                    "config": common | {"prompts_per_step": ppo_prompts},
                }
            )
    return jobs


def accuracy_within(run: dict, seconds: float) -> float:
    """Held-out accuracy at the last evaluation made within ``seconds`` of training."""
    return [e["accuracy"] for e in run["evals"] if e["train_s"] <= seconds + 1e-9][-1]


def split_seconds(group: list[dict]) -> dict[str, float]:
    """Mean seconds per step over steps and seeds: sampling; the critic's pass over the rollout
    (PPO); the rest of the step (scoring, the fixed log-prob passes and the update), the same
    definition for both methods."""

    def mean(r, key):
        return statistics.fmean(r["curves"].get(key) or [0.0] * len(r["curves"]["step_s"]))

    parts = {
        key: statistics.fmean(mean(r, key) for r in group)
        for key in ("sample_s", "critic_s", "step_s")
    }
    parts["update_s"] = parts["step_s"] - parts["sample_s"] - parts["critic_s"]
    return {key: round(value, 4) for key, value in parts.items()}


def verdict(low: float, high: float, null: float = 0.0) -> str:
    if low <= null <= high:
        return "not resolved"
    return "PPO higher" if low > null else "GRPO higher"


def summarise(runs: list[dict]) -> dict:
    from grpo_minimal.course.stats import t_interval

    def interval(values, null=0.0):
        mean, low, high = t_interval(values)
        return {
            "mean": round(mean, 4),
            "low": round(low, 4),
            "high": round(high, 4),
            "values": [round(v, 4) for v in values],
            "verdict": verdict(low, high, null),
        }

    out = {}
    for setting in SETTINGS:
        pairs = {}
        for run in runs:
            if run["setting"] == setting:
                pairs.setdefault(run["seed"], {})[run["algo"]] = run
        seeds = sorted(s for s, p in pairs.items() if len(p) == 2)
        ppo = [pairs[s]["ppo"] for s in seeds]
        grpo = [pairs[s]["grpo"] for s in seeds]

        def final(r):
            return r["evals"][-1]["accuracy"]

        def mean_of(r, key):
            return statistics.fmean(v for v in r["curves"].get(key, [0.0]) if v is not None)

        equal_time = [
            (
                accuracy_within(p, min(p["train_s"], g["train_s"])),
                accuracy_within(g, min(p["train_s"], g["train_s"])),
            )
            for p, g in zip(ppo, grpo, strict=True)
        ]
        thirds = {}
        for r in ppo:
            ev = r["curves"]["explained_variance"]
            n = len(ev) // 3
            for name, part in (("first", ev[:n]), ("middle", ev[n : 2 * n]), ("last", ev[2 * n :])):
                thirds.setdefault(name, []).append(statistics.fmean(part))
        out[setting] = {
            "seeds": seeds,
            "completions_per_step": ppo[0]["completions_per_step"],
            "steps": ppo[0]["evals"][-1]["step"],
            "accuracy_before": statistics.fmean(r["evals"][0]["accuracy"] for r in ppo + grpo),
            "final_accuracy": {
                "ppo": interval([final(r) for r in ppo]),
                "grpo": interval([final(r) for r in grpo]),
            },
            "ppo_minus_grpo_equal_completions": interval(
                [final(p) - final(g) for p, g in zip(ppo, grpo, strict=True)]
            ),
            "ppo_minus_grpo_equal_seconds": interval([p - g for p, g in equal_time]),
            "seconds_per_step": {
                algo: split_seconds(group) for algo, group in (("ppo", ppo), ("grpo", grpo))
            },
            "step_time_ratio_ppo_over_grpo": interval(
                [
                    mean_of(p, "step_s") / mean_of(g, "step_s")
                    for p, g in zip(ppo, grpo, strict=True)
                ],
                null=1.0,
            ),
            "train_s": {"ppo": [r["train_s"] for r in ppo], "grpo": [r["train_s"] for r in grpo]},
            "peak_above_model_mb": {
                "ppo": interval([r["peak_above_model_mb"] for r in ppo]),
                "grpo": interval([r["peak_above_model_mb"] for r in grpo]),
            },
            "planned_update_mb": {
                "ppo": ppo[0]["planned_update_mb"],
                "grpo": grpo[0]["planned_update_mb"],
            },
            "explained_variance_thirds": {k: interval(v) for k, v in thirds.items()},
            "stability": {
                algo: {
                    "final_accuracy_sd": round(statistics.stdev(final(r) for r in group), 4),
                    "max_kl": round(max(max(r["curves"]["kl"]) for r in group), 4),
                    "min_completion_length": round(
                        min(min(r["curves"]["completion_length"]) for r in group), 3
                    ),
                    "collapses": sum(
                        max(e["accuracy"] for e in r["evals"]) - final(r) >= COLLAPSE for r in group
                    ),
                }
                for algo, group in (("ppo", ppo), ("grpo", grpo))
            },
        }
    return out


def real_model(steps: int) -> dict:
    """SmolLM2-135M: ``steps`` steps of each method at notebook 11's settings, beta 0 and 0.04,
    each in its own process, one after another on 2 torch threads (notebook 11's setting):
    peak memory and seconds per step."""
    jobs = []
    for beta in (0.0, 0.04):
        for algo in ("grpo", "ppo"):
            jobs.append(
                {
                    "algo": algo,
                    "setting": f"beta={beta}",
                    "seed": 0,
                    "threads": 2,
                    "config": {
                        "model": "smollm2-135m",
                        "beta": beta,
                        "max_steps": steps,
                        "eval_every": 0,
                        "eval_n": 8,
                    },
                }
            )
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        runs = pool.map(one_run, jobs, chunksize=1)
    table = []
    for run in runs:
        curves = run["curves"]
        table.append(
            {
                "algo": run["algo"],
                "beta": run["config"]["beta"],
                "completions_per_step": run["completions_per_step"],
                # the first step also warms up allocations and caches: the mean is over the rest
                **{
                    key: round(statistics.fmean(curves[key][1:]), 2)
                    for key in ("sample_s", "critic_s", "update_s", "step_s")
                    if key in curves
                },
                "peak_above_model_mb": run["peak_above_model_mb"],
                "planned_update_mb": run["planned_update_mb"],
            }
        )
    return {"steps": steps, "threads": 2, "runs": table}


def replan_real() -> dict:
    """The plan column of ``llm_ppo_vs_grpo_real.json`` recomputed at the runs' own prompt
    length (the chat-formatted prompt the run fed, ``longest_prompt_tokens``), from each run's
    config; the measured columns are kept as they were. The planner alone: no training."""
    from types import SimpleNamespace

    from transformers import AutoConfig, AutoTokenizer

    from grpo_minimal.data import load_math_rows
    from grpo_minimal.lm_model import resolve_model_name
    from grpo_minimal.lm_ppo import LMPPOConfig
    from grpo_minimal.lm_train import MathConfig

    path = RESULTS / "llm_ppo_vs_grpo_real.json"
    result = json.loads(path.read_text())
    folder = resolve_model_name("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = SimpleNamespace(config=AutoConfig.from_pretrained(folder))
    for run in result["runs"]:
        cls = LMPPOConfig if run["algo"] == "ppo" else MathConfig
        cfg = cls.for_device("cpu", model="smollm2-135m", beta=run["beta"], max_steps=3)
        rows = load_math_rows(cfg.dataset, "train")[:1000]
        prompt = longest_prompt_tokens(rows, tokenizer, cfg)
        run["prompt_tokens"] = prompt
        run["seq_len_planned"] = prompt + cfg.max_completion_length
        run["planned_update_mb"] = round(
            planned_mb(
                model,
                run["algo"],
                run["completions_per_step"] // max(1, cfg.gradient_accumulation_steps),
                prompt + cfg.max_completion_length,
                cfg.beta,
            ),
            2,
        )
    result["replanned"] = (
        "planned_update_mb recomputed at the run's own (chat-formatted) prompt length with "
        "python bench/llm_ppo_vs_grpo.py --replan; the runs themselves are the --real ones. "
        "The plan counts the weights, and so does peak_above_model_mb: a checkpoint is mapped, "
        "not read, when it loads, and its pages are read during the run"
    )
    return result


BLOCK = 10  # the stored curves are means over blocks of this many steps


def stored(run: dict) -> dict:
    """A run as the results file keeps it: curves averaged over blocks of ``BLOCK`` steps, four
    significant digits (the summary was computed from every step)."""

    def blocks(values):
        values = [v for v in values if v is not None]
        return [
            float(f"{statistics.fmean(values[i : i + BLOCK]):.4g}")
            for i in range(0, len(values), BLOCK)
        ]

    return run | {"curves": {k: blocks(v) for k, v in run["curves"].items()}, "curve_block": BLOCK}


def write_results(path: Path, result: dict) -> None:
    """The summary indented, one line per run (diffs stay readable, the file small)."""
    head = {k: v for k, v in result.items() if k != "runs"}
    text = json.dumps(head, indent=1)
    if "runs" in result:
        runs = ",\n".join(json.dumps(r, separators=(",", ":")) for r in result["runs"])
        text = text[:-2] + ',\n "runs": [\n' + runs + "\n ]\n}"
    tmp = path.with_suffix(".tmp")  # atomic: a stopped bench leaves the old file whole
    tmp.write_text(text + "\n")
    tmp.replace(path)


def epochs_control(seeds, steps: int, workers: int) -> dict:
    """GRPO at the defaults batch with PPO's 4 epochs, against the committed PPO runs."""
    from grpo_minimal.course.stats import t_interval

    (prompts, group), _ = SETTINGS["defaults"]
    jobs = [
        {
            "algo": "grpo",
            "setting": "defaults_4_epochs",
            "seed": seed,
            "config": {
                "seed": seed,
                "max_steps": steps,
                "eval_every": 50,
                "eval_n": 500,
                "prompts_per_step": prompts,
                "num_generations": group,
                "num_iterations": 4,
            },
        }
        for seed in seeds
    ]
    with multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
        runs = pool.map(one_run, jobs, chunksize=1)
    committed = json.loads((RESULTS / "llm_ppo_vs_grpo.json").read_text())["runs"]
    ppo = {r["seed"]: r for r in committed if r["setting"] == "defaults" and r["algo"] == "ppo"}

    def interval(values, null=0.0):
        mean, low, high = t_interval(values)
        return {
            "mean": round(mean, 4),
            "low": round(low, 4),
            "high": round(high, 4),
            "values": [round(v, 4) for v in values],
            "verdict": verdict(low, high, null),
        }

    final = {r["seed"]: r["evals"][-1]["accuracy"] for r in runs}
    within = [
        (
            accuracy_within(ppo[s], min(ppo[s]["train_s"], r["train_s"])),
            accuracy_within(r, min(ppo[s]["train_s"], r["train_s"])),
        )
        for s, r in ((r["seed"], r) for r in runs)
    ]
    summary = {
        "final_accuracy": interval(list(final.values())),
        "ppo_minus_grpo_equal_completions": interval(
            [ppo[s]["evals"][-1]["accuracy"] - a for s, a in final.items()]
        ),
        "ppo_minus_grpo_equal_seconds": interval([p - g for p, g in within]),
        "seconds_per_step": split_seconds(runs),
        "peak_above_model_mb": interval([r["peak_above_model_mb"] for r in runs]),
    }
    return {"summary": summary, "runs": [stored(r) for r in runs]}


# The controls (--controls): each a name, its method and its settings over the tiny model's
# defaults, 600 steps unless said, over the seeds of the committed runs. The three reference
# runs (PPO and GRPO at their defaults, GRPO with 4 epochs) are the committed ones of
# llm_ppo_vs_grpo.json and llm_ppo_vs_grpo_epochs.json, paired by seed: a run is deterministic
# given its seed (seed 0's PPO and GRPO, rerun here, end on the committed accuracy).
CONTROLS = {
    "ppo_8x8": ("ppo", {"prompts_per_step": 8, "num_generations": 8}),
    "grpo_32x2": ("grpo", {"prompts_per_step": 32, "num_generations": 2}),
    "ppo_no_critic": ("ppo", {"prompts_per_step": 64, "value_coef": 0.0}),
    "grpo_16x4": ("grpo", {"prompts_per_step": 16, "num_generations": 4}),
    "ppo_beta0": ("ppo", {"prompts_per_step": 64, "beta": 0.0}),
    "grpo_beta0": ("grpo", {"prompts_per_step": 8, "num_generations": 8, "beta": 0.0}),
    "ppo_fit": ("ppo", {"prompts_per_step": 64}),  # max_steps: the steps that fit GRPO's seconds
    # GRPO's defaults again: its share of all-equal groups (not kept by the committed runs), and
    # a check that each seed ends where the committed run did
    "grpo_again": ("grpo", {"prompts_per_step": 8, "num_generations": 8}),
}
REFERENCE = {  # name: (results file, its setting, its algo)
    "ppo": ("llm_ppo_vs_grpo.json", "defaults", "ppo"),
    "grpo": ("llm_ppo_vs_grpo.json", "defaults", "grpo"),
    "grpo_4_epochs": ("llm_ppo_vs_grpo_epochs.json", "defaults_4_epochs", "grpo"),
}
# Seconds, interleaved: the reference settings again for TIMING_STEPS steps each, one seed after
# another in the same pool as the controls (the committed ones were timed in other runs).
TIMING = {
    "ppo": ("ppo", {"prompts_per_step": 64}),
    "grpo": ("grpo", {"prompts_per_step": 8, "num_generations": 8}),
    "grpo_4_epochs": ("grpo", {"prompts_per_step": 8, "num_generations": 8, "num_iterations": 4}),
}
TIMING_STEPS = 60
TRAIN_PROBLEMS = 3000  # data/arithmetic_train.jsonl, for runs committed before they said
# (a, b, what the difference a - b separates): final accuracy, paired by seed
COMPARISONS = (
    ("ppo", "grpo", "the headline: PPO - GRPO at the same completions (600 steps x 64)"),
    (
        "ppo_8x8",
        "grpo",
        "the same rollouts (8 prompts x 8): the critic, batch whitening against the group "
        "baseline, the KL's place and PPO's 4 epochs",
    ),
    ("ppo", "ppo_8x8", "PPO's prompt diversity: 64 prompts x 1 against 8 x 8"),
    ("ppo_no_critic", "ppo", "the critic: V = 0 (value_coef 0, head at 0) against a learned V"),
    ("ppo_beta0", "grpo_beta0", "PPO - GRPO with no KL at all (beta 0): the KL's place removed"),
    ("ppo_beta0", "ppo", "PPO's KL in the reward (beta 0 against 0.04)"),
    ("grpo_beta0", "grpo", "GRPO's KL in the loss (beta 0 against 0.04)"),
    ("grpo_16x4", "grpo", "GRPO's prompt diversity: 16 prompts x 4 against 8 x 8"),
    ("grpo_32x2", "grpo", "GRPO's prompt diversity: 32 prompts x 2 against 8 x 8"),
    ("grpo_4_epochs", "grpo", "GRPO's epochs: 4 against 1"),
    ("ppo", "grpo_4_epochs", "PPO - GRPO with 4 epochs each"),
    (
        "ppo_fit",
        "grpo",
        "equal seconds, each schedule annealed: PPO over the steps that fit GRPO's seconds",
    ),
)
PARTIAL = RESULTS / "llm_ppo_vs_grpo_controls.partial.jsonl"  # one finished run a line


def fit_steps(steps: int) -> int:
    """The PPO steps that take GRPO's seconds for ``steps`` steps: ``steps`` over the step-time
    ratio committed in ``llm_ppo_vs_grpo.json`` (measured before this run)."""
    committed = json.loads((RESULTS / "llm_ppo_vs_grpo.json").read_text())["summary"]
    return max(1, round(steps / committed["defaults"]["step_time_ratio_ppo_over_grpo"]["mean"]))


def controls_jobs(seeds, steps: int) -> list[dict]:
    jobs = []
    for seed in seeds:  # seed-major: every control of a seed runs beside the others
        for name, (algo, config) in CONTROLS.items():
            max_steps = fit_steps(steps) if name == "ppo_fit" else steps
            common = {"seed": seed, "max_steps": max_steps, "eval_every": 50, "eval_n": 500}
            jobs.append({"algo": algo, "setting": name, "seed": seed, "config": common | config})
        for name, (algo, config) in TIMING.items():
            common = {"seed": seed, "max_steps": TIMING_STEPS, "eval_every": 0, "eval_n": 100}
            jobs.append(
                {"algo": algo, "setting": f"timing_{name}", "seed": seed, "config": common | config}
            )
    return jobs


def reference_runs(seeds) -> list[dict]:
    """The committed runs the controls are paired with, renamed to their control names."""
    runs = []
    for name, (file, setting, algo) in REFERENCE.items():
        for run in json.loads((RESULTS / file).read_text())["runs"]:
            if run["setting"] == setting and run["algo"] == algo and run["seed"] in seeds:
                runs.append(run | {"setting": name, "source": file})
    return runs


def summarise_controls(runs: list[dict]) -> dict:
    from grpo_minimal.course.stats import t_interval

    def interval(values, a="a", b="b", null=0.0):
        mean, low, high = t_interval(values)
        word = "not resolved" if low <= null <= high else (a if low > null else b) + " higher"
        return {
            "mean": round(mean, 4),
            "low": round(low, 4),
            "high": round(high, 4),
            "values": [round(v, 4) for v in values],
            "verdict": word,
        }

    by = {}
    for run in runs:
        by.setdefault(run["setting"], {})[run["seed"]] = run

    def final(r):
        return r["evals"][-1]["accuracy"]

    def mean_curve(r, key):
        values = [v for v in r["curves"].get(key, []) if v is not None]
        return statistics.fmean(values) if values else None

    settings = {}
    for name, seeds in by.items():
        if name.startswith("timing_"):
            continue
        group = list(seeds.values())
        first = group[0]
        steps = first["evals"][-1]["step"]
        prompts = first["config"]["prompts_per_step"] * steps
        zero_std = [mean_curve(r, "frac_zero_std") for r in group]
        settings[name] = {
            "algo": first["algo"],
            "layout": f"{first['config']['prompts_per_step']} x {first['config']['num_generations']}",
            "steps": steps,
            "seeds": sorted(seeds),
            "prompts_drawn": prompts,
            "passes_over_train_split": round(
                prompts / first.get("train_problems", TRAIN_PROBLEMS), 2
            ),
            "final_accuracy": {
                k: v for k, v in interval([final(r) for r in group]).items() if k != "verdict"
            },
            "train_s": [r["train_s"] for r in group],
            "seconds_per_step": split_seconds(group),
            # all-equal groups give GRPO no signal; with 1 completion a prompt every group is one
            "frac_zero_std": round(statistics.fmean(zero_std), 4)
            if first["config"]["num_generations"] > 1 and None not in zero_std
            else None,
        }
    comparisons = []
    for a, b, question in COMPARISONS:
        if a not in by or b not in by:
            continue
        seeds = sorted(set(by[a]) & set(by[b]))
        if len(seeds) < 2:
            continue
        pa, pb = [by[a][s] for s in seeds], [by[b][s] for s in seeds]
        within = [min(x["train_s"], y["train_s"]) for x, y in zip(pa, pb, strict=True)]
        comparisons.append(
            {
                "a": a,
                "b": b,
                "separates": question,
                "seeds": seeds,
                "a_minus_b_final_accuracy": interval(
                    [final(x) - final(y) for x, y in zip(pa, pb, strict=True)], a, b
                ),
                "a_minus_b_equal_seconds": interval(
                    [
                        accuracy_within(x, t) - accuracy_within(y, t)
                        for x, y, t in zip(pa, pb, within, strict=True)
                    ],
                    a,
                    b,
                ),
                "train_s_ratio_a_over_b": interval(
                    [x["train_s"] / y["train_s"] for x, y in zip(pa, pb, strict=True)], a, b, 1.0
                ),
            }
        )
    timing = {}
    for name in TIMING:
        group = by.get(f"timing_{name}", {})
        if group:
            timing[name] = split_seconds(list(group.values()))
    if "timing_ppo" in by:
        for name in ("grpo", "grpo_4_epochs"):
            seeds = sorted(set(by["timing_ppo"]) & set(by.get(f"timing_{name}", {})))
            if len(seeds) >= 2:
                timing[f"ppo_over_{name}_step_s"] = interval(
                    [
                        mean_curve(by["timing_ppo"][s], "step_s")
                        / mean_curve(by[f"timing_{name}"][s], "step_s")
                        for s in seeds
                    ],
                    "ppo",
                    name,
                    1.0,
                )
    return {
        "settings": settings,
        "comparisons": comparisons,
        "timing": timing,
        "timing_steps": TIMING_STEPS,
    }


def controls(seeds, steps: int, workers: int, resume: bool) -> dict:
    """Every control over the same seeds in one interleaved pool, then paired with the committed
    reference runs; each finished run is kept in ``PARTIAL`` so that a stopped bench resumes
    (``--resume``) where it stopped. Runs of a reference setting found there (an earlier layout
    of this bench reran them) are kept apart as reproductions of the committed ones."""
    done = []
    if resume and PARTIAL.exists():
        done = [json.loads(line) for line in PARTIAL.read_text().splitlines() if line.strip()]
    have = {(r["setting"], r["seed"]) for r in done}
    jobs = [j for j in controls_jobs(seeds, steps) if (j["setting"], j["seed"]) not in have]
    print(f"{len(jobs)} runs to go, {len(done)} kept from {PARTIAL.name}", flush=True)
    with (
        multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool,
        PARTIAL.open("a" if resume else "w") as partial,
    ):
        for run in pool.imap_unordered(one_run, jobs, chunksize=1):
            run = stored(run)
            done.append(run)
            partial.write(json.dumps(run, separators=(",", ":")) + "\n")
            partial.flush()
            print(
                f"{run['setting']} seed {run['seed']}: {run['evals'][-1]['accuracy']:.3f} "
                f"in {run['train_s']:.0f} s",
                flush=True,
            )
    references = reference_runs(seeds)
    committed = {(r["setting"], r["seed"]): r["evals"][-1]["accuracy"] for r in references}
    reproduced = [
        {
            "setting": r["setting"],
            "seed": r["seed"],
            "final_accuracy": r["evals"][-1]["accuracy"],
            "committed": committed.get((r["setting"], r["seed"])),
        }
        for r in done
        if r["setting"] in REFERENCE
    ]
    runs = [r for r in done if r["setting"] not in REFERENCE]
    order = {name: i for i, name in enumerate([*CONTROLS, *(f"timing_{n}" for n in TIMING)])}
    runs.sort(key=lambda r: (r["seed"], order[r["setting"]]))
    summary = summarise_controls(references + runs)
    summary["reproduced"] = reproduced
    return {"summary": summary, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="2 seeds, 40 steps")
    parser.add_argument("--real", action="store_true", help="SmolLM2-135M memory and time")
    parser.add_argument("--epochs", action="store_true", help="GRPO with 4 epochs (a control)")
    parser.add_argument(
        "--controls", action="store_true", help="the controls of notebook 12, interleaved"
    )
    parser.add_argument(
        "--replan", action="store_true", help="--real's plan at the run's prompt length"
    )
    parser.add_argument("--resume", action="store_true", help="--controls: keep finished runs")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.replan:
        result = replan_real()
        path = RESULTS / "llm_ppo_vs_grpo_real.json"
    elif args.real:
        result = real_model(steps=3)
        path = RESULTS / "llm_ppo_vs_grpo_real.json"
    elif args.controls:
        result = controls(list(range(args.seeds)), args.steps, args.workers, args.resume)
        path = RESULTS / "llm_ppo_vs_grpo_controls.json"
    elif args.epochs:
        result = epochs_control(list(range(args.seeds)), args.steps, args.workers)
        path = RESULTS / "llm_ppo_vs_grpo_epochs.json"
    else:
        seeds, steps = (range(2), 40) if args.quick else (range(args.seeds), args.steps)
        jobs = jobs_for(list(seeds), steps, eval_every=10 if args.quick else 50)
        with multiprocessing.get_context("spawn").Pool(args.workers, maxtasksperchild=1) as pool:
            runs = pool.map(one_run, jobs, chunksize=1)
        result = {"summary": summarise(runs), "runs": [stored(r) for r in runs]}
        path = RESULTS / ("llm_ppo_vs_grpo_quick.json" if args.quick else "llm_ppo_vs_grpo.json")
    if args.replan:  # the runs keep their own command and wall time
        result["replan_provenance"] = provenance(threads=None)
    else:
        result["command"] = "python bench/llm_ppo_vs_grpo.py " + " ".join(sys.argv[1:])
        result["provenance"] = provenance(threads=2 if args.real else 1)
        result["bench_wall_s"] = round(time.perf_counter() - started, 1)
    write_results(path, result)
    print(json.dumps(result.get("summary", result), indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
