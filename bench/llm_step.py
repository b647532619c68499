"""Benchmark one GRPO step: grpo_minimal vs TRL vs the naive loop (tiny) or the floor (real).

    .venv/bin/python bench/llm_step.py            # a few minutes on 2 CPU cores
    .venv/bin/python bench/llm_step.py --beta 0   # no reference model (TRL's default)
    .venv/bin/python bench/llm_step.py --profile 20 --threads 1   # where grpo_minimal's step goes
    .venv/bin/python bench/llm_step.py --model smollm2-135m --rounds 3 --steps 3   # notebook 11

Same model, same data, same settings for every method, fp32 on the CPU. The tiny model
(``data/tiny_math_lm``, the default) runs notebook 06's settings (8 prompts x 8 generations, at
most 5 new tokens, temperature 1, beta 0.04 so a reference model is used; a constant learning
rate, which does not change the timing). ``--model smollm2-135m`` (fetched first) runs notebook
11's (``MathConfig.PRESETS``: 2 prompts x 8, at most 32 new tokens, temperature 0.7,
beta 0) and compares against the floor instead of the naive loop.

- **grpo_minimal**: ``LMGRPOTrainer.step`` (``grpo_minimal/lm_grpo.py``; the tiny model on the
  CPU samples through ``completions.sample_with_kv_cache``, the same draws as ``generate``).
- **TRL**: ``trl.GRPOTrainer`` with the same settings (``grpo_minimal/trl_bridge.py``:
  ``bf16=False``, no gradient checkpointing, fused AdamW as ours); a step is timed from TRL's
  ``on_step_begin`` to ``on_step_end`` callbacks (generation, scoring, loss, optimizer).
- **naive**: the NAIVE BASELINE in ``bench/naive_grpo.py``, the per-sample loop of the GRPO
  paper review (one ``generate`` per sample, one forward per response). Tiny model only.
- **floor** (``FloorStep``): the same tensor work with nothing around it: one ``generate`` for
  every completion, one forward and backward over all of them, one AdamW step. Real model only.

Completions per second are measured in one process, in interleaved rounds (ours, TRL, naive,
then again), and the median step of each is reported, so that load from other programs on a
shared machine hits all three alike. Peak memory is measured separately, each method in its
own fresh process, since a process's peak never goes down: the peak resident memory after 3
steps, and how much of it came after the model was loaded (the steps, plus building TRL's
trainer and its reference model for TRL).
``--profile N`` runs N steps of grpo_minimal alone under cProfile (after 3 untimed ones) and
prints where a step's time goes, per stage and per function, then stops.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

warnings.filterwarnings("ignore", category=FutureWarning)  # transformers 5 renames, from TRL

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from naive_grpo import NaiveGRPO  # noqa: E402
from provenance import provenance  # noqa: E402
from transformers import set_seed  # noqa: E402

from grpo_minimal.completions import mask_after_eos  # noqa: E402
from grpo_minimal.data import load_math_rows  # noqa: E402
from grpo_minimal.device import peak_memory_mb  # noqa: E402
from grpo_minimal.lm_grpo import LMGRPOTrainer  # noqa: E402
from grpo_minimal.lm_model import eos_token_ids, format_prompt, load_model  # noqa: E402
from grpo_minimal.lm_train import MathConfig  # noqa: E402
from grpo_minimal.rewards import accuracy_reward  # noqa: E402

METHODS = ("grpo_minimal", "trl", "naive", "floor")
TINY_METHODS = ("grpo_minimal", "trl", "naive")
REAL_METHODS = ("grpo_minimal", "trl", "floor")  # the naive loop: one generate per sample, minutes


def make_config(args) -> MathConfig:
    """The model's defaults (the tiny model: notebook 06's run; ``smollm2-135m``: notebook 11's,
    ``MathConfig.PRESETS``) with the sizes given on the command line."""
    given = {
        "prompts_per_step": args.prompts,
        "num_generations": args.generations,
        "max_completion_length": args.max_new_tokens,
        "beta": args.beta,
    }
    given = {k: v for k, v in given.items() if v is not None}
    return MathConfig.for_device(
        "cpu",
        model=args.model,
        dtype="float32",
        seed=args.seed,
        max_steps=10_000,
        lr_scheduler_type="constant",
        **given,
    )


def training_rows(cfg: MathConfig) -> list[dict]:
    return load_math_rows(cfg.dataset, "train")


class FloorStep:
    """The step's floor: the same tensor work with nothing around it. One ``generate`` call
    samples every completion, one forward and backward over all of them (the vocabulary's
    logits only where a completion token is predicted) weights each token's log-prob by a
    stand-in advantage (+1 / -1 by halves of each group: no rewards are read, no advantages
    computed, nothing logged), one fused AdamW step. Our step and TRL's do this work and
    more; how much more is the price of everything else."""

    def __init__(self, cfg: MathConfig, model, tokenizer) -> None:
        self.cfg, self.model, self.tokenizer = cfg, model, tokenizer
        if cfg.beta > 0:
            raise SystemExit("the floor has no reference model: compare it with --beta 0")
        self.eos = eos_token_ids(model, tokenizer)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, fused=True)

    def step(self, rows: list[dict]) -> None:
        cfg, G = self.cfg, self.cfg.num_generations
        prompts = [format_prompt(r["prompt"], self.tokenizer, cfg.prompt_template) for r in rows]
        enc = self.tokenizer(
            prompts,
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=False,
        )
        ids, mask = (
            enc.input_ids.repeat_interleave(G, 0),
            enc.attention_mask.repeat_interleave(G, 0),
        )
        self.model.eval()
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids,
                attention_mask=mask,
                do_sample=True,
                temperature=cfg.temperature,
                top_k=0,
                max_new_tokens=cfg.max_completion_length,
                eos_token_id=self.eos,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        self.model.train()
        completion = out[:, ids.shape[1] :]
        completion_mask = mask_after_eos(completion, self.eos)
        full_mask = torch.cat([mask, completion_mask], dim=1)
        positions = (full_mask.cumsum(1) - 1).clamp(min=0)  # left padding: count real tokens
        C = completion.shape[1]  # logits only where a completion token is predicted
        logits = (
            self.model(
                input_ids=out,
                attention_mask=full_mask,
                position_ids=positions,
                logits_to_keep=C + 1,
            ).logits[:, :-1]
            / cfg.temperature
        )
        chosen = logits.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        logps = chosen - logits.logsumexp(-1)
        sign = torch.tensor([1.0 if i % G < G // 2 else -1.0 for i in range(len(out))])
        loss = -(sign[:, None] * logps * completion_mask).sum() / completion_mask.sum().clamp(min=1)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class Runner:
    """Runs steps of one method on batches of prompts; ``run(n)`` returns n step times."""

    def __init__(self, method: str, cfg: MathConfig, rows: list[dict], workdir: str) -> None:
        self.method, self.cfg, self.rows = method, cfg, rows
        self.cursor = 0
        model, tokenizer = load_model(cfg.model, torch.device("cpu"))
        if method == "grpo_minimal":
            self.trainer = LMGRPOTrainer(cfg, model, tokenizer)
        elif method == "floor":
            self.trainer = FloorStep(cfg, model, tokenizer)
        elif method == "naive":
            self.trainer = NaiveGRPO(
                model,
                tokenizer,
                accuracy_reward,
                group_size=cfg.num_generations,
                clip_epsilon=cfg.epsilon,
                kl_coef=cfg.beta,
                lr=cfg.learning_rate,
                max_new_tokens=cfg.max_completion_length,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                ref_model=copy.deepcopy(model).requires_grad_(False) if cfg.beta > 0 else None,
            )
        else:  # TRL's trainer is built on the first run()
            self.model, self.tokenizer, self.workdir = model, tokenizer, workdir

    def batch(self) -> list[dict]:
        n = self.cfg.prompts_per_step
        rows = [self.rows[(self.cursor + i) % len(self.rows)] for i in range(n)]
        self.cursor += n
        return rows

    def run(self, steps: int) -> list[float]:
        if self.method == "trl":
            from grpo_minimal.trl_bridge import make_trl_trainer

            if not hasattr(self, "trl"):  # one trainer; each train() call runs `steps` steps
                self.trl, self.clock = make_trl_trainer(
                    self.cfg, self.model, self.tokenizer, self.rows, self.workdir
                )
            self.trl.args.max_steps = steps
            self.clock.step_s = []
            self.trl.train()
            return self.clock.step_s
        times = []
        for _ in range(steps):
            rows = self.batch()
            start = time.perf_counter()
            if self.method in ("grpo_minimal", "floor"):
                self.trainer.step(rows)
            else:
                self.trainer.train_step([r["prompt"] for r in rows], [r["answer"] for r in rows])
            times.append(time.perf_counter() - start)
        return times


def measure_memory(method: str, args) -> dict:
    """Peak memory of a few steps of one method, in a fresh process."""
    cmd = [
        sys.executable,
        __file__,
        "--memory-of",
        method,
        "--seed",
        str(args.seed),
        "--model",
        args.model,
    ]
    for flag, value in (
        ("--prompts", args.prompts),
        ("--generations", args.generations),
        ("--max-new-tokens", args.max_new_tokens),
        ("--beta", args.beta),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_child(method: str, args) -> None:
    cfg = make_config(args)
    rows = training_rows(cfg)
    set_seed(cfg.seed)
    with tempfile.TemporaryDirectory() as workdir:
        runner = Runner(method, cfg, rows, workdir)
        loaded = peak_memory_mb(torch.device("cpu"))
        runner.run(3)
        peak = peak_memory_mb(torch.device("cpu"))
    print(json.dumps({"peak_mb": round(peak, 1), "growth_mb": round(peak - loaded, 1)}))


# (stage, function) pairs: a stage's time is the cumulative time of its function in the profile
PROFILE_STAGES = [
    ("whole step", "lm_grpo.py", "step"),
    ("1 sample", "completions.py", "sample_completions"),
    ("  generate", "utils.py", "generate"),
    ("  sampling loop", "completions.py", "sample_with_kv_cache"),
    ("2 rewards", "rewards.py", "score_completions"),
    ("3 frozen log-probs", "lm_trainer.py", "frozen_logps"),
    ("3+5 log-prob passes", "lm_trainer.py", "completion_logps"),
    ("5 backward", "_tensor.py", "backward"),
    ("5 optimizer", "optimizer.py", "wrapper"),
    ("  model forwards", "modeling_qwen2.py", "forward"),  # the tiny model
    ("  model forwards", "modeling_llama.py", "forward"),  # SmolLM2
]


def profile_steps(cfg: MathConfig, rows: list[dict], steps: int) -> None:
    """Where grpo_minimal's step goes: ``steps`` steps under cProfile, after 3 untimed ones."""
    runner = Runner("grpo_minimal", cfg, rows, "")
    runner.run(3)
    profiler = cProfile.Profile()
    profiler.enable()
    runner.run(steps)
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"per step, mean over {steps} profiled steps (cProfile's own overhead included):")
    for label, file, name in PROFILE_STAGES:
        found = [
            (cum, calls)
            for (f, _, fn), (_, calls, _, cum, _) in stats.stats.items()
            if f.endswith(file) and fn == name
        ]
        if found:
            cum, calls = max(found)  # the outermost of nested calls (e.g. Qwen2ForCausalLM)
            print(f"  {label:<24}{cum / steps * 1000:8.1f} ms  ({calls / steps:.1f} calls)")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    print("\nfunctions by own time (all steps):")
    print(out.getvalue().split("\n\n", 1)[-1].strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--steps", type=int, default=8, help="timed steps per round (default: 8)")
    parser.add_argument(
        "--naive-steps",
        type=int,
        default=2,
        help="timed steps per round of the slow naive loop (default: 2)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: 2)")
    parser.add_argument(
        "--model",
        default="tiny",
        help="tiny (notebook 06) or smollm2-135m (notebook 11: fetch it first)",
    )
    parser.add_argument(
        "--prompts", type=int, help="prompts per step (default: the model's, 8 / 2)"
    )
    parser.add_argument("--generations", type=int, help="G (default: the model's, 8)")
    parser.add_argument("--max-new-tokens", type=int, help="(default: the model's, 5 / 32)")
    parser.add_argument(
        "--beta",
        type=float,
        help="KL weight; > 0 adds the reference model's forward (default: the model's, 0.04 / 0)",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-memory", action="store_true", help="do not measure memory")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="STEPS",
        help="profile STEPS steps of grpo_minimal alone, print the top costs",
    )
    parser.add_argument("--memory-of", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_of:
        memory_child(args.memory_of, args)
        return

    cfg = make_config(args)
    rows = training_rows(cfg)
    methods = TINY_METHODS if args.model == "tiny" else REAL_METHODS
    if args.profile:
        set_seed(cfg.seed)
        profile_steps(cfg, rows, args.profile)
        return
    batch = cfg.prompts_per_step * cfg.num_generations
    print(
        f"{args.model} model, {cfg.prompts_per_step} prompts x {cfg.num_generations} generations = "
        f"{batch} completions a step, <= {cfg.max_completion_length} new tokens, beta "
        f"{cfg.beta}, fp32, {torch.get_num_threads()} torch threads, {os.cpu_count()} CPUs"
    )
    set_seed(cfg.seed)
    times: dict[str, list[float]] = {m: [] for m in methods}
    with tempfile.TemporaryDirectory() as workdir:
        runners = {m: Runner(m, cfg, rows, workdir) for m in methods}
        for method, runner in runners.items():  # warm-up: first calls allocate and compile
            runner.run(args.warmup if method != "naive" else 1)
        for r in range(args.rounds):
            for method, runner in runners.items():
                steps = args.naive_steps if method == "naive" else args.steps
                times[method] += runner.run(steps)
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{m} {statistics.median(t) * 1000:.0f} ms/step" for m, t in times.items()
                )
            )

    result = {}
    for method, t in times.items():
        step = statistics.median(t)
        result[method] = {
            "median_step_s": round(step, 4),
            "completions_per_s": round(batch / step, 1),
            "steps_timed": len(t),
        }
    if not args.skip_memory:
        for method in methods:
            result[method].update(measure_memory(method, args))
    ours = result["grpo_minimal"]["completions_per_s"]
    print()
    print(f"{'method':<14}{'ms/step':>10}{'completions/s':>16}{'peak MB':>10}{'+MB steps':>11}")
    for method, r in result.items():
        print(
            f"{method:<14}{r['median_step_s'] * 1000:>10.0f}{r['completions_per_s']:>16.1f}"
            f"{r.get('peak_mb', float('nan')):>10.0f}{r.get('growth_mb', float('nan')):>11.0f}"
        )
    ratios = {
        f"grpo_minimal_vs_{m}": round(ours / result[m]["completions_per_s"], 2)
        for m in methods
        if m != "grpo_minimal"
    }
    said = {
        "trl": "TRL's",
        "naive": "the naive loop's",
        "floor": "the floor's (the same tensor work)",
    }
    print(
        "\ngrpo_minimal's completions/s: "
        + ", ".join(
            f"{ratios[f'grpo_minimal_vs_{m}']}x {said[m]}" for m in methods if m != "grpo_minimal"
        )
    )
    print(
        json.dumps(
            {
                "model": args.model,
                "config": cfg.to_dict(),
                "results": result,
                "ratios": ratios,
                "provenance": provenance(threads=torch.get_num_threads()),
            }
        )
    )


if __name__ == "__main__":
    main()
