"""Notebook 13's measurements: GRPO on the tiny VLM, 5 seeds, and seed 002's list beside it.

    .venv/bin/python bench/vlm.py                # defaults, seed 002's rows, TRL at equal time
    .venv/bin/python bench/vlm.py --seeds 0 1 --only default   # a slice

Every run trains ``data/tiny_vlm`` with ``grpo-minimal math --model tiny-vlm``'s settings
(``MathConfig``'s ``tiny-vlm`` preset; validation accuracy during training), one torch thread,
``--workers`` runs at a time, then measures greedy accuracy on the test split (500 images that
decided nothing), on 500 fresh images in no split (``data/make_shapes.py --fresh 500 --seed
100``) and on the test rows with blank images. Variants (``course.seed002.VARIANTS``) are compared
with the defaults seed by seed (the same seed draws the same batches): the mean difference in
final test accuracy and its 95% t interval over the seeds. ``trl`` runs TRL's ``GRPOTrainer`` on
the same model, data and settings for as many seconds of training as the same seed's default
run took (its learning-rate schedule is then cut where the time ends).

Results: ``bench/results/vlm.json`` (summary, then one line per run).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

RESULTS = HERE / "results" / "vlm.json"
FRESH_SEED = 100


def draw_fresh(folder: Path) -> str:
    """``data/make_shapes.py --fresh 500 --seed 100`` into ``folder``: its JSONL file's path."""
    subprocess.run(
        [
            sys.executable,
            str(HERE.parent / "data" / "make_shapes.py"),
            "--fresh",
            "500",
            "--seed",
            str(FRESH_SEED),
            "--out",
            str(folder),
        ],
        check=True,
        capture_output=True,
    )
    return str(folder / "fresh.jsonl")


def one_run(job: dict) -> dict:
    import torch

    torch.set_num_threads(1)
    from grpo_minimal.course.seed002 import VARIANTS
    from grpo_minimal.data import load_jsonl, load_shapes
    from grpo_minimal.lm_model import load_model
    from grpo_minimal.lm_train import evaluate_accuracy, train_math
    from grpo_minimal.math_config import MathConfig
    from grpo_minimal.vlm import blank_rows

    variant, seed = job["variant"], job["seed"]
    settings, trainer_cls = VARIANTS.get(variant, ({}, None))
    extra = {"time_budget_s": job["seconds"]} if variant == "trl" else {}
    if job.get("steps"):
        extra["max_steps"] = job["steps"]
    cfg = MathConfig.for_device("cpu", model="tiny-vlm", seed=seed, **settings, **extra)
    model, processor = load_model(cfg.model, torch.device("cpu"))
    train, validation = load_shapes("train"), load_shapes("validation")
    with tempfile.TemporaryDirectory() as out:
        if variant == "trl":
            from grpo_minimal.trl_bridge import train_math_trl

            trainer, history = train_math_trl(
                cfg, model, processor, train, validation[: cfg.eval_n], out, progress=False
            )
            model = load_model(out, torch.device("cpu"))[0]
        else:
            trainer, history = train_math(
                cfg,
                model,
                processor,
                train,
                validation[: cfg.eval_n],
                progress=False,
                trainer_cls=trainer_cls,
            )
            model = trainer.model
    model.eval()
    test = load_shapes("test")
    fresh = load_jsonl(job["fresh"])
    return {
        "variant": variant,
        "seed": seed,
        "steps": history[-1]["step"],
        "train_s": history[-1]["train_s"],
        "validation": [
            (r["step"], round(r["eval_accuracy"], 4)) for r in history if "eval_accuracy" in r
        ],
        "test_after": evaluate_accuracy(model, processor, test, cfg)[0],
        "fresh_after": evaluate_accuracy(model, processor, fresh, cfg)[0],
        "blank_after": evaluate_accuracy(model, processor, blank_rows(test), cfg)[0],
        "kl_last": history[-1].get("kl"),
    }


def baseline(fresh_path: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from grpo_minimal.data import load_jsonl, load_shapes
    from grpo_minimal.lm_model import load_model
    from grpo_minimal.lm_train import evaluate_accuracy
    from grpo_minimal.math_config import MathConfig
    from grpo_minimal.vlm import blank_rows

    cfg = MathConfig.for_device("cpu", model="tiny-vlm")
    model, processor = load_model(cfg.model, torch.device("cpu"))
    test = load_shapes("test")
    return {
        "test_before": evaluate_accuracy(model, processor, test, cfg)[0],
        "fresh_before": evaluate_accuracy(model, processor, load_jsonl(fresh_path), cfg)[0],
        "blank_before": evaluate_accuracy(model, processor, blank_rows(test), cfg)[0],
        "validation_before": evaluate_accuracy(model, processor, load_shapes("validation"), cfg)[0],
    }


def summarise(runs: list[dict], base: dict) -> dict:
    from grpo_minimal.course.stats import t_interval

    def interval(values):
        mean, low, high = t_interval(values)
        resolved = "not resolved" if low <= 0 <= high else ("higher" if low > 0 else "lower")
        return {
            "mean": round(mean, 4),
            "low": round(low, 4),
            "high": round(high, 4),
            "n": len(values),
            "verdict": resolved,
        }

    by = {}
    for run in runs:
        by.setdefault(run["variant"], {})[run["seed"]] = run
    default = by.get("default", {})
    out = {}
    if len(default) >= 2:
        d = list(default.values())
        out["default"] = {
            "test_gain": interval([r["test_after"] - base["test_before"] for r in d]),
            "fresh_gain": interval([r["fresh_after"] - base["fresh_before"] for r in d]),
            "blank_after_mean": round(sum(r["blank_after"] for r in d) / len(d), 4),
            "train_s_mean": round(sum(r["train_s"] for r in d) / len(d), 2),
        }
    for variant, seeds in by.items():
        paired = sorted(set(seeds) & set(default))
        if variant == "default" or len(paired) < 2:
            continue
        out[variant] = {
            "test_minus_default": interval(
                [seeds[s]["test_after"] - default[s]["test_after"] for s in paired]
            ),
            "test_after_mean": round(sum(seeds[s]["test_after"] for s in paired) / len(paired), 4),
            "steps_mean": sum(seeds[s]["steps"] for s in paired) / len(paired),
            "train_s_mean": round(sum(seeds[s]["train_s"] for s in paired) / len(paired), 2),
        }
    return out


def write(result: dict) -> None:
    head = {k: v for k, v in result.items() if k != "runs"}
    text = json.dumps(head, indent=1)[:-2] + ',\n "runs": [\n'
    text += ",\n".join(json.dumps(r, separators=(",", ":")) for r in result["runs"]) + "\n ]\n}\n"
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(RESULTS)


def main() -> None:
    from provenance import provenance

    from grpo_minimal.course.seed002 import VARIANTS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--only", nargs="+", help="variants to run (default: all, and trl)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, help="max_steps for a smoke run (default: preset's)")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="add these runs to the results file's (replacing "
        "runs of the same variant and seed), with this run's provenance beside the file's",
    )
    args = parser.parse_args()
    import trl

    made_by = provenance(threads=1) | {"workers": args.workers, "trl": trl.__version__}
    variants = args.only or [*VARIANTS, "trl"]
    fresh_path = draw_fresh(Path(tempfile.mkdtemp(prefix="vlm-fresh-")))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.workers, maxtasksperchild=1) as pool:
        base = pool.apply(baseline, (fresh_path,))
        print("before:", base, flush=True)
        first = [
            {"variant": "default", "seed": s, "fresh": fresh_path, "steps": args.steps}
            for s in args.seeds
        ]
        runs = list(pool.imap(one_run, first)) if "default" in variants else []
        seconds = {r["seed"]: r["train_s"] for r in runs}
        rest = [
            {
                "variant": v,
                "seed": s,
                "fresh": fresh_path,
                "seconds": seconds.get(s, 20.0),
                "steps": args.steps,
            }
            for s in args.seeds
            for v in variants
            if v != "default"
        ]
        for run in pool.imap_unordered(one_run, rest):
            runs.append(run)
            print(run["variant"], run["seed"], run["test_after"], run["train_s"], flush=True)
    command = "python bench/vlm.py " + " ".join(sys.argv[1:])
    if args.merge:  # the defaults' runs are read back, not rerun (runs are seeded)
        old = json.loads(RESULTS.read_text())
        done = {(r["variant"], r["seed"]) for r in runs}
        kept = [r for r in old["runs"] if (r["variant"], r["seed"]) not in done]
        runs = kept + runs
        made_by = old["provenance"] | {
            "merged": old["provenance"].get("merged", []) + [made_by | {"command": command}]
        }
        command = old["command"]
    result = {
        "what": "notebook 13: GRPO on the tiny VLM (bench/vlm.py)",
        "command": command,
        "provenance": made_by,
        "before": base,
        "summary": summarise(runs, base),
        "runs": sorted(runs, key=lambda r: (r["variant"], r["seed"])),
    }
    write(result)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
