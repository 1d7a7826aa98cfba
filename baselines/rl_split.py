"""The RL train/evaluate split: train a policy on some workloads, then evaluate it on held-out
workloads with a fixed trial budget, next to the same agent learning from scratch there.

    python -m tensorgym.baselines.rl_split --agent maskable-ppo --target cpu \\
        --train matmul:64,64,64 conv2d:1,16,28,28,16,3,1,1 \\
        --eval matmul:128,128,128 --train-trials 64 --eval-trials 32 --out rl.json

Training uses the same envs and real measurements as tuning. The output is a results document
(``tensorgym leaderboard show rl.json``) with entries ``<agent>:pretrained`` (the trained policy
acting, not learning) and ``<agent>:scratch`` (online learning from a fresh policy).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Sequence

from tensorgym.workloads import get_workload

from .harness import device_info, software_versions
from .leaderboard import RunOptions, _now, run_entry
from .results import ResultsDoc, Run
from .rl import train_policy


def run_split(agent: str, target: str, train: Sequence[str], evaluate: Sequence[str],
              train_trials: int, eval_trials: int, seeds: Sequence[int],
              policy_path: "str | None" = None, remeasure: int = 1) -> ResultsDoc:
    overlap = {get_workload(w).key for w in train} & {get_workload(w).key for w in evaluate}
    if overlap:
        raise ValueError(f"train and eval workloads overlap: {sorted(overlap)}")
    policy_path = policy_path or str(Path(tempfile.mkdtemp()) / f"{agent}-policy.zip")
    train_policy(agent, list(train), target, train_trials, seeds[0], policy_path)
    pretrained, scratch = f"{agent}:pretrained", f"{agent}:scratch"
    options = RunOptions(remeasure=remeasure, agent_options={
        pretrained: {"policy_path": policy_path, "learn": False}, scratch: {}})
    run = Run(uuid.uuid4().hex, _now(), device_info(target), software_versions(),
              {"name": f"rl-split-{agent}", "train": list(train), "eval": list(evaluate),
               "train_trials": train_trials, "trials": eval_trials, "policy": policy_path},
              list(seeds))
    for w in evaluate:
        for seed in seeds:
            for name in (pretrained, scratch):
                run.entries.append(run_entry(agent, w, target, seed, eval_trials, options,
                                             display_name=name))
    return ResultsDoc([run])


def main(argv: "Sequence[str] | None" = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorgym.baselines.rl_split")
    p.add_argument("--agent", default="maskable-ppo", choices=["ppo", "maskable-ppo"])
    p.add_argument("--target", default="cpu")
    p.add_argument("--train", nargs="+", required=True)
    p.add_argument("--eval", nargs="+", required=True, dest="evaluate")
    p.add_argument("--train-trials", type=int, default=64)
    p.add_argument("--eval-trials", type=int, default=32)
    p.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[0])
    p.add_argument("--policy", help="where to save the trained policy")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    doc = run_split(args.agent, args.target, args.train, args.evaluate, args.train_trials,
                    args.eval_trials, args.seeds, args.policy)
    doc.save(args.out)
    from .tables import markdown

    print(markdown(doc), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
