"""Command line: ``grpo-minimal`` or ``python -m grpo_minimal``.

    grpo-minimal cartpole --seed 1 --out runs/cartpole
    grpo-minimal evaluate cartpole --policy runs/cartpole/policy.pt --episodes 100 --seed 10000

Every field of the config dataclass is a flag (``--num-generations 16``, ``--beta 0.04``);
``--help`` lists them with their meaning.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import sys
import textwrap
from pathlib import Path

from .config import CartPoleConfig


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field (used as ``--help`` text)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0].body
        for node, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _optional_float(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def add_config_flags(
    parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()
) -> None:
    """One ``--flag`` per dataclass field, typed and documented from the class itself."""
    docs = field_docs(cls)
    converters = {"int": int, "float": float, "str": str, "bool": _parse_bool}
    group = parser.add_argument_group(f"{cls.__name__} fields")
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        kind = str(f.type).replace(" ", "")
        convert = _optional_float if kind == "float|None" else converters[kind]
        group.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=convert,
            default=f.default,
            help=f"{docs.get(f.name, '')} (default: {f.default})",
        )


def config_from_args(cls: type, args: argparse.Namespace):
    """Build (and so validate) the config from parsed flags."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in vars(args).items() if k in names})


def run_cartpole(args: argparse.Namespace) -> dict:
    """Train, write metrics.jsonl, policy.pt and learning_curve.png; return a summary."""
    from .control import save_policy, train_cartpole
    from .plots import learning_curve

    cfg = config_from_args(CartPoleConfig, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    metrics_path = out / "metrics.jsonl"
    with metrics_path.open("w") as fh:

        def log(record: dict) -> None:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

        policy, history = train_cartpole(cfg, progress=not args.no_progress, on_update=log)
    save_policy(policy, cfg, out / "policy.pt")
    learning_curve(
        history, out / "learning_curve.png", title=f"GRPO on {cfg.env_id}, seed {cfg.seed}"
    )
    last = history[-1]
    solved_at = next((r for r in history if r.get("solved")), None)
    return {
        "algo": "grpo",
        "env_id": cfg.env_id,
        "seed": cfg.seed,
        "solved": solved_at is not None,
        "env_steps": last["env_steps"],
        "wall_s": last["wall_s"],
        "updates": last["update"],
        "final_sampled_return": round(last["return_mean"], 2),
        "greedy_return": last.get("eval_return"),
        "out": str(out),
    }


def run_evaluate_cartpole(args: argparse.Namespace) -> dict:
    """Greedy evaluation of a saved policy."""
    from .control import evaluate_policy, load_policy

    policy, cfg = load_policy(args.policy)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-minimal", description="GRPO, from CartPole to math-reward LLM training."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    cartpole = commands.add_parser(
        "cartpole", help="train GRPO on CartPole-v1 (or another discrete env)"
    )
    cartpole.add_argument("--algo", choices=["grpo"], default="grpo", help="training algorithm")
    cartpole.add_argument(
        "--out", default="runs/cartpole", help="output folder (default: runs/cartpole)"
    )
    cartpole.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_config_flags(cartpole, CartPoleConfig)
    cartpole.set_defaults(func=run_cartpole)

    evaluate = commands.add_parser("evaluate", help="evaluate a trained policy or model")
    targets = evaluate.add_subparsers(dest="target", required=True)
    ev_cartpole = targets.add_parser("cartpole", help="greedy returns of a saved CartPole policy")
    ev_cartpole.add_argument(
        "--policy", required=True, help="path to policy.pt written by training"
    )
    ev_cartpole.add_argument(
        "--episodes", type=int, default=100, help="evaluation episodes (default: 100)"
    )
    ev_cartpole.add_argument(
        "--seed", type=int, default=10_000, help="first reset seed (default: 10000)"
    )
    ev_cartpole.set_defaults(func=run_evaluate_cartpole)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        summary = args.func(args)
    except ValueError as err:  # bad config values: one clear line, no traceback
        parser.exit(2, f"grpo-minimal: error: {err}\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
