"""Offline evaluation from Python: a dataset's questions searched with and without SPEX's
speculation, side by side, in one process (no Redis, no services) — the example of the guide
"SPEX from a notebook".

    python examples/offline_eval.py --engine sim --questions 20
    python examples/offline_eval.py --engine hf --model DIR --questions 8 --json results/eval.json
    python examples/offline_eval.py --engine vllm --url http://127.0.0.1:8000 --model DIR --prm-url URL

On `sim` the questions' trees are the synthetic workload's (the simulated GPU writes no text);
on `hf` and `vllm` the model writes each step, and answers are graded against the dataset's.
"""

from __future__ import annotations

import argparse
import sys

import spex


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.engine == "hf" and not args.model:
        parser.error("--model: the hf engine needs the model's directory")
    if args.engine == "vllm" and not args.url:
        parser.error("--url: the vllm engine needs the server's URL")
    try:
        questions = spex.load_dataset(args.dataset, limit=args.questions)
        both = spex.evaluate(
            questions,
            engine=_engine(args),
            reward=_reward(args),
            algorithm=args.algorithm,
            target=args.target,
            batch_size=args.batch_size,
            params={"max_depth": args.max_depth} if args.max_depth is not None else None,
            max_step_tokens=args.max_step_tokens,
            mode="compare",
            progress=not args.quiet,
        )
    except (ValueError, spex.EngineFailed) as exc:
        print(f"offline_eval: error: {exc}", file=sys.stderr)
        return 2
    for base, spec in zip(both.baseline, both.spex, strict=True):
        grade = {True: "right", False: "wrong", None: "ungraded"}[spec.correct]
        same = "same tree" if base.tree_digest == spec.tree_digest else "A DIFFERENT TREE"
        answer = f"{spec.answer} (reference {spec.reference})"
        print(f"{spec.query_id}  {answer:>24}  {grade:8}  {same}  {spec.question[:50]}")
    if both.spex.content == "synthetic":
        print("(sim: each question's tree is the synthetic workload's for its id; the text is not read)")
    accuracy = "-" if both.spex.accuracy is None else f"{both.spex.accuracy:.2f}"
    hits = "-" if both.spex.hit_rate is None else f"{both.spex.hit_rate:.2f}"
    print(
        f"\n{len(both.spex)} questions, {args.algorithm}-{args.target} on {args.engine}: "
        f"accuracy {accuracy}, speedup {both.speedup:.2f}x, hit rate {hits}, "
        f"lossless: {'yes' if both.lossless else 'NO'} ({both.baseline.wall_s + both.spex.wall_s:.1f} s)"
    )
    if args.json:
        both.write_json(args.json)
        print(f"results: {args.json}")
    return 0 if both.lossless or args.engine != "sim" else 1


def _engine(args: argparse.Namespace) -> spex.Engine:
    if args.engine == "hf":
        return spex.Engine.hf(args.model, deterministic=True)
    if args.engine == "vllm":
        return spex.Engine.vllm(args.url, model=args.model)
    return spex.Engine.sim()


def _reward(args: argparse.Namespace) -> spex.Reward | None:
    if args.prm_url:
        return spex.Reward.served(args.prm_url, server=args.prm_server)
    if args.prm:
        return spex.Reward.prm(args.prm)
    return None  # the engine's default: the simulated PRM on sim, log-probabilities on a model


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engine", choices=["sim", "hf", "vllm"], default="sim", help="the generator")
    p.add_argument(
        "--model", default=None, help="hf: the model's directory; vllm: the served model's (optional)"
    )
    p.add_argument("--url", default=None, help="vllm: the server's URL")
    p.add_argument("--prm", default=None, help="a process reward model's directory, run in process (hf)")
    p.add_argument("--prm-url", default=None, help="a process reward model's server (vllm)")
    p.add_argument("--prm-server", choices=["vllm", "sglang"], default="vllm", help="what serves --prm-url")
    p.add_argument(
        "--dataset", default="easy", help="a JSONL file, a saved datasets folder, or easy, math500"
    )
    p.add_argument("--questions", type=int, default=20, help="the dataset's first N questions")
    p.add_argument("--algorithm", default="rebase", help="the search")
    p.add_argument("--target", type=int, default=8, help="its width (REBASE, ETS) or rollouts (MCTS)")
    p.add_argument("--batch-size", type=int, default=4, help="questions searched at once")
    p.add_argument("--max-depth", type=int, default=None, help="a search's deepest step (default: its own)")
    p.add_argument("--max-step-tokens", type=int, default=None, help="a step's token cap")
    p.add_argument("--json", default=None, metavar="FILE", help="write the results file here")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


if __name__ == "__main__":
    raise SystemExit(main())
