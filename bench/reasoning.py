"""R1-Zero in miniature (``grpo_minimal/course/r1_zero.py``): every variant of notebook 10 over seeds.

    .venv/bin/python bench/reasoning.py                    # 4 variants x seeds 0-4
    .venv/bin/python bench/reasoning.py --variants grpo --seeds 0 1 --out /tmp/r.json

Each run trains one variant (``r1_zero.VARIANTS``: ``grpo``, ``no_steps``, ``length_penalty``,
``dr_grpo``) from its cold start with ``MathConfig.PRESETS["reasoning"]`` and scores it on the
reasoning **test** split (greedy, 500 problems), which decides nothing here: the settings
(200 steps, the length penalty) were chosen on seed 5 against 200 problems in no shipped
split (``data/make_reasoning.py --fresh 200 --seed 2``), as ``bench/README.md`` records.
Results are appended to ``bench/results/reasoning.json`` (notebook 10 reads it) one run at a
time, each stamped with the machine, the date and ``provenance``; an interrupted sweep resumes where it stopped (runs already in the file,
same variant, seed and steps, are skipped). To use both cores, run two processes with different ``--out`` files and join
their ``runs`` lists.
"""

from __future__ import annotations

import argparse

import torch
from provenance import provenance  # bench/ is on the path when a script here runs
from tqdm.auto import tqdm

from grpo_minimal.course.ablations import RESULTS, append_result, load_results
from grpo_minimal.course.r1_zero import VARIANTS, run_variant
from grpo_minimal.data import load_reasoning
from grpo_minimal.math_config import MathConfig

OUT = RESULTS.with_name("reasoning.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument(
        "--steps", type=int, default=None, help="default: the reasoning preset's max_steps"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    test = load_reasoning("test")
    steps = args.steps or MathConfig.PRESETS["reasoning"]["max_steps"]
    data = load_results(args.out)
    done = {(r["variant"], r["seed"], r["steps"]) for r in data["runs"]}
    todo = [(v, s) for s in args.seeds for v in args.variants if (v, s, steps) not in done]
    for variant, seed in tqdm(todo, desc="runs"):
        run = run_variant(variant, seed, test, sample_every=25, eval_n=len(test), max_steps=steps)
        run |= {"provenance": provenance(threads=torch.get_num_threads())}
        record = append_result(args.out, data, run)
        first, last = record["evals"][0], record["evals"][-1]
        print(
            f"{variant:15s} seed {seed}: accuracy {first['eval_accuracy']:.3f} -> "
            f"{last['eval_accuracy']:.3f}, reasoning {first['eval_reasoning_rate']:.2f} -> "
            f"{last['eval_reasoning_rate']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
