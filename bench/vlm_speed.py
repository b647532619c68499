"""One GRPO step on the tiny vision-language model: the course's trainer vs plain PyTorch vs TRL.

    .venv/bin/python bench/vlm_speed.py                  # a few minutes on 2 busy CPU cores
    .venv/bin/python bench/vlm_speed.py --threads 1 2    # each thread count in turn
    .venv/bin/python bench/vlm_speed.py --profile 20     # where the course's step goes

Same model (``data/tiny_vlm``, loaded fresh for each method), same rows (``load_shapes
("train")``, 16 a step, in order), same settings: notebook 13's preset
(``MathConfig.for_device("cpu", model="tiny-vlm", dataset="shapes")``: 16 prompts x G=8 = 128
completions a step, at most 2 new tokens, temperature 1, beta 0.04 so a reference model runs,
loss dapo, one update per batch, AdamW at 1e-4, clipping at 1.0), float32 on the CPU.

- **ours**: ``LMGRPOTrainer(cfg, model, processor).step(rows)``: sampling through the loop over
  the KV cache (``completions.sample_with_kv_cache``), ``accuracy_reward``, group advantages,
  the reference pass and the loss pass through the shared prompt cache, AdamW and the schedule,
  and the step's metrics (entropy, KL, clip fraction, its record).
- **plain**: ``PlainGRPO`` below, the same tensor work with nothing around it: one processor call,
  one prefill forward with ``pixel_values`` and per-token forwards over the KV cache
  (multinomial, ``<image>`` suppressed), the reward by string equality, group advantages, a
  reference pass and a loss pass that encode each prompt once and copy its cache G times (as
  ours does), one backward, gradient clipping and a fused AdamW step. No course helpers.
- **trl**: TRL's ``GRPOTrainer`` from ``trl_bridge.make_trl_trainer`` (the same settings); a
  step is timed by the bridge's step clock (``make_trl_callbacks``: ``on_step_begin`` to
  ``on_step_end``: generation, reward, reference and loss passes, optimizer). TRL's dataloader
  (which decodes the images from its dataset) runs before ``on_step_begin``, so it is not in
  TRL's seconds; TRL runs the vision tower once per completion in each log-prob pass, ours once
  per prompt.

The methods run in interleaved rounds (their order rotating), ``--steps`` timed steps each per
round after ``--warmup`` untimed ones; each round gives each method's median step, and the
ratios of one round's medians are the unit of the reported 95% Student-t intervals
(``course.stats.t_interval`` over rounds), so that load from other programs on a shared machine
hits all alike. Written to ``bench/results/vlm_speed.json`` (atomically) with provenance, the
CPU model and the load average before and after.
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
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

from provenance import provenance  # noqa: E402

from grpo_minimal.course.stats import t_interval  # noqa: E402
from grpo_minimal.data import load_shapes  # noqa: E402
from grpo_minimal.lm_grpo import LMGRPOTrainer  # noqa: E402
from grpo_minimal.lm_model import format_prompt, load_model  # noqa: E402
from grpo_minimal.math_config import MathConfig  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "vlm_speed.json"
METHODS = ("ours", "plain", "trl")
PRESET = {"model": "tiny-vlm", "dataset": "shapes"}


def make_config() -> MathConfig:
    cfg = MathConfig.for_device("cpu", **PRESET, max_steps=100_000)  # the schedule barely moves
    # the preset's settings, checked: a change to the preset must be seen here
    assert (cfg.prompts_per_step, cfg.num_generations, cfg.max_completion_length) == (16, 8, 2)
    assert (cfg.beta, cfg.loss_type, cfg.num_iterations, cfg.temperature) == (0.04, "dapo", 1, 1)
    assert cfg.gradient_accumulation_steps == 1 and not cfg.gradient_checkpointing
    return cfg


class PlainGRPO:
    """The same step written as plain batched PyTorch: no course helpers, minimal Python.

    Assumes what this benchmark's data gives: every prompt the same text (no padding), one image
    per prompt, a single-digit answer."""

    def __init__(self, cfg: MathConfig, model, processor) -> None:
        self.cfg, self.model, self.processor = cfg, model, processor
        self.reference = copy.deepcopy(model).requires_grad_(False).eval()
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.learning_rate, weight_decay=0.0, fused=True
        )
        tokenizer = processor.tokenizer
        self.eos, self.pad = tokenizer.eos_token_id, tokenizer.pad_token_id
        self.image_id = model.config.image_token_id
        self.prompt = "<image>="  # what the chat template renders for an empty question
        assert self.prompt == format_prompt("", processor, "plain")
        self.timings: dict[str, float] = {}

    def logps(self, model, ids, pixel_values, completion, completion_mask):
        """Log-probs [N, C] of the completion tokens: each prompt (and image) encoded once, its
        KV cache copied G times, the completion tokens run on from the copies."""
        G, C = self.cfg.num_generations, completion.shape[1]
        out = model(input_ids=ids, pixel_values=pixel_values, use_cache=True, logits_to_keep=1)
        cache = out.cache
        cache.batch_repeat_interleave(G)
        logits = out.logits[:, -1:].repeat_interleave(G, dim=0)
        if C > 1:
            N, Lp = completion.shape[0], ids.shape[1]
            mask = torch.cat([completion_mask.new_ones(N, Lp), completion_mask[:, :-1]], dim=1)
            positions = Lp + torch.arange(C - 1).expand(N, -1)
            rest = model(
                input_ids=completion[:, :-1],
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
            ).logits
            logits = torch.cat([logits, rest], dim=1)
        token = logits.gather(-1, completion.unsqueeze(-1)).squeeze(-1)
        return token - torch.logsumexp(logits, dim=-1)

    def step(self, rows: list[dict]) -> dict:
        cfg, model, G = self.cfg, self.model, self.cfg.num_generations
        start = time.perf_counter()
        enc = self.processor(
            images=[row["image"] for row in rows],
            text=[self.prompt] * len(rows),
            return_tensors="pt",
        )
        ids, pixel_values = enc["input_ids"], enc["pixel_values"]
        # 1. sample: one prefill forward with the images, then one token per row per forward
        model.eval()
        with torch.no_grad():
            out = model(input_ids=ids, pixel_values=pixel_values, use_cache=True, logits_to_keep=1)
            cache = out.cache
            cache.batch_repeat_interleave(G)
            logits = out.logits[:, -1].repeat_interleave(G, dim=0)
            N, position = logits.shape[0], ids.shape[1]
            unfinished = torch.ones(N, dtype=torch.bool)
            tokens = []
            while True:
                logits[:, self.image_id] = float("-inf")
                token = torch.multinomial(torch.softmax(logits / cfg.temperature, -1), 1)[:, 0]
                token = torch.where(unfinished, token, self.pad)
                tokens.append(token)
                unfinished &= token != self.eos
                if len(tokens) == cfg.max_completion_length or not unfinished.any():
                    break
                out = model(
                    input_ids=token[:, None],
                    position_ids=torch.full((N, 1), position),
                    cache=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                logits, position = out.logits[:, -1], position + 1
        completion = torch.stack(tokens, dim=1)
        ended = (completion == self.eos).int()
        completion_mask = (ended.cumsum(1) - ended == 0).float()  # up to and with the first EOS
        sample_s = time.perf_counter() - start
        # 2. reward and 4. group advantages
        texts = self.processor.tokenizer.batch_decode(completion, skip_special_tokens=True)
        answers = [row["answer"] for row in rows for _ in range(G)]
        rewards = torch.tensor([float(t.strip() == a) for t, a in zip(texts, answers, strict=True)])
        grouped = rewards.view(-1, G)
        mean, std = grouped.mean(1, keepdim=True), grouped.std(1, keepdim=True)
        advantages = ((grouped - mean) / (std + 1e-4)).flatten()[:, None]
        # 3. reference log-probs, 5. the loss (dapo, one update: ratio 1 with its gradient)
        with torch.no_grad():
            ref = self.logps(self.reference, ids, pixel_values, completion, completion_mask)
        model.train()
        logps = self.logps(model, ids, pixel_values, completion, completion_mask)
        ratio = torch.exp(logps - logps.detach())
        clipped = torch.clamp(ratio, 1 - cfg.epsilon, 1 + cfg.epsilon)
        kl = torch.exp(ref - logps) - (ref - logps) - 1
        per_token = -torch.min(ratio * advantages, clipped * advantages) + cfg.beta * kl
        loss = (per_token * completion_mask).sum() / completion_mask.sum().clamp(min=1)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        self.optimizer.step()
        step_s = time.perf_counter() - start
        return {
            "step_s": step_s,
            "sample_s": sample_s,
            "after_sampling_s": step_s - sample_s,
            "completion_length": completion_mask.sum(1).mean().item(),
        }


class Runner:
    """One method on its own fresh copy of the model; ``run(steps)`` times that many steps."""

    def __init__(self, method: str, cfg: MathConfig, rows: list[dict], workdir: str) -> None:
        self.method, self.cfg, self.rows, self.next = method, cfg, rows, 0
        torch.manual_seed(cfg.seed)
        model, processor = load_model("tiny-vlm", torch.device("cpu"))
        if method == "ours":
            self.trainer = LMGRPOTrainer(cfg, model, processor)
            assert self.trainer.sampler == "loop" and self.trainer.share_prompts
        elif method == "plain":
            self.trainer = PlainGRPO(cfg, model, processor)
        else:
            from grpo_minimal.trl_bridge import make_trl_trainer

            self.trainer, self.clock = make_trl_trainer(cfg, model, processor, rows, workdir)

    def batch(self) -> list[dict]:
        size = self.cfg.prompts_per_step
        start = self.next * size % (len(self.rows) - size)
        self.next += 1
        return self.rows[start : start + size]

    def run(self, steps: int) -> list[dict]:
        """Each step's seconds (and its parts, where the method says them)."""
        if self.method == "trl":  # one trainer; each train() call runs `steps` steps
            self.trainer.args.max_steps = steps
            self.clock.step_s = []
            self.trainer.train()
            return [{"step_s": s} for s in self.clock.step_s]
        done = []
        for _ in range(steps):
            rows = self.batch()
            if self.method == "plain":
                done.append(self.trainer.step(rows))
                continue
            start = time.perf_counter()
            record, _ = self.trainer.step(rows)
            step_s = time.perf_counter() - start
            done.append(
                {
                    "step_s": step_s,
                    "sample_s": record["sample_s"],
                    "after_sampling_s": step_s - record["sample_s"],
                    "update_s": record["update_s"],  # the trainer's clock: backward + AdamW
                    "completion_length": record["completion_length"],
                }
            )
        return done


def interval(values: list[float]) -> dict:
    mean, low, high = t_interval(values)
    return {"mean": round(mean, 3), "low": round(low, 3), "high": round(high, 3)}


def measure(cfg: MathConfig, rows: list[dict], args, threads: int) -> dict:
    torch.set_num_threads(threads)
    batch = cfg.prompts_per_step * cfg.num_generations
    rounds: list[dict[str, dict]] = []
    lengths: dict[str, list[float]] = {m: [] for m in METHODS}
    with tempfile.TemporaryDirectory() as workdir:
        runners = {m: Runner(m, cfg, rows, workdir) for m in METHODS}
        for runner in runners.values():  # warm-up: first calls allocate
            runner.run(args.warmup)
        for r in range(args.rounds):
            order = METHODS[r % 3 :] + METHODS[: r % 3]
            steps = {m: runners[m].run(args.steps) for m in order}
            medians = {
                m: {
                    key: statistics.median(s[key] for s in done)
                    for key in done[0]
                    if key != "completion_length"
                }
                for m, done in steps.items()
            }
            rounds.append(medians)
            for m, done in steps.items():
                lengths[m] += [s["completion_length"] for s in done if "completion_length" in s]
            print(
                f"  {threads} thread(s), round {r + 1}/{args.rounds} ({'/'.join(order)}): "
                + ", ".join(f"{m} {medians[m]['step_s'] * 1000:.0f}" for m in METHODS)
                + " ms/step; ours/plain "
                + f"{medians['ours']['step_s'] / medians['plain']['step_s']:.2f}",
                flush=True,
            )
    ours_plain = [r["ours"]["step_s"] / r["plain"]["step_s"] for r in rounds]
    ours_trl = [r["trl"]["step_s"] / r["ours"]["step_s"] for r in rounds]
    parts = {
        m: {
            key: round(statistics.median(r[m][key] for r in rounds) * 1000, 1)
            for key in rounds[0][m]
        }
        for m in METHODS
    }
    return {
        "threads": threads,
        "median_ms": parts,
        "completions_per_s": {
            m: round(batch / statistics.median(r[m]["step_s"] for r in rounds), 1) for m in METHODS
        },
        # tokens per completion, EOS included (TRL's are not recorded here)
        "mean_completion_length": {
            m: round(statistics.mean(v), 3) for m, v in lengths.items() if v
        },
        "step_time_ratio_ours_over_plain": interval(ours_plain),
        "completions_per_s_ratio_ours_over_trl": interval(ours_trl),
        "rounds": [{m: round(r[m]["step_s"] * 1000, 1) for m in METHODS} for r in rounds],
    }


def profile_steps(cfg: MathConfig, rows: list[dict], steps: int) -> None:
    """``steps`` steps of the course's trainer under cProfile (after 3 untimed), top costs."""
    torch.set_num_threads(1)
    runner = Runner("ours", cfg, rows, "")
    runner.run(3)
    profiler = cProfile.Profile()
    profiler.enable()
    runner.run(steps)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(20)
    print(out.getvalue())


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def write_json(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".tmp")  # atomic: a stopped bench leaves the old file whole
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default: 6)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round (default: 5)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default: 2)")
    parser.add_argument(
        "--threads", type=int, nargs="+", default=[1], help="torch thread counts (default: 1)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="STEPS", help="profile ours alone, then stop"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    cfg = make_config()
    rows = load_shapes("train")
    if args.profile:
        profile_steps(cfg, rows, args.profile)
        return
    import trl

    load_before = os.getloadavg()
    started = time.perf_counter()
    print(
        f"tiny-vlm, {cfg.prompts_per_step} prompts x {cfg.num_generations} = "
        f"{cfg.prompts_per_step * cfg.num_generations} completions a step, <= "
        f"{cfg.max_completion_length} new tokens, beta {cfg.beta}, {cfg.loss_type}, fp32; "
        f"load average {load_before[0]:.1f} on {os.cpu_count()} CPUs"
    )
    by_threads = [measure(cfg, rows, args, threads) for threads in args.threads]
    result = {
        "what": __doc__.split("\n")[0],
        "command": "bench/vlm_speed.py " + " ".join(sys.argv[1:]),
        "provenance": {
            **provenance(threads=args.threads[0] if len(args.threads) == 1 else None),
            "platform": platform.platform(),
            "cpu_model": cpu_model(),
            "trl": trl.__version__,
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "config": {k: v for k, v in cfg.to_dict().items() if k != "max_steps"},
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "warmup_steps": args.warmup,
        "results": by_threads,
        "note": (
            "ratios: per round, one round's median step of each method; the interval is a 95% "
            "Student-t interval over rounds. ours/plain: step time (target <= 1.2). "
            "ours/trl: completions per second (TRL's step from its on_step_begin to "
            "on_step_end: its dataloader and image decoding are outside). Measured on a shared "
            "machine: see the load averages."
        ),
    }
    write_json(args.out, result)
    for r in by_threads:
        a, b = r["step_time_ratio_ours_over_plain"], r["completions_per_s_ratio_ours_over_trl"]
        print(
            f"{r['threads']} thread(s): completions/s {r['completions_per_s']}; step time "
            f"ours/plain {a['mean']:.2f} [{a['low']:.2f}, {a['high']:.2f}]; completions/s "
            f"ours/TRL {b['mean']:.2f} [{b['low']:.2f}, {b['high']:.2f}]"
        )
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
